"""``passkt power``: how many problems a comparison needs, from a base evaluation.

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from passkt.eval.cli import _positive_int
from passkt.eval.power import (
    DEFAULT_SIMS,
    PowerAnswer,
    counts_at,
    required_problems,
    smallest_change,
    smoothed_rates,
)
from passkt.eval.store import load_run

__all__ = ["add_parser", "answer_markdown"]

EXAMPLES = """\
examples:
  passkt power runs/base --delta 0.04
      problems needed to detect a 0.04 change of pass@(n, T_max) (the boundary) with power 0.8
  passkt power runs/base --delta 0.05 --k 1 --T 5
  passkt power runs/base --problems 100
      the smallest boundary change 100 problems detect (a gain; add --loss for a loss)
"""


def add_parser(subparsers: Any) -> None:
    """Add ``power`` to the ``passkt`` command line."""
    p = subparsers.add_parser(
        "power",
        help="problems (or the smallest change) a paired comparison needs, by simulation",
        description="Simulate paired comparisons from a base run's own per-problem success "
        "rates, with the test `passkt compare` uses (passkt.eval.power).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run", type=Path, help="a finished base evaluation (run directory)")
    p.add_argument("--delta", type=float, help="the change of pass@(k, T) to detect, e.g. 0.04")
    p.add_argument("--problems", type=_positive_int, help="find the smallest change P detects")
    p.add_argument("--loss", action="store_true", help="with --problems: the smallest loss")
    p.add_argument("--k", type=_positive_int, help="k of pass@k (default n: the boundary)")
    p.add_argument("--T", dest="budget", type=int, help="the budget T (default the largest)")
    p.add_argument("--level", type=float, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=float, default=0.8, help="the wanted power (0.8)")
    p.add_argument(
        "--samples", type=_positive_int, help="samples per problem of the planned study (n)"
    )
    p.add_argument("--sims", type=_positive_int, default=DEFAULT_SIMS, help="simulated studies")
    p.add_argument("--seed", type=int, default=0, help="seed of the simulation")
    p.set_defaults(func=run_power)


def answer_markdown(answer: PowerAnswer, budget: int, run: str) -> str:
    """The answer as one sentence and the table of the points the search simulated."""
    what = "the boundary" if answer.k == answer.n else f"pass@{answer.k}"
    head = (
        f"{run}: {answer.problems} problems detect a change of {what} at T = {budget} "
        f"(pass@({answer.k}, {budget}) = {answer.base_pass_at_k:.3f} under the base's smoothed "
        f"rates) of {answer.delta:+.3f} with power {answer.achieved:.3f} (wanted {answer.power}) "
        f"at level {answer.level}, with n = {answer.n} samples per problem."
    )
    rows = ["| problems | change | power |", "| ---: | ---: | ---: |"]
    for point, power in sorted(answer.tried):
        problems, delta = (
            (int(point), answer.delta)
            if answer.searched == "problems"
            else (answer.problems, point)
        )
        rows.append(f"| {problems} | {delta:+.3f} | {power:.3f} |")
    return head + "\n\n" + "\n".join(rows) + "\n"


def run_power(args: argparse.Namespace) -> int:
    if (args.delta is None) == (args.problems is None):
        raise ValueError("give --delta (problems needed) or --problems (smallest change), not both")
    _, table = load_run(args.run)
    budget = max(table.budgets) if args.budget is None else args.budget
    counts = counts_at(table.correct, table.budgets, budget)
    n = args.samples or table.n
    k = n if args.k is None else args.k
    if k > n:
        raise ValueError(f"--k {k} is more than the samples per problem (n = {n})")
    rates = smoothed_rates(counts, table.n)
    common = dict(n=n, k=k, level=args.level, power=args.power, sims=args.sims, seed=args.seed)
    if args.delta is not None:
        answer = required_problems(rates, delta=args.delta, **common)
    else:
        direction = -1.0 if args.loss else 1.0
        answer = smallest_change(rates, problems=args.problems, direction=direction, **common)
    print(answer_markdown(answer, budget, str(args.run)), end="")
    return 0
