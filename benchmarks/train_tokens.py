"""Token counts of training episodes, the measured input of the GPU estimate in README.md.

    python benchmarks/train_tokens.py [--limit 100] [--t-train 5]

Runs the oracle expert (``scripted:oracle``: follows each task's gold chain, with a one-line
``<think>`` per turn) on the real task files in ``tests/data`` at the study's training budget,
and counts, per episode, the tokens of the prompt (system prompt and question), of the
observations (search results and chat-template turns) and of the policy's own turns, with the
SmolLM2 tokenizer (a 49k BPE; Qwen2.5's 151k BPE gives somewhat fewer tokens for English text).
The prompt and observation counts are the env's own and hold for any policy that makes the same
calls; the policy's turns are the oracle's short ones, a lower bound for a model that reasons.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CATEGORIES = {
    "A": ("Math-v0", {"source": "math500", "path": str(DATA / "math500.jsonl")}, 0),
    "B": (
        "ComparisonQA-v0",
        {"source": "hotpotqa", "path": str(DATA / "hotpotqa_dev_distractor_subset.json")},
        None,
    ),
    "C": (
        "BridgeQA-v0",
        {"source": "hotpotqa", "path": str(DATA / "hotpotqa_dev_distractor_subset.json")},
        None,
    ),
}


def count(env_id: str, kwargs: dict, budget: int, limit: int, tokenizer) -> dict[str, float]:
    import gymnasium as gym

    import passkt.envs  # noqa: F401
    from passkt.agents.rollout import rollout
    from passkt.agents.scripted import OraclePolicy

    env = gym.make(env_id, max_tool_calls=budget, **kwargs)
    tasks = list(env.unwrapped.tasks)[:limit]
    env.close()
    episodes = rollout(
        OraclePolicy(tasks),
        env_id,
        [t.task_id for t in tasks],
        budgets=(budget,),
        env_kwargs=kwargs,
        tokenizer=tokenizer,
    ).episodes
    rows = []
    for e in episodes:
        first = e.policy_mask.index(True)
        policy = sum(e.policy_mask)
        rows.append((first, policy, len(e.token_ids) - first - policy, len(e.turns), e.reward))
    return {
        "episodes": len(rows),
        "prompt": statistics.mean(r[0] for r in rows),
        "policy": statistics.mean(r[1] for r in rows),
        "observations": statistics.mean(r[2] for r in rows),
        "turns": statistics.mean(r[3] for r in rows),
        "total": statistics.mean(sum(r[:3]) for r in rows),
        "max_total": max(sum(r[:3]) for r in rows),
        "reward": statistics.mean(r[4] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100, help="tasks per category")
    parser.add_argument("--t-train", type=int, default=5, help="training budget T_train (B, C)")
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from passkt.agents.smollm import smollm2_path

    tokenizer = AutoTokenizer.from_pretrained(smollm2_path())
    print(f"oracle episodes, T_train={args.t_train} (A: T=0), SmolLM2 tokenizer, means per episode")
    print(
        "| category | episodes | turns | prompt tokens | observation tokens | policy tokens "
        "| total | max total | oracle reward |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cat, (env_id, kwargs, budget) in CATEGORIES.items():
        c = count(env_id, kwargs, args.t_train if budget is None else budget, args.limit, tokenizer)
        print(
            f"| {cat} {env_id} | {c['episodes']} | {c['turns']:.2f} | {c['prompt']:.0f} "
            f"| {c['observations']:.0f} | {c['policy']:.0f} | {c['total']:.0f} "
            f"| {c['max_total']} | {c['reward']:.2f} |"
        )


if __name__ == "__main__":
    main()
