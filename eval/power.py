"""Power analysis for a paired comparison: how many problems a study needs to see a change.

A comparison of a trained policy against its base (``passkt compare``) decides a cell with the
paired-gap test of :mod:`passkt.eval.intervals`. Whether that test can detect a change of a given
size depends on the problems (how many, and how hard), on the samples per problem and on k.
This module answers by simulation from a base evaluation's own per-problem success rates, with
the very test ``compare`` uses:

1. The base's per-problem rates are its observed rates, smoothed to ``(c + 1/2) / (n + 1)`` so
   that a problem never solved in n samples is rare rather than impossible (a boundary can then
   widen in the simulation, as it could in a real study).
2. The alternative moves every problem's rate by one shift on the logit scale, chosen so that
   the population pass@(k, T) moves by exactly ``delta`` (:func:`shifted_rates`).
3. A simulated study draws P problems from the base's problems (with replacement: the problems
   are a sample of a population), n outcomes per problem from each policy's rate, and runs the
   paired test at ``1 - level`` confidence (:func:`passkt.eval.intervals.paired_gap_intervals`).
   The power is the share of simulated studies whose test is significant in the direction of
   ``delta``.

:func:`required_problems` finds the smallest P with at least the wanted power;
:func:`smallest_change` the smallest ``delta`` a given P detects. Both are deterministic for a
seed (the simulated studies use common random numbers across the P or delta they try).
Assumptions: problems of the study are independent draws like the base's; a single pre-declared
test at the nominal level (no multiple-comparison correction); the two evaluations are independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from passkt.eval.estimator import pass_at_k_array
from passkt.eval.intervals import paired_gap_intervals, t_quantile
from passkt.eval.seeds import seed_level_counts

__all__ = [
    "PowerAnswer",
    "evaluation_sd",
    "power_at",
    "required_problems",
    "seed_level_power",
    "seeds_needed",
    "seeds_needed_t",
    "shifted_rates",
    "smallest_change",
    "smoothed_rates",
    "t_test_power",
    "true_pass_at_k",
]

DEFAULT_SIMS = 2000
"""Simulated studies per power estimate: the estimate's standard error is at most 0.011."""
MAX_PROBLEMS = 100_000
_normal_cdf = np.vectorize(NormalDist().cdf, otypes=[float])


def smoothed_rates(counts: np.ndarray, n: int) -> np.ndarray:
    """Per-problem success rates ``(c + 1/2) / (n + 1)`` from correct counts of n samples."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 1 or counts.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {counts.shape}")
    if n < 1 or (counts < 0).any() or (counts > n).any():
        raise ValueError(f"counts must lie in 0..n = {n}")
    return (counts + 0.5) / (n + 1)


def true_pass_at_k(rates: np.ndarray, k: int) -> float:
    """Population pass@k of problems with these success rates: ``mean(1 - (1 - p)^k)``."""
    return float(np.mean(1.0 - (1.0 - np.asarray(rates)) ** k))


def _shift(rates: np.ndarray, s: float) -> np.ndarray:
    logit = np.log(rates) - np.log1p(-rates)
    return 1.0 / (1.0 + np.exp(-(logit + s)))


def shifted_rates(rates: np.ndarray, k: int, delta: float) -> np.ndarray:
    """The rates after one logit shift that moves the population pass@k by ``delta``.

    Raises:
        ValueError: If no shift reaches ``pass@k + delta`` (outside (0, 1)).
    """
    rates = np.asarray(rates, dtype=np.float64)
    base = true_pass_at_k(rates, k)
    target = base + delta
    if not 0.0 < target < 1.0:
        raise ValueError(
            f"pass@{k} cannot move by {delta:+g} from {base:.3f}: it would leave (0, 1)"
        )
    lo, hi = (-60.0, 0.0) if delta < 0 else (0.0, 60.0)
    for _ in range(200):
        mid = (lo + hi) / 2
        if true_pass_at_k(_shift(rates, mid), k) < target:  # increasing in the shift
            lo = mid
        else:
            hi = mid
    return _shift(rates, (lo + hi) / 2)


def power_at(
    base: np.ndarray,
    trained: np.ndarray,
    *,
    problems: int,
    n: int,
    k: int,
    level: float = 0.05,
    sims: int = DEFAULT_SIMS,
    seed: int = 0,
) -> float:
    """Share of ``sims`` simulated studies of ``problems`` problems whose paired test of the
    pass@k gap is significant at ``level`` in the direction of ``mean(trained) - mean(base)``.

    Args:
        base: Per-problem success rates of the base, ``(Q,)``; studies draw problems from them.
        trained: The trained policy's rates of the same problems, ``(Q,)``.
        problems: Problems per simulated study (P).
        n: Samples per problem and policy.
        k: The k of pass@k (``k = n``: the boundary).
        level: Significance level of the two-sided test (confidence ``1 - level``).
        sims: Simulated studies.
        seed: Seed of the simulation.
    """
    _check_study(problems, n, k)
    rng = np.random.default_rng(seed)
    base, trained = np.asarray(base), np.asarray(trained)
    direction = np.sign(true_pass_at_k(trained, k) - true_pass_at_k(base, k)) or 1.0
    hits = 0
    for start in range(0, sims, 500):  # bounded memory: (P, 500) counts at a time
        size = min(500, sims - start)
        drawn = rng.integers(base.size, size=(problems, size))
        counts_a = rng.binomial(n, base[drawn])
        counts_b = rng.binomial(n, trained[drawn])
        gaps = paired_gap_intervals(counts_a, n, counts_b, n, [k], 1.0 - level)
        significant = (gaps.gap_p[0] < level) & (np.sign(gaps.gap[0]) == direction)
        hits += int(significant.sum())
    return hits / sims


@dataclass(frozen=True)
class PowerAnswer:
    """What a power analysis found, with the (P or delta, power) points it tried."""

    k: int
    n: int
    level: float
    power: float
    """The wanted power."""
    base_pass_at_k: float
    """The base's population pass@k under the smoothed rates."""
    problems: int
    delta: float
    achieved: float
    """The simulated power at ``problems`` and ``delta``."""
    searched: str = "problems"
    """What the search varied: ``"problems"`` (:func:`required_problems`) or ``"delta"``."""
    tried: tuple[tuple[float, float], ...] = field(default=())
    """``(problems or delta, power)`` of every point the search simulated, in order."""


