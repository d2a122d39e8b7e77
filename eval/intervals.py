"""Intervals that count both sources of variance: which problems were drawn, and which samples.

A run estimates, for every (k, T), the mean over problems of each problem's unbiased pass@k. The
estimate varies for two reasons: the benchmark is one draw of problems (between-problem variance)
and each problem's n samples are one draw of its outcomes (within-problem variance). Its variance
is ``(var_between + mean_within) / P`` for P problems.

How we estimate it, and why:

- **Observed spread.** The sample variance of the P per-problem estimates already contains both
  parts (each estimate is the problem's true value plus its own sampling noise), so
  ``S^2 / P`` estimates the total. This is what the old problem-level bootstrap used.
- **Within-problem floor.** ``S^2`` is itself noisy; with few problems off the floor (the hard
  regime: most problems never solved) it can fall below the within-problem part alone, which
  makes intervals too short. So every variance here is ``max(S^2 / P, W / P)``, where ``W`` is the
  mean over problems of the within-problem variance of that problem's estimator: the exact
  variance of the statistic when the problem's n outcomes are Binomial(n, c / n), times
  ``n / (n - 1)`` (which makes it unbiased for pass@1; for larger k it is the plug-in value).
  For a paired gap between two independent evaluations the two runs' within parts add.
- **Shape near 0 and 1.** A proportion near a bound has a skewed sampling distribution, and
  symmetric (Wald or percentile) intervals undercover there. A surface cell is a mean of values
  in [0, 1], so it gets a Wilson score interval at its effective sample size
  ``n_eff = m (1 - m) / V`` (a design-effect Wilson interval, as used for clustered surveys).
  A cell where every problem has the same value carries no spread at all; it gets
  ``n_eff = P * n / k`` (the disjoint groups of k samples), so an all-zero cell still has a
  non-zero upper limit. Gaps and widenings (differences, centred near 0) use the Student-t
  interval (P - 1 degrees of freedom) with the same variance, and two-sided t-test p-values
  that agree with it; the Wilson interval also uses the t quantile.

Assumptions: problems are independent draws from the benchmark's population and the n samples of
a problem are independent given the problem (the evaluator seeds each one on its own); the two runs
of a comparison are independent evaluations on the same problems. Where no unbiased
within-problem variance exists (pass@k with 2k > n, e.g. the boundary k = n) the floor uses a
plug-in value that is biased upwards, so those intervals are conservative.
``benchmarks/calibration.py`` measures coverage and A/A false-positive rates by simulation.

pass^k. Every interval here also serves pass^k (``metric="pass^k"``): the per-problem pass^k
with c correct is pass@k's survival term at n - c, and n - c is Binomial(n, 1 - p), so the same
within-problem variance table, read from the other end, is the exact (or plug-in) variance of
pass^k. An all-zero pass^k cell gets the same non-zero upper limit as an all-zero pass@k cell.

Multiple comparisons. A surface comparison tests one gap per (k, T) cell; reading all of them at
level 0.05 finds a "significant" cell in most A/A comparisons. :func:`holm` adjusts the cells'
p-values (Holm's step-down, valid under any dependence between cells).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from passkt.eval.estimator import Metric, pass_at_k_matrix

__all__ = [
    "GapIntervals",
    "binomial_pmf_matrix",
    "holm",
    "mover_gap_interval",
    "normal_interval",
    "paired_gap_intervals",
    "pass_at_k_interval",
    "pass_at_k_table",
    "pass_at_k_within",
    "score_interval",
    "t_quantile",
    "t_to_z",
    "within_variance_table",
    "z_quantile",
]


_ERFC = np.vectorize(math.erfc, otypes=[np.float64])
"""Two-sided normal tail ``2 (1 - Phi(z)) = erfc(z / sqrt 2)``, elementwise (0 at infinity)."""


def z_quantile(level: float) -> float:
    """The two-sided normal quantile of a ``level`` interval (1.96 for 0.95)."""
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
    return NormalDist().inv_cdf(0.5 + level / 2)


def t_to_z(t: np.ndarray, df: int) -> np.ndarray:
    """The normal deviate with the same tail probability as Student's ``|t|`` on ``df`` degrees
    of freedom (Peizer and Pratt's approximation, 3-digit accurate for df >= 3; scipy-free).

    Intervals use :func:`t_quantile`, its inverse, so an interval excludes 0 exactly when the
    matching p-value is below ``1 - level``.
    """
    t = np.abs(np.asarray(t, dtype=np.float64))
    if df < 1:
        return t
    with np.errstate(over="ignore", invalid="ignore"):
        z = (df - 2 / 3 + 1 / (10 * df)) * np.sqrt(np.log1p(t * t / df) / (df - 5 / 6))
    return np.where(np.isfinite(t), z, np.inf)


def t_quantile(level: float, df: int) -> float:
    """Student's two-sided ``level`` quantile on ``df`` degrees of freedom (1.984 for 0.95, 99),
    by bisection on :func:`t_to_z`; the normal quantile when ``df < 1``."""
    z = z_quantile(level)
    if df < 1:
        return z
    lo, hi = z, z * 100
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if float(t_to_z(mid, df)) < z else (lo, mid)
    return (lo + hi) / 2


def binomial_pmf_matrix(n: int) -> np.ndarray:
    """``M[c, j]`` = P(j successes of n) when the success probability is ``c / n``."""
    j = np.arange(n + 1, dtype=np.float64)
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    log_comb = lgamma(n + 1.0) - lgamma(j + 1) - lgamma(n - j + 1)
    p = j / n  # one row per observed count c
    with np.errstate(divide="ignore", invalid="ignore"):
        log_pmf = log_comb[None, :] + j[None, :] * np.log(p[:, None])
        log_pmf += (n - j[None, :]) * np.log1p(-p[:, None])
    pmf = np.exp(np.nan_to_num(log_pmf, nan=-np.inf))  # 0 * log 0 at p in {0, 1}
    pmf[0] = 0.0
    pmf[0, 0] = 1.0
    pmf[n] = 0.0
    pmf[n, n] = 1.0
    return pmf  # (n + 1, n + 1)


def pass_at_k_table(n: int, ks: Sequence[int], metric: Metric = "pass@k") -> np.ndarray:
    """``table[i, c]`` = unbiased pass@ks[i] (or pass^ks[i]) of a problem with c correct of n,
    shape (K, n + 1)."""
    return pass_at_k_matrix(np.arange(n + 1), n, ks, metric)


def _survival(n: int, j: int) -> np.ndarray:
    """``C(n - c, j) / C(n, j)`` for c = 0..n: unbiased for ``(1 - p) ** j`` (needs j <= n)."""
    return 1.0 - pass_at_k_table(n, [j])[0] if j else np.ones(n + 1)


def within_variance_table(
    n: int, terms: Sequence[tuple[float, int]], metric: Metric = "pass@k"
) -> np.ndarray:
    """Within-problem variance of ``sum(a * pass@k for a, k in terms)``, for every count c.

    With ``q_k = (1 - p) ** k`` the statistic is a constant minus ``g = sum(a * Q_k)``, where
    ``Q_k = C(n - c, k) / C(n, k)`` is unbiased for ``q_k``. When every ``k_i + k_j <= n``,
    ``g**2 - sum(a_i a_j Q_{k_i + k_j})`` is an unbiased estimate of ``Var(g)`` (the U-statistic's
    own variance), and that is what we use. Otherwise (pass@k with 2k > n, e.g. the boundary
    k = n) no unbiased estimate exists; we use the plug-in value, the exact variance when the
    n outcomes are Binomial(n, c / n), times ``n / (n - 1)``. The plug-in value is biased
    upwards for large k (Jensen's inequality), so those floors are conservative.

    For ``metric="pass^k"`` the statistic is ``sum(a * pass^k)``; pass^k at count c is the
    survival term at count n - c, and n - c is binomial too, so its variance is the pass@k table
    read backwards.

    Returns:
        Array ``(n + 1,)``: ``out[c]`` for a problem with c correct of n (0 for n = 1). Single
        entries of the unbiased form can be negative; only their mean over problems is used.
    """
    if metric == "pass^k":
        return within_variance_table(n, terms)[::-1].copy()
    if n < 2:
        return np.zeros(n + 1)
    g = sum(a * _survival(n, k) for a, k in terms)
    if all(k1 + k2 <= n for _, k1 in terms for _, k2 in terms):
        cross = sum(a1 * a2 * _survival(n, k1 + k2) for a1, k1 in terms for a2, k2 in terms)
        return g**2 - cross
    pmf = binomial_pmf_matrix(n)  # (c, j)
    mean = pmf @ g
    return np.maximum(pmf @ g**2 - mean**2, 0.0) * (n / (n - 1))


def _variance(values: np.ndarray, within: np.ndarray) -> np.ndarray:
    """``max(S^2 / P, mean within / P)`` over axis 0: the variance of the mean over problems."""
    num = values.shape[0]
    observed = values.var(axis=0, ddof=1) / num if num > 1 else np.zeros(values.shape[1:])
    return np.maximum(observed, np.maximum(within.mean(axis=0), 0.0) / num)


def _wilson(
    mean: np.ndarray,
    var: np.ndarray,
    z: np.ndarray | float,
    cap: np.ndarray,
    cap_always: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Design-effect Wilson limits of ``mean`` at variance ``var``; ``z`` may vary per cell."""
    with np.errstate(divide="ignore", invalid="ignore"):
        n_eff = np.where((var > 0) & (mean * (1 - mean) > 0), mean * (1 - mean) / var, cap)
    if cap_always:
        n_eff = np.minimum(n_eff, cap)
    n_eff = np.maximum(n_eff, 1.0)
    denom = 1 + z * z / n_eff
    centre = (mean + z * z / (2 * n_eff)) / denom
    half = z * np.sqrt(mean * (1 - mean) / n_eff + z * z / (4 * n_eff**2)) / denom
    # At m = 0 or 1 the Wilson form cannot carry a variance that comes from the within-problem
    # floor alone (every problem alike, each one uncertain): there the interval is also at least
    # the normal interval of that variance.
    spread = np.where(mean * (1 - mean) > 0, 0.0, z * np.sqrt(var))
    lower = np.clip(np.minimum(centre - half, mean - spread), 0.0, 1.0)
    upper = np.clip(np.maximum(centre + half, mean + spread), 0.0, 1.0)
    return lower, upper


def score_interval(
    values: np.ndarray,
    within: np.ndarray,
    level: float,
    n_eff_max: np.ndarray | float,
    *,
    cap_always: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Design-effect Wilson interval of a mean of per-problem values in [0, 1].

    Args:
        values: Per-problem estimates, shape ``(P, ...)``.
        within: Their within-problem variances, same shape.
        level: Confidence level.
        n_eff_max: Effective sample size where the variance is 0 (every problem alike, no
            sampling noise seen): ``P * n / k`` for pass@k, broadcast over ``values.shape[1:]``.
        cap_always: Bound the effective sample size by ``n_eff_max`` everywhere (pass^k: a mean
            of tiny per-problem values, driven by the rare problems solved k times, has a
            spread far below ``m (1 - m)``, and the Wilson form would then trust far more than
            the ``P * n / k`` disjoint groups of k samples behind it).

    Returns:
        ``(estimate, lower, upper, standard_error)``, each of shape ``values.shape[1:]``.
    """
    z = t_quantile(level, values.shape[0] - 1)
    mean = values.mean(axis=0)
    var = _variance(values, within)
    cap = np.broadcast_to(np.asarray(n_eff_max, dtype=np.float64), mean.shape)
    lower, upper = _wilson(mean, var, z, cap, cap_always)
    return mean, lower, upper, np.sqrt(var)


def mover_gap_interval(
    values_a: np.ndarray,
    within_a: np.ndarray,
    values_b: np.ndarray,
    within_b: np.ndarray,
    level: float,
    n_eff_max: np.ndarray | float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Paired MOVER interval of ``mean(b) - mean(a)`` from the two cells' Wilson intervals, and
    the two-sided p-value that agrees with it (Newcombe 1998; Zou and Donner 2008).

    The gap's limits recover the variance of each side from that side's own Wilson limit, with
    the paired correlation of the per-problem values (taken as 0 when undefined, never below 0,
    which only widens the interval). Where both cells are all zero the Student-t interval of the
    gap collapses to [0, 0]; this one keeps the width of the two cells' upper limits.

    Returns:
        ``(lower, upper, p_value)``, each of shape ``values_a.shape[1:]``.
    """
    df = values_a.shape[0] - 1
    ma, mb = values_a.mean(axis=0), values_b.mean(axis=0)
    va, vb = _variance(values_a, within_a), _variance(values_b, within_b)
    cap = np.broadcast_to(np.asarray(n_eff_max, dtype=np.float64), ma.shape)
    da, db = values_a - ma, values_b - mb
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = (da * db).sum(axis=0) / np.sqrt((da**2).sum(axis=0) * (db**2).sum(axis=0))
    phi = np.clip(np.nan_to_num(phi, nan=0.0), 0.0, 1.0)

    def limits(z: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        la, ua = _wilson(ma, va, z, cap, True)
        lb, ub = _wilson(mb, vb, z, cap, True)
        down = (mb - lb) ** 2 + (ua - ma) ** 2 - 2 * phi * (mb - lb) * (ua - ma)
        up = (ub - mb) ** 2 + (ma - la) ** 2 - 2 * phi * (ub - mb) * (ma - la)
        gap = mb - ma
        return gap - np.sqrt(np.maximum(down, 0.0)), gap + np.sqrt(np.maximum(up, 0.0))

    lower, upper = limits(t_quantile(level, df))
    # p-value: the z (on the t scale) at which the interval first touches 0, by bisection.
    lo, hi = np.zeros(ma.shape), np.full(ma.shape, 40.0)
    for _ in range(40):
        mid = (lo + hi) / 2
        low, high = limits(mid)
        excludes = (low > 0) | (high < 0)
        lo, hi = np.where(excludes, mid, lo), np.where(excludes, hi, mid)
    p_value = _ERFC(t_to_z(lo, df) / math.sqrt(2)).astype(np.float64)
    return lower, upper, p_value


def normal_interval(
    values: np.ndarray, within: np.ndarray, level: float, bound: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Student-t interval and two-sided t-test p-value (against 0) of a mean of differences.

    Args:
        values: Per-problem differences, shape ``(P, ...)``.
        within: Their within-problem variances, same shape.
        level: Confidence level.
        bound: The differences lie in ``[-bound, bound]``; limits are clipped to it.

    Returns:
        ``(estimate, lower, upper, p_value)``, each of shape ``values.shape[1:]``. A cell with no
        variance at all has p = 1 when its estimate is 0 and p = 0 otherwise.
    """
    z = t_quantile(level, values.shape[0] - 1)
    mean = values.mean(axis=0)
    se = np.sqrt(_variance(values, within))
    lower = np.clip(mean - z * se, -bound, bound)
    upper = np.clip(mean + z * se, -bound, bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.abs(mean) / se
    stat = np.where(se > 0, stat, np.where(np.abs(mean) > 1e-12, np.inf, 0.0))
    p_value = _ERFC(t_to_z(stat, values.shape[0] - 1) / math.sqrt(2)).astype(np.float64)
    return mean, lower, upper, p_value


def holm(p_values: np.ndarray) -> np.ndarray:
    """Holm step-down adjusted p-values over every entry of ``p_values`` (any shape).

    A cell is significant at family-wise level ``alpha`` when its adjusted p-value is below
    ``alpha``; the chance that any A/A cell is then called significant is at most ``alpha``,
    whatever the correlation between cells.
    """
    flat = np.asarray(p_values, dtype=np.float64).ravel()
    m = flat.size
    order = np.argsort(flat, kind="stable")
    scaled = (m - np.arange(m)) * flat[order]
    adjusted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    out = np.empty(m)
    out[order] = adjusted
    return out.reshape(np.shape(p_values))


def pass_at_k_within(
    n: int, counts: np.ndarray, ks: Sequence[int], metric: Metric = "pass@k"
) -> np.ndarray:
    """Within-problem variance of every pass@k (or pass^k): ``(P, K, ...)`` from counts
    ``(P, ...)``."""
    table = np.stack([within_variance_table(n, [(1.0, k)], metric) for k in ks])  # (K, n + 1)
    return np.moveaxis(table[:, np.asarray(counts)], 0, 1)


def pass_at_k_interval(
    counts: np.ndarray, n: int, ks: Sequence[int], level: float, metric: Metric = "pass@k"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean pass@k (or pass^k) over problems with its score interval, from correct counts.

    Args:
        counts: Correct counts ``(P, ...)`` (e.g. ``(P, T)``; any trailing axes are independent
            cells, which is how the calibration simulates many runs at once).
        n: Samples per problem.
        ks: The k grid.
        level: Confidence level.
        metric: ``"pass@k"`` (default) or ``"pass^k"``.

    Returns:
        ``(estimate, lower, upper)``, each ``(K, ...)``.
    """
    counts = np.asarray(counts)
    values = np.moveaxis(pass_at_k_table(n, ks, metric)[:, counts], 0, 1)  # (P, K, ...)
    # With no spread at all, the disjoint groups of k samples are the independent units.
    cap = counts.shape[0] * n / np.asarray(ks, dtype=np.float64)
    cap = cap.reshape((len(ks),) + (1,) * (counts.ndim - 1))
    within = pass_at_k_within(n, counts, ks, metric)
    capped = metric == "pass^k"
    mean, lower, upper, _ = score_interval(values, within, level, cap, cap_always=capped)
    return mean, lower, upper


@dataclass(frozen=True)
class GapIntervals:
    """Paired gap ``b - a`` per (k, ...) cell and the widening ``gap(k_max) - gap(k_min)``.

    Every array's trailing axes are those of the counts (e.g. T); gap arrays lead with k.
    """

    gap: np.ndarray
    gap_lower: np.ndarray
    gap_upper: np.ndarray
    gap_p: np.ndarray
    widening: np.ndarray
    widening_lower: np.ndarray
    widening_upper: np.ndarray
    widening_p: np.ndarray


def paired_gap_intervals(
    counts_a: np.ndarray,
    n_a: int,
    counts_b: np.ndarray,
    n_b: int,
    ks: Sequence[int],
    level: float,
    metric: Metric = "pass@k",
) -> GapIntervals:
    """Gap and widening intervals of two independent evaluations of the same problems.

    Args:
        counts_a: Correct counts of run a, ``(P, ...)``; row i is the same problem in both runs.
        n_a: Samples per problem of run a.
        counts_b: Correct counts of run b, same shape.
        n_b: Samples per problem of run b.
        ks: The k grid (every k at most ``min(n_a, n_b)``).
        level: Confidence level.
        metric: ``"pass@k"`` (default) or ``"pass^k"``: what the gap is a gap of.
    """
    values, within, wide_within = [], [], []
    for counts, n in ((counts_a, n_a), (counts_b, n_b)):
        counts = np.asarray(counts)
        table = pass_at_k_table(n, ks, metric)  # (K, n + 1)
        values.append(np.moveaxis(table[:, counts], 0, 1))  # (P, K, ...)
        within.append(pass_at_k_within(n, counts, ks, metric))
        wide_terms = [(1.0, ks[-1]), (-1.0, ks[0])]
        wide_within.append(within_variance_table(n, wide_terms, metric)[counts])
    diff = values[1] - values[0]
    gap = normal_interval(diff, within[0] + within[1], level, 1.0)
    wide = normal_interval(diff[:, -1] - diff[:, 0], wide_within[0] + wide_within[1], level, 2.0)
    if metric == "pass^k":
        # Where no problem (or one) is solved k times, the Student-t interval collapses; the
        # gap's interval is then also at least the MOVER interval of the two Wilson cells, and
        # its p-value the larger of the two, so that the interval and the test still agree.
        cap = np.asarray(counts_a).shape[0] * min(n_a, n_b) / np.asarray(ks, dtype=np.float64)
        cap = cap.reshape((len(ks),) + (1,) * (np.ndim(counts_a) - 1))
        lower, upper, p_value = mover_gap_interval(
            values[0], within[0], values[1], within[1], level, cap
        )
        gap = (
            gap[0],
            np.minimum(gap[1], lower),
            np.maximum(gap[2], upper),
            np.maximum(gap[3], p_value),
        )
    return GapIntervals(*gap, *wide)
