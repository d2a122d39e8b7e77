"""Statistics over PASS@(k,T) surfaces: bootstrap CIs, paired comparisons, boundary sets.

Uncertainty comes from the finite set of problems, so every interval here is a percentile
bootstrap over problems (tasks resampled with replacement; the per-problem pass@k values are
computed once and each resample is a weighted mean, so 1000 resamples cost one matrix product).
Comparisons of two runs are paired: each resample draws the same tasks for both runs.

Definitions used throughout:

- **boundary set** at T: the tasks with at least one success among the ``n`` samples at T
  (pass@n > 0), i.e. what the run can solve at all.
- **gap** at (k, T): ``pass@k(b) - pass@k(a)``; positive when ``b`` is better.
- **crossover** at T: the first k on the grid where the gap has the opposite sign of the gap at
  the smallest k. We report both the bracketing grid pair ``(k_lo, k_hi)`` and a k interpolated
  linearly in ``log2 k`` between them (where the straight line through the two gaps hits 0).
- **widening** at T: ``gap(k_max) - gap(k_min)`` (k_min = 1 and k_max = n on the default grid);
  ``widens`` is true when its paired-bootstrap CI lies entirely above 0.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from passkt.eval.boundary import (
    BoundaryComparison,
    Venn,
    _shared_tasks,
    boundary_comparison,
    boundary_set,
    venn,
)
from passkt.eval.estimator import Surface, check_ks, default_ks, pass_at_k_array, surface
from passkt.eval.outcomes import OutcomeTable, Record, freeze_arrays

__all__ = [
    "BoundaryComparison",
    "Comparison",
    "Crossover",
    "SurfaceCI",
    "Venn",
    "bootstrap_means",
    "bootstrap_surface",
    "boundary_comparison",
    "boundary_set",
    "compare",
    "find_crossover",
    "saturation_depth",
    "venn",
]

logger = logging.getLogger(__name__)

DEFAULT_N_BOOT = 1000
DEFAULT_LEVEL = 0.95


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


# ---------------------------------------------------------------------- paired comparison


@dataclass(frozen=True)
class Crossover(Record):
    """Where the gap first changes sign along k at one budget.

    Attributes:
        budget: The T.
        sign_at_k_min: Sign of the gap at the smallest k (-1, 0 or +1).
        k: Crossover k interpolated linearly in log2 k between the bracketing grid points, or
            ``None`` when the sign never flips (or the gap at the smallest k is 0).
        bracket: ``(k_lo, k_hi)``: the last grid k with the starting sign (or a zero gap) and
            the first with the opposite sign; ``None`` when there is no crossover.
        significant: Set by :func:`compare`: the gap's CI excludes 0 on the starting side at
            the smallest k and on the opposite side at some k >= k_hi, so the curves really
            cross rather than wobble around each other within noise.
    """

    budget: int
    sign_at_k_min: int
    k: float | None
    bracket: tuple[int, int] | None
    significant: bool = False


def find_crossover(
    ks: Sequence[int], gap: Sequence[float], budget: int = 0, tol: float = 1e-12
) -> Crossover:
    """The first sign change of ``gap`` along ``ks`` relative to its sign at ``ks[0]``.

    Gaps within ``tol`` of 0 count as 0: a zero gap neither starts nor completes a crossover.
    """
    gap = np.asarray(gap, dtype=np.float64)
    signs = np.where(np.abs(gap) <= tol, 0, np.sign(gap)).astype(int)
    start = int(signs[0])
    if start == 0:
        return Crossover(int(budget), 0, None, None)
    flipped = np.flatnonzero(signs == -start)
    if flipped.size == 0:
        return Crossover(int(budget), start, None, None)
    j = int(flipped[0])
    g_lo, g_hi = float(gap[j - 1]), float(gap[j])
    x_lo, x_hi = math.log2(ks[j - 1]), math.log2(ks[j])
    frac = g_lo / (g_lo - g_hi)  # in [0, 1): g_lo has the start sign or is 0, g_hi the opposite
    k_cross = 2.0 ** (x_lo + frac * (x_hi - x_lo))
    return Crossover(int(budget), start, k_cross, (int(ks[j - 1]), int(ks[j])))


def _with_significance(
    cross: Crossover, ks: Sequence[int], lower: np.ndarray, upper: np.ndarray
) -> Crossover:
    if cross.bracket is None:
        return cross
    start = cross.sign_at_k_min
    before = upper[0] < 0 if start < 0 else lower[0] > 0
    after_idx = ks.index(cross.bracket[1])
    after = np.any(lower[after_idx:] > 0) if start < 0 else np.any(upper[after_idx:] < 0)
    return dataclasses.replace(cross, significant=bool(before and after))


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
        gap_lower: Lower paired-bootstrap CI bound of the gap.
        gap_upper: Upper bound.
        crossovers: One :class:`Crossover` per budget.
        widening: ``gap[k_max] - gap[k_min]`` per budget, shape ``(len(budgets),)``.
        widening_lower: Lower paired-bootstrap CI bound of the widening.
        widening_upper: Upper bound.
        widens: Per budget: whether the widening's CI lies entirely above 0.
        level: Confidence level.
        n_boot: Bootstrap resamples.
        seed: Seed of the resampling.
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

    def __post_init__(self) -> None:
        arrays = ("surface_a", "surface_b", "gap", "gap_lower", "gap_upper")
        freeze_arrays(self, *arrays, "widening", "widening_lower", "widening_upper")

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


def compare(
    a: OutcomeTable,
    b: OutcomeTable,
    ks: Sequence[int] | None = None,
    budgets: Sequence[int] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int | None = 0,
    level: float = DEFAULT_LEVEL,
) -> Comparison:
    """Paired comparison of ``b`` against ``a`` on their shared tasks.

    Args:
        a: Reference run (e.g. base).
        b: Run compared with it (e.g. RL); gaps are ``b - a``.
        ks: k grid; default :func:`default_ks` of ``min(a.n, b.n)``.
        budgets: T grid; default the budgets both runs evaluated.
        n_boot: Bootstrap resamples; each draws the same tasks for both runs.
        seed: Seed of the resampling.
        level: Confidence level of the percentile intervals.

    Returns:
        A :class:`Comparison` with the gap and its CI per (k, T), the crossover per T and the
        widening ``gap(k_max) - gap(k_min)`` per T with its CI and the ``widens`` verdict.
    """
    _check_boot(n_boot, level)
    ks, budgets = _compare_grid(a, b, ks, budgets)
    shared = _shared_tasks([a, b])
    surf_a = surface(a.select(shared).select_budgets(budgets), ks)
    surf_b = surface(b.select(shared).select_budgets(budgets), ks)
    diff = surf_b.per_problem - surf_a.per_problem  # (P, K, T)
    replicates = bootstrap_means(diff, n_boot, seed)  # (B, K, T)
    gap_lower, gap_upper = _percentile_ci(replicates, level)
    gap = diff.mean(axis=0)
    widening_reps = replicates[:, -1, :] - replicates[:, 0, :]  # (B, T)
    widening_lower, widening_upper = _percentile_ci(widening_reps, level)
    crossovers = tuple(
        _with_significance(find_crossover(ks, gap[:, j], t), ks, gap_lower[:, j], gap_upper[:, j])
        for j, t in enumerate(budgets)
    )
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
        widening=gap[-1] - gap[0],
        widening_lower=widening_lower,
        widening_upper=widening_upper,
        widens=tuple(bool(lo > 0) for lo in widening_lower),
        level=level,
        n_boot=n_boot,
        seed=seed,
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
