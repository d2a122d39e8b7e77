"""``OutcomeBuilder`` builds the table ``OutcomeTable.from_records`` builds, and refuses alike."""

from __future__ import annotations

import re

import pytest

from passkt.eval.outcome_stream import OutcomeBuilder
from passkt.eval.outcomes import OutcomeTable


def grid(tasks=("a", "b", "c"), samples=(0, 1), budgets=(0, 3)):
    return [
        {"task_id": t, "sample": s, "budget": b, "correct": (i + s + b) % 2 == 0, "category": t}
        for i, t in enumerate(tasks)
        for s in samples
        for b in budgets
    ]


GRIDS = [(0, ()), (2, (0, 3)), (1, (3, 7))]
"""Builders told no grid (every cell in the dict), the records' grid, and a grid that only
partly fits (cells in both the flat arrays and the dict)."""


def built(records, grid=(0, ())):
    builder = OutcomeBuilder(*grid)
    for record in records:
        builder.add(record)
    return builder.build(name="r")


@pytest.mark.parametrize("shape", GRIDS)
def test_same_table_in_any_record_order_and_after_a_rollback(shape):
    records = grid()
    shuffled = records[::-1][3:] + records[::-1][:3]
    for rs in (records, shuffled):
        assert built(rs, shape) == OutcomeTable.from_records(rs, name="r")
    # records (and a new task, and a bad one) added after a mark are forgotten on rollback
    junk = [{"task_id": "z", "sample": 9, "budget": 9, "correct": 1}, {"task_id": "a"}]
    builder = OutcomeBuilder(*shape)
    for r in records:
        builder.add(r)
    point = builder.mark()
    for r in junk:
        builder.add(r)
    builder.rollback(point)
    assert builder.build(name="r") == OutcomeTable.from_records(records, name="r")


def _cases():
    g = grid()
    yield "duplicate", [*g[:5], dict(g[2]), *g[5:]]
    yield "missing", g[:-2]
    yield "conflict", [*g[:4], {**g[4], "category": "other"}, *g[5:]]
    yield "dup before conflict", [*g[:3], {**g[1], "category": "x"}, *g[3:]]
    yield "conflict before bad key", [*g[:2], {**g[2], "category": "x"}, {"task_id": "q"}, *g[3:]]
    yield "missing key", [*g[:2], {"task_id": "a", "sample": 0}, *g[2:]]
    yield "bad correct", [*g[:6], {**g[6], "correct": 0.25}, *g[7:]]
    yield "bad sample", [*g[:1], {**g[1], "sample": "1"}, *g[2:]]
    yield "bool budget", [*g[:1], {**g[1], "budget": True}, *g[2:]]
    yield (
        "unlabeled task",
        [{k: v for k, v in r.items() if k != "category" or r["task_id"] != "b"} for r in g],
    )
    yield "empty", []


@pytest.mark.parametrize("shape", GRIDS)
@pytest.mark.parametrize(("label", "records"), list(_cases()))
def test_refuses_with_the_message_of_from_records(label, records, shape):
    with pytest.raises(ValueError) as expected:
        OutcomeTable.from_records(records, name="r")
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        built(records, shape)


@pytest.mark.parametrize("shape", GRIDS)
def test_rollback_forgets_new_budgets_samples_and_categories_of_the_last_chunk(shape):
    records = grid()
    builder = OutcomeBuilder(*shape)
    builder.mark()
    for r in records:
        builder.add(r)
    point = builder.mark()
    # a short chunk that widens the grid (new T, new sample, a new task) and labels a task
    for r in (
        {"task_id": "a", "sample": 7, "budget": 9, "correct": 1, "category": "a"},
        {"task_id": "new", "sample": -3, "budget": 0, "correct": 0, "category": "zzz"},
        {"task_id": "b", "sample": 10**9, "budget": 3, "correct": 1, "category": "b"},
    ):
        builder.add(r)
    builder.rollback(point)
    assert builder.build(name="r") == OutcomeTable.from_records(records, name="r")


@pytest.mark.parametrize("shape", [(0, ()), (6, (0, 3))])
def test_sample_indices_off_the_grid_build_the_same_table(shape):
    records = grid(samples=(-2, 0, 5, 10**9))
    assert built(records, shape) == OutcomeTable.from_records(records, name="r")
    dup = [*records, dict(records[-1])]
    with pytest.raises(ValueError) as expected:
        OutcomeTable.from_records(dup, name="r")
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        built(dup, shape)


def _peak_bytes(n, tasks, budgets=(0, 1, 2, 3, 5)):
    """Peak traced memory of reading and building a tasks x n x budgets run."""
    import tracemalloc

    record = {"task_id": "", "sample": 0, "budget": 0, "correct": True, "category": "bridge"}
    tracemalloc.start()
    builder = OutcomeBuilder(n, budgets)
    for t in range(tasks):
        record["task_id"] = f"task-{t:05d}"
        for s in range(n):
            record["sample"] = s
            for b in budgets:
                record["budget"], record["correct"] = b, (t + s + b) % 3 == 0
                builder.add(record)
    table = builder.build(name="big")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert table.correct.shape == (tasks, n, len(budgets))
    assert table.correct.sum() == sum(
        (t + s + b) % 3 == 0 for t in range(tasks) for s in range(n) for b in budgets
    )
    return peak


def test_an_episode_costs_a_few_bytes_while_reading_and_building():
    """Told the grid, each further episode (same tasks, larger n) adds about 5 bytes to the
    builder's peak, reading and building (the column arrays of before added about 115)."""
    small, large = _peak_bytes(16, 600), _peak_bytes(64, 600)
    per_episode = (large - small) / (600 * (64 - 16) * 5)
    assert per_episode < 12, f"{per_episode:.1f} bytes per episode"
