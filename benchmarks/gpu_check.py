"""GPU acceptance check: every GPU route, each in a fresh process, one line per check.

    python benchmarks/gpu_check.py                   # on a GPU machine: under 10 minutes
    python benchmarks/gpu_check.py --dry             # what would run, what skips and why
    python benchmarks/gpu_check.py --report out.json # also write the JSON report there

No network and no downloaded weights: the model is a random Qwen2-architecture checkpoint made on
the spot (``passkt.agents.tiny``, hidden 256, 4 layers: about 10 MB) and the env is the synthetic
``BridgeQA-v0`` (multi-turn search then answer, T = 2). The checks (``CHECKS``): passkt's eval on
CUDA; passkt's trainer in bf16 with full fine-tuning and with LoRA; passkt's trainer with its
colocated vLLM engine, synced through ``apply_model`` and through LoRA requests; ``passkt eval
--policy vllm:``; TRL's GRPOTrainer through the adapter with the trained model and with a
colocated vLLM engine; two processes under torchrun.

A check whose packages or hardware are missing is skipped with the reason, never failed. Every
training check runs ``passkt train ... --check`` first and reports its memory estimate beside the
measured peak. The exit status is 1 only when a check that ran failed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

TIMEOUT_S = 240
"""Per command; the checks that run without vLLM stay under 10 minutes on one GPU."""

ENV = ["--env", "BridgeQA-v0"]
SMALL_EVAL = ["--n", "2", "--budgets", "0,2", "--limit", "4", "--max-new-tokens", "16"]
SMALL_GRPO = ["--t-train", "2", "--group-size", "2", "--tasks-per-step", "2", "--limit", "4"]
SMALL_GRPO += ["--micro-batch-size", "2", "--max-new-tokens", "16", "--max-steps", "2"]
SMALL_GRPO += ["--no-progress"]

PEAK = """
import json, sys, torch
from passkt.eval.cli import main
out, argv = sys.argv[1], sys.argv[2:]
try:
    code = main(argv)
finally:
    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        peak = {"allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
                "device_used_gb": (total - free) / 1e9}
        open(out, "w").write(json.dumps(peak))
