"""Suite-wide settings."""

import contextlib
import os

from hypothesis import settings

# Two cores: torch's intra-op threads fight with the rest of the process (and with each other
# under load); one thread is faster for the tiny models the tests use.
with contextlib.suppress(ImportError):
    import torch

    torch.set_num_threads(1)

# CI replays the same examples every run (a failure there is reproducible); locally hypothesis
# explores new ones each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