def required_problems(
    base: np.ndarray,
    *,
    delta: float,
    n: int,
    k: int,
    level: float = 0.05,
    power: float = 0.8,
    sims: int = DEFAULT_SIMS,
    seed: int = 0,
    start: int = 25,
) -> PowerAnswer:
    """The smallest number of problems whose paired test detects a pass@k change of ``delta``
    with at least ``power`` (doubling from ``start``, then bisection).

    Raises:
        ValueError: If even ``MAX_PROBLEMS`` problems fall short.
    """
    _check_power(power, level)
    trained = shifted_rates(base, k, delta)
    tried: list[tuple[float, float]] = []

    def measure(problems: int) -> float:
        got = power_at(
            base, trained, problems=problems, n=n, k=k, level=level, sims=sims, seed=seed
        )
        tried.append((problems, got))
        return got

    low, high = 1, max(2, start)
    while measure(high) < power:
        low, high = high, high * 2
        if high > MAX_PROBLEMS:
            raise ValueError(
                f"a pass@{k} change of {delta:+g} needs more than {MAX_PROBLEMS} problems "
                f"for power {power} at level {level}"
            )
    while high - low > max(1, high // 100):  # to 1% of P
        mid = (low + high) // 2
        if measure(max(mid, 2)) >= power:
            high = mid
        else:
            low = mid
    achieved = next(p for size, p in reversed(tried) if size == high)
    return PowerAnswer(
        k, n, level, power, true_pass_at_k(base, k), high, delta, achieved, "problems", tuple(tried)
    )


def smallest_change(
    base: np.ndarray,
    *,
    problems: int,
    n: int,
    k: int,
    level: float = 0.05,
    power: float = 0.8,
    sims: int = DEFAULT_SIMS,
    seed: int = 0,
    direction: float = 1.0,
) -> PowerAnswer:
    """The smallest pass@k change (in ``direction``: +1 a gain, -1 a loss) that a study of
    ``problems`` problems detects with at least ``power``, to 0.001.

    Raises:
        ValueError: If no change within the room pass@k has left reaches that power.
    """
    _check_power(power, level)
    base_value = true_pass_at_k(base, k)
    room = (1.0 - base_value) if direction > 0 else base_value
    tried: list[tuple[float, float]] = []

    def measure(size: float) -> float:
        trained = shifted_rates(base, k, direction * size)
        got = power_at(
            base, trained, problems=problems, n=n, k=k, level=level, sims=sims, seed=seed
        )
        tried.append((direction * size, got))
        return got

    low, high = 0.0, room * 0.999
    if measure(high) < power:
        raise ValueError(
            f"{problems} problems cannot detect any pass@{k} change up to {direction * high:+.3f} "
            f"with power {power}"
        )
    while high - low > 0.001:
        mid = (low + high) / 2
        if measure(mid) >= power:
            high = mid
        else:
            low = mid
    achieved = next(p for size, p in reversed(tried) if size == direction * high)
    return PowerAnswer(
        k, n, level, power, base_value, problems, direction * high, achieved, "delta", tuple(tried)
    )


def seed_level_power(
    bases: Sequence[np.ndarray],
    *,
    delta: float,
    problems: int,
    n: int,
    k: int,
    level: float = 0.05,
    sims: int = DEFAULT_SIMS,
    seed: int = 0,
    spread: float = 0.0,
    replicates: int | None = None,
) -> float:
    """Power of the seed-level test (:mod:`passkt.eval.seeds`) with one replicate per base.

    Each base's rates (``(Q,)``, the same Q problems for every base) are moved by a logit shift
    so that its population pass@k changes by that replicate's true change; a simulated study
    draws P problems (shared by every replicate), n outcomes per problem and policy, and runs
    the seed-level test at ``1 - level`` confidence.

    ``spread = 0`` (the default): every replicate changes by exactly ``delta``, so the
    replicates differ only as the bases do. That is an **upper bound**: real replicates' changes
    differ. ``spread > 0``: each replicate's true change is drawn from a normal distribution
    around ``delta`` with that standard deviation (the observed between-replicate spread of a
    pilot's changes is the realistic value), and kept inside what the base's pass@k leaves
    (a base with no room for a gain is capped at its room, as it would be). ``replicates``: how
    many (base, trained) pairs the study has, cycling through ``bases`` (default one per base).

    Raises:
        ValueError: If the bases hold different numbers of problems, or (``spread = 0``)
            ``delta`` leaves (0, 1) for a base.
    """
    bases = [np.asarray(b, dtype=np.float64) for b in bases]
    if not bases or len({b.size for b in bases}) != 1:
        raise ValueError("the bases must hold rates of the same problems, one array each")
    _check_study(problems, n, k)
    if not spread >= 0 or not np.isfinite(spread):
        raise ValueError(f"spread must be a finite number >= 0, got {spread!r}")
    count = len(bases) if replicates is None else int(replicates)
    if count < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates!r}")
    used = [bases[i % len(bases)] for i in range(count)]
    unique = [_change_grid(b, k, delta, spread) for b in bases]  # (deltas (G,), rates (G, Q))
    grids = [unique[i % len(bases)] for i in range(count)]
    rng = np.random.default_rng(seed)
    direction = 1.0 if delta >= 0 else -1.0
    hits = 0
    for start in range(0, sims, 500):
        size = min(500, sims - start)
        drawn = rng.integers(used[0].size, size=(problems, size))
        pairs = []
        for base, (deltas, rates) in zip(used, grids, strict=True):
            wanted = delta + spread * rng.standard_normal(size)
            pick = np.abs(deltas[:, None] - wanted[None, :]).argmin(axis=0)  # (size,)
            trained = rates[pick[None, :], drawn]  # (P, size)
            pairs.append(((rng.binomial(n, base[drawn]), n), [(rng.binomial(n, trained), n)]))
        test = seed_level_counts(pairs, k=k, budget=0, level=1.0 - level)
        found = test.lower > 0 if direction > 0 else test.upper < 0
        hits += int(np.sum(found))
    return hits / sims


