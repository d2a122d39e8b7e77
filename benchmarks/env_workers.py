"""Env workers: throughput against slow envs, and their cost on passkt's own envs.

Usage:
    OMP_NUM_THREADS=1 python benchmarks/env_workers.py [--tasks 8] [--n 8] [--step-ms 20]

Two envs whose every step takes ``--step-ms``: one sleeps (a server round trip, a subprocess),
one burns CPU (a game engine). Each is rolled out with 0 workers (every env in the main process,
as passkt ran before env workers existed) and with 1, 2 and 4 workers; the table gives episodes'
steps per second of wall time, the ratio to 0 workers, and CPU seconds (main process plus
workers) beside wall. Then passkt's own BridgeQA-v0 with the heuristic agent, 0, 1 and 2 workers:
the cost per env step that workers add. Every configuration's records must equal 0 workers'
(checked; the script exits 1 otherwise). Prints Markdown tables for benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time

import gymnasium as gym

import passkt.envs  # noqa: F401  (registers BridgeQA-v0)
from passkt.agents.policy import Completion
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy


class SlowEnv(gym.Env):
    """Say the word back in ``<answer>``; any other text is a move. Each step takes ``seconds``
    asleep or, with ``busy``, of CPU."""

    def __init__(self, seconds=0.02, busy=False, split="test"):
        self.seconds, self.busy = seconds, busy
        self.tasks = [f"word{i}" for i in range(64)]
        self.protocol = {"stop": ["</answer>"]}
        self.observation_space = gym.spaces.Text(1000)
        self.action_space = gym.spaces.Text(1000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = options["task_id"]
        return f"The word is {self.word}.", {}

    def step(self, action):
        if self.busy:
            end = time.process_time() + self.seconds
            while time.process_time() < end:
                pass
        else:
            time.sleep(self.seconds)
        if action.startswith("<answer>"):
            right = action == f"<answer>{self.word}</answer>"
            return "Done.", float(right), True, False, {"correct": right}
        return f"The word is {self.word}.", 0.0, False, False, {}


gym.register("SlowEnv-v0", entry_point=SlowEnv)


class Mover:
    """Moves until its third turn, then answers (a fixed number of steps per episode)."""

    def generate(self, conversations, params):
        out = []
        for messages in conversations:
            word = messages[-1]["content"].rsplit(" ", 1)[-1].rstrip(".")
            turns = sum(m["role"] == "assistant" for m in messages)
            out.append(Completion(f"<answer>{word}</answer>" if turns >= 3 else "look"))
        return out


def cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(policy, env_id, task_ids, n, budgets, env_kwargs, workers):
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = rollout(
        policy, env_id, task_ids, n=n, budgets=budgets, env_kwargs=env_kwargs,
        env_workers=workers, seed=1,
    )  # fmt: skip
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    steps = sum(len(e.turns) for e in result.episodes if e.budget == max(budgets))
    records = [json.dumps(e.to_record(), sort_keys=True) for e in result.episodes]
    return wall, cpu, steps, records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--bridge-tasks", type=int, default=100)
    args = parser.parse_args()
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {args.tasks} tasks x n = {args.n}, a {args.step_ms:g} ms step\n"
    )
    ok = True
    print("| env step | workers | steps | wall s | steps/s | vs 0 workers | CPU s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ids = [f"word{i}" for i in range(args.tasks)]
    for busy in (False, True):
        kwargs = {"seconds": args.step_ms / 1000, "busy": busy}
        base = None
        for workers in (0, 1, 2, 4):
            wall, cpu, steps, records = measure(
                Mover(), "SlowEnv-v0", ids, args.n, (3,), kwargs, workers
            )
            if base is None:
                base = (steps / wall, records)
            same = records == base[1]
            ok &= same
            label = f"{args.step_ms:g} ms {'CPU' if busy else 'sleep'}"
            print(
                f"| {label} | {workers} | {steps} | {wall:.2f} | {steps / wall:.1f} | "
                f"{steps / wall / base[0]:.2f}x | {cpu:.2f} |" + ("" if same else " DIFFERENT")
            )
    print("\n| BridgeQA-v0, heuristic | workers | env steps | wall s | CPU s | µs/step over 0 |")
    print("|---|---:|---:|---:|---:|---:|")
    env = gym.make("BridgeQA-v0")
    ids = [t.task_id for t in env.unwrapped.tasks[: args.bridge_tasks]]
    base = None
    for workers in (0, 1, 2):
        wall, cpu, steps, records = measure(
            HeuristicPolicy(), "BridgeQA-v0", ids, 4, (0, 1, 2, 3, 5), {}, workers
        )
        if base is None:
            base = (wall, cpu, records)
        same = records == base[2]
        ok &= same
        extra_wall = (wall - base[0]) / steps * 1e6
        extra_cpu = (cpu - base[1]) / steps * 1e6
        print(
            f"| | {workers} | {steps} | {wall:.2f} | {cpu:.2f} | {extra_wall:+.0f} wall, "
            f"{extra_cpu:+.0f} CPU |" + ("" if same else " DIFFERENT")
        )
    print("\nrecords identical across worker counts:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