sys.exit(code)
"""
"""Runs one passkt command in this process and records its peak GPU memory: torch's allocator
peak and what the device holds at the end (vLLM's reservation included)."""


@dataclass
class Check:
    """One route: the commands, what it needs, and what happened."""

    name: str
    what: str
    commands: list[list[str]]
    needs: tuple[str, ...] = ()
    """Python packages (``trl``, ``datasets``, ``peft``, ``vllm``)."""
    gpus: int = 1
    bf16: bool = False
    plan: list[str] | None = None
    """``passkt train`` arguments whose ``--check`` estimate the peak is compared with."""
    status: str = "pending"
    reason: str = ""
    seconds: float = 0.0
    estimate_gb: float | None = None
    peak: dict[str, float] = field(default_factory=dict)


def cuda() -> tuple[int, bool, float | None]:
    """GPUs, bf16 support and the first GPU's memory in GB (0, False, None without CUDA)."""
    try:
        import torch  # optional: the hf extra
    except ImportError:
        return 0, False, None
    if not torch.cuda.is_available():
        return 0, False, None
    memory = torch.cuda.get_device_properties(0).total_memory / 1e9
    return torch.cuda.device_count(), torch.cuda.is_bf16_supported(), memory


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def passkt() -> list[str]:
    return [sys.executable, "-m", "passkt.eval.cli"]


def train(*flags: str) -> list[str]:
    return ["train", "grpo", *ENV, *SMALL_GRPO, *flags]


def checks(model: Path, work: Path) -> list[Check]:
    """Every check, in order (commands refer to ``model`` and folders under ``work``)."""
    hf = [*ENV, "--policy", f"hf:{model}", "--device", "cuda", *SMALL_EVAL]
    policy = ["--policy", f"hf:{model}"]

    def trainer(name: str, what: str, flags: list[str], **kw: object) -> Check:
        argv = train(*policy, *flags, "--out", str(work / name))
        return Check(name, what, [argv], plan=argv, **kw)  # type: ignore[arg-type]

    trl_out = work / "trl-grpo"
    trl = train(*policy, "--backend", "trl", "--out", str(trl_out))
    final_eval = [*ENV, "--policy", f"hf:{trl_out / 'final'}", "--device", "cuda", *SMALL_EVAL]
    return [
        Check("hf-eval-cuda", "passkt eval --policy hf: on CUDA", [["eval", *hf, "--out",
              str(work / "eval")]]),
        trainer("passkt-grpo-full-bf16", "passkt's trainer, full fine-tuning, bf16",
                ["--dtype", "bfloat16"], bf16=True),
        trainer("passkt-grpo-lora", "passkt's trainer, LoRA r 8", ["--finetune", "lora",
                "--lora-r", "8"], needs=("peft",)),
        trainer("passkt-grpo-vllm", "passkt's trainer, colocated vLLM, apply_model sync",
                ["--rollout-engine", "vllm"], needs=("vllm",)),
        trainer("passkt-grpo-vllm-lora", "passkt's trainer, colocated vLLM, LoRA requests",
                ["--rollout-engine", "vllm", "--finetune", "lora", "--lora-r", "8"],
                needs=("vllm", "peft")),
        Check("eval-vllm", "passkt eval --policy vllm:", [["eval", *ENV, "--policy",
              f"vllm:{model}", *SMALL_EVAL, "--out", str(work / "eval-vllm")]], needs=("vllm",)),
        Check("trl-grpo", "TRL's GRPOTrainer through the adapter, then eval of OUT/final",
              [trl, ["eval", *final_eval, "--out", str(work / "eval-trl")]],
              needs=("trl", "datasets"), plan=trl),
        trainer("trl-grpo-vllm", "TRL's GRPOTrainer with a colocated vLLM engine",
                ["--backend", "trl", "--rollout-engine", "vllm"], needs=("trl", "datasets",
                "vllm")),
        Check("torchrun-2", "torchrun --nproc_per_node 2, TRL, DDP on NCCL",
              [["torchrun", *train(*policy, "--backend", "trl", "--out", str(work / "torchrun"))]],
              needs=("trl", "datasets"), gpus=2),
    ]  # fmt: skip


def skip_reason(check: Check, gpus: int, bf16: bool, has: Callable[[str], bool]) -> str:
    """Why ``check`` cannot run here ('' when it can): every missing thing, named."""
    reasons = []
    if gpus == 0:
        reasons.append("no CUDA device")
    elif gpus < check.gpus:
        reasons.append(f"{gpus} GPU(s): needs {check.gpus}")
    elif check.bf16 and not bf16:
        reasons.append("the GPU has no bf16")
    missing = [m for m in check.needs if not has(m)]
    if missing:
        reasons.append(f"not installed: {', '.join(missing)}")
    return "; ".join(reasons)


def estimate(argv: list[str], gpu_memory: float) -> float | None:
    """The plan check's memory estimate (GB) of a ``passkt train`` command."""
    done = subprocess.run(
        [*passkt(), *argv, "--check", "--gpu-memory", f"{gpu_memory:.1f}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r"memory per GPU: .* = ([\d.]+) GB \(typical", done.stdout)
    return float(found.group(1)) if found else None


def command_line(argv: list[str], peak_file: Path) -> list[str]:
    if argv[0] == "torchrun":
        return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                "-m", "passkt.eval.cli", *argv[1:]]  # fmt: skip
    return [sys.executable, "-c", PEAK, str(peak_file), *argv]


def run(check: Check, work: Path, gpu_memory: float | None) -> None:
    """Run the check's commands; fill in its status, seconds, estimate and peak."""
    if check.plan is not None and gpu_memory is not None:
        check.estimate_gb = estimate(check.plan, gpu_memory)
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    clock = time.perf_counter()
    check.status = "ok"
    for index, argv in enumerate(check.commands):
        peak_file = work / f"{check.name}-{index}.peak.json"
        try:
            done = subprocess.run(
                command_line(argv, peak_file), capture_output=True, text=True,
                timeout=TIMEOUT_S, env=env,
            )  # fmt: skip
            if done.returncode != 0:
                check.status = "fail"
                check.reason = " ".join(done.stderr.strip().splitlines()[-1:])
        except subprocess.TimeoutExpired:
            check.status, check.reason = "fail", f"timed out after {TIMEOUT_S} s"
        if peak_file.is_file() and not check.peak:
            check.peak = json.loads(peak_file.read_text())
        if check.status == "fail":
            break
    check.seconds = time.perf_counter() - clock


def line(check: Check, dry: bool) -> str:
    if check.status == "skip":
        return f"{check.name}: SKIP ({check.reason})"
    if dry:
        return f"{check.name}: would run ({len(check.commands)} command(s))"
    memory = ""
    if check.peak:
        memory = f", peak {check.peak['allocated_gb']:.2f} GB allocated"
        if check.estimate_gb is not None:
            memory += f" (plan check: {check.estimate_gb:.1f} GB)"
    if check.status == "ok":
        return f"{check.name}: OK ({check.seconds:.0f} s{memory})"
    return f"{check.name}: FAIL ({check.seconds:.0f} s): {check.reason}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry", action="store_true", help="say what would run; run nothing")
    parser.add_argument("--report", type=Path, help="write the JSON report here")
    args = parser.parse_args(argv)
    gpus, bf16, memory = cuda()
    with tempfile.TemporaryDirectory(prefix="passkt-gpu-check-") as folder:
        work = Path(folder)
        model = work / "model"
        todo = checks(model, work)
        for check in todo:
            reason = skip_reason(check, gpus, bf16, installed)
            if reason:
                check.status, check.reason = "skip", reason
        if not args.dry and any(c.status != "skip" for c in todo):
            from passkt.agents.tiny import make_tiny_checkpoint

            make_tiny_checkpoint(model, hidden_size=256, num_layers=4, num_heads=4)
        for check in todo:
            if check.status != "skip" and not args.dry:
                run(check, work, memory)
            print(line(check, args.dry), flush=True)
    report = {
        "gpus": gpus,
        "gpu_memory_gb": memory,
        "dry": args.dry,
        "checks": [
            {k: v for k, v in asdict(c).items() if k not in ("commands", "plan")} for c in todo
        ],
    }
    if args.report is not None:
        args.report.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if any(c.status == "fail" for c in todo) else 0


if __name__ == "__main__":
    sys.exit(main())
