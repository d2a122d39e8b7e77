"""The TRL route under two processes on the CPU: the multi-process launches of the GPU recipe,
emulated. ``pytest -k emulated`` selects exactly these tests (slow: two fresh processes each).

Each launches ``trl_emulated_worker.py`` with ``torchrun --nproc_per_node 2`` (accelerate inside:
``accelerate launch --cpu --num_processes 2`` starts one process, not two, with accelerate 1.16),
trains ``train_grpo_trl`` 2 steps with multi-turn rollouts, and checks that the two processes'
GRPO loss of one fixed batch, through the wrapped model (DDP module, or the ZeRO-3 engine that
gathers its shards), equals one process's loss of the same batch on the saved checkpoint.

FSDP2 is not emulated: transformers' Trainer (the base of TRL's) does not run FSDP on a CPU launch.
Tried with ``fsdp="full_shard", fsdp_config={"version": 2}`` under the same torchrun: with
``use_cpu=True`` (what ``trl_args`` sets without CUDA) its accelerate state is MULTI_CPU and the
FSDP settings are silently not applied (plain DDP); with ``use_cpu=False`` it stops with
"Using fsdp only works in distributed training".
The rewards are a stand-in that differs between samples (``varying_reward``): a random model
never solves a task, and all-zero rewards would leave every weight where it started.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from passkt.agents.train.report import read_metrics

WORKER = Path(__file__).with_name("trl_emulated_worker.py")

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(kind: str, model: Path, out: Path) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2"]
    command += ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    command += [str(WORKER), kind, str(model), str(out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    env["DS_ACCELERATOR"] = "cpu"  # DeepSpeed's CPU accelerator (ignored by the DDP run)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "emulated.json").read_text())


def one_process_loss(checkpoint: Path) -> float:
    sys.path.insert(0, str(WORKER.parent))
    try:
        from trl_emulated_worker import emulated_config, fixed_batch_loss
    finally:
        sys.path.remove(str(WORKER.parent))
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    pad_id = AutoTokenizer.from_pretrained(checkpoint).pad_token_id
    config = emulated_config(str(checkpoint), "unused")
    vocab = int(model.config.vocab_size)
    halves = [fixed_batch_loss(model, config, slice(i, i + 2), pad_id, vocab) for i in (0, 2)]
    return sum(halves) / 2


@pytest.mark.parametrize(("kind", "state"), [("ddp", "MULTI_CPU"), ("zero3", "DEEPSPEED")])
def test_emulated_two_process_trl_route_matches_one_process(kind, state, tiny64, tmp_path):
    if kind == "zero3":
        pytest.importorskip("deepspeed", reason="ZeRO-3 needs the scale extra (deepspeed)")
    out = tmp_path / kind
    record = launch(kind, tiny64, out)
    assert record["steps"] == 2 and record["world"] == 2 and record["distributed_type"] == state
    assert record["loss"] == pytest.approx(one_process_loss(out / "final"), abs=1e-5)
    assert [m["step"] for m in read_metrics(out)] == [1, 2]
    assert record["loss"] != pytest.approx(one_process_loss(tiny64), abs=1e-6)  # weights moved
