"""``passkt power``: how many problems a comparison needs, from a base evaluation.

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from passkt.agents.preflight import (
    MAX_RESAMPLES,
    finite_float,
    int_in,
    resamples,
    seed_int,
    unit_float,
)
from passkt.eval.cli import _positive_int
from passkt.eval.estimator import default_ks, pass_at_k_array
from passkt.eval.power import (
    DEFAULT_SIMS,
    PowerAnswer,
    counts_at,
    evaluation_sd,
    required_problems,
    seed_level_power,
    seeds_needed,
    seeds_needed_t,
    smallest_change,
    smoothed_rates,
    true_pass_at_k,
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
  passkt power runs/base-s0 runs/base-s1 runs/base-s2 --delta 0.04
      each base's answer, then the seed-level test's power over the three (one training each)
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
    p.add_argument(
        "run",
        type=Path,
        nargs="+",
        help="a finished base evaluation (run directory); several: independently pretrained "
        "bases of one recipe on the same problems, for the seed-level test's power (--delta)",
    )
    p.add_argument(
        "--delta", type=finite_float, help="the change of pass@(k, T) to detect, e.g. 0.04"
    )
    p.add_argument("--problems", type=_positive_int, help="find the smallest change P detects")
    p.add_argument("--loss", action="store_true", help="with --problems: the smallest loss")
    p.add_argument("--k", type=_positive_int, help="k of pass@k (default n: the boundary)")
    p.add_argument(
        "--T", dest="budget", type=int_in(0, 1000), help="the budget T (default the largest)"
    )
    p.add_argument("--level", type=unit_float, default=0.05, help="significance level (0.05)")
    p.add_argument("--power", type=unit_float, default=0.8, help="the wanted power (0.8)")
    p.add_argument(
        "--samples",
        type=int_in(1, 10_000),
        help="samples per problem of the planned study (n, to 10,000)",
    )
    p.add_argument(
        "--sims",
        type=resamples,
        default=DEFAULT_SIMS,
        help=f"simulated studies (1 to {MAX_RESAMPLES:,})",
    )
    p.add_argument(
        "--spread",
        type=finite_float,
        help="several runs: the standard deviation of the replicates' true changes (e.g. a "
        "pilot's per-replicate changes, as its summary prints them) for the realistic "
        "seed-level power beside the equal-change upper bound",
    )
    p.add_argument(
        "--replicates",
        type=int_in(1, 1000),
        help="several runs: the (base, trained) pairs the planned study has, cycling through "
        "the runs given (1 to 1000; default one per run)",
    )
    p.add_argument(
        "--seeds-for",
        type=unit_float,
        metavar="POWER",
        help="with --spread: also the fewest replicates (3..16) that reach this power",
    )
    p.add_argument("--seed", type=seed_int, default=0, help="seed of the simulation (>= 0)")
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


def check_room(path: Path, table: Any, budget: int, k: int, delta: float) -> None:
    """Refuse, in one line, a ``--delta`` that would take pass@(k, T) out of (0, 1), naming the
    value the report shows and the ``--k``, ``--T`` or ``--delta`` that would answer.

    The simulation moves the base's smoothed rates ``(c + 1/2) / (n + 1)`` (so that a problem
    solved n of n times can still fail); their pass@k is what must stay inside (0, 1)."""

    def smoothed(k: int, t: int) -> float:
        return true_pass_at_k(
            smoothed_rates(counts_at(table.correct, table.budgets, t), table.n), k
        )

    base = smoothed(k, budget)
    if 0.0 < base + delta < 1.0:
        return
    counts = counts_at(table.correct, table.budgets, budget)
    shown = float(pass_at_k_array(table.n, counts, k).mean())
    fits = (lambda value: value + delta < 1.0) if delta > 0 else (lambda value: value + delta > 0)
    hints = []
    ks = [j for j in default_ks(table.n) if j < k and fits(smoothed(j, budget))]
    if ks:
        hints.append(f"--k {ks[-1]}")
    budgets = [t for t in table.budgets if t != budget and fits(smoothed(k, t))]
    if budgets:
        hints.append(f"--T {budgets[0] if delta > 0 else budgets[-1]}")

    def smaller(value: float) -> str | None:
        room = 1.0 - value if delta > 0 else value
        size = math.floor(room * 100) / 100 - 0.01
        return f"--delta {'' if delta > 0 else '-'}{size:.2f}" if size >= 0.01 else None

    if smaller(base):
        hints.append(smaller(base))
    if not hints:  # the most room there is: pass@1 at the lowest (gain) or highest (loss) T
        t = table.budgets[0] if delta > 0 else table.budgets[-1]
        widest = smaller(smoothed(1, t))
        if widest:
            hints.append(f"--k 1 --T {t} {widest}")
    raise ValueError(
        f"{path}: pass@({k}, {budget}) is {shown:.3f} (as `passkt report` shows it; {base:.3f} "
        f"under the smoothed rates the simulation moves), which leaves no room for a change of "
        f"{delta:+g}; try " + (" or ".join(hints) if hints else "another run")
    )


def run_power(args: argparse.Namespace) -> int:
    if args.spread is not None and (not math.isfinite(args.spread) or args.spread < 0):
        raise ValueError(f"--spread must be a finite number >= 0, got {args.spread!r}")
    if args.seeds_for is not None and not 0 < args.seeds_for < 1:
        raise ValueError(f"--seeds-for must lie in (0, 1), e.g. 0.8; got {args.seeds_for!r}")
    if args.seeds_for is not None and args.spread is None:
        raise ValueError("--seeds-for needs --spread (the realistic power it searches with)")
    if (args.delta is None) == (args.problems is None):
        raise ValueError("give --delta (problems needed) or --problems (smallest change), not both")
    if len(args.run) > 1 and args.delta is None:
        raise ValueError("several runs: give --delta (the seed-level test's power for that change)")
    tables = [load_run(path)[1] for path in args.run]
    budget = max(tables[0].budgets) if args.budget is None else args.budget
    shared = set(tables[0].task_ids).intersection(*(t.task_ids for t in tables[1:]))
    if len(shared) < 2:
        raise ValueError(f"{args.run[-1]}: shares fewer than 2 problems with {args.run[0]}")
    ids = sorted(shared)
    n = args.samples or tables[0].n
    k = n if args.k is None else args.k
    if k > n:
        raise ValueError(f"--k {k} is more than the samples per problem (n = {n})")
    common = dict(n=n, k=k, level=args.level, sims=args.sims, seed=args.seed)
    bases = []
    for path, table in zip(args.run, tables, strict=True):
        counts = counts_at(table.correct, table.budgets, budget)
        rates = smoothed_rates(counts, table.n)
        if args.delta is not None:
            check_room(path, table, budget, k, args.delta)
            answer = required_problems(rates, delta=args.delta, power=args.power, **common)
        else:
            direction = -1.0 if args.loss else 1.0
            answer = smallest_change(
                rates, problems=args.problems, direction=direction, power=args.power, **common
            )
        print(answer_markdown(answer, budget, str(path)), end="")
        index = {task: i for i, task in enumerate(table.task_ids)}
        bases.append(rates[[index[task] for task in ids]])
    if len(bases) > 1:
        what = "the boundary" if k == n else f"pass@{k}"
        count = args.replicates or len(bases)
        study = dict(problems=len(ids), replicates=count, **common)
        try:
            upper = f"{seed_level_power(bases, delta=args.delta, **study):.3f}"
        except ValueError as e:
            upper = f"none ({e})"
        print(
            f"\nseed-level test over {count} replicates (cycling through these {len(bases)} "
            f"bases, one trained policy each) and their {len(ids)} shared problems, a change of "
            f"{what} at T = {budget} of {args.delta:+g} at level {args.level}:\n"
            f"- upper bound (every replicate changes by exactly {args.delta:+g}): power {upper}"
        )

        def beyond(bases: list[Any]) -> str:  # past the simulated search: the t-test's count
            noise = float(np.mean([evaluation_sd(b, n=n, k=k, problems=len(ids)) for b in bases]))
            sd = math.hypot(args.spread, noise)
            count = seeds_needed_t(args.delta, sd, power=args.seeds_for, level=args.level)
            about = f"about {count}" if count is not None else "more than 1000"
            return (
                f" ({about} by a t-test on the replicates' changes, sd {sd:.3f}: the spread and "
                f"each replicate's evaluation noise, {noise:.3f})"
            )

        if args.spread is not None:
            realistic = seed_level_power(bases, delta=args.delta, spread=args.spread, **study)
            print(
                f"- realistic (each replicate's true change drawn around {args.delta:+g} with sd "
                f"{args.spread:g}, capped at the room its base leaves): power {realistic:.3f}"
            )
            if args.seeds_for is not None:
                study.pop("replicates")
                needed = seeds_needed(
                    bases, delta=args.delta, spread=args.spread, power=args.seeds_for, **study
                )
                print(
                    f"- replicates for power {args.seeds_for:g} (realistic): "
                    + (str(needed) if needed is not None else "more than 16" + beyond(bases))
                )
        else:
            print(
                "- realistic: give --spread SD (the sd of the replicates' changes, e.g. from a "
                "pilot) for the power when replicates' changes differ, which is lower"
            )
        print("A verdict needs 3 or more replicates.")
    return 0
