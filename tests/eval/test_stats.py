"""Tests of bootstrap CIs, paired comparisons, boundary sets and saturation depth."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest

from passkt.eval.estimator import pass_at_k_array, surface
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.stats import (
    bootstrap_means,
    bootstrap_surface,
    boundary_comparison,
    boundary_set,
    compare,
    find_crossover,
    saturation_depth,
    surface_interval,
    venn,
)

BUDGETS = (0, 1, 2, 3, 5)


def simulate(
    probs: np.ndarray, n: int, seed: int, name: str, budgets: tuple[int, ...] = BUDGETS
) -> OutcomeTable:
    """Outcomes with success probability ``probs[task]`` (the same at every budget)."""
    rng = np.random.default_rng(seed)
    correct = rng.random((len(probs), n, len(budgets))) < np.asarray(probs)[:, None, None]
    ids = tuple(f"q{i:03d}" for i in range(len(probs)))
    return OutcomeTable(ids, budgets, correct, name=name)


def reliable_vs_broad(num: int = 100, n: int = 64) -> tuple[OutcomeTable, OutcomeTable]:
    """a solves 40% of the problems reliably (p = 0.9); b solves 80% of them rarely (p = 0.1).

    pass@1: a 0.36 > b 0.08; pass@64: a 0.40 < b ~0.80. The curves must cross in between.
    """
    idx = np.arange(num)
    p_a = np.where(idx < 0.4 * num, 0.9, 0.0)
    p_b = np.where(idx < 0.8 * num, 0.1, 0.0)
    return simulate(p_a, n, 1, "a"), simulate(p_b, n, 2, "b")


# ---------------------------------------------------------------------- bootstrap


def test_bootstrap_means_equals_naive_index_resampling() -> None:
    per_problem = np.random.default_rng(0).random((30, 3, 2))
    fast = bootstrap_means(per_problem, n_boot=50, seed=7)
    idx = np.random.default_rng(7).integers(0, 30, size=(50, 30))
    naive = per_problem[idx].mean(axis=1)
    np.testing.assert_allclose(fast, naive, rtol=1e-12)


def test_bootstrap_ci_contains_estimate_and_is_reproducible() -> None:
    probs = np.random.default_rng(3).beta(0.6, 0.8, size=80)
    surf = surface(simulate(probs, 16, 4, "run"))
    ci = bootstrap_surface(surf, n_boot=500, seed=11)
    assert ci.lower.shape == ci.upper.shape == surf.values.shape
    assert np.all(ci.lower <= surf.values) and np.all(surf.values <= ci.upper)
    assert np.all(ci.upper - ci.lower > 0)
    again = bootstrap_surface(surf, n_boot=500, seed=11)
    np.testing.assert_array_equal(ci.lower, again.lower)
    other = bootstrap_surface(surf, n_boot=500, seed=12)
    assert not np.array_equal(ci.lower, other.lower)
    data = json.loads(json.dumps(ci.to_dict()))
    assert data["level"] == 0.95 and data["num_tasks"] == 80 and len(data["lower"]) == 5


def test_bootstrap_ci_shrinks_with_more_problems() -> None:
    rng = np.random.default_rng(5)
    small = surface(simulate(rng.beta(0.6, 0.8, size=25), 16, 6, "small"))
    large = surface(simulate(rng.beta(0.6, 0.8, size=400), 16, 7, "large"))
    width_small = bootstrap_surface(small, n_boot=400).upper - bootstrap_surface(small).lower
    width_large = bootstrap_surface(large, n_boot=400).upper - bootstrap_surface(large).lower
    # Width scales like 1/sqrt(num_problems): 4x narrower expected; demand at least 2x.
    assert width_large.mean() < 0.5 * width_small.mean()


def test_bootstrap_coverage_is_roughly_nominal() -> None:
    """Problems drawn from a population with p ~ Beta(0.5, 1.5): the true population pass@k is
    E[1 - (1 - p)^k] = 1 - B(a, b + k) / B(a, b); a 90% CI should cover it about 90% of the time.
    """
    a, b, n, num, reps, ks = 0.5, 1.5, 16, 60, 200, (1, 4, 16)

    def log_beta(x: float, y: float) -> float:
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    truth = np.array([1 - math.exp(log_beta(a, b + k) - log_beta(a, b)) for k in ks])
    rng = np.random.default_rng(2024)
    covered = np.zeros(len(ks))
    for rep in range(reps):
        table = simulate(rng.beta(a, b, size=num), n, rep, "sim", budgets=(0,))
        ci = bootstrap_surface(surface(table, ks), n_boot=300, level=0.9, seed=rep)
        covered += (ci.lower[:, 0] <= truth) & (truth <= ci.upper[:, 0])
    coverage = covered / reps
    assert np.all((coverage > 0.8) & (coverage < 0.97)), coverage


def test_bootstrap_argument_errors() -> None:
    surf = surface(simulate(np.full(5, 0.5), 4, 0, "run"))
    with pytest.raises(ValueError, match="n_boot must be a positive int"):
        bootstrap_surface(surf, n_boot=0)
    with pytest.raises(ValueError, match=r"level must lie in \(0, 1\)"):
        bootstrap_surface(surf, level=95)


# ---------------------------------------------------------------------- boundary sets


def _table(name: str, solved: dict[str, tuple[int, ...]], n: int = 3) -> OutcomeTable:
    """Tasks -> number of successes at budgets (0, 2)."""
    correct = np.zeros((len(solved), n, 2), dtype=bool)
    for i, counts in enumerate(solved.values()):
        for j, c in enumerate(counts):
            correct[i, :c, j] = True
    return OutcomeTable(tuple(solved), (0, 2), correct, name=name)


def test_boundary_set() -> None:
    table = _table("a", {"t1": (0, 1), "t2": (2, 3), "t3": (0, 0)})
    assert boundary_set(table, 0) == {"t2"}
    assert boundary_set(table, 2) == {"t1", "t2"}
    with pytest.raises(ValueError, match=r"no budget T=1; evaluated budgets: \(0, 2\)"):
        boundary_set(table, 1)


def test_boundary_comparison(caplog: pytest.LogCaptureFixture) -> None:
    a = _table("base", {"t1": (0, 1), "t2": (0, 3), "t3": (0, 0), "t4": (0, 0), "t9": (1, 1)})
    b = _table("rl", {"t4": (0, 0), "t3": (0, 2), "t2": (0, 1), "t1": (0, 0), "t8": (1, 1)})
    with caplog.at_level(logging.WARNING, logger="passkt.eval.stats"):
        bc = boundary_comparison(a, b, 2)
    assert "1 task(s) not in every run" in caplog.text
    assert (bc.only_a, bc.only_b, bc.both, bc.neither) == (("t1",), ("t3",), ("t2",), ("t4",))
    assert bc.excluded == ("t9", "t8")
    assert bc.counts() == {
        "only_a": 1,
        "only_b": 1,
        "both": 1,
        "neither": 1,
        "size_a": 2,
        "size_b": 2,
    }
    assert json.loads(json.dumps(bc.to_dict()))["counts"]["only_b"] == 1
    assert boundary_comparison(a, b, 0).neither == ("t1", "t2", "t3", "t4")


def test_venn_three_runs() -> None:
    base = _table("base", {"t1": (0, 1), "t2": (0, 1), "t3": (0, 0), "t4": (0, 0), "t5": (0, 0)})
    rl = _table("rl", {"t1": (0, 1), "t2": (0, 0), "t3": (0, 1), "t4": (0, 0), "t5": (0, 0)})
    sft = _table("sft", {"t1": (0, 1), "t2": (0, 1), "t3": (0, 0), "t4": (0, 1), "t5": (0, 0)})
    v = venn([base, rl, sft], 2)
    assert v.ids("base", "rl", "sft") == ("t1",)
    assert v.ids("base", "sft") == ("t2",)
    assert v.ids("rl") == ("t3",)
    assert v.ids("sft") == ("t4",)
    assert v.ids() == ("t5",)
    assert v.ids("base") == ()
    counts = v.counts()
    assert len(counts) == 8 and sum(counts.values()) == 5
    assert counts["rl only"] == 1 and counts["base & sft"] == 1 and counts["none"] == 1
    assert next(iter(counts)) == "base & rl & sft"  # regions run from "all" down to "none"
    assert json.loads(json.dumps(v.to_dict()))["regions"]["sft only"] == ["t4"]
    with pytest.raises(ValueError, match=r"unknown run name\(s\) \['dpo'\]"):
        v.ids("dpo")


def test_venn_errors() -> None:
    a = _table("a", {"t1": (0, 1)})
    with pytest.raises(ValueError, match="2 or 3 runs, got 1"):
        venn([a], 2)
    with pytest.raises(ValueError, match="2 or 3 runs, got 4"):
        venn([a, a.with_name("b"), a.with_name("c"), a.with_name("d")], 2)
    with pytest.raises(ValueError, match=r"run names must differ.*with_name"):
        venn([a, a], 2)
    with pytest.raises(ValueError, match="share no task ids"):
        venn([a, _table("b", {"t2": (0, 1)})], 2)


# ---------------------------------------------------------------------- comparison


def test_compare_finds_crossover_and_widening() -> None:
    a, b = reliable_vs_broad()
    cmp = compare(a, b, n_boot=500, seed=0)
    assert cmp.ks == (1, 2, 4, 8, 16, 32, 64) and cmp.budgets == BUDGETS
    for j, t in enumerate(cmp.budgets):
        gap = cmp.gap[:, j]
        assert gap[0] < 0 < gap[-1], gap
        assert cmp.gap_upper[0, j] < 0 < cmp.gap_lower[-1, j]  # both ends significant
        cross = cmp.crossover_at(t)
        assert cross.sign_at_k_min == -1 and cross.bracket is not None and cross.significant
        k_lo, k_hi = cross.bracket
        assert k_lo <= cross.k <= k_hi
        i_hi = cmp.ks.index(k_hi)
        assert gap[i_hi] > 0 and np.all(gap[:i_hi] <= 0)
        assert cmp.widens[j] and cmp.widening_lower[j] > 0
        assert cmp.widening[j] == pytest.approx(gap[-1] - gap[0])
    assert np.all(cmp.gap_lower <= cmp.gap) and np.all(cmp.gap <= cmp.gap_upper)
    np.testing.assert_allclose(cmp.gap, cmp.surface_b - cmp.surface_a, atol=1e-15)
    data = json.loads(json.dumps(cmp.to_dict()))
    assert data["widens"] == [True] * 5 and data["crossovers"][0]["bracket"] == [k_lo, k_hi]


def test_compare_identical_tables() -> None:
    """Two evaluations that happen to agree on every sample: no gap, nothing significant. The
    bootstrap over problems sees no spread at all; the score method still allows for the
    sampling noise two independent evaluations carry."""
    a, _ = reliable_vs_broad(num=30, n=16)
    old = compare(a, a.with_name("copy"), n_boot=200, method="bootstrap")
    assert np.all(old.gap == 0) and np.all(old.gap_lower == 0) and np.all(old.gap_upper == 0)
    cmp = compare(a, a.with_name("copy"))
    assert np.all(cmp.gap == 0) and np.all(cmp.gap_p == 1) and not cmp.significant.any()
    np.testing.assert_allclose(cmp.gap_lower, -cmp.gap_upper)
    assert cmp.gap_upper[0, 0] > 0.01  # pass@1 of 30 problems x 16 samples: not known exactly
    assert cmp.widens == (False,) * 5 and not cmp.headline.significant
    assert all(c.k is None and c.bracket is None and c.sign_at_k_min == 0 for c in cmp.crossovers)


def test_crossover_within_noise_is_not_significant() -> None:
    """40 tasks; a solves task 0 in 4/4 samples, b solves tasks 0 and 1 in 1/4 each. The curves
    cross (gap -0.0125 at k=1, 0 at k=2, +0.025 at k=4: pass@2 of c=1 in n=4 is 1/2) but
    resamples without task 0 or without task 1 flip the sign."""
    correct_a = np.zeros((40, 4, 1), dtype=bool)
    correct_a[0] = True
    correct_b = np.zeros((40, 4, 1), dtype=bool)
    correct_b[[0, 1], 0] = True
    ids = tuple(f"t{i}" for i in range(40))
    a = OutcomeTable(ids, (3,), correct_a, name="a")
    b = OutcomeTable(ids, (3,), correct_b, name="b")
    cmp = compare(a, b, n_boot=300)
    np.testing.assert_allclose(cmp.gap[:, 0], [-0.0125, 0.0, 0.025], atol=1e-15)
    cross = cmp.crossover_at(3)
    assert cross.bracket == (2, 4) and cross.k == pytest.approx(2.0) and not cross.significant
    with pytest.raises(ValueError, match=r"T=5 is not among the compared budgets \(3,\)"):
        cmp.crossover_at(5)


def test_compare_pairs_tasks_by_id() -> None:
    """b is a's outcomes with the tasks in another order plus extra tasks: the gap must be 0."""
    a, _ = reliable_vs_broad(num=20, n=8)
    order = list(np.random.default_rng(0).permutation(a.task_ids))
    extra = simulate(np.full(3, 1.0), 8, 0, "x")
    correct = np.concatenate([a.select(order).correct, extra.correct])
    b = OutcomeTable((*order, "e1", "e2", "e3"), a.budgets, correct, name="b")
    cmp = compare(a, b, n_boot=100)
    assert cmp.task_ids == a.task_ids
    assert np.all(cmp.gap == 0)


