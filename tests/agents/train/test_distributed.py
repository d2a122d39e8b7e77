"""The trainers under two processes (``torchrun``, gloo on the CPU): the code a single process runs.

Slow (two fresh Python processes per run import torch and transformers): ``pytest -m slow``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from passkt.agents.train.report import read_metrics

WORKER = Path(__file__).with_name("distributed_worker.py")

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(kind: str, model: Path, out: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=1",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        str(WORKER),
        kind,
        str(model),
        str(out),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def rank_weights(out: Path) -> tuple[dict, dict]:
    load = lambda rank: torch.load(out / f"weights_rank{rank}.pt")  # noqa: E731
    return load(0), load(1)


def test_two_process_sft_equals_one_process_on_the_same_global_batch(tiny64, people, tmp_path):
    sys.path.insert(0, str(WORKER.parent))
    try:
        from distributed_worker import sft_config, trainable_weights
    finally:
        sys.path.remove(str(WORKER.parent))
    from passkt.agents.train.sft import train_sft

    torchrun("sft", tiny64, tmp_path / "two")
    rank0, rank1 = rank_weights(tmp_path / "two")
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name  # all-reduced gradients: one model

    # One process, same global batch (4 episodes per step), other micro-batching.
    single = train_sft(sft_config(str(tiny64), str(tmp_path / "one"), 4, 2))
    one = trainable_weights(single.model)
    for name in rank0:
        torch.testing.assert_close(rank0[name], one[name], atol=2e-5, rtol=1e-4)
    two_losses = [m["loss/nll"] for m in read_metrics(tmp_path / "two")]
    one_losses = [m["loss/nll"] for m in read_metrics(tmp_path / "one")]
    assert two_losses == pytest.approx(one_losses, rel=1e-4)
    assert two_losses[-1] < two_losses[0]
    # only rank 0 wrote metrics and checkpoints
    assert len(two_losses) == 3
    assert sorted(p.name for p in (tmp_path / "two").glob("checkpoint-*")) == ["checkpoint-3"]


def test_two_process_grpo_keeps_ranks_identical_and_learns(format_checkpoint, tmp_path):
    torchrun("grpo", format_checkpoint, tmp_path / "grpo")
    rank0, rank1 = rank_weights(tmp_path / "grpo")
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), name
    metrics = read_metrics(tmp_path / "grpo")
    assert [m["step"] for m in metrics] == list(range(1, 9))
    rewards = [m["reward/mean"] for m in metrics]
    # each step's 4 tasks x 8 samples are split over the two ranks; reward is their mean
    assert rewards[0] < 0.4 and max(rewards[-3:]) > 0.7, rewards
