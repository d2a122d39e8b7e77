"""Rollout engine overhead: the share of wall time spent outside ``generate``, and episodes/s.

Runs the tiny test model (made on the fly, offline) through ``rollout`` on synthetic BridgeQA at
several batch sizes (batch = tasks x samples live in one round) and prints, side by side, wall
and CPU time of the rollout, wall and CPU time inside the policy's ``generate_ids``, the share
outside it (wall and CPU), and tokens and episodes per CPU-second (the best of ``--repeats``
rollouts by CPU time).

    python benchmarks/rollout.py                 # batch 1, 8, 32
    python benchmarks/rollout.py --batches 32 --max-new-tokens 48 --budget 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch

import passkt.envs  # noqa: F401
from passkt.agents.hf import HFPolicy
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.tiny import make_tiny_checkpoint


class CPUTimedPolicy(HFPolicy):
    """``HFPolicy`` that adds up the CPU seconds spent inside ``generate_ids``."""

    generate_cpu = 0.0

    def generate_ids(self, prompts, params):  # type: ignore[no-untyped-def]
        cpu = time.process_time()
        try:
            return super().generate_ids(prompts, params)
        finally:
            self.generate_cpu += time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--batches", default="1,8,32", help="comma-separated batch sizes")
    parser.add_argument("--budget", type=int, default=3, help="T of every episode")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument(
        "--repeats", type=int, default=2, help="rollouts per batch size (best kept)"
    )
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    folder = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / "tiny", seed=0)
    policy = CPUTimedPolicy(folder, batch_size=512)
    tasks = [t.task_id for t in gym.make("BridgeQA-v0").unwrapped.tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    rollout(policy, "BridgeQA-v0", tasks[:2], budgets=(1,), params=params)  # warm-up

    print(f"tiny model, BridgeQA-v0, T = {args.budget}, max_new_tokens = {args.max_new_tokens}")
    columns = (
        "batch", "episodes", "wall s", "CPU s", "generate s", "generate CPU s", "outside",
        "outside CPU", "tokens/CPU-s", "episodes/CPU-s",
    )  # fmt: skip
    widths = (5, 8, 8, 8, 10, 14, 8, 11, 12, 14)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for batch in [int(b) for b in args.batches.split(",")]:
        best = None
        for repeat in range(args.repeats):
            ids = tasks[repeat * batch : (repeat + 1) * batch]
            policy.generate_cpu = 0.0
            started, cpu = time.perf_counter(), time.process_time()
            result = rollout(
                policy, "BridgeQA-v0", ids, budgets=(args.budget,), params=params, seed=repeat
            )
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            stats = result.stats
            if best is None or cpu < best[1]:
                best = (wall, cpu, stats, policy.generate_cpu)
        wall, cpu, stats, generate_cpu = best
        outside = 1 - stats.generate_seconds / wall
        outside_cpu = 1 - generate_cpu / cpu
        print(
            f"{batch:>5} {stats.episodes:>8} {wall:>8.2f} {cpu:>8.2f} "
            f"{stats.generate_seconds:>10.2f} {generate_cpu:>14.2f} "
            f"{outside:>8.1%} {outside_cpu:>11.1%} {stats.generated_tokens / cpu:>12.0f} "
            f"{stats.episodes / cpu:>14.2f}"
        )


if __name__ == "__main__":
    main()
