"""``benchmarks/gpu_check.py``: every check listed with why it skips; a missing package skips."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
CHECKS = (
    "hf-eval-cuda",
    "passkt-grpo-full-bf16",
    "passkt-grpo-lora",
    "passkt-grpo-vllm",
    "passkt-grpo-vllm-lora",
    "eval-vllm",
    "trl-grpo",
    "trl-grpo-vllm",
    "torchrun-2",
)


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_lists_every_check_and_why_it_skips(tmp_path):
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == list(CHECKS)
    for line in lines:
        assert "SKIP (" in line or "would run" in line, line
    written = json.loads(report.read_text())
    assert [c["name"] for c in written["checks"]] == list(CHECKS) and written["dry"]
    if not torch.cuda.is_available():
        assert all(line.startswith(f"{line.split(':')[0]}: SKIP (no CUDA device") for line in lines)
        assert all(c["status"] == "skip" and c["reason"] for c in written["checks"])
    if importlib.util.find_spec("vllm") is None:
        vllm_lines = [line for line in lines if "vllm" in line.split(":")[0]]
        assert len(vllm_lines) == 4 and all("not installed: vllm" in x for x in vllm_lines)


def test_a_missing_optional_package_skips_and_names_it():
    module = gpu_check()
    todo = {c.name: c for c in module.checks(Path("m"), Path("w"))}
    without_trl = lambda name: name not in ("trl", "datasets")  # noqa: E731
    assert module.skip_reason(todo["trl-grpo"], 1, True, without_trl) == (
        "not installed: trl, datasets"
    )
    assert module.skip_reason(todo["passkt-grpo-lora"], 1, True, without_trl) == ""
    assert module.skip_reason(todo["torchrun-2"], 1, True, lambda name: True) == "1 GPU(s): needs 2"
    assert module.skip_reason(todo["passkt-grpo-full-bf16"], 1, False, lambda n: True) == (
        "the GPU has no bf16"
    )
    assert module.skip_reason(todo["hf-eval-cuda"], 0, False, lambda n: True) == "no CUDA device"


def test_every_training_check_is_compared_with_the_plan_checks_estimate():
    module = gpu_check()
    for check in module.checks(Path("m"), Path("w")):
        if check.commands[0][0] in ("train", "torchrun") and check.name != "torchrun-2":
            assert check.plan is not None, check.name
