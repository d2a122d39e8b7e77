"""Suite-wide settings."""

import contextlib

# Two cores: torch's intra-op threads fight with the rest of the process (and with each other
# under load); one thread is faster for the tiny models the tests use.
with contextlib.suppress(ImportError):
    import torch

    torch.set_num_threads(1)
