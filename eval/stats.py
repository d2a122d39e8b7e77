"""Statistics over PASS@(k,T) surfaces: bootstrap CIs, paired comparisons, boundary sets.

Uncertainty has two sources, the problems drawn and the n samples drawn per problem; the default
intervals (``method="score"``) count both, as :mod:`passkt.eval.intervals` explains: surface cells
get a design-effect Wilson interval, gaps and widenings a normal interval and z-test, each with a
variance no smaller than the within-problem sampling variance. ``method="bootstrap"`` keeps the
older percentile bootstrap over problems (tasks resampled with replacement; each resample is a
weighted mean, so 1000 resamples cost one matrix product), which undercovers cells near 0 or 1.
Comparisons of two runs are paired: the same tasks for both runs. The gap's p-values are adjusted
over the whole (k, T) grid with Holm's method; one pre-declared headline test is reported apart.

Definitions used throughout:

- **boundary set** at T: the tasks with at least one success among the ``n`` samples at T
  (pass@n > 0), i.e. what the run can solve at all.
- **gap** at (k, T): ``pass@k(b) - pass@k(a)``; positive when ``b`` is better.
- **crossover** at T: the first k on the grid where the gap has the opposite sign of the gap at
  the smallest k. We report both the bracketing grid pair ``(k_lo, k_hi)`` and a k interpolated
  linearly in ``log2 k`` between them (where the straight line through the two gaps hits 0).
- **widening** at T: ``gap(k_max) - gap(k_min)`` (k_min = 1 and k_max = n on the default grid);
  ``widens`` is true when it is positive and significant after Holm's correction over the T's.
- **crossover range** at T: the grid bracket that holds the crossover at the CI level: from the last
  k (of the leading run of k's) whose gap CI lies on the starting side, to the first later k whose
  CI lies on the opposite side (``None``: not reached on the grid).
- **headline**: one test named before looking (default the widening at the largest T), read at
  the nominal level without correction, because it is the single question asked.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from passkt.eval.boundary import (
    BoundaryComparison,
    BoundaryDifference,
    Venn,
    _shared_tasks,
    boundary_comparison,
    boundary_difference,
    boundary_set,
    venn,
)
from passkt.eval.crossover import (
    Crossover,
    Headline,
    find_crossover,
    parse_headline,
    with_significance,
)
from passkt.eval.estimator import (
    METRICS,
    Metric,
    Surface,
    check_ks,
    default_ks,
    pass_at_k_array,
    reliability_surface,
    surface,
)
from passkt.eval.intervals import holm, paired_gap_intervals, pass_at_k_interval
from passkt.eval.outcomes import OutcomeTable, Record, freeze_arrays

__all__ = [
    "BoundaryComparison",
    "BoundaryDifference",
    "Comparison",
    "Crossover",
    "Headline",
    "SurfaceCI",
    "Venn",
    "bootstrap_means",
    "bootstrap_surface",
    "boundary_comparison",
    "boundary_difference",
    "boundary_set",
    "compare",
    "find_crossover",
    "saturation_depth",
    "surface_interval",
    "venn",
]

logger = logging.getLogger(__name__)

DEFAULT_N_BOOT = 1000
DEFAULT_LEVEL = 0.95

Method = Literal["score", "bootstrap"]
"""``score``: intervals with both variance sources (default); ``bootstrap``: the older percentile
bootstrap over problems, kept to measure it against (``benchmarks/calibration.py``)."""

METHOD_TEXT = {
    "score": "interval over problems and samples (design-effect Wilson for pass@k, Student t for "
    "gaps; variance at least the within-problem sampling variance)",
    "bootstrap": "percentile bootstrap over problems",
}


def _check_boot(n_boot: int, level: float) -> None:
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int, got {n_boot!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")


def bootstrap_means(
    per_problem: np.ndarray, n_boot: int = DEFAULT_N_BOOT, seed: int | None = 0
) -> np.ndarray:
    """Bootstrap replicates of the mean over problems (axis 0).

    Args:
        per_problem: Array ``(num_tasks, ...)`` of per-problem values.
        n_boot: Number of resamples.
        seed: Seed of the ``np.random.Generator`` that draws the task indices.

    Returns:
        Array ``(n_boot, ...)``: the mean over each resample of ``num_tasks`` tasks drawn with
        replacement.
    """
    _check_boot(n_boot, 0.5)
    per_problem = np.asarray(per_problem, dtype=np.float64)
    num_tasks = per_problem.shape[0]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, num_tasks, size=(n_boot, num_tasks))  # (B, P)
    # How often each task is drawn in each resample: the mean is then one matrix product.
    offsets = (np.arange(n_boot) * num_tasks)[:, None]
    weights = np.bincount((idx + offsets).ravel(), minlength=n_boot * num_tasks)
    weights = weights.reshape(n_boot, num_tasks).astype(np.float64) / num_tasks  # (B, P)
    flat = per_problem.reshape(num_tasks, -1)  # (P, K*T)
    return (weights @ flat).reshape(n_boot, *per_problem.shape[1:])


def _percentile_ci(replicates: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    alpha = 1.0 - level
    lower, upper = np.quantile(replicates, [alpha / 2, 1 - alpha / 2], axis=0)
    return lower, upper


@dataclass(frozen=True, eq=False)
class SurfaceCI(Record):
    """Percentile bootstrap confidence intervals for every cell of a surface.

    Attributes:
        name: Run name.
        ks: The k grid.
        budgets: The T grid.
        estimate: The surface itself, ``(len(ks), len(budgets))``.
        lower: Lower CI bound, same shape.
        upper: Upper CI bound, same shape.
        level: Confidence level (e.g. 0.95).
        n_boot: Bootstrap resamples.
        seed: Seed of the resampling.
        num_tasks: Problems resampled.
        method: ``"score"`` or ``"bootstrap"`` (see :data:`METHOD_TEXT`); the score method
            draws nothing, so its ``n_boot`` is 0 and ``seed`` is ``None``.
    """

    name: str
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    level: float
    n_boot: int
    seed: int | None
    num_tasks: int
    method: str = "bootstrap"

    def __post_init__(self) -> None:
        freeze_arrays(self, "estimate", "lower", "upper")


def bootstrap_surface(
    surf: Surface,
    n_boot: int = DEFAULT_N_BOOT,
    level: float = DEFAULT_LEVEL,
    seed: int | None = 0,
) -> SurfaceCI:
    """Bootstrap CIs over problems for every (k, T) of a surface.

    Args:
        surf: The surface (from :func:`passkt.eval.estimator.surface`).
        n_boot: Resamples (default 1000).
        level: Confidence level of the percentile interval (default 0.95).
        seed: Seed of the ``np.random.Generator``; the same seed gives the same intervals.
    """
    _check_boot(n_boot, level)
    replicates = bootstrap_means(surf.per_problem, n_boot, seed)  # (B, K, T)
    lower, upper = _percentile_ci(replicates, level)
    args = (surf.name, surf.ks, surf.budgets, surf.values, lower, upper, level, n_boot, seed)
    return SurfaceCI(*args, num_tasks=surf.num_tasks)


def surface_interval(surf: Surface, counts: np.ndarray, level: float = DEFAULT_LEVEL) -> SurfaceCI:
    """CIs with both variance sources for every (k, T) of a surface (``method="score"``).

    Works for both metrics: a pass^k surface (``reliability_surface``) gets pass^k's intervals.

    Args:
        surf: The surface.
        counts: The run's correct counts ``(num_tasks, len(surf.budgets))`` in the surface's task
            order (``table.counts()`` of the table the surface was made from).
        level: Confidence level (default 0.95).
    """
    _check_boot(1, level)
    counts = np.asarray(counts)
    if counts.shape != (surf.num_tasks, len(surf.budgets)):
        raise ValueError(
            f"counts must have shape {(surf.num_tasks, len(surf.budgets))} (tasks, budgets), "
            f"got {counts.shape}; pass table.counts() of the surface's table"
        )
    _, lower, upper = pass_at_k_interval(counts, surf.n, surf.ks, level, surf.metric)
    args = (surf.name, surf.ks, surf.budgets, surf.values, lower, upper, level, 0, None)
    return SurfaceCI(*args, num_tasks=surf.num_tasks, method="score")


# ---------------------------------------------------------------------- paired comparison


@dataclass(frozen=True, eq=False)
class Comparison(Record):
    """Paired comparison of run ``b`` against run ``a`` on their shared tasks.

    Attributes:
        name_a: Name of run a (the reference, e.g. the base model).
        name_b: Name of run b (e.g. the RL model).
        task_ids: The shared tasks both surfaces were averaged over.
        ks: The k grid.
        budgets: The T grid.
        surface_a: Mean pass@k of a, ``(len(ks), len(budgets))``.
        surface_b: Mean pass@k of b.
        gap: ``surface_b - surface_a``.
        gap_lower: Lower paired CI bound of the gap (per cell, not adjusted).
        gap_upper: Upper bound.
        crossovers: One :class:`Crossover` per budget.
        widening: ``gap[k_max] - gap[k_min]`` per budget, shape ``(len(budgets),)``.
        widening_lower: Lower paired CI bound of the widening.
        widening_upper: Upper bound.
        widens: Per budget: whether the widening is positive and significant after Holm's
            correction over the T's.
        level: Confidence level.
        n_boot: Bootstrap resamples (0 for the score method).
        seed: Seed of the resampling.
        method: ``"score"`` or ``"bootstrap"``.
        gap_p: Two-sided p-value of each gap cell against 0.
        gap_p_holm: ``gap_p`` adjusted with Holm's method over the whole (k, T) grid.
        widening_p: p-value of each T's widening.
        widening_p_holm: ``widening_p`` adjusted with Holm's method over the T's.
        headline: The pre-declared :class:`Headline` test.
        metric: ``"pass@k"`` (default) or ``"pass^k"``: what the surfaces and gaps hold.
    """

    name_a: str
    name_b: str
    task_ids: tuple[str, ...]
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    surface_a: np.ndarray
    surface_b: np.ndarray
    gap: np.ndarray
    gap_lower: np.ndarray
    gap_upper: np.ndarray
    crossovers: tuple[Crossover, ...]
    widening: np.ndarray
    widening_lower: np.ndarray
    widening_upper: np.ndarray
    widens: tuple[bool, ...]
    level: float
    n_boot: int
    seed: int | None
    method: str
    gap_p: np.ndarray
    gap_p_holm: np.ndarray
    widening_p: np.ndarray
    widening_p_holm: np.ndarray
    headline: Headline
    metric: Metric = "pass@k"

    def __post_init__(self) -> None:
        arrays = ("surface_a", "surface_b", "gap", "gap_lower", "gap_upper", "gap_p", "gap_p_holm")
        widening = ("widening", "widening_lower", "widening_upper", "widening_p", "widening_p_holm")
        freeze_arrays(self, *arrays, *widening)

    @property
    def significant(self) -> np.ndarray:
        """Per (k, T) cell: whether the gap is significant after Holm's correction."""
        return self.gap_p_holm < 1.0 - self.level

    def crossover_at(self, budget: int) -> Crossover:
        """The crossover at budget ``T``."""
        return self.crossovers[self.budget_index(budget)]

    def budget_index(self, budget: int) -> int:
        """Position of ``budget`` in :attr:`budgets` (a clear error when it was not compared)."""
        if budget not in self.budgets:
            raise ValueError(f"T={budget} is not among the compared budgets {self.budgets}")
        return self.budgets.index(budget)


