"""The noise floor (``passkt.eval.noise``): base-vs-base pairs, and differences beyond them
(descriptive: the API keeps the names ``findings`` / ``Findings``)."""

from __future__ import annotations

import numpy as np
import pytest

from passkt.eval.boundary import boundary_comparison, boundary_difference
from passkt.eval.noise import findings, noise_floor
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.stats import compare

KS = (1, 4, 16)


def simulate(probs: np.ndarray, seed: int, name: str, n: int = 16) -> OutcomeTable:
    rng = np.random.default_rng(seed)
    correct = rng.random((len(probs), n, 1)) < probs[:, None, None]
    return OutcomeTable(tuple(f"q{i}" for i in range(len(probs))), (5,), correct, name=name)


def test_floor_counts_swaps_and_gaps_by_hand() -> None:
    """Three tasks, n = 2: r0 solves q0 and q1, r1 solves q1 and q2, r2 solves q1 only."""
    solved = {"r0": (1, 1, 0), "r1": (0, 1, 1), "r2": (0, 1, 0)}
    tables = [
        OutcomeTable(("q0", "q1", "q2"), (5,), np.array(row, bool)[:, None, None].repeat(2, 1),
                     name=name)
        for name, row in solved.items()
    ]  # fmt: skip
    floor = noise_floor(tables, (1, 2), (5,), 5)
    assert floor.pairs == (("r0", "r1"), ("r0", "r2"), ("r1", "r2"))
    assert floor.swaps == ((1, 1), (1, 0), (1, 0)) and floor.max_swap == 1
    np.testing.assert_allclose(floor.gaps[:, 0, 0], [0.0, -1 / 3, -1 / 3])
    np.testing.assert_allclose(floor.max_abs_gap, [[1 / 3], [1 / 3]])
    assert "Largest one-sided swap count: 1" in floor.to_markdown()


def test_a_gain_of_a_floor_sized_difference_is_not_beyond_the_floor() -> None:
    """Base evaluated three times; b is base again (A/A) or a clearly better policy."""
    probs = np.random.default_rng(0).beta(0.3, 2.0, size=100)
    base = [simulate(probs, seed, f"base{seed}") for seed in range(3)]
    floor = noise_floor(base, KS, (5,), 5)
    for other, expect_finding in ((simulate(probs, 9, "again"), False),
                                  (simulate(np.sqrt(probs), 10, "better"), True)):  # fmt: skip
        cmp = compare(base[0], other, ks=KS)
        bd = boundary_difference(base[0], other, 5)
        regions = boundary_comparison(base[0], other, 5)
        found = findings(cmp, floor, bd, len(regions.only_b), len(regions.only_a))
        assert bool(found.cells) == expect_finding, found
        assert found.boundary == expect_finding and not found.loss
        # Mirrored: the base against the better policy has lost its boundary, not gained it.
        back = findings(compare(other, base[0], ks=KS), noise_floor(base, KS, (5,), 5),
                        boundary_difference(other, base[0], 5), len(regions.only_a),
                        len(regions.only_b))  # fmt: skip
        assert back.loss == expect_finding and not back.boundary
        for k, _ in found.cells:
            i = KS.index(k)
            assert abs(cmp.gap[i, 0]) > floor.max_abs_gap[i, 0] and cmp.significant[i, 0]
        # The paragraph describes one comparison and sends a claim about a recipe to the
        # seed-level test; it calls nothing a finding.
        text = found.to_markdown(other.name, "base0")
        yes = "yes" if expect_finding else "no"
        assert text.startswith(f"**Beyond the noise floor** ({other.name} vs base0): gap cells")
        assert f"boundary gain beyond the floor: {yes}; boundary loss beyond the floor: no." in text
        assert "a claim about a recipe needs the seed-level test (`passkt.eval.seeds`" in text
        assert "finding" not in text.lower() and text.count("\n") == 1


def test_floor_errors() -> None:
    a = simulate(np.full(5, 0.5), 0, "a")
    with pytest.raises(ValueError, match="at least two evaluations"):
        noise_floor([a], KS, (5,), 5)
    with pytest.raises(ValueError, match="distinct names"):
        noise_floor([a, simulate(np.full(5, 0.5), 1, "a")], KS, (5,), 5)
    floor = noise_floor([a, simulate(np.full(5, 0.5), 1, "b")], KS, (5,), 5)
    cmp = compare(a, simulate(np.full(5, 0.5), 2, "c"), ks=(1, 16))
    with pytest.raises(ValueError, match="build the floor on the same grid"):
        findings(cmp, floor, boundary_difference(a, a.with_name("x"), 5), 0)


def test_boundary_size_interval_counts_sampling_noise() -> None:
    """Every problem solved by exactly 1 of 16 samples: the observed size is all 100 problems,
    but a new evaluation would miss about (15/16)^16 = 36% of them, so the CI is wide below."""
    from passkt.eval.boundary import boundary_size_interval

    correct = np.zeros((100, 16, 1), dtype=bool)
    correct[:, 0] = True
    table = OutcomeTable(tuple(f"q{i}" for i in range(100)), (5,), correct, name="a")
    size, lower, upper = boundary_size_interval(table, 5)
    assert size == 100 and upper == pytest.approx(100)
    assert lower < 95  # the bootstrap over problems alone would say [100, 100]
    never = OutcomeTable(table.task_ids, (5,), np.zeros_like(correct), name="b")
    size, lower, upper = boundary_size_interval(never, 5)
    assert (size, lower) == (0, 0) and 0 < upper < 5
