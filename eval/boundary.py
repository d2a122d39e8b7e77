"""Boundary sets: which problems a run ever solves at (n, T), and how runs' sets differ.

A problem is inside a run's capability boundary at budget T when at least one of its n samples
succeeds (pass@n > 0). Differences between runs (only-A, only-B, both, neither) and the Venn regions
of two or three runs say whether RL or SFT reached problems the base model never solved.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from passkt.eval.intervals import normal_interval, score_interval, within_variance_table
from passkt.eval.outcomes import OutcomeTable, Record

__all__ = [
    "BoundaryComparison",
    "BoundaryDifference",
    "Venn",
    "boundary_comparison",
    "boundary_difference",
    "boundary_set",
    "boundary_size_interval",
    "venn",
]

logger = logging.getLogger(__name__)


def boundary_set(table: OutcomeTable, budget: int) -> frozenset[str]:
    """Tasks with at least one success among the ``n`` samples at budget ``T`` (pass@n > 0)."""
    column = table.counts()[:, table.budget_index(budget)]
    return frozenset(t for t, c in zip(table.task_ids, column, strict=True) if c > 0)


def _shared_tasks(tables: Sequence[OutcomeTable]) -> tuple[str, ...]:
    """Task ids present in every table, in the first table's order (an error when none)."""
    common = set(tables[0].task_ids).intersection(*(t.task_ids for t in tables[1:]))
    if not common:
        names = [t.name for t in tables]
        raise ValueError(f"runs {names} share no task ids; compare runs on the same tasks")
    for t in tables:
        dropped = t.num_tasks - len(common)
        if dropped:
            logger.warning(
                "run %r: %d task(s) not in every run are left out of the comparison",
                t.name,
                dropped,
            )
    return tuple(t for t in tables[0].task_ids if t in common)


@dataclass(frozen=True)
class BoundaryComparison(Record):
    """Boundary sets of runs ``a`` and ``b`` at one budget, on their shared tasks.

    Attributes:
        budget: The T.
        name_a: Name of run a.
        name_b: Name of run b.
        only_a: Tasks solved (at pass@n) by a but not b.
        only_b: Tasks solved by b but not a.
        both: Tasks solved by both.
        neither: Tasks solved by neither.
        excluded: Tasks of either run that the other lacks (left out of every set above).
    """

    budget: int
    name_a: str
    name_b: str
    only_a: tuple[str, ...]
    only_b: tuple[str, ...]
    both: tuple[str, ...]
    neither: tuple[str, ...]
    excluded: tuple[str, ...] = ()

    @property
    def size_a(self) -> int:
        """Boundary size of a on the shared tasks."""
        return len(self.only_a) + len(self.both)

    @property
    def size_b(self) -> int:
        """Boundary size of b on the shared tasks."""
        return len(self.only_b) + len(self.both)

    def counts(self) -> dict[str, int]:
        """Region sizes (only_a, only_b, both, neither) and the boundary sizes size_a, size_b."""
        regions = ("only_a", "only_b", "both", "neither")
        sizes = {"size_a": self.size_a, "size_b": self.size_b}
        return {name: len(getattr(self, name)) for name in regions} | sizes

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with the counts and the task lists."""
        return {**super().to_dict(), "counts": self.counts()}


def boundary_comparison(a: OutcomeTable, b: OutcomeTable, budget: int) -> BoundaryComparison:
    """Which shared tasks only ``a``, only ``b``, both or neither solve at budget ``T``.

    Task lists keep ``a``'s task order. Tasks present in only one run are listed in ``excluded``.
    """
    regions = venn([a.with_name("a"), b.with_name("b")], budget).regions
    shared = set(regions[True, True] + regions[True, False] + regions[False, True])
    shared |= set(regions[False, False])
    excluded = dict.fromkeys(t for t in (*a.task_ids, *b.task_ids) if t not in shared)
    return BoundaryComparison(
        int(budget),
        a.name,
        b.name,
        regions[True, False],
        regions[False, True],
        regions[True, True],
        regions[False, False],
        tuple(excluded),
    )


@dataclass(frozen=True)
class BoundaryDifference(Record):
    """Boundary-set sizes of two runs at one T, and their difference, with CIs.

    The boundary size is ``P * mean(pass@n)``: its CI counts both which problems were drawn and
    the chance that a problem solved with probability p shows no success in n samples (see
    :mod:`passkt.eval.intervals`). Sizes are in problems, on the shared tasks.

    Attributes:
        budget: The T.
        name_a: Run a.
        name_b: Run b.
        num_tasks: Shared problems.
        size_a: Boundary size of a, with ``size_a_lower``/``size_a_upper``.
        size_b: Boundary size of b, with ``size_b_lower``/``size_b_upper``.
        difference: ``size_b - size_a`` with ``difference_lower``/``difference_upper``.
        p_value: Two-sided p-value of the difference against 0.
        level: Confidence level.
    """

    budget: int
    name_a: str
    name_b: str
    num_tasks: int
    size_a: int
    size_a_lower: float
    size_a_upper: float
    size_b: int
    size_b_lower: float
    size_b_upper: float
    difference: int
    difference_lower: float
    difference_upper: float
    p_value: float
    level: float


def _solved(table: OutcomeTable, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Per problem: solved at least once (0/1), and the within-problem variance of that."""
    counts = table.counts()[:, table.budget_index(budget)]
    solved_by_count = (np.arange(table.n + 1) > 0).astype(np.float64)  # pass@n
    within = within_variance_table(table.n, [(1.0, table.n)])
    return solved_by_count[counts], within[counts]


