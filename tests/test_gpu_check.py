"""``benchmarks/gpu_check.py --dry``: every check is listed; each that cannot run says why."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
CHECKS = ("hf-eval-cuda", "trl-grpo", "trl-grpo-vllm", "passkt-grpo", "torchrun-2")


def test_the_dry_run_lists_every_check_and_why_it_skips():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == list(CHECKS)
    for line in lines:
        assert "SKIP (" in line or "would run" in line, line
    if not torch.cuda.is_available():
        assert all(line.endswith("SKIP (no CUDA device)") for line in lines)