def _compare_grid(
    a: OutcomeTable, b: OutcomeTable, ks: Sequence[int] | None, budgets: Sequence[int] | None
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = min(a.n, b.n)
    ks = default_ks(n) if ks is None else check_ks(ks, n)
    if budgets is None:
        budgets = tuple(sorted(set(a.budgets) & set(b.budgets)))
        if not budgets:
            raise ValueError(
                f"runs {a.name!r} {a.budgets} and {b.name!r} {b.budgets} share no budget T"
            )
    budgets = tuple(sorted({int(t) for t in budgets}))
    for table, t in itertools.product((a, b), budgets):
        table.budget_index(t)  # raises a clear error for a budget the run lacks
    return ks, budgets


def _bootstrap_p(replicates: np.ndarray) -> np.ndarray:
    """Two-sided bootstrap p-value against 0: twice the smaller share of replicates past 0."""
    below = (replicates <= 0).mean(axis=0)
    above = (replicates >= 0).mean(axis=0)
    return np.minimum(1.0, 2 * np.minimum(below, above))


def compare(
    a: OutcomeTable,
    b: OutcomeTable,
    ks: Sequence[int] | None = None,
    budgets: Sequence[int] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int | None = 0,
    level: float = DEFAULT_LEVEL,
    method: Method = "score",
    headline: str | None = None,
    metric: Metric = "pass@k",
) -> Comparison:
    """Paired comparison of ``b`` against ``a`` on their shared tasks.

    Args:
        a: Reference run (e.g. base).
        b: Run compared with it (e.g. RL); gaps are ``b - a``.
        ks: k grid; default :func:`default_ks` of ``min(a.n, b.n)``.
        budgets: T grid; default the budgets both runs evaluated.
        n_boot: Bootstrap resamples (``method="bootstrap"`` only); each draws the same tasks for
            both runs.
        seed: Seed of the resampling (``method="bootstrap"`` only).
        level: Confidence level of the intervals; also the family-wise level of the Holm
            correction and the level of the headline test.
        method: ``"score"`` (both variance sources; see :mod:`passkt.eval.intervals`) or
            ``"bootstrap"`` (the older percentile bootstrap over problems).
        headline: The pre-declared test, ``"widening@T"`` or ``"gap@K,T"`` (default: the
            widening at the largest T).
        metric: ``"pass@k"`` (default) or ``"pass^k"``: the gaps of the reliability surface,
            with the same intervals (pass^k's form of them) and the same Holm correction.

    Returns:
        A :class:`Comparison` with the gap, its CI and p-values (raw and Holm-adjusted) per
        (k, T), the crossover per T and the widening ``gap(k_max) - gap(k_min)`` per T with its
        CI and the ``widens`` verdict, and the headline test.
    """
    _check_boot(n_boot, level)
    if method not in METHOD_TEXT:
        raise ValueError(f"method must be one of {sorted(METHOD_TEXT)}, got {method!r}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    ks, budgets = _compare_grid(a, b, ks, budgets)
    kind, head_k, head_t = parse_headline(headline, ks, budgets)
    shared = _shared_tasks([a, b])
    sub_a = a.select(shared).select_budgets(budgets)
    sub_b = b.select(shared).select_budgets(budgets)
    make = surface if metric == "pass@k" else reliability_surface
    surf_a, surf_b = make(sub_a, ks), make(sub_b, ks)
    diff = surf_b.per_problem - surf_a.per_problem  # (P, K, T)
    if method == "score":
        counts = (sub_a.counts(), sub_a.n, sub_b.counts(), sub_b.n)
        g = paired_gap_intervals(*counts, ks, level, metric)
        gap, gap_lower, gap_upper, gap_p = g.gap, g.gap_lower, g.gap_upper, g.gap_p
        widening_lower, widening_upper, widening_p = (
            g.widening_lower,
            g.widening_upper,
            (g.widening_p),
        )
    else:
        replicates = bootstrap_means(diff, n_boot, seed)  # (B, K, T)
        gap_lower, gap_upper = _percentile_ci(replicates, level)
        widening_reps = replicates[:, -1, :] - replicates[:, 0, :]  # (B, T)
        widening_lower, widening_upper = _percentile_ci(widening_reps, level)
        gap, gap_p, widening_p = (
            diff.mean(axis=0),
            _bootstrap_p(replicates),
            _bootstrap_p(widening_reps),
        )
    crossovers = tuple(
        with_significance(find_crossover(ks, gap[:, j], t), ks, gap_lower[:, j], gap_upper[:, j])
        for j, t in enumerate(budgets)
    )
    widening = gap[-1] - gap[0]
    j = budgets.index(head_t)
    if kind == "widening":
        cell = (widening[j], widening_lower[j], widening_upper[j], widening_p[j])
    else:
        i = ks.index(head_k)
        cell = (gap[i, j], gap_lower[i, j], gap_upper[i, j], gap_p[i, j])
    head = Headline(kind, head_t, head_k, *map(float, cell), bool(cell[3] < 1 - level))
    return Comparison(
        name_a=a.name,
        name_b=b.name,
        task_ids=shared,
        ks=ks,
        budgets=budgets,
        surface_a=surf_a.values,
        surface_b=surf_b.values,
        gap=gap,
        gap_lower=gap_lower,
        gap_upper=gap_upper,
        crossovers=crossovers,
        widening=widening,
        widening_lower=widening_lower,
        widening_upper=widening_upper,
        widens=tuple(
            bool(w > 0 and p < 1 - level) for w, p in zip(widening, holm(widening_p), strict=True)
        ),
        level=level,
        n_boot=n_boot if method == "bootstrap" else 0,
        seed=seed if method == "bootstrap" else None,
        method=method,
        gap_p=gap_p,
        gap_p_holm=holm(gap_p),
        widening_p=widening_p,
        widening_p_holm=holm(widening_p),
        headline=head,
        metric=metric,
    )


# ---------------------------------------------------------------------- saturation


def saturation_depth(table: OutcomeTable, k: int, tol: float = 0.01) -> int:
    """The smallest budget T at which pass@k comes within ``tol`` of its maximum over T.

    Args:
        table: The run.
        k: The k at which to read the surface (``1 <= k <= n``; need not be on a grid).
        tol: Absolute tolerance in pass@k (default 0.01, one percentage point): more depth
            that gains less than this does not count.

    Returns:
        The budget T (a value from ``table.budgets``) where the run saturates.
    """
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    curve = pass_at_k_array(table.n, table.counts(), k).mean(axis=0)  # (num_budgets,)
    reached = np.flatnonzero(curve >= curve.max() - tol - 1e-12)  # 1e-12: float round-off
    return table.budgets[int(reached[0])]
