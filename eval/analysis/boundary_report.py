"""The boundary section of a comparison: what each run can solve, how deep it must search.

For each run, on the problems all runs share: the boundary-set size (problems solved at least once
among the n samples) at every shared budget T, and the saturation depth (the smallest T at which
pass@k comes within ``tol`` of its maximum over T, :func:`passkt.eval.stats.saturation_depth`) at
k = 1 and k = n; then, at one T, the problems that exactly one run solves. ``passkt compare``
prints it next to the gap tables and the Venn regions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from passkt.eval.analysis.common import markdown_table
from passkt.eval.boundary import boundary_set
from passkt.eval.outcomes import OutcomeTable, Record
from passkt.eval.stats import saturation_depth

__all__ = ["BoundarySummary", "RunBoundary", "boundary_summary"]


@dataclass(frozen=True)
class RunBoundary(Record):
    """One run's row of the boundary section.

    Attributes:
        name: Run name.
        n: Samples per (problem, T).
        sizes: Boundary-set size at each of :attr:`BoundarySummary.budgets`.
        saturation: Saturation depth T at each of :attr:`BoundarySummary.ks`.
        only: Problems this run solves at :attr:`BoundarySummary.budget` and no other run does.
    """

    name: str
    n: int
    sizes: tuple[int, ...]
    saturation: tuple[int, ...]
    only: tuple[str, ...]


@dataclass(frozen=True)
class BoundarySummary(Record):
    """Boundary sizes, saturation depths and single-run problems of several runs.

    Attributes:
        runs: One entry per run, in the given order.
        budgets: The budgets every run evaluated.
        ks: The k at which saturation depth is read.
        budget: The T of the single-run problem lists.
        tol: Saturation tolerance in pass@k.
        num_tasks: Problems every run has (everything here is on these).
        excluded: Problems some run lacks (left out).
    """

    runs: tuple[RunBoundary, ...]
    budgets: tuple[int, ...]
    ks: tuple[int, ...]
    budget: int
    tol: float
    num_tasks: int
    excluded: tuple[str, ...] = ()

    def to_markdown(self, only_one_lists: bool = True, max_ids: int = 20) -> str:
        """The report section.

        Args:
            only_one_lists: Add the problems only one run solves (``passkt compare`` already
                lists them in its Venn table for 2 or 3 runs).
            max_ids: Most task ids listed per run.
        """
        rows = [[r.name, str(r.n), *map(str, r.sizes)] for r in self.runs]
        left_out = f"; {len(self.excluded)} unshared left out" if self.excluded else ""
        text = (
            f"Boundary sets (problems solved at least once in n samples) on {self.num_tasks} "
            f"shared problems{left_out}\n\n"
            + markdown_table(["run", "n", *(f"T={t}" for t in self.budgets)], rows)
        )
        rows = [[r.name, *map(str, r.saturation)] for r in self.runs]
        text += (
            f"\nSaturation depth: smallest T where pass@k is within {self.tol:g} of its maximum "
            "over T\n\n" + markdown_table(["run", *(f"pass@{k}" for k in self.ks)], rows)
        )
        if only_one_lists and len(self.runs) > 1:
            rows = []
            for r in self.runs:
                listed = ", ".join(r.only[:max_ids])
                if len(r.only) > max_ids:
                    listed += f", ... (+{len(r.only) - max_ids})"
                rows.append([r.name, str(len(r.only)), listed])
            text += f"\nProblems only one run solves at T = {self.budget}\n\n" + markdown_table(
                ["run", "problems", "tasks"], rows, align="lrl"
            )
        return text


def boundary_summary(
    tables: Sequence[OutcomeTable],
    *,
    budget: int | None = None,
    ks: Sequence[int] | None = None,
    tol: float = 0.01,
) -> BoundarySummary:
    """Boundary sizes per T, saturation depths and single-run problems of one or more runs.

    Args:
        tables: The runs (distinct names), e.g. base, RL, SFT.
        budget: T of the single-run lists (default: the largest budget all runs share).
        ks: k values of the saturation depth (default 1 and the smallest n of the runs).
        tol: Saturation tolerance in pass@k.

    Raises:
        ValueError: for no runs, repeated names, no shared task or budget, or a bad k or T.
    """
    tables = list(tables)
    if not tables:
        raise ValueError("boundary_summary needs at least one run")
    names = [t.name for t in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"run names must differ, got {names}; rename with table.with_name(...)")
    shared_tasks = [t for t in tables[0].task_ids if all(t in x.task_ids for x in tables[1:])]
    if not shared_tasks:
        raise ValueError(f"runs {names} share no task ids")
    budgets = sorted(set(tables[0].budgets).intersection(*(t.budgets for t in tables[1:])))
    if not budgets:
        raise ValueError(f"runs {names} share no budget T: {[t.budgets for t in tables]}")
    chosen = budgets[-1] if budget is None else int(budget)
    if chosen not in budgets:
        raise ValueError(f"T={budget} was not evaluated by every run; shared budgets: {budgets}")
    min_n = min(t.n for t in tables)
    ks = tuple(sorted({1, min_n})) if ks is None else tuple(int(k) for k in ks)
    if any(not 1 <= k <= min_n for k in ks):
        raise ValueError(f"ks must lie in 1..{min_n} (the smallest n of the runs), got {ks}")
    views = [t.select(shared_tasks).select_budgets(budgets) for t in tables]
    solved = [boundary_set(v, chosen) for v in views]
    runs = []
    for i, view in enumerate(views):
        others = set().union(*(s for j, s in enumerate(solved) if j != i))
        runs.append(
            RunBoundary(
                name=view.name,
                n=view.n,
                sizes=tuple(len(boundary_set(view, t)) for t in budgets),
                saturation=tuple(saturation_depth(view, k, tol) for k in ks),
                only=tuple(t for t in shared_tasks if t in solved[i] and t not in others),
            )
        )
    every = dict.fromkeys(t for table in tables for t in table.task_ids)
    return BoundarySummary(
        runs=tuple(runs),
        budgets=tuple(budgets),
        ks=ks,
        budget=chosen,
        tol=float(tol),
        num_tasks=len(shared_tasks),
        excluded=tuple(t for t in every if t not in set(shared_tasks)),
    )
