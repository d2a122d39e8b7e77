"""Tests of the pass@k estimator, the PASS@(k,T) surface and the OutcomeTable it reads."""

from __future__ import annotations

import itertools
import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passkt.eval.estimator import (
    Surface,
    check_ks,
    default_ks,
    pass_at_k,
    pass_at_k_array,
    pass_at_k_matrix,
    surface,
)
from passkt.eval.outcomes import OutcomeTable


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def _cases() -> list[tuple[int, int, int]]:
    """Random (n, c, k) up to n = 1024 plus the numerically hardest corners."""
    rng = np.random.default_rng(1234)
    cases = []
    for n in (1, 2, 3, 7, 16, 64, 100, 257, 512, 1000, 1024):
        for _ in range(25):
            c, k = int(rng.integers(0, n + 1)), int(rng.integers(1, n + 1))
            cases.append((n, c, k))
        # Tiny pass@k (one success, one draw), pass@k near 1, and the n - c = k boundary.
        cases += [(n, 1, 1), (n, min(1, n), n), (n, n // 2, max(1, n // 2)), (n, n - 1, 1)]
    cases += [(1024, c, k) for c in (1, 2, 3, 511, 1023) for k in (1, 2, 3, 64, 512)]
    return cases


CASES = _cases()


def test_pass_at_k_matches_exact_rational_arithmetic() -> None:
    worst = 0.0
    for n, c, k in CASES:
        exact = exact_pass_at_k(n, c, k)
        got = pass_at_k(n, c, k)
        if exact == 0:
            assert got == 0.0, (n, c, k)
            continue
        worst = max(worst, abs(Fraction(got) - exact) / exact)
    assert worst < 1e-12


def test_vectorised_matches_exact_and_scalar() -> None:
    for n in (5, 64, 1024):
        c = np.arange(n + 1)
        for k in sorted({1, 2, n // 2 or 1, n}):
            got = pass_at_k_array(n, c, k)
            exact = np.array([float(exact_pass_at_k(n, int(ci), k)) for ci in c])
            nonzero = exact > 0
            assert np.all(got[~nonzero] == 0)
            rel = np.abs(got[nonzero] - exact[nonzero]) / exact[nonzero]
            assert rel.max() < 1e-12, (n, k)
            scalar = np.array([pass_at_k(n, int(ci), k) for ci in c])
            np.testing.assert_allclose(got, scalar, rtol=1e-13, atol=0)


def test_pass_at_k_edge_cases() -> None:
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 7, 4) == 1.0  # n - c = 3 < k: every 4-subset contains a success
    assert pass_at_k(10, 7, 3) < 1.0
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5, abs=1e-15)
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4, abs=1e-15)  # pass@1 = c / n


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((10, 11, 1), ValueError, r"0 <= c <= n.*c=11, n=10"),
        ((10, -1, 1), ValueError, r"0 <= c <= n"),
        ((10, 3, 0), ValueError, r"1 <= k <= n.*k=0"),
        ((10, 3, 11), ValueError, r"1 <= k <= n.*k=11, n=10"),
        ((0, 0, 1), ValueError, r"n \(samples per problem\) must be >= 1"),
        ((10, 3.0, 1), TypeError, r"c must be an int"),
        ((10, 3, 2.0), TypeError, r"k must be an int"),
        ((True, 1, 1), TypeError, r"n must be an int"),
    ],
)
def test_pass_at_k_rejects_bad_arguments(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        pass_at_k(*args)


def test_vectorised_rejects_bad_counts() -> None:
    with pytest.raises(ValueError, match=r"0 <= c <= n=4; got \[5\]"):
        pass_at_k_array(4, [0, 5], 1)
    with pytest.raises(TypeError, match="c must hold integers"):
        pass_at_k_array(4, np.array([0.5]), 1)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k_array(4, [1], 5)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n))))
def test_monotone_in_k(nc: tuple[int, int]) -> None:
    n, c = nc
    values = pass_at_k_array(n, np.full(1, c), 1)
    curve = [float(pass_at_k_array(n, [c], k)[0]) for k in range(1, n + 1)]
    assert all(0.0 <= v <= 1.0 for v in curve)
    assert all(a <= b + 1e-15 for a, b in itertools.pairwise(curve))
    assert values[0] == pytest.approx(c / n, rel=1e-12, abs=1e-15)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_monotone_in_c(nk: tuple[int, int]) -> None:
    n, k = nk
    curve = pass_at_k_array(n, np.arange(n + 1), k)
    assert curve[0] == 0.0 and curve[-1] == 1.0
    assert np.all(np.diff(curve) >= -1e-15)
    assert np.all(curve[n - k + 1 :] == 1.0)


