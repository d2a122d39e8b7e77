"""p-values that agree with their intervals at every level: for many drawn studies, the interval
at level 1 - p just touches 0, and p < alpha exactly when the level 1 - alpha interval excludes 0
(the seed-level test, and compare's paired gaps)."""

from __future__ import annotations

import numpy as np
import pytest

from passkt.eval.intervals import paired_gap_intervals
from passkt.eval.seeds import seed_level_counts


def _study(rng: np.random.Generator):
    """Random counts for S bases, each with one or two trained policies, on P problems."""
    problems, seeds, n = int(rng.integers(4, 60)), int(rng.integers(1, 7)), int(rng.integers(2, 17))
    shift = rng.normal(0, 0.15)
    pairs = []
    for _ in range(seeds):
        rates = rng.beta(rng.uniform(0.3, 3), rng.uniform(0.3, 3), size=problems)
        base = rng.binomial(n, rates)
        seed_shift = shift + rng.normal(0, 0.1)
        trained = [
            (rng.binomial(n, np.clip(rates + seed_shift, 0, 1)), n)
            for _ in range(int(rng.integers(1, 3)))
        ]
        pairs.append(((base, n), trained))
    return pairs, n


def _touches(lower: float, upper: float, scale: float) -> float:
    return min(abs(lower), abs(upper)) / max(scale, 1e-12)


@pytest.mark.parametrize("draw", range(150))
def test_the_seed_level_interval_at_level_1_minus_p_touches_zero(draw):
    rng = np.random.default_rng(draw)
    pairs, n = _study(rng)
    k = int(rng.integers(1, n + 1))
    test = seed_level_counts(pairs, k=k, budget=0, level=0.95)
    se = float(np.hypot(test.se_eval, test.se_seed))
    if se == 0:
        assert test.p_value in (0.0, 1.0)
        return
    for alpha in (0.01, 0.05, 0.1, 0.5):
        at = seed_level_counts(pairs, k=k, budget=0, level=1 - alpha)
        excludes = at.lower > 0 or at.upper < 0
        if abs(test.p_value - alpha) > 1e-9:
            assert excludes == (test.p_value < alpha), (test.p_value, alpha, at.lower, at.upper)
    if 1e-10 < test.p_value < 1 - 1e-10:
        at = seed_level_counts(pairs, k=k, budget=0, level=1 - test.p_value)
        assert _touches(at.lower, at.upper, se) < 1e-6, (test.p_value, at.lower, at.upper)


@pytest.mark.parametrize("metric", ["pass@k", "pass^k"])
@pytest.mark.parametrize("draw", range(60))
def test_the_paired_gap_interval_at_level_1_minus_p_touches_zero(draw, metric):
    rng = np.random.default_rng(10_000 + draw)
    problems, n = int(rng.integers(3, 80)), int(rng.integers(2, 17))
    rates = rng.beta(1, 1, size=(problems, 3))
    a = rng.binomial(n, rates)
    b = rng.binomial(n, np.clip(rates + rng.normal(0, 0.15), 0, 1))
    ks = sorted({1, int(rng.integers(1, n + 1)), n})
    found = paired_gap_intervals(a, n, b, n, ks, 0.95, metric)
    for alpha in (0.01, 0.05, 0.2):
        at = paired_gap_intervals(a, n, b, n, ks, 1 - alpha, metric)
        excludes = (at.gap_lower > 0) | (at.gap_upper < 0)
        decided = np.abs(found.gap_p - alpha) > 1e-9
        assert (excludes == (found.gap_p < alpha))[decided].all()
    for index in np.ndindex(found.gap_p.shape):
        p = float(found.gap_p[index])
        if not 1e-10 < p < 1 - 1e-10:
            continue
        at = paired_gap_intervals(a, n, b, n, ks, 1 - p, metric)
        width = float(at.gap_upper[index] - at.gap_lower[index])
        assert _touches(at.gap_lower[index], at.gap_upper[index], width) < 1e-6, (index, p)
