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


def built(records):
    builder = OutcomeBuilder()
    for record in records:
        builder.add(record)
    return builder.build(name="r")


def test_same_table_in_any_record_order_and_after_a_rollback():
    records = grid()
    shuffled = records[::-1][3:] + records[::-1][:3]
    for rs in (records, shuffled):
        assert built(rs) == OutcomeTable.from_records(rs, name="r")
    # records (and a new task, and a bad one) added after a mark are forgotten on rollback
    junk = [{"task_id": "z", "sample": 9, "budget": 9, "correct": 1}, {"task_id": "a"}]
    builder = OutcomeBuilder()
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


@pytest.mark.parametrize(("label", "records"), list(_cases()))
def test_refuses_with_the_message_of_from_records(label, records):
    with pytest.raises(ValueError) as expected:
        OutcomeTable.from_records(records, name="r")
    with pytest.raises(ValueError, match=re.escape(str(expected.value))):
        built(records)
