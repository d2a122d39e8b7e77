"""Rollout engine overhead: the share of wall time spent outside ``generate``, and episodes/s.

Runs the tiny test model (made on the fly, offline) through ``rollout`` on synthetic BridgeQA at
several batch sizes (batch = tasks x samples live in one round) and prints, side by side, wall
time, time inside the policy's ``generate_ids``, the share outside it, and episodes per second.

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
    policy = HFPolicy(folder, batch_size=512)
    tasks = [t.task_id for t in gym.make("BridgeQA-v0").unwrapped.tasks]
    params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens)
    rollout(policy, "BridgeQA-v0", tasks[:2], budgets=(1,), params=params)  # warm-up

    print(f"tiny model, BridgeQA-v0, T = {args.budget}, max_new_tokens = {args.max_new_tokens}")
    columns = ("batch", "episodes", "wall s", "generate s", "outside", "tokens/s", "episodes/s")
    widths = (5, 8, 8, 10, 8, 9, 10)
    print(" ".join(f"{c:>{w}}" for c, w in zip(columns, widths, strict=True)))
    for batch in [int(b) for b in args.batches.split(",")]:
        best = None
        for repeat in range(args.repeats):
            ids = tasks[repeat * batch : (repeat + 1) * batch]
            started = time.perf_counter()
            result = rollout(
                policy, "BridgeQA-v0", ids, budgets=(args.budget,), params=params, seed=repeat
            )
            wall = time.perf_counter() - started
            stats = result.stats
            if best is None or wall < best[0]:
                best = (wall, stats)
        wall, stats = best
        outside = 1 - stats.generate_seconds / wall
        print(
            f"{batch:>5} {stats.episodes:>8} {wall:>8.2f} {stats.generate_seconds:>10.2f} "
            f"{outside:>8.1%} {stats.generated_tokens / wall:>9.0f} {stats.episodes / wall:>10.2f}"
        )


if __name__ == "__main__":
    main()
