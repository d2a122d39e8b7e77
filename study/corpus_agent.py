"""How often the pretraining corpus's own noisy agent succeeds on the test problems.

A testbed base imitates the episodes of its corpus (``passkt.study.testbed.corpus``), which a
``NoisyAgentPolicy`` wrote at several guided rates. That agent's success on the *test* problems,
at the budget the calibration targets are read at, is what a perfect imitator of the mixture
would score: the ceiling the base is measured against. This runs it through the real envs (no
model, a few seconds per category) and prints pass@1 per guided rate and the mean over a mixture
of rates (episodes are spread evenly over a corpus's rates)::

    python -m passkt.study.corpus_agent --rates 0,0.25,0.5,0.75,1 \\
        --mixture 0,0.25,0.5,0.75 --mixture 0.5,0.75,1 --limit 100 --n 8
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Sequence

import gymnasium as gym

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.study.testbed.corpus import NoisyAgentPolicy

CATEGORIES = {  # env id, env kwargs, budget (as passkt.study.calibration_curve)
    "A": ("Math-v0", {}, 0),
    "B": ("ComparisonQA-v0", {}, 5),
    "C": ("BridgeQA-v0", {"hops": [2]}, 5),
}


def success(category: str, rate: float, *, limit: int, n: int, seed: int = 0) -> float:
    """pass@1 of the corpus's agent at guided ``rate`` on the first ``limit`` test problems."""
    env_id, kwargs, budget = CATEGORIES[category]
    env = gym.make(env_id, split="test", **kwargs)
    tasks = env.unwrapped.tasks[:limit]
    env.close()
    policy = NoisyAgentPolicy(tasks, guided=rate, seed=seed)
    result = rollout(
        policy, env_id, [t.task_id for t in tasks], n=n, budgets=(budget,),
        env_kwargs={"split": "test", **kwargs}, params=SamplingParams(seed=seed + 1),
    )  # fmt: skip
    return sum(e.correct for e in result.episodes) / len(result.episodes)


def table(
    categories: Sequence[str], rates: Sequence[float], mixtures: Sequence[Sequence[float]],
    *, limit: int, n: int,
) -> str:  # fmt: skip
    """A markdown table: a row per category, a column per rate and per mixture."""
    wanted = sorted({*rates, *(r for m in mixtures for r in m)})
    heads = [f"rate {r:g}" for r in rates] + [
        "mixture " + ", ".join(f"{r:g}" for r in m) for m in mixtures
    ]
    lines = ["| category | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    for cat in categories:
        by_rate = {r: success(cat, r, limit=limit, n=n) for r in wanted}
        cells = [by_rate[r] for r in rates] + [
            sum(by_rate[r] for r in m) / len(m) for m in mixtures
        ]
        env_id, _, budget = CATEGORIES[cat]
        lines.append(
            f"| {cat} {env_id} T={budget} | " + " | ".join(f"{c:.3f}" for c in cells) + " |"
        )
    return "\n".join(lines) + "\n"


def _rates(text: str) -> list[float]:
    try:
        rates = [float(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of rates: {text!r}") from None
    if not rates or not all(0.0 <= r <= 1.0 for r in rates):
        raise argparse.ArgumentTypeError(f"rates must lie in [0, 1], got {text!r}")
    return rates


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--categories", default="A,B,C")
    p.add_argument("--rates", type=_rates, default=[0.0, 0.25, 0.5, 0.75, 1.0])
    p.add_argument("--mixture", type=_rates, action="append", default=[],
                   help="a corpus's guided rates, averaged (repeatable)")  # fmt: skip
    p.add_argument("--limit", type=int, default=100, help="test problems")
    p.add_argument("--n", type=int, default=8, help="episodes per problem and rate")
    args = p.parse_args(list(argv) if argv is not None else None)
    cats = args.categories.split(",")
    unknown = sorted(set(cats) - set(CATEGORIES))
    if unknown:
        p.error(f"--categories: unknown {unknown}; choose from {sorted(CATEGORIES)}")
    sys.stdout.write(table(cats, args.rates, args.mixture, limit=args.limit, n=args.n))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
