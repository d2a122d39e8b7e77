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
  non-zero upper limit. Gaps and widenings (differences, centred near 0) use the normal
  interval with the same variance, and two-sided z-test p-values that agree with it.

Assumptions: problems are independent draws from the benchmark's population and the n samples of
a problem are independent given the problem (the evaluator seeds each one on its own); the two runs
of a comparison are independent evaluations on the same problems. Normal quantiles stand in for
Student's t, so with fewer than about 30 problems the intervals are a little short.
``benchmarks/calibration.py`` measures coverage and A/A false-positive rates by simulation.

Multiple comparisons. A surface comparison tests one gap per (k, T) cell; reading all of them at
level 0.05 finds a "significant" cell in most A/A comparisons. :func:`holm` adjusts the cells'
p-values (Holm's step-down, valid under any dependence between cells).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from passkt.eval.estimator import pass_at_k_array

__all__ = [
    "binomial_pmf_matrix",
    "holm",
    "normal_interval",
    "pass_at_k_table",
    "score_interval",
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


def pass_at_k_table(n: int, ks: Sequence[int]) -> np.ndarray:
    """``table[i, c]`` = unbiased pass@ks[i] of a problem with c correct of n, shape (K, n + 1)."""
    counts = np.arange(n + 1)
    return np.stack([pass_at_k_array(n, counts, k) for k in ks])


def within_variance_table(n: int, values: np.ndarray) -> np.ndarray:
    """Within-problem variance of a per-problem statistic, for every observed count.

    Args:
        n: Samples per problem.
        values: ``values[..., j]`` is the statistic of a problem with ``j`` correct of ``n``
            (e.g. a row of :func:`pass_at_k_table`, or a difference of two rows).

    Returns:
        Same shape: ``out[..., c]`` = the statistic's variance when a problem's n outcomes are
        Binomial(n, c / n), times ``n / (n - 1)`` (0 for n = 1, where nothing can be said).
    """
    if n < 2:
        return np.zeros_like(values, dtype=np.float64)
    pmf = binomial_pmf_matrix(n)  # (c, j)
    mean = values @ pmf.T  # (..., c)
    second = (values**2) @ pmf.T
    return np.maximum(second - mean**2, 0.0) * (n / (n - 1))


def _variance(values: np.ndarray, within: np.ndarray) -> np.ndarray:
    """``max(S^2 / P, mean within / P)`` over axis 0: the variance of the mean over problems."""
    num = values.shape[0]
    observed = values.var(axis=0, ddof=1) / num if num > 1 else np.zeros(values.shape[1:])
    return np.maximum(observed, within.mean(axis=0) / num)


def score_interval(
    values: np.ndarray, within: np.ndarray, level: float, n_eff_max: np.ndarray | float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Design-effect Wilson interval of a mean of per-problem values in [0, 1].

    Args:
        values: Per-problem estimates, shape ``(P, ...)``.
        within: Their within-problem variances, same shape.
        level: Confidence level.
        n_eff_max: Largest effective sample size (``P * n / k`` for pass@k), broadcast over
            ``values.shape[1:]``; also the size used where the variance is 0.

    Returns:
        ``(estimate, lower, upper, standard_error)``, each of shape ``values.shape[1:]``.
    """
    z = z_quantile(level)
    mean = values.mean(axis=0)
    var = _variance(values, within)
    cap = np.broadcast_to(np.asarray(n_eff_max, dtype=np.float64), mean.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        n_eff = np.where(var > 0, mean * (1 - mean) / var, cap)
    n_eff = np.clip(n_eff, 1.0, cap)
    denom = 1 + z * z / n_eff
    centre = (mean + z * z / (2 * n_eff)) / denom
    half = z * np.sqrt(mean * (1 - mean) / n_eff + z * z / (4 * n_eff**2)) / denom
    lower = np.clip(np.minimum(centre - half, mean), 0.0, 1.0)
    upper = np.clip(np.maximum(centre + half, mean), 0.0, 1.0)
    return mean, lower, upper, np.sqrt(var)


def normal_interval(
    values: np.ndarray, within: np.ndarray, level: float, bound: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Normal interval and two-sided z-test p-value (against 0) of a mean of differences.

    Args:
        values: Per-problem differences, shape ``(P, ...)``.
        within: Their within-problem variances, same shape.
        level: Confidence level.
        bound: The differences lie in ``[-bound, bound]``; limits are clipped to it.

    Returns:
        ``(estimate, lower, upper, p_value)``, each of shape ``values.shape[1:]``. A cell with no
        variance at all has p = 1 when its estimate is 0 and p = 0 otherwise.
    """
    z = z_quantile(level)
    mean = values.mean(axis=0)
    se = np.sqrt(_variance(values, within))
    lower = np.clip(mean - z * se, -bound, bound)
    upper = np.clip(mean + z * se, -bound, bound)
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.abs(mean) / se
    stat = np.where(se > 0, stat, np.where(np.abs(mean) > 1e-12, np.inf, 0.0))
    p_value = _ERFC(np.asarray(stat, dtype=np.float64) / math.sqrt(2)).astype(np.float64)
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