def test_pass_at_k_matrix_shape_and_values() -> None:
    counts = np.array([[0, 1], [2, 4]])
    out = pass_at_k_matrix(counts, 4, (1, 2, 4))
    assert out.shape == (3, 2, 2)
    assert out[0, 1, 0] == pytest.approx(0.5)  # pass@1 with c=2, n=4
    assert out[1, 0, 1] == pytest.approx(0.5)  # pass@2 with c=1, n=4
    assert out[2, 0, 0] == 0.0 and out[2, 0, 1] == 1.0


def test_default_ks() -> None:
    assert default_ks(64) == (1, 2, 4, 8, 16, 32, 64)
    assert default_ks(1) == (1,)
    assert default_ks(10) == (1, 2, 4, 8, 10)  # n not a power of two: appended as the last k
    assert default_ks(1024)[-1] == 1024 and len(default_ks(1024)) == 11
    with pytest.raises(ValueError, match="n must be >= 1"):
        default_ks(0)


def test_check_ks_errors() -> None:
    assert check_ks([1, 4], 4) == (1, 4)
    with pytest.raises(ValueError, match="strictly increasing"):
        check_ks([4, 2], 8)
    with pytest.raises(ValueError, match=r"\[1, n=8\].*default_ks\(8\)"):
        check_ks([1, 16], 8)
    with pytest.raises(ValueError, match="empty"):
        check_ks([], 8)


# ---------------------------------------------------------------------- surface


def _hand_table() -> OutcomeTable:
    """Two tasks, n = 4, budgets (0, 1); counts A: (1, 2), B: (0, 4)."""
    correct = np.zeros((2, 4, 2), dtype=bool)
    correct[0, 0, 0] = True
    correct[0, [1, 3], 1] = True
    correct[1, :, 1] = True
    return OutcomeTable(("A", "B"), (0, 1), correct, name="hand")


def test_surface_on_hand_made_table() -> None:
    surf = surface(_hand_table(), ks=(1, 2, 4))
    # pass@1 = c/n: T=0 (1/4 + 0)/2, T=1 (2/4 + 1)/2.
    # pass@2: c=1 -> 1 - C(3,2)/C(4,2) = 1/2; c=2 -> 1 - 1/6 = 5/6.  T=0: 1/4, T=1: 11/12.
    # pass@4: any success -> 1.  T=0: 1/2, T=1: 1.
    expected = np.array([[1 / 8, 3 / 4], [1 / 4, 11 / 12], [1 / 2, 1.0]])
    np.testing.assert_allclose(surf.values, expected, rtol=1e-13)
    assert surf.per_problem.shape == (2, 3, 2)
    np.testing.assert_allclose(surf.per_problem[0, 1], [0.5, 5 / 6], rtol=1e-13)
    assert surf.value(2, 1) == pytest.approx(11 / 12)
    assert (surf.ks, surf.budgets, surf.n, surf.num_tasks) == ((1, 2, 4), (0, 1), 4, 2)
    assert surface(_hand_table()).ks == (1, 2, 4)  # default grid for n = 4
    with pytest.raises(ValueError, match="not on the surface's k grid"):
        surf.value(3, 0)
    with pytest.raises(ValueError):
        surf.values[0, 0] = 0.0  # read-only
    assert json.loads(json.dumps(surf.to_dict()))["values"][1][1] == pytest.approx(11 / 12)


def test_surface_rejects_bad_k_grid() -> None:
    with pytest.raises(ValueError, match=r"\[1, n=4\]"):
        surface(_hand_table(), ks=(1, 8))


def test_surface_shape_check() -> None:
    with pytest.raises(ValueError, match="per_problem must have shape"):
        Surface("x", (1,), (0,), np.zeros((1, 1)), np.zeros((2, 1, 1)), ("a",), 1)


# ---------------------------------------------------------------------- OutcomeTable


def _records(table: OutcomeTable) -> list[dict]:
    return [
        {"task_id": t, "sample": s, "budget": b, "correct": bool(table.correct[i, s, j])}
        for i, t in enumerate(table.task_ids)
        for s in range(table.n)
        for j, b in enumerate(table.budgets)
    ]


def test_outcome_table_basics() -> None:
    table = _hand_table()
    assert table.n == 4 and table.num_tasks == 2
    np.testing.assert_array_equal(table.counts(), [[1, 2], [0, 4]])
    picked = table.select(["B", "A"])
    assert picked.task_ids == ("B", "A")
    np.testing.assert_array_equal(picked.counts(), [[0, 4], [1, 2]])
    assert table.select_budgets([1]).budgets == (1,)
    np.testing.assert_array_equal(table.select_budgets([1]).counts(), [[2], [4]])
    with pytest.raises(ValueError, match=r"no task\(s\) \['Z'\]"):
        table.select(["Z"])
    with pytest.raises(ValueError, match=r"did you mean \['bridge_017'\]"):
        OutcomeTable(("bridge_017",), (0,), np.ones((1, 1, 1), bool)).select(["bridge_17"])
    with pytest.raises(ValueError, match=r"no budget T=3; evaluated budgets: \(0, 1\)"):
        table.budget_index(3)
    with pytest.raises(ValueError):
        table.correct[0, 0, 0] = False  # read-only