def boundary_size_interval(
    table: OutcomeTable, budget: int, level: float = 0.95
) -> tuple[int, float, float]:
    """``(size, lower, upper)``: the boundary size at T and its CI over problems and samples."""
    solved, within = _solved(table, budget)
    _, lower, upper, _ = score_interval(solved[:, None], within[:, None], level, table.num_tasks)
    return int(solved.sum()), float(lower[0]) * table.num_tasks, float(upper[0]) * table.num_tasks


def boundary_difference(
    a: OutcomeTable, b: OutcomeTable, budget: int, level: float = 0.95
) -> BoundaryDifference:
    """Sizes of the boundary sets of ``a`` and ``b`` at T and ``size_b - size_a``, with CIs."""
    shared = _shared_tasks([a, b])
    solved_a, within_a = _solved(a.select(shared), budget)
    solved_b, within_b = _solved(b.select(shared), budget)
    num = len(shared)
    sizes = [
        *boundary_size_interval(a.select(shared), budget, level),
        *boundary_size_interval(b.select(shared), budget, level),
    ]
    _, lower, upper, p_value = normal_interval(
        (solved_b - solved_a)[:, None], (within_a + within_b)[:, None], level, 1.0
    )
    diff = int(solved_b.sum() - solved_a.sum())
    return BoundaryDifference(
        int(budget), a.name, b.name, num, *sizes, diff, float(lower[0]) * num,
        float(upper[0]) * num, float(p_value[0]), level,
    )  # fmt: skip


@dataclass(frozen=True)
class Venn:
    """Venn regions of 2 or 3 runs' boundary sets at one budget, on their shared tasks.

    Attributes:
        budget: The T.
        names: Run names, in order.
        task_ids: The shared tasks (the universe).
        regions: Membership pattern (one bool per run, in ``names`` order) -> tasks solved by
            exactly those runs. All ``2 ** len(names)`` patterns are present (possibly empty);
            the all-False pattern holds the tasks no run solves.
    """

    budget: int
    names: tuple[str, ...]
    task_ids: tuple[str, ...]
    regions: Mapping[tuple[bool, ...], tuple[str, ...]]

    def __post_init__(self) -> None:
        object.__setattr__(self, "regions", MappingProxyType(dict(self.regions)))

    def label(self, pattern: tuple[bool, ...]) -> str:
        """Human label of a region: ``"base only"``, ``"base & rl"``, ``"none"``."""
        members = [n for n, inside in zip(self.names, pattern, strict=True) if inside]
        if not members:
            return "none"
        if len(members) == 1 and len(self.names) > 1:
            return f"{members[0]} only"
        return " & ".join(members)

    def ids(self, *names: str) -> tuple[str, ...]:
        """Tasks solved by exactly the named runs (no names: by none)."""
        unknown = [n for n in names if n not in self.names]
        if unknown:
            raise ValueError(f"unknown run name(s) {unknown}; runs are {self.names}")
        return self.regions[tuple(n in names for n in self.names)]

    def counts(self) -> dict[str, int]:
        """Region label -> number of tasks, regions ordered as in :attr:`regions`."""
        return {self.label(p): len(ids) for p, ids in self.regions.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: counts and task lists keyed by region label."""
        return {
            "budget": self.budget,
            "names": list(self.names),
            "num_tasks": len(self.task_ids),
            "counts": self.counts(),
            "regions": {self.label(p): list(ids) for p, ids in self.regions.items()},
        }


def venn(tables: Sequence[OutcomeTable], budget: int) -> Venn:
    """Venn regions of the boundary sets of 2 or 3 runs at budget ``T``.

    Raises:
        ValueError: for fewer than 2 or more than 3 runs, or repeated run names.
    """
    tables = list(tables)
    if not 2 <= len(tables) <= 3:
        raise ValueError(f"venn() takes 2 or 3 runs, got {len(tables)}")
    names = tuple(t.name for t in tables)
    if len(set(names)) != len(names):
        raise ValueError(
            f"run names must differ to label Venn regions, got {names}; "
            "rename with table.with_name(...)"
        )
    shared = _shared_tasks(tables)
    sets = [boundary_set(t, budget) for t in tables]
    # Regions from "all runs" down to "none": the order tables and bar charts read best in.
    patterns = sorted(
        itertools.product((True, False), repeat=len(tables)), key=lambda p: (-sum(p), p[::-1])
    )
    regions = {
        p: tuple(
            t for t in shared if all((t in s) == inside for s, inside in zip(sets, p, strict=True))
        )
        for p in patterns
    }
    return Venn(int(budget), names, shared, regions)