def test_paired_bootstrap_is_narrower_than_unpaired() -> None:
    """b flips a few of a's outcomes: the runs are strongly correlated over problems, so the
    paired CI of the gap is much narrower than one built from the two separate CIs."""
    probs = np.random.default_rng(8).beta(0.5, 0.7, size=60)
    a = simulate(probs, 16, 1, "a")
    flips = np.random.default_rng(9).random(a.correct.shape) < 0.03
    b = OutcomeTable(a.task_ids, a.budgets, a.correct ^ flips, name="b")
    cmp = compare(a, b, ks=(1, 4), n_boot=500, method="bootstrap")
    ci_a = bootstrap_surface(surface(a, (1, 4)), n_boot=500, seed=1)
    ci_b = bootstrap_surface(surface(b, (1, 4)), n_boot=500, seed=2)
    unpaired = np.hypot(ci_a.upper - ci_a.lower, ci_b.upper - ci_b.lower)
    # Resampling a and b independently would give a ratio near 1; pairing gives about 0.1-0.2.
    assert np.all(cmp.gap_upper - cmp.gap_lower < 0.4 * unpaired)


def test_score_gap_is_paired() -> None:
    """Independent evaluations of nearly the same policy: problems' difficulty is shared, so
    the paired score CI of the gap is far narrower than one from the two surfaces' CIs."""
    probs = np.random.default_rng(8).beta(0.5, 0.7, size=100)
    a = simulate(probs, 16, 1, "a")
    b = simulate(np.clip(probs + 0.02, 0, 1), 16, 2, "b")
    cmp = compare(a, b, ks=(1, 4))
    ci_a = surface_interval(surface(a, (1, 4)), a.counts())
    ci_b = surface_interval(surface(b, (1, 4)), b.counts())
    unpaired = np.hypot(ci_a.upper - ci_a.lower, ci_b.upper - ci_b.lower)
    assert np.all(cmp.gap_upper - cmp.gap_lower < 0.6 * unpaired)


