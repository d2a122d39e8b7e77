"""The math reward accepts the answer, the whole answer and nothing but the answer.

Regression pairs from every class of wrong answer that was once rewarded (prefix parsing, trailing
operators, equations inside expressions, base subscripts, absolute tolerances), and a property
test over MATH-500: value-changing mutations of every gold answer are never rewarded, and every
gold answer in its equivalent forms always is (``tests/envs/math_mutations.py``).
"""

from __future__ import annotations

import json

import pytest
from math_mutations import ACCEPTED, REGRESSION, REWARDED_BEFORE, equivalent_forms, mutations
from real_data import DATA

from passkt.envs.math_answer import (
    answer_content,
    balanced,
    base_subscripts,
    decimal_places,
)
from passkt.envs.scoring import math_equal

MATH500 = DATA / "math500.jsonl"


def _golds() -> list[str]:
    lines = MATH500.read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["answer"] for line in lines if line.strip()]


GOLDS = _golds()


@pytest.mark.parametrize(("gold", "wrong"), REGRESSION)
def test_wrong_answers_are_not_rewarded(gold: str, wrong: str) -> None:
    assert not math_equal(wrong, gold)
    assert not math_equal(f"<answer>{wrong}</answer>", gold)


def test_the_five_rewarded_cases_are_in_the_regression_set() -> None:
    assert len(REWARDED_BEFORE) == 5
    assert set(REWARDED_BEFORE) <= set(REGRESSION)


@pytest.mark.parametrize(("gold", "right"), ACCEPTED)
def test_equivalent_answers_are_rewarded(gold: str, right: str) -> None:
    assert math_equal(right, gold)


@pytest.mark.parametrize(
    ("text", "content"),
    [
        (r"\boxed{2}", "2"),
        (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
        (r"\boxed{1} then \boxed{ 2 + }", "2 +"),
        (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
        (r"\boxed{2", None),
        ("$2**100$", "2**100"),
        ("first $1$ then $$2 +$$", "2 +"),
        (r"\(3\)", "3"),
        (r"\$18.90", r"\$18.90"),
        ("  7 ", "7"),
    ],
)
def test_answer_content_is_the_last_box_or_math_segment(text: str, content: str | None) -> None:
    assert answer_content(text) == content


@pytest.mark.parametrize(
    ("latex", "ok"),
    [("(0, 1]", True), (r"\{1\}", True), ("2}", False), ("(2", False), ("{(})", False)],
)
def test_balanced(latex: str, ok: bool) -> None:
    assert balanced(latex) is ok


@pytest.mark.parametrize(
    ("latex", "bases"),
    [("40_9", ("9",)), ("4210_{5}", ("5",)), ("40_{10}", ()), ("x_1 + 2", ()), ("40_0", ("0",))],
)
def test_base_subscripts(latex: str, bases: tuple[str, ...]) -> None:
    assert base_subscripts(latex) == bases


@pytest.mark.parametrize(
    ("latex", "places"),
    [("3.14", 2), (".0000672", 7), (r"5.4 \text{ cents}", 1), (r"\$18.90", 2), ("3", None)],
)
def test_decimal_places(latex: str, places: int | None) -> None:
    assert decimal_places(latex) == places


def test_mutations_cover_every_class() -> None:
    kinds = {kind for gold in ("2", "x=5", "40_9", ".0000672") for kind, _ in mutations(gold)}
    wrappers = {"trailing-operator", "trailing-power", "dollar-prefix", "times-two", "plus-one"}
    assert wrappers <= kinds
    assert {"base", "decimal-tail", "decimal-last-digit", "digit"} <= kinds
    assert ("times-two", r"2\cdot(x=5)") in mutations("x=5")


def test_mutations_of_a_sample_of_golds_are_not_rewarded() -> None:
    sample = GOLDS[::25]
    wrong = [(gold, m) for gold in sample for _, m in mutations(gold)]
    assert len(wrong) > 100
    assert [(gold, m) for gold, m in wrong if math_equal(m, gold)] == []


@pytest.mark.slow  # about 4,000 comparisons: 20 s on one core
def test_no_value_changing_mutation_of_a_math500_gold_is_rewarded() -> None:
    wrong = [(gold, kind, m) for gold in GOLDS for kind, m in mutations(gold)]
    assert len(wrong) >= 1000
    assert [w for w in wrong if math_equal(w[2], w[0])] == []


@pytest.mark.slow  # about 2,700 comparisons
def test_every_math500_gold_is_rewarded_in_its_equivalent_forms() -> None:
    forms = [(gold, form) for gold in GOLDS for form in equivalent_forms(gold)]
    assert len(forms) >= 2000
    assert [(gold, form) for gold, form in forms if not math_equal(form, gold)] == []
