"""Tests of pass^k: the estimator, the pass^k(T) surface, its intervals and its comparisons."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from passkt.eval.estimator import (
    pass_at_k_array,
    pass_hat_k,
    pass_hat_k_array,
    reliability_surface,
    surface,
)
from passkt.eval.intervals import pass_at_k_interval, within_variance_table
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.stats import compare, surface_interval


def exact_pass_hat_k(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


def _cases() -> list[tuple[int, int, int]]:
    """Random (n, c, k) up to n = 1024, plus all-correct, c = k and k = 1 corners."""
    rng = np.random.default_rng(4321)
    cases = []
    for n in (1, 2, 3, 7, 16, 64, 257, 1024):
        for _ in range(25):
            c, k = int(rng.integers(0, n + 1)), int(rng.integers(1, n + 1))
            cases.append((n, c, k))
        cases += [(n, n, n), (n, n // 2, max(1, n // 2)), (n, n - 1, 1), (n, 0, 1)]
    return cases


@pytest.mark.parametrize("n, c, k", _cases())
def test_pass_hat_k_matches_exact_rationals(n: int, c: int, k: int) -> None:
    exact = exact_pass_hat_k(n, c, k)
    got = pass_hat_k(n, c, k)
    if exact == 0:
        assert got == 0.0
    else:
        assert abs(Fraction(got) - exact) / exact < 1e-12
    assert pass_hat_k_array(n, np.array([[c]]), k)[0, 0] == got


def test_pass_hat_k_by_hand() -> None:
    # 3 correct of 4, all of 2 drawn correct: C(3,2)/C(4,2) = 3/6.
    assert pass_hat_k(4, 3, 2) == pytest.approx(0.5)
    assert pass_hat_k(4, 1, 2) == 0.0  # fewer successes than k: never all correct
    assert pass_hat_k(4, 4, 4) == 1.0


def test_pass_hat_one_is_pass_at_one_and_the_failures_read_backwards() -> None:
    n = 12
    counts = np.arange(n + 1)
    np.testing.assert_allclose(pass_hat_k_array(n, counts, 1), counts / n, rtol=1e-14)
    for k in range(1, n + 1):
        flipped = 1.0 - pass_at_k_array(n, n - counts, k)
        np.testing.assert_allclose(pass_hat_k_array(n, counts, k), flipped, atol=1e-14)


def test_pass_hat_k_guards() -> None:
    with pytest.raises(ValueError, match="undefined for k > n"):
        pass_hat_k(4, 2, 5)
    with pytest.raises(ValueError, match=r"0 <= c <= n"):
        pass_hat_k(4, 5, 2)


def _table(p: np.ndarray, n: int, budgets: tuple[int, ...], seed: int, name: str):
    rng = np.random.default_rng(seed)
    correct = rng.random((len(p), n, len(budgets))) < p[:, None, None]
    return OutcomeTable(tuple(f"t{i}" for i in range(len(p))), budgets, correct, name=name)


def test_reliability_surface_is_the_mean_of_per_problem_pass_hat_k() -> None:
    table = _table(np.linspace(0.05, 0.95, 30), 8, (0, 2), seed=3, name="r")
    surf = reliability_surface(table, (1, 2, 8))
    assert surf.metric == "pass^k" and surf.title == "pass^k(T)"
    counts = table.counts()
    for i, k in enumerate((1, 2, 8)):
        expected = [np.mean([pass_hat_k(8, int(c), k) for c in counts[:, j]]) for j in range(2)]
        np.testing.assert_allclose(surf.values[i], expected, rtol=1e-12)
    # pass^1 equals pass@1; pass^k never exceeds pass@k.
    np.testing.assert_allclose(surf.values[0], surface(table, (1, 2, 8)).values[0])
    assert np.all(surf.values <= surface(table, (1, 2, 8)).values + 1e-15)
    assert surf.to_dict()["metric"] == "pass^k"


def test_pass_hat_k_within_variance_is_unbiased() -> None:
    """The within-problem variance table (read backwards for pass^k) averages, over the
    binomial distribution of c, to the exact variance of the estimator."""
    n, k = 10, 3
    table = within_variance_table(n, [(1.0, k)], "pass^k")
    values = pass_hat_k_array(n, np.arange(n + 1), k)
    for p in (0.1, 0.5, 0.8):
        pmf = np.array([math.comb(n, c) * p**c * (1 - p) ** (n - c) for c in range(n + 1)])
        exact = pmf @ values**2 - (pmf @ values) ** 2
        assert pmf @ table == pytest.approx(exact, rel=1e-9)


def test_surface_interval_of_a_reliability_surface_is_pass_hat_k_interval() -> None:
    table = _table(np.linspace(0.0, 0.9, 40), 8, (0, 1), seed=5, name="r")
    surf = reliability_surface(table, (1, 4))
    ci = surface_interval(surf, table.counts())
    _, lower, upper = pass_at_k_interval(table.counts(), 8, (1, 4), 0.95, "pass^k")
    np.testing.assert_array_equal(ci.lower, lower)
    np.testing.assert_array_equal(ci.upper, upper)
    assert np.all((ci.lower <= surf.values) & (surf.values <= ci.upper))


def test_all_zero_pass_hat_k_cell_keeps_a_positive_upper_limit_and_gap_width() -> None:
    """Nobody solves any problem 4 times: pass^4 is 0 in both runs, and neither the cell nor
    the gap interval collapses to a point."""
    a = _table(np.full(50, 0.1), 8, (0,), seed=1, name="a")
    b = _table(np.full(50, 0.1), 8, (0,), seed=2, name="b")
    assert a.counts().max() < 4 and b.counts().max() < 4
    _, lower, upper = pass_at_k_interval(a.counts(), 8, (4,), 0.95, "pass^k")
    assert lower[0, 0] == 0.0 and upper[0, 0] > 0.0
    cmp = compare(a, b, ks=(1, 4), metric="pass^k")
    assert cmp.gap[1, 0] == 0.0 and cmp.gap_lower[1, 0] < 0.0 < cmp.gap_upper[1, 0]
    assert cmp.gap_p[1, 0] == pytest.approx(1.0)


def test_compare_pass_hat_k_finds_a_real_reliability_gain() -> None:
    """b solves the same problems more reliably: pass^k gaps are positive and significant after
    Holm's correction, and the interval agrees with the p-value in every cell."""
    p = np.linspace(0.3, 0.7, 60)
    a = _table(p, 16, (0, 1), seed=7, name="a")
    b = _table(np.minimum(p + 0.25, 1.0), 16, (0, 1), seed=8, name="b")
    cmp = compare(a, b, metric="pass^k")
    assert cmp.metric == "pass^k" and cmp.to_dict()["metric"] == "pass^k"
    assert np.all(cmp.gap[:3] > 0) and cmp.significant[:3].all()
    excludes = (cmp.gap_lower > 0) | (cmp.gap_upper < 0)
    np.testing.assert_array_equal(excludes, cmp.gap_p < 0.05)
    with pytest.raises(ValueError, match="metric must be one of"):
        compare(a, b, metric="pass_k")  # type: ignore[arg-type]