def _change_grid(
    rates: np.ndarray, k: int, delta: float, spread: float, points: int = 41
) -> tuple[np.ndarray, np.ndarray]:
    """The true changes a replicate of this base may draw, and its rates after each: exactly
    ``delta`` without spread; else ``delta ± 4 spread`` on ``points`` values, kept inside
    what the base's pass@k leaves."""
    if spread == 0:
        return np.array([delta]), shifted_rates(rates, k, delta)[None, :]
    base = true_pass_at_k(rates, k)
    low = max(delta - 4 * spread, -base + 1e-4)
    high = min(delta + 4 * spread, 1.0 - base - 1e-4)
    deltas = np.linspace(low, high, points) if high > low else np.array([high])
    shifted = np.stack([shifted_rates(rates, k, d) if d else rates for d in deltas])
    return deltas, shifted


def seeds_needed(
    bases: Sequence[np.ndarray],
    *,
    delta: float,
    spread: float,
    power: float = 0.8,
    most: int = 16,
    **study: Any,
) -> int | None:
    """The fewest replicates (from 3, cycling through ``bases``) whose seed-level test reaches
    ``power`` for a true change ``delta`` with between-replicate ``spread`` (power grows with
    replicates, so a bisection over 3..``most``); ``None`` if ``most`` do not."""

    def enough(count: int) -> bool:
        found = seed_level_power(bases, delta=delta, spread=spread, replicates=count, **study)
        return found >= power

    return _fewest_replicates(enough, most)