def test_compare_grid_and_errors() -> None:
    a = simulate(np.full(4, 0.5), 8, 0, "a", budgets=(0, 1, 3))
    b = simulate(np.full(4, 0.5), 16, 1, "b", budgets=(1, 3, 5))
    cmp = compare(a, b, n_boot=50)
    assert cmp.budgets == (1, 3) and cmp.ks == (1, 2, 4, 8)  # shared Ts; ks up to min n
    with pytest.raises(ValueError, match=r"run 'b' has no budget T=0"):
        compare(a, b, budgets=(0, 1))
    with pytest.raises(ValueError, match=r"\[1, n=8\]"):
        compare(a, b, ks=(1, 16))
    c = simulate(np.full(4, 0.5), 8, 0, "c", budgets=(7,))
    with pytest.raises(ValueError, match="share no budget T"):
        compare(a, c)
    with pytest.raises(ValueError, match="n_boot must be a positive int"):
        compare(a, b, n_boot=-1)


def test_find_crossover() -> None:
    cross = find_crossover((1, 2, 4, 8), [-0.1, -0.05, 0.05, 0.2], budget=3)
    assert cross.bracket == (2, 4) and cross.sign_at_k_min == -1 and cross.budget == 3
    assert cross.k == pytest.approx(2**1.5)  # halfway between log2 2 and log2 4
    down = find_crossover((1, 2, 4), [0.3, 0.1, -0.1])
    assert down.sign_at_k_min == 1 and down.bracket == (2, 4) and down.k == pytest.approx(2**1.5)
    touch = find_crossover((1, 2, 4, 8), [-0.1, 0.0, 0.0, 0.2])
    assert touch.bracket == (4, 8) and touch.k == pytest.approx(4.0)  # zero gap: crosses at 4
    assert find_crossover((1, 2, 4), [-0.1, -0.2, -0.01]).k is None
    assert find_crossover((1, 2, 4), [0.0, 0.1, 0.2]).sign_at_k_min == 0


