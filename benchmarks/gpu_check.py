"""GPU acceptance check: the GPU routes, each in a fresh process, one line per check.

    python benchmarks/gpu_check.py            # on a GPU machine: under 10 minutes on one GPU
    python benchmarks/gpu_check.py --dry      # say what would run and what skips, run nothing

No network and no downloaded weights: the model is a random Qwen2-architecture checkpoint made on
the spot (``passkt.agents.tiny``, hidden 256, 4 layers: about 10 MB) and the env is the synthetic
``BridgeQA-v0`` (multi-turn search then answer, T = 2). The checks:

- ``hf-eval-cuda``: ``passkt eval --policy hf:MODEL --device cuda`` (4 tasks, n = 2, T in 0, 2).
- ``trl-grpo``: ``passkt train grpo --backend trl`` 2 steps (TRL's GRPOTrainer, the trainer's
  model generates), then ``passkt eval`` of its checkpoint on CUDA.
- ``trl-grpo-vllm``: ``train_grpo_trl`` 2 steps with TRL's colocated vLLM (``use_vllm=True``,
  ``vllm_mode="colocate"``); skipped when vLLM is not installed.
- ``passkt-grpo``: ``passkt train grpo`` (passkt's own trainer) 2 steps.
- ``torchrun-2``: ``torchrun --nproc_per_node 2`` of ``passkt train grpo --backend trl`` 2 steps
  (DDP on NCCL); skipped with fewer than two GPUs.

Without CUDA it runs nothing and says, per check, why it skips (what ``--dry`` prints on any
machine). The exit status is 1 when a check that ran failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMEOUT_S = 240
"""Per check; the five together stay under 10 minutes on one GPU."""

ENV = ["--env", "BridgeQA-v0"]
SMALL_EVAL = ["--n", "2", "--budgets", "0,2", "--limit", "4", "--max-new-tokens", "16"]
SMALL_GRPO = ["--t-train", "2", "--group-size", "2", "--tasks-per-step", "2", "--limit", "4"]
SMALL_GRPO += ["--micro-batch-size", "2", "--max-new-tokens", "16", "--max-steps", "2"]
SMALL_GRPO += ["--no-progress"]

TRL_VLLM = """
import sys
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.trl import train_grpo_trl
model, out = sys.argv[1:3]
config = GRPOConfig(policy="hf:" + model, env_id="BridgeQA-v0", t_train=2, group_size=2,
    tasks_per_step=2, micro_batch_size=2, limit=4, max_new_tokens=16, max_steps=2,
    finetune="full", output_dir=out, progress=False)
result = train_grpo_trl(config, use_vllm=True, vllm_mode="colocate",
    vllm_gpu_memory_utilization=0.3)
assert result.steps == 2, result.steps
"""


def cuda_count() -> int:
    try:
        import torch  # optional: the hf extra
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def passkt_cli() -> list[str]:
    return [sys.executable, "-m", "passkt.eval.cli"]


def plan(model: Path, work: Path, gpus: int) -> list[tuple[str, list[list[str]], str | None]]:
    """``(name, commands, why it skips or None)`` of every check, in order."""
    no_cuda = "no CUDA device" if gpus == 0 else None
    hf = ["--policy", f"hf:{model}", "--device", "cuda"]
    trl_out, final = work / "trl", work / "trl" / "final"
    checks = [
        (
            "hf-eval-cuda",
            [[*passkt_cli(), "eval", *ENV, *hf, *SMALL_EVAL, "--out", str(work / "eval")]],
            no_cuda,
        ),
        (
            "trl-grpo",
            [
                [
                    *passkt_cli(),
                    "train",
                    "grpo",
                    "--backend",
                    "trl",
                    *ENV,
                    "--policy",
                    f"hf:{model}",
                    *SMALL_GRPO,
                    "--out",
                    str(trl_out),
                ],
                [
                    *passkt_cli(),
                    "eval",
                    *ENV,
                    "--policy",
                    f"hf:{final}",
                    "--device",
                    "cuda",
                    *SMALL_EVAL,
                    "--out",
                    str(work / "eval-trl"),
                ],
            ],
            no_cuda,
        ),
        (
            "trl-grpo-vllm",
            [[sys.executable, "-c", TRL_VLLM, str(model), str(work / "trl-vllm")]],
            no_cuda or (None if importlib.util.find_spec("vllm") else "vLLM is not installed"),
        ),
        (
            "passkt-grpo",
            [
                [
                    *passkt_cli(),
                    "train",
                    "grpo",
                    *ENV,
                    "--policy",
                    f"hf:{model}",
                    *SMALL_GRPO,
                    "--out",
                    str(work / "passkt"),
                ]
            ],
            no_cuda,
        ),
        (
            "torchrun-2",
            [
                [
                    sys.executable,
                    "-m",
                    "torch.distributed.run",
                    "--nproc_per_node",
                    "2",
                    "-m",
                    "passkt.eval.cli",
                    "train",
                    "grpo",
                    "--backend",
                    "trl",
                    *ENV,
                    "--policy",
                    f"hf:{model}",
                    *SMALL_GRPO,
                    "--out",
                    str(work / "torchrun"),
                ]
            ],
            no_cuda or (None if gpus >= 2 else f"{gpus} GPU(s): needs two"),
        ),
    ]
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="say what would run; run nothing")
    args = parser.parse_args(argv)
    gpus = cuda_count()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="passkt-gpu-check-") as folder:
        work = Path(folder)
        model = work / "model"
        if gpus and not args.dry:
            from passkt.agents.tiny import make_tiny_checkpoint

            make_tiny_checkpoint(model, hidden_size=256, num_layers=4, num_heads=4)
        for name, commands, skip in plan(model, work, gpus):
            if skip is not None:
                print(f"{name}: SKIP ({skip})", flush=True)
                continue
            if args.dry:
                print(f"{name}: would run ({len(commands)} command(s))", flush=True)
                continue
            clock = time.perf_counter()
            env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
            for command in commands:
                try:
                    done = subprocess.run(
                        command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env
                    )
                    ok, tail = done.returncode == 0, done.stderr.strip().splitlines()[-1:]
                except subprocess.TimeoutExpired:
                    ok, tail = False, [f"timed out after {TIMEOUT_S} s"]
                if not ok:
                    break
            seconds = time.perf_counter() - clock
            if ok:
                print(f"{name}: OK ({seconds:.0f} s)", flush=True)
            else:
                failed += 1
                print(f"{name}: FAIL ({seconds:.0f} s): {' '.join(tail)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
