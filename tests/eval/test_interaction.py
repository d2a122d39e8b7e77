"""The interaction test (a change on one problem set minus the change on another, the same bases
on both): calibrated when the two changes are equal, and it finds a real difference."""

from __future__ import annotations

import numpy as np
import pytest

from passkt.eval.seeds import interaction_counts


def _side(rng, seeds, problems, n, shifts, sims):
    """Counts of ``seeds`` bases and one trained policy each; base s's change is ``shifts[s]``
    on the logit scale; trailing axis: independent simulated studies."""
    pairs = []
    for s in range(seeds):
        logits = rng.normal(0, 1.5, size=(problems, 1)) + rng.normal(0, 0.3, size=(1, sims))
        rates = 1 / (1 + np.exp(-logits))
        trained = 1 / (1 + np.exp(-(logits + shifts[s])))
        pairs.append(((rng.binomial(n, rates), n), [(rng.binomial(n, trained), n)]))
    return pairs


@pytest.mark.parametrize("seeds", [3, 5])
def test_equal_changes_rarely_look_different_and_a_real_difference_is_found(seeds):
    rng = np.random.default_rng(seeds)
    sims, n = 400, 8
    shared = rng.normal(0.3, 0.3, size=(seeds, sims))  # each base's change, the same on both sides
    first = _side(rng, seeds, 60, n, shared, sims)
    second = _side(rng, seeds, 40, n, shared, sims)
    null = interaction_counts(first, second, k_first=1, k_second=1)
    false = np.mean((null.lower > 0) | (null.upper < 0))
    assert false <= 0.08, false
    assert np.array_equal(null.p_value < 0.05, (null.lower > 0) | (null.upper < 0))
    moved = _side(rng, seeds, 60, n, shared + 1.5, sims)
    real = interaction_counts(moved, second, k_first=1, k_second=1)
    assert np.mean(real.lower > 0) >= 0.8


def test_the_sides_must_hold_the_same_bases():
    rng = np.random.default_rng(0)
    one = _side(rng, 3, 5, 4, np.zeros((3, 1)), 1)
    with pytest.raises(ValueError, match="3 bases on one side, 2 on the other"):
        interaction_counts(one, one[:2], k_first=1, k_second=1)
