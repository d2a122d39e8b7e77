"""Cost of a full PASS@(k,T) surface: prefix sharing against independent per-T runs.

Runs the same evaluation twice in one process, same policy, tasks, n and T grid: once with prefix
sharing (one rollout at the largest T, a forked branch per smaller T) and once with every T run on
its own. Prints generated tokens, policy calls (batched generate rounds) and wall time side by
side with their ratio, and checks the estimates: for a deterministic policy (a scripted one, or
temperature 0) the two surfaces must be identical, and the script fails if they are not.

    python benchmarks/eval_cost.py                          # scripted:oracle, 100 tasks, n = 16
    python benchmarks/eval_cost.py --policy scripted:heuristic --temperature 0
    python benchmarks/eval_cost.py --policy hf:smollm2-135m-instruct --limit 5 --n 2 \\
        --temperature 0 --max-new-tokens 48
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import sys
import time

import numpy as np

from passkt.agents import scripted
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import ChatTokens
from passkt.agents.scripted import HeuristicPolicy
from passkt.agents.specs import load_policy, parse_spec
from passkt.envs.base import ToolUseEnv
from passkt.eval.cli import parse_env_kwargs, parse_int_list
from passkt.eval.evaluate import default_chunk_tasks, env_info, evaluate


class _Counting:
    """Wraps a policy and counts the sequences it is asked to continue (one per turn played)."""

    def __init__(self, policy) -> None:
        self._policy = policy
        self.sequences = 0

    def __getattr__(self, name: str):  # tokenizer, spec ...: a TokenPolicy stays a TokenPolicy
        return getattr(self._policy, name)

    def generate(self, conversations, params):
        self.sequences += len(conversations)
        return self._policy.generate(conversations, params)

    def generate_ids(self, prompts, params):
        self.sequences += len(prompts)
        return self._policy.generate_ids(prompts, params)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--env", default="BridgeQA-v0")
    p.add_argument("--env-kwargs", default=None, help="k=v,... as for `passkt eval`")
    p.add_argument("--policy", default="scripted:oracle", help="a policy spec (default oracle)")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--budgets", default="0,1,2,3,5")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = deterministic")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--device", default=None, help="hf: cpu / cuda")
    p.add_argument("--dtype", default=None, help="hf: float32 / bfloat16")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--before",
        action="store_true",
        help="also run both modes with the fork and prompt costs of the earlier design",
    )
    return p


@contextlib.contextmanager
def earlier_design():
    """The costs the evaluator had in its earlier design, restored for a side-by-side measure: every
    fork deep-copied the env's RNG and both spaces and rebuilt its spec and episode with
    ``dataclasses.replace``, every sample rendered and tokenized the first prompt again, and the
    heuristic agent parsed every text of the conversation again at every turn."""
    fork, prompt_ids, act = ToolUseEnv.fork, ChatTokens.prompt_ids, HeuristicPolicy.act
    parsers = (scripted._parsed_names, scripted._documents, scripted._searched)

    def old_act(self, conversation, rng, *, greedy):
        for parser in parsers:
            parser.cache_clear()
        return act(self, conversation, rng, greedy=greedy)

    def old_fork(self, max_tool_calls):
        clone, observation = fork(self, max_tool_calls)
        clone._episode = dataclasses.replace(clone._episode)
        clone._np_random = copy.deepcopy(self.np_random)
        clone.action_space = copy.deepcopy(self.action_space)
        clone.observation_space = copy.deepcopy(self.observation_space)
        if self.spec is not None:
            kwargs = {**self.spec.kwargs, "max_tool_calls": max_tool_calls}
            clone.spec = dataclasses.replace(self.spec, kwargs=kwargs)
        return clone, observation

    def old_prompt_ids(self, messages):
        self._prompt_cache.clear()
        return prompt_ids(self, messages)

    ToolUseEnv.fork, ChatTokens.prompt_ids = old_fork, old_prompt_ids
    HeuristicPolicy.act = old_act
    try:
        yield
    finally:
        ToolUseEnv.fork, ChatTokens.prompt_ids, HeuristicPolicy.act = fork, prompt_ids, act


def _evaluate(args, policy, env_kwargs, budgets, params, share):
    """One evaluation; its result, turns generated, wall and CPU seconds."""
    counting = _Counting(policy)
    wall, cpu = time.perf_counter(), time.process_time()
    result = evaluate(
        args.env,
        counting,
        env_kwargs=env_kwargs,
        n=args.n,
        budgets=budgets,
        limit=args.limit,
        seed=args.seed,
        params=params,
        share_prefix=share,
        progress=False,
        chunk_tasks=default_chunk_tasks(args.n),  # the wrapper batches jointly: fixed chunks
    )
    return result, counting.sequences, time.perf_counter() - wall, time.process_time() - cpu


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    parse_spec(args.policy)  # a bad spec fails before any work
    env_kwargs = parse_env_kwargs(args.env_kwargs)
    budgets = parse_int_list(args.budgets, "--budgets")
    options = {k: v for k, v in (("device", args.device), ("dtype", args.dtype)) if v}
    info = env_info(args.env, env_kwargs)
    policy = load_policy(args.policy, tasks=info.tasks, **options)  # loaded once, used twice
    params = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    # The oracle ignores sampling; every other policy is deterministic at temperature 0.
    deterministic = args.temperature == 0 or args.policy == "scripted:oracle"
    args_warm = argparse.Namespace(**{**vars(args), "limit": 2})
    _evaluate(args_warm, policy, env_kwargs, budgets, params, True)  # imports, caches: not timed
    runs = {}
    for share in (True, False):
        runs["now", share] = _evaluate(args, policy, env_kwargs, budgets, params, share)
        if args.before:
            with earlier_design():
                runs["before", share] = _evaluate(args, policy, env_kwargs, budgets, params, share)

    (shared, seq_shared, t_shared, c_shared) = runs["now", True]
    (alone, seq_alone, t_alone, c_alone) = runs["now", False]
    rows = [
        ("generated tokens", shared.stats.generated_tokens, alone.stats.generated_tokens),
        ("turns generated", seq_shared, seq_alone),
        ("policy calls (rounds)", shared.stats.policy_calls, alone.stats.policy_calls),
        ("wall seconds", t_shared, t_alone),
        ("CPU seconds", c_shared, c_alone),
    ]
    grid = f"T in {{{','.join(map(str, budgets))}}}"
    print(
        f"{args.env} {env_kwargs or ''} | {args.policy} (temperature {args.temperature}) | "
        f"{shared.outcomes.num_tasks} tasks, n = {args.n}, {grid}"
    )
    print(f"| {'':22} | {'prefix sharing':>15} | {'independent per T':>18} | {'ratio':>6} |")
    print(f"|{'-' * 24}|{'-' * 16}:|{'-' * 19}:|{'-' * 7}:|")
    for name, a, b in rows:
        fmt = "{:.2f}" if isinstance(a, float) else "{:d}"
        ratio = b / a if a else float("nan")
        print(f"| {name:22} | {fmt.format(a):>15} | {fmt.format(b):>18} | {ratio:>5.2f}x |")

    diff = float(np.abs(shared.surface.values - alone.surface.values).max())
    same = shared.outcomes.with_name("x") == alone.outcomes.with_name("x")
    print(f"pass@k surfaces: max |difference| = {diff:.4f}; outcomes identical: {same}")
    failed = deterministic and not same
    if args.before:
        failed |= _print_before_after(runs)
    if failed:
        print("FAIL: a deterministic policy must give identical estimates", file=sys.stderr)
        return 1
    return 0


def _print_before_after(runs) -> bool:
    """The before/now table (CPU per 1,000 episodes); True if any outcome changed."""
    print("\nCPU seconds per 1,000 episodes (episodes = tasks x n x T values), same run:")
    print("| mode | before | now | before / now | outcomes |")
    print("|---|---:|---:|---:|---|")
    changed = False
    for share, label in ((True, "prefix sharing"), (False, "independent per T")):
        before, now = runs["before", share], runs["now", share]
        per = 1000 / now[0].stats.episodes
        same = before[0].outcomes.with_name("x") == now[0].outcomes.with_name("x")
        changed |= not same
        print(
            f"| {label} | {before[3] * per:.2f} | {now[3] * per:.2f} | "
            f"{before[3] / now[3]:.2f}x | {'identical' if same else 'DIFFERENT'} |"
        )
    return changed


if __name__ == "__main__":
    sys.exit(main())
