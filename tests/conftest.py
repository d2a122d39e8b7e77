"""Suite-wide settings."""

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Two cores: torch's intra-op threads fight with the rest of the process (and with each other
# under load); one thread is faster for the tiny models the tests use. The environment variables
# reach every `passkt` command a test starts and every in-process `main()`, which would otherwise
# each take both cores while the other pytest worker is busy on one.
for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    if not os.environ.get(name, "").isdigit():
        os.environ[name] = "1"
with contextlib.suppress(ImportError):
    import torch

    torch.set_num_threads(1)

# CI replays the same examples every run (a failure there is reproducible); locally hypothesis
# explores new ones each run.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture
def lock_holder():
    """Start a process that holds a run directory's writer lock until the test ends (SIGKILL).

    ``lock_holder(directory)`` returns the ``Popen`` once the lock is taken.
    """
    holders = []

    def start(directory):
        holder = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time\nfrom pathlib import Path\nfrom passkt.agents.run_lock import "
                "RunLock\nRunLock.acquire(Path(sys.argv[1]))\nprint('locked', flush=True)\n"
                "time.sleep(600)",
                str(directory),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        holders.append(holder)
        assert holder.stdout.readline().strip() == "locked"
        return holder

    yield start
    for holder in holders:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


# The testbed's tokenizer and a small random testbed checkpoint: the study's testbed tests and
# the lean decoder's (passkt.agents.lean decodes testbed models) share them.
@pytest.fixture(scope="session")
def testbed_tokenizer():
    """The word-level tokenizer fitted to the synthetic world of seed 0 (a few seconds)."""
    from passkt.study.testbed.tokenizer import build_tokenizer, fit_vocabulary, fitting_texts

    return build_tokenizer(fit_vocabulary(fitting_texts(0)))


@pytest.fixture(scope="session")
def nano_checkpoint(tmp_path_factory: pytest.TempPathFactory, testbed_tokenizer) -> Path:
    """An untrained nano model over the testbed tokenizer, saved as a Hugging Face folder."""
    from passkt.study.testbed.model import build_model, save_checkpoint

    folder = tmp_path_factory.mktemp("testbed") / "nano"
    return save_checkpoint(
        build_model("nano", testbed_tokenizer, seed=0), testbed_tokenizer, folder
    )


LONGEST_FIRST = (
    "test_the_plug_in_block_runs_as_printed",
    "test_pretrained_nano_follows_the_protocol",
    "test_emulated_two_process_trl_route_matches_one_process",
    "test_the_env_contract_page_runs_as_written",
)
"""Tests that each take minutes in their own call (no expensive module fixture): started first,
so that with ``-n 2`` the other core runs the rest beside them instead of idling at the end."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = getattr(item, "originalname", item.name)
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the rest keep their order
