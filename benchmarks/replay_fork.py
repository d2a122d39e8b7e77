"""The generic replay fork against an env's own fork: same outcomes, what it costs.

An env without ``fork(max_tool_calls)`` still gets prefix sharing: each budget branch re-makes the
env, resets it with the original seed and options, replays the actions and checks every replayed
observation (``passkt.agents.env_runtime``). This script evaluates one policy three ways in one
process, on the same tasks, n and T grid:

- ``fork``: BridgeQA-v0 as registered (its own ``fork``);
- ``replay``: the same env under a wrapper passkt does not know (``Opaque``), which sends every
  branch through the replay fork;
- ``independent``: every T on its own (``share_prefix=False``), the cost prefix sharing avoids.

It prints generated tokens, turns generated, wall and CPU seconds side by side with ratios to
``fork``, and exits with an error unless the three runs give identical outcomes (the policy must
be deterministic: a scripted one, or temperature 0).

    python benchmarks/replay_fork.py                                  # scripted:heuristic, T 0..5
    python benchmarks/replay_fork.py --policy scripted:oracle --limit 100 --n 16
    python benchmarks/replay_fork.py --policy tiny --limit 20 --n 4   # a tiny random HF model

``--policy tiny`` builds a tiny random Qwen2 checkpoint (``passkt.agents.tiny``) in a temporary
folder and decodes greedily: real tokens, so the cost of generation is in the comparison.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym

from passkt.agents.policy import SamplingParams
from passkt.agents.specs import load_policy
from passkt.eval.cli import parse_env_kwargs, parse_int_list
from passkt.eval.evaluate import env_info, evaluate


class Opaque(gym.Wrapper):
    """A wrapper passkt does not know: it cannot fork through it, so it replays."""


def opaque_bridge(**kwargs):
    from passkt.envs.bridge_qa import BridgeQAEnv

    return Opaque(BridgeQAEnv(**kwargs))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--policy", default="scripted:heuristic")
    p.add_argument("--env-kwargs", default=None, help="BridgeQA-v0 kwargs, k=v,...")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--budgets", default="0,1,2,3,5")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=32, help="per turn (model policies)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    gym.register("OpaqueBridgeQA-v0", entry_point=opaque_bridge)
    kwargs = parse_env_kwargs(args.env_kwargs)
    budgets = parse_int_list(args.budgets, "--budgets")
    tasks = env_info("BridgeQA-v0", kwargs).tasks
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    if args.policy == "tiny":
        import torch

        from passkt.agents.tiny import make_tiny_checkpoint

        torch.set_num_threads(1)
        folder = Path(tempfile.mkdtemp(prefix="passkt-tiny-"))
        args.policy = f"hf:{make_tiny_checkpoint(folder / 'model', seed=0)}"
    # Warm-up (imports, the scorer, the task cache) so the first mode measured pays nothing extra.
    evaluate(
        "BridgeQA-v0",
        load_policy(args.policy, tasks=tasks),
        env_kwargs=kwargs,
        n=1,
        budgets=budgets,
        limit=2,
        params=params,
        progress=False,
    )
    modes = {
        "fork": ("BridgeQA-v0", None),
        "replay": ("OpaqueBridgeQA-v0", None),
        "independent": ("BridgeQA-v0", False),
    }
    rows, tables = {}, {}
    for mode, (env_id, share) in modes.items():
        policy = load_policy(args.policy, tasks=tasks)
        wall, cpu = time.perf_counter(), time.process_time()
        run = evaluate(
            env_id,
            policy,
            env_kwargs=kwargs,
            n=args.n,
            budgets=budgets,
            limit=args.limit,
            seed=args.seed,
            params=params,
            share_prefix=share,
            progress=False,
        )
        rows[mode] = (
            run.stats.generated_tokens,
            time.perf_counter() - wall,
            time.process_time() - cpu,
        )
        tables[mode] = run.outcomes.correct
    base = rows["fork"]
    print(
        f"BridgeQA-v0 {kwargs or ''} {args.policy} T={list(budgets)} n={args.n} tasks={args.limit}"
    )
    print("| mode | tokens | tokens / fork | wall s | wall / fork | CPU s | CPU / fork |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode, (tokens, wall, cpu) in rows.items():
        print(
            f"| {mode} | {tokens:,} | {tokens / base[0]:.2f}x | {wall:.2f} | {wall / base[1]:.2f}x "
            f"| {cpu:.2f} | {cpu / base[2]:.2f}x |"
        )
    same = all((tables[m] == tables["fork"]).all() for m in tables)
    print(f"outcomes identical across the three runs: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