def test_from_records_round_trip_and_order() -> None:
    table = _hand_table()
    records = _records(table)[::-1]  # order of records must not matter (tasks: first seen)
    rebuilt = OutcomeTable.from_records(records, name="hand")
    assert rebuilt.task_ids == ("B", "A")
    assert rebuilt.select(["A", "B"]) == table
    with_cats = [dict(r, category="C") for r in _records(table)]
    assert OutcomeTable.from_records(with_cats).categories == ("C", "C")


def test_from_records_missing_cell_is_named() -> None:
    records = [r for r in _records(_hand_table()) if (r["task_id"], r["sample"]) != ("B", 2)]
    with pytest.raises(ValueError, match=r"2 missing .*task_id='B', sample=2, T=0"):
        OutcomeTable.from_records(records)


def test_from_records_duplicate_is_named() -> None:
    records = _records(_hand_table())
    records.append(dict(records[3]))
    with pytest.raises(ValueError, match=r"record 16: duplicate cell .*first seen in record 3"):
        OutcomeTable.from_records(records)


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"task_id": "A", "sample": 0, "budget": 0}, r"record 0: missing key 'correct'"),
        ({"task_id": "A", "sample": 0, "budget": 0, "correct": 0.5}, r"bool \(or 0/1\)"),
        ({"task_id": "A", "sample": "0", "budget": 0, "correct": 1}, r"'sample' must be an int"),
    ],
)
def test_from_records_bad_record(record: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OutcomeTable.from_records([record])


def test_from_records_errors_on_empty_and_categories() -> None:
    with pytest.raises(ValueError, match="no records"):
        OutcomeTable.from_records([])
    base = {"sample": 0, "budget": 0, "correct": True}
    with pytest.raises(ValueError, match="category 'y' here but 'x'"):
        OutcomeTable.from_records(
            [dict(base, task_id="A", category="x"), dict(base, task_id="A", sample=1, category="y")]
        )
    with pytest.raises(ValueError, match=r"task\(s\) \['B'\] have none"):
        OutcomeTable.from_records([dict(base, task_id="A", category="x"), dict(base, task_id="B")])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task_ids": ("a", "a")}, r"unique; repeated: \['a'\]"),
        ({"budgets": (1, 0)}, "strictly increasing"),
        ({"budgets": (0, 0)}, "strictly increasing"),
        ({"task_ids": ("a",)}, "2 tasks on axis 0 but task_ids has 1"),
        ({"budgets": (0,)}, "2 budgets on axis 2"),
        ({"correct": np.zeros((2, 3))}, r"shape \(num_tasks, n, num_budgets\)"),
        ({"correct": np.full((2, 3, 2), 2)}, "bool array"),
        ({"categories": ("x",)}, "categories has 1 entries"),
        ({"task_ids": (), "correct": np.zeros((0, 3, 2), bool)}, "at least one task"),
    ],
)
def test_outcome_table_validation(kwargs: dict, match: str) -> None:
    args = {"task_ids": ("a", "b"), "budgets": (0, 1), "correct": np.zeros((2, 3, 2), bool)}
    with pytest.raises(ValueError, match=match):
        OutcomeTable(**(args | kwargs))


def test_to_dict_from_dict_json_round_trip() -> None:
    rng = np.random.default_rng(0)
    table = OutcomeTable(
        ("t0", "t1", "t2"), (0, 2, 5), rng.random((3, 7, 3)) < 0.4, ("B", "C", "C"), "rl"
    )
    data = json.loads(json.dumps(table.to_dict()))
    assert OutcomeTable.from_dict(data) == table
    assert OutcomeTable.from_dict(data) != table.with_name("other")
    data["correct"][1][0] = data["correct"][1][0][:-1]
    with pytest.raises(ValueError, match=r"row 1 \(task 't1'\) must be 3 strings of 7"):
        OutcomeTable.from_dict(data)
    with pytest.raises(ValueError, match="missing key 'budgets'"):
        OutcomeTable.from_dict({"task_ids": [], "n": 1, "correct": []})


def test_no_negative_zero():
    # 0 correct -> 0.0 exactly, not -0.0 (which prints as "-0.000" in tables).
    assert math.copysign(1.0, pass_at_k(8, 0, 3)) == 1.0
    assert np.all(np.signbit(pass_at_k_array(8, np.array([0, 0, 2]), 3)) == [False] * 3)
