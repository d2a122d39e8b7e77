"""Proof by simulation that the intervals are calibrated (``passkt.eval.calibration``).

1000 simulated studies per regime (100 problems, n = 16), nominal level 0.95, for pass@k and for
pass^k. A rate is checked against its nominal value within a binomial tolerance of 3.8 standard
errors: about 120 rates are checked, and 3.8 sigma keeps the chance that a perfectly calibrated
method fails any of them near 1%.
"""

from __future__ import annotations

import numpy as np
import pytest

from passkt.eval.calibration import REGIMES, calibrate
from passkt.eval.intervals import holm, t_quantile, t_to_z

LEVEL = 0.95
SIGMAS = 3.8
N = 16


@pytest.fixture(scope="module")
def score_rows() -> dict[str, list]:
    return {regime: calibrate(regime, "score", runs=1000, seed=0) for regime in REGIMES}


@pytest.mark.parametrize("regime", list(REGIMES))
def test_coverage_is_never_below_nominal(score_rows: dict, regime: str) -> None:
    """pass@k, gaps and boundary differences: no interval is overconfident, in any regime
    (including the hard one, where most problems are never solved)."""
    coverage = [r for r in score_rows[regime] if r.target.startswith("coverage")]
    assert len(coverage) == 10
    for r in coverage:
        assert r.rate >= LEVEL - r.tolerance(LEVEL, SIGMAS), (r.target, r.k, r.rate)


@pytest.mark.parametrize("regime", list(REGIMES))
def test_coverage_is_not_wasteful_where_the_floor_is_unbiased(score_rows: dict, regime: str):
    """For k <= n/2 the within-problem floor is unbiased, so intervals are not needlessly wide
    either. (For k > n/2 the floor is a plug-in value biased upwards: conservative, as the
    README says, so only the lower side is checked there.)"""
    for r in score_rows[regime]:
        if r.target.startswith("coverage") and r.k is not None and 2 * r.k <= N:
            assert r.rate <= LEVEL + r.tolerance(LEVEL, SIGMAS), (r.target, r.k, r.rate)


@pytest.mark.parametrize("regime", list(REGIMES))
def test_aa_false_positives_stay_at_the_nominal_level(score_rows: dict, regime: str) -> None:
    """Two evaluations of the same policy: the headline test, the boundary cell and the whole
    grid after Holm's correction each call a difference at most 5% of the time."""
    rates = {r.target: r for r in score_rows[regime] if r.target.startswith("A/A")}
    for target in ("A/A headline (widening)", "A/A cell k=n", "A/A any cell, Holm"):
        r = rates[target]
        assert r.rate <= 1 - LEVEL + r.tolerance(LEVEL, SIGMAS), (target, r.rate)
    # Reading every cell at 5% without a correction finds "something" far more often.
    assert rates["A/A any cell, uncorrected"].rate > rates["A/A any cell, Holm"].rate


@pytest.fixture(scope="module")
def reliability_rows() -> dict[str, list]:
    return {r: calibrate(r, "score", runs=1000, seed=0, metric="pass^k") for r in REGIMES}


@pytest.mark.parametrize("regime", list(REGIMES))
def test_pass_hat_k_coverage_is_never_below_nominal(reliability_rows: dict, regime: str) -> None:
    """pass^k cells and paired pass^k gaps at every k, in every regime: including the hard and
    flat ones, where pass^k at k >= 2 is a mean of tiny values and most cells are all zero."""
    coverage = [r for r in reliability_rows[regime] if r.target.startswith("coverage")]
    assert {r.target for r in coverage} == {"coverage pass^k", "coverage gap^k"}
    assert len(coverage) == 10 and all(r.metric == "pass^k" for r in coverage)
    for r in coverage:
        assert r.rate >= LEVEL - r.tolerance(LEVEL, SIGMAS), (r.target, r.k, r.rate)


