"""The seed-level test (``passkt.eval.seeds``): calibrated by simulation, with and without common
random numbers between a trained policy and its base.

A simulated study: 100 problems (difficulty on the logit scale, shared by every base), S bases
(each shifted by its pretraining seed), one recipe whose effect on each base is drawn around its
mean, n = 16 samples per problem. 1000 studies per case; rates are checked within 3.8 binomial
standard errors of their nominal value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from passkt.eval.outcomes import OutcomeTable
from passkt.eval.seeds import SeedPair, seed_level_counts, seed_level_test

LEVEL = 0.95
STUDIES = 1000
P, N = 100, 16


def _tolerance(rate: float) -> float:
    return 3.8 * math.sqrt(rate * (1 - rate) / STUDIES)


def _studies(rng, seeds, effect, spread, *, common: bool):
    """Correct counts of ``STUDIES`` simulated studies at once (trailing axis) and the target:
    the population mean over problems and bases of true pass@k(trained) - pass@k(base)."""
    difficulty = rng.normal(-1.0, 2.0, size=(P, 1, STUDIES))
    offset = rng.normal(0.0, 0.5, size=(1, seeds, STUDIES))
    shift = rng.normal(effect, spread, size=(1, seeds, STUDIES))
    base = 1 / (1 + np.exp(-(difficulty + offset)))
    trained = 1 / (1 + np.exp(-(difficulty + offset + shift)))
    pairs = []
    for s in range(seeds):
        draws = rng.random((N, P, STUDIES))
        other = draws if common else rng.random((N, P, STUDIES))
        pairs.append(
            (((draws < base[:, s]).sum(axis=0), N), [((other < trained[:, s]).sum(axis=0), N)])
        )
    return pairs


def _target(rng, effect, spread, k):
    difficulty = rng.normal(-1.0, 2.0, size=400_000)
    offset = rng.normal(0.0, 0.5, size=400_000)
    shift = rng.normal(effect, spread, size=400_000)
    base = 1 / (1 + np.exp(-(difficulty + offset)))
    trained = 1 / (1 + np.exp(-(difficulty + offset + shift)))
    return float(np.mean((1 - base) ** k - (1 - trained) ** k))


@pytest.mark.parametrize("common", [False, True], ids=["independent", "common-random-numbers"])
@pytest.mark.parametrize(
    ("seeds", "effect", "spread", "k"),
    [(3, 0.0, 0.0, 1), (3, 0.0, 0.0, N), (3, 0.0, 0.5, N), (3, 0.5, 0.3, 1), (5, 0.5, 0.6, N)],
)
def test_intervals_cover_the_recipe_effect(seeds, effect, spread, k, common):
    rng = np.random.default_rng(seeds * 100 + k + int(common))
    target = _target(rng, effect, spread, k)
    result = seed_level_counts(
        _studies(rng, seeds, effect, spread, common=common), k=k, budget=5, level=LEVEL
    )
    covered = float(np.mean((result.lower <= target) & (target <= result.upper)))
    assert covered >= LEVEL - _tolerance(LEVEL), (covered, target)
    if effect == 0.0 and spread == 0.0:  # A/A: the recipe does nothing to any base
        fired = float(np.mean((result.lower > 0) | (result.upper < 0)))
        assert fired <= 1 - LEVEL + _tolerance(1 - LEVEL), fired


def test_a_real_effect_is_found_on_three_seeds():
    rng = np.random.default_rng(11)
    result = seed_level_counts(_studies(rng, 3, 1.0, 0.2, common=True), k=1, budget=5)
    assert float(np.mean(result.lower > 0)) > 0.8  # the test has power, not only coverage


def _table(name, counts, n=4, budgets=(0, 5)):
    counts = np.asarray(counts)
    correct = np.zeros((len(counts), n, len(budgets)), dtype=bool)
    for i, c in enumerate(counts):
        correct[i, :c, -1] = True
    return OutcomeTable(tuple(f"t{i}" for i in range(len(counts))), budgets, correct, name=name)


def test_tables_give_the_same_answer_as_their_counts():
    bases = [[0, 1, 2, 4, 1], [1, 1, 0, 3, 2], [0, 2, 2, 4, 0]]
    trained = [[[2, 2, 3, 4, 1]], [[1, 3, 1, 4, 2], [2, 2, 1, 3, 3]], [[1, 2, 4, 4, 1]]]
    pairs = [
        SeedPair(_table(f"b{s}", b), tuple(_table(f"r{s}{j}", t) for j, t in enumerate(ts)))
        for s, (b, ts) in enumerate(zip(bases, trained, strict=True))
    ]
    got = seed_level_test(pairs, k=2, budget=5)
    want = seed_level_counts(
        [
            ((np.array(b), 4), [(np.array(t), 4) for t in ts])
            for b, ts in zip(bases, trained, strict=True)
        ],
        k=2,
        budget=5,
    )
    assert got == want
    assert got.seeds == 3 and got.trainings == 4 and got.replicated
    assert got.estimate == pytest.approx(np.mean(got.per_seed))
    assert got.lower < got.estimate < got.upper


def test_one_base_is_not_a_replicated_finding():
    pair = SeedPair(_table("b", [0, 0, 0, 0, 0]), (_table("r", [4, 4, 4, 4, 4]),))
    result = seed_level_test([pair], k=1, budget=5)
    assert result.lower > 0 and not result.replicated and result.verdict() == "inconclusive"


def test_bad_inputs_name_the_problem():
    pair = SeedPair(_table("b", [1, 2]), (_table("r", [2, 2]),))
    with pytest.raises(ValueError, match="no T = 3"):
        seed_level_test([pair], k=1, budget=3)
    with pytest.raises(ValueError, match="fewer than k = 8"):
        seed_level_test([pair], k=8, budget=5)
    with pytest.raises(ValueError, match="no trained policy"):
        seed_level_test([SeedPair(_table("b", [1]), ())], k=1, budget=5)