# ---------------------------------------------------------------------- saturation


def _depth_table(successes_per_budget: list[int], n: int = 10) -> OutcomeTable:
    """10 tasks; at budget j the first ``successes_per_budget[j]`` tasks always succeed."""
    budgets = (0, 1, 2, 3, 5)
    correct = np.zeros((10, n, len(budgets)), dtype=bool)
    for j, solved in enumerate(successes_per_budget):
        correct[:solved, :, j] = True
    return OutcomeTable(tuple(f"t{i}" for i in range(10)), budgets, correct, name="d")


def test_saturation_depth() -> None:
    table = _depth_table([2, 5, 8, 8, 8])
    assert saturation_depth(table, 1) == 2
    assert saturation_depth(table, 10) == 2
    assert saturation_depth(_depth_table([2, 5, 7, 8, 8]), 1, tol=0.0) == 3
    assert saturation_depth(_depth_table([2, 5, 7, 8, 8]), 1, tol=0.1) == 2
    assert saturation_depth(_depth_table([0, 0, 0, 0, 0]), 1) == 0
    # pass@k read at a k off any grid: one task with 1 success in 10 samples at T >= 3.
    correct = np.zeros((1, 10, 5), dtype=bool)
    correct[0, 0, 3:] = True
    single = OutcomeTable(("x",), (0, 1, 2, 3, 5), correct)
    assert saturation_depth(single, 3) == 3
    assert float(pass_at_k_array(10, [1], 3)[0]) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="tol must be >= 0"):
        saturation_depth(table, 1, tol=-0.1)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        saturation_depth(table, 11)