@pytest.mark.parametrize("regime", ["easy", "mixed"])
def test_pass_hat_k_coverage_is_not_wasteful_where_it_is_not_tiny(reliability_rows, regime):
    """Where pass^k is not a mean of tiny values (k <= n/4 with problems spread over [0, 1]),
    its intervals are not needlessly wide. (Elsewhere they are conservative: the Wilson form is
    capped at the P n / k disjoint groups of k samples, and gaps are at least the MOVER
    interval; docs/statistics.md.)"""
    for r in reliability_rows[regime]:
        if r.target.startswith("coverage") and 4 * r.k <= N:
            assert r.rate <= LEVEL + r.tolerance(LEVEL, SIGMAS), (r.target, r.k, r.rate)


@pytest.mark.parametrize("regime", list(REGIMES))
def test_pass_hat_k_aa_false_positives_stay_at_the_nominal_level(reliability_rows, regime):
    rates = {r.target: r for r in reliability_rows[regime] if r.target.startswith("A/A")}
    for target in ("A/A headline (widening)", "A/A cell k=n", "A/A any cell, Holm"):
        r = rates[target]
        assert r.rate <= 1 - LEVEL + r.tolerance(LEVEL, SIGMAS), (target, r.rate)


def test_student_t_alone_undercovers_pass_hat_k_gaps_in_the_hard_regime(monkeypatch) -> None:
    """The pass^k check has power: without the MOVER floor, gaps of cells where no problem is
    solved k times collapse to [0, 0] and miss the true (tiny, positive) gap."""
    import passkt.eval.intervals as intervals

    def no_floor(values_a, within_a, values_b, within_b, level, n_eff_max):
        shape = values_a.shape[1:]
        return np.full(shape, np.inf), np.full(shape, -np.inf), np.zeros(shape)

    monkeypatch.setattr(intervals, "mover_gap_interval", no_floor)
    rows = {(r.target, r.k): r for r in calibrate("hard", "score", runs=1000, metric="pass^k")}
    r = rows["coverage gap^k", 4]
    assert r.rate < LEVEL - r.tolerance(LEVEL, SIGMAS)


def test_old_bootstrap_is_overconfident_in_the_hard_regime() -> None:
    """The check has power: the problem-level percentile bootstrap undercovers pass@1 when most
    problems are never solved (about 0.90), and its uncorrected grid calls A/A differences."""
    rows = {(r.target, r.k): r for r in calibrate("hard", "bootstrap", runs=1000, seed=0)}
    r = rows["coverage pass@k", 1]
    assert r.rate < LEVEL - r.tolerance(LEVEL, SIGMAS)
    any_cell = rows["A/A any cell, uncorrected", None]
    assert any_cell.rate > 1 - LEVEL + any_cell.tolerance(LEVEL, SIGMAS)


def test_holm_by_hand() -> None:
    adjusted = holm(np.array([0.01, 0.04, 0.03, 0.5]))
    # Sorted 0.01, 0.03, 0.04, 0.5 times 4, 3, 2, 1 -> 0.04, 0.09, 0.08 -> running max 0.09, 0.5.
    np.testing.assert_allclose(adjusted, [0.04, 0.09, 0.09, 0.5])
    assert holm(np.array([0.9, 0.8])).max() == 1.0


def test_student_t_quantiles_match_tables() -> None:
    for df, expected in ((5, 2.571), (10, 2.228), (29, 2.045), (99, 1.984)):
        assert t_quantile(0.95, df) == pytest.approx(expected, abs=0.006)
    # The p-value map and the quantile agree: |t| at the quantile has two-sided p = 0.05.
    z = float(t_to_z(t_quantile(0.95, 20), 20))
    assert z == pytest.approx(1.959964, abs=1e-6)


def test_calibrate_argument_errors() -> None:
    with pytest.raises(ValueError, match="must end with n = 16"):
        calibrate("easy", "score", runs=10, ks=(1, 4))
    with pytest.raises(ValueError, match="method must be"):
        calibrate("easy", "wald", runs=10)
    with pytest.raises(ValueError, match="metric must be one of"):
        calibrate("easy", "score", runs=10, metric="pass")