def t_test_power(delta: float, sd: float, count: int, *, level: float = 0.05) -> float:
    """The power of a two-sided one-sample t-test at ``level`` on ``count`` replicate changes
    drawn from a normal with mean ``delta`` and sd ``sd``: ``P(|T| > t(1 - level/2, S-1))``
    with ``T`` noncentral t, by quadrature over the chi-square of the sample variance (numpy
    only; the critical value is :func:`passkt.eval.intervals.t_quantile`, the seed-level test's)."""
    if count < 2:
        raise ValueError(f"count must be >= 2, got {count}")
    if sd <= 0:
        return 1.0 if delta else level
    df = count - 1
    crit = t_quantile(1 - level, df)
    nc = abs(delta) * np.sqrt(count) / sd
    # V ~ chi2(df), written as V = w^2 so the density w^(df-1) exp(-w^2/2) has no pole at 0;
    # sqrt(V / df) = w / sqrt(df) scales the critical value. Trapezoids on a fine grid of w.
    w = np.linspace(0.0, np.sqrt(df) + 12.0, 4_001)
    log_f = np.full_like(w, -np.inf)
    log_f[1:] = (df - 1) * np.log(w[1:]) - w[1:] ** 2 / 2
    if df == 1:
        log_f[0] = 0.0
    weights = np.exp(log_f - log_f.max())
    scaled = crit * w / np.sqrt(df)
    tail = _normal_cdf(nc - scaled) + _normal_cdf(-nc - scaled)
    return float(np.clip(_trapezoid(tail * weights, w) / _trapezoid(weights, w), 0.0, 1.0))


def _trapezoid(y: np.ndarray, x: np.ndarray) -> float:
    return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2)


def seeds_needed_t(
    delta: float, sd: float, *, power: float = 0.8, level: float = 0.05, most: int = 1000
) -> int | None:
    """The fewest replicates (from 3) at which a two-sided t-test at ``level`` on per-replicate
    changes of sd ``sd`` reaches ``power`` for a true mean change ``delta``
    (:func:`t_test_power`). No simulation of problems, so it reaches counts :func:`seeds_needed`
    does not search; ``sd`` holds the between-replicate spread and the evaluation's noise per
    replicate together. ``None`` if ``most`` do not reach it (or ``delta`` is 0)."""
    _check_power(power, level)
    if sd < 0 or not np.isfinite(sd):
        raise ValueError(f"sd must be a finite number >= 0, got {sd!r}")
    if delta == 0:
        return None

    def enough(count: int) -> bool:
        return t_test_power(delta, sd, count, level=level) >= power

    return _fewest_replicates(enough, most)


def evaluation_sd(rates: np.ndarray, *, n: int, k: int, problems: int) -> float:
    """The standard deviation, from sampling alone, of one replicate's measured change of
    pass@k: the mean over ``problems`` problems of the trained evaluation's unbiased pass@k
    minus the base's, n samples each, both at these rates (a change small beside the noise).

    Each problem's estimator variance is exact under its binomial count (``n + 1`` terms); the
    problems are drawn from ``rates``, so the mean variance over them is divided by
    ``problems``, and doubled for the two evaluations. Added in quadrature to the replicates'
    spread, it is the per-replicate sd :func:`seeds_needed_t` asks for."""
    rates = np.clip(np.asarray(rates, dtype=np.float64), 1e-12, 1 - 1e-12)
    _check_study(problems, n, k)
    counts = np.arange(n + 1)
    log_choose = np.array([math.lgamma(n + 1) - math.lgamma(c + 1) - math.lgamma(n - c + 1)
                           for c in counts])  # fmt: skip
    log_pmf = (
        log_choose[None, :]
        + counts[None, :] * np.log(rates)[:, None]
        + (n - counts)[None, :] * np.log1p(-rates)[:, None]
    )
    pmf = np.exp(log_pmf)
    estimate = pass_at_k_array(n, counts, k)
    mean = pmf @ estimate
    variance = np.maximum(pmf @ estimate**2 - mean**2, 0.0)
    return float(np.sqrt(2 * variance.mean() / problems))


def _fewest_replicates(enough: Callable[[int], bool], most: int) -> int | None:
    """The fewest replicates in 3..``most`` for which ``enough`` (monotone in the count) holds,
    by bisection; ``None`` if ``most`` do not."""
    if not enough(most):
        return None
    low, high = 2, most  # enough(high); low is "not enough" (fewer than 3 give no verdict)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def _check_study(problems: int, n: int, k: int) -> None:
    if problems < 2:
        raise ValueError(f"problems must be >= 2, got {problems}")
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in 1..n = {n}, got {k}")


def _check_power(power: float, level: float) -> None:
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), got {power}")
    if not 0 < level < 0.5:
        raise ValueError(f"level must lie in (0, 0.5), e.g. 0.05; got {level}")


def counts_at(correct: np.ndarray, budgets: Sequence[int], t: int) -> np.ndarray:
    """Correct counts per problem at budget ``t`` from a run's ``(P, n, T)`` outcome array."""
    if t not in budgets:
        raise ValueError(f"T = {t} was not evaluated; the run has T in {list(budgets)}")
    return np.asarray(correct)[:, :, list(budgets).index(t)].sum(axis=1)