def test_headline_and_crossover_range() -> None:
    a, b = reliable_vs_broad()
    cmp = compare(a, b, headline="gap@64,3")
    head = cmp.headline
    i, j = cmp.ks.index(64), cmp.budgets.index(3)
    assert (head.kind, head.k, head.budget) == ("gap", 64, 3) and head.label == "gap at (k=64, T=3)"
    assert head.estimate == cmp.gap[i, j] and head.p_value == cmp.gap_p[i, j]
    assert head.significant and head.lower > 0
    default = compare(a, b).headline
    assert (default.kind, default.budget) == ("widening", 5)
    assert default.estimate == pytest.approx(cmp.widening[-1])
    # b is far better at k = 64 and far worse at k = 1: the crossing is resolved on the grid.
    cross = cmp.crossover_at(5)
    k_from, k_to = cross.k_range
    assert k_from is not None and k_to is not None and k_from <= cross.bracket[0] < k_to
    assert cmp.ks.index(k_to) >= cmp.ks.index(cross.bracket[1])
    # Holm never makes a cell more significant than its raw p-value says.
    assert np.all(cmp.gap_p_holm >= cmp.gap_p) and np.all(cmp.widening_p_holm >= cmp.widening_p)
    with pytest.raises(ValueError, match="'widening@T' or 'gap@K,T'"):
        compare(a, b, headline="widening@4")
