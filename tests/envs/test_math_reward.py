"""The math reward accepts the answer, the whole answer and nothing but the answer.

Regression pairs from every class of wrong answer that was once rewarded (prefix parsing, trailing
operators, equations inside expressions, base subscripts, absolute tolerances), and property
tests over MATH-500: value-changing mutations of every gold answer are never rewarded, and every
gold answer in its equivalent forms always is (``tests/envs/math_mutations.py``); each family of
hacks (a unit then more mathematics, numbers side by side, words left of ``=``, bare interval
endpoints, near irrational numbers) is refused and each family of equivalent forms (thousands
separators, Unicode, units, repeating decimals, complex and base forms, assignments, long prose)
is rewarded, generated from every gold (``tests/envs/math_families.py``).
"""

from __future__ import annotations

import json
import math
import re

import pytest
from math_families import RIGHT_FAMILIES, WRONG_FAMILIES, wrong_answers
from math_mutations import ACCEPTED, REGRESSION, REWARDED_BEFORE, equivalent_forms, mutations
from real_data import DATA

from passkt.envs.math_answer import (
    answer_content,
    balanced,
    base_subscripts,
    closed_form_size,
    decimal_places,
)
from passkt.envs.math_grammar import normalize, one_object_reason
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


# --- one grammar: adversarial families over every gold ------------------------------------------

FAMILY_SAMPLE = GOLDS[::25]


def _wrong_by_family(golds: list[str]) -> dict[str, list[tuple[str, str]]]:
    cases: dict[str, list[tuple[str, str]]] = {family: [] for family in WRONG_FAMILIES}
    for gold in golds:
        for family, answer in wrong_answers(gold):
            cases[family].append((gold, answer))
    return cases


def _right_by_family(golds: list[str]) -> dict[str, list[tuple[str, str]]]:
    return {
        family: [(gold, answer) for gold in golds for answer in forms_of(gold)]
        for family, forms_of in RIGHT_FAMILIES.items()
    }


@pytest.mark.slow  # generating every family for every gold: about 6 s
def test_every_family_reaches_every_gold_of_its_kind() -> None:
    wrong, right = _wrong_by_family(GOLDS), _right_by_family(GOLDS)
    reached = {family: {g for g, _ in cases} for family, cases in {**wrong, **right}.items()}
    distinct = set(GOLDS)
    numbers = {
        g for g in distinct if re.fullmatch(r"-?\d*\.?\d+|-?\\[dt]?frac ?\{?\d+\}?\{?\d+\}?", g)
    }
    assert len(numbers) >= 150
    for family in ("unit-then-more", "juxtaposed-numbers", "long-prose"):
        assert reached[family] == distinct, family
    assert reached["left-of-equals"] == {g for g in distinct if "=" not in g and r"\in" not in g}
    assert reached["near-exact"] >= numbers | {r"3\sqrt{13}", r"-\frac{\pi}{6}", r"18+2\pi"}
    assert reached["word-units"] >= numbers
    assert reached["assignments"] >= numbers
    assert reached["thousands"] == {g for g in distinct if re.fullmatch(r"(\\\$)?[\d,\\!]{4,}", g)}
    assert reached["base-forms"] == {g for g in distinct if re.fullmatch(r"\w+_\{?\d+\}?", g)}
    assert reached["complex-forms"] == {g for g in distinct if re.fullmatch(r"[-\d +]+i", g)}
    assert len(reached["unbracketed-interval"]) >= 8
    assert len(reached["unicode"]) >= 50
    repeating = {g for g in numbers if "frac" in g and _repeats(g)}
    assert reached["repeating-decimals"] == repeating


def _repeats(fraction: str) -> bool:
    """Whether a ``\\frac{p}{q}`` gold has a repeating decimal (q has a factor besides 2, 5)."""
    p, q = (int(n) for n in re.search(r"frac ?\{?(\d+)\}?\{?(\d+)", fraction).groups())
    q //= math.gcd(p, q)
    for factor in (2, 5):
        while q % factor == 0:
            q //= factor
    return q != 1


@pytest.mark.parametrize("family", list(WRONG_FAMILIES))
def test_a_sample_of_each_hack_family_is_refused(family: str) -> None:
    cases = _wrong_by_family(FAMILY_SAMPLE)[family] or _wrong_by_family(GOLDS)[family]
    assert cases
    assert [(gold, answer) for gold, answer in cases if math_equal(answer, gold)] == []


@pytest.mark.parametrize("family", list(RIGHT_FAMILIES))
def test_a_sample_of_each_equivalent_family_is_rewarded(family: str) -> None:
    cases = _right_by_family(FAMILY_SAMPLE)[family] or _right_by_family(GOLDS)[family]
    assert cases
    assert [(gold, answer) for gold, answer in cases if not math_equal(answer, gold)] == []


@pytest.mark.slow  # about 9,000 comparisons: 30 s on one core
def test_no_hack_of_any_family_is_rewarded_for_any_math500_gold() -> None:
    wrong = _wrong_by_family(GOLDS)
    assert sum(map(len, wrong.values())) >= 5000
    rewarded = {f: [(g, a) for g, a in cases if math_equal(a, g)] for f, cases in wrong.items()}
    assert rewarded == {family: [] for family in WRONG_FAMILIES}


@pytest.mark.slow  # about 4,000 comparisons
def test_every_equivalent_family_is_rewarded_for_every_math500_gold() -> None:
    right = _right_by_family(GOLDS)
    assert sum(map(len, right.values())) >= 3000
    refused = {f: [(g, a) for g, a in cases if not math_equal(a, g)] for f, cases in right.items()}
    assert refused == {family: [] for family in RIGHT_FAMILIES}


@pytest.mark.parametrize(
    ("gold", "wrong"),
    [
        ("9", r"9\text{ cm} + \frac{1}{7}"),
        ("9", r"9\,\text{cm} - \sqrt{2}"),
        ("9", r"9\text{, or maybe }\frac{20}{2}"),
        ("5", r"5\text{ cm}, \frac{1}{7}"),
        (r"\frac{1}{2}", r"\frac{1}{4}\quad 2"),
        (r"\frac{1}{2}", r"\frac14 2"),
        ("0", r"5\quad 0"),
        ("0", "I am not sure 0"),
        ("0", "0 I am not sure"),
        ("0", r"5 (0)"),
        ("0", r"I am not sure \cdot 0"),
        ("0", "0x"),
        (r"\text{even}", r"\text{odd} = \text{even}"),
        ("1,-2", "7 = 1,-2"),
        (r"(-\sqrt{3}, \sqrt{3})", r"-\sqrt{3}, \sqrt{3}"),
        ("3.21", r"\sqrt{10.3}"),
        ("3.21", r"3.21+\frac{\sqrt2}{1000}"),
        ("0.15", r"\frac{\pi}{21}"),
        ("4.5", r"\sqrt{e^3}"),
        ("2", r"\sqrt{4.0000001}"),
        ("3", r"3\frac{5}{2}"),
        ("5", "5i"),
        (r"\sqrt{13}", r"\sqrt13"),
        ("5", r"5 \approx 5"),
        ("3.14", r"3.14\ldots"),
        ("30", r"5 \ldots 6"),
        ("5", "5_{x}"),
    ],
)
def test_the_hacks_of_each_family_are_refused(gold: str, wrong: str) -> None:
    assert not math_equal(wrong, gold)
    assert not math_equal(rf"\boxed{{{wrong}}}", gold)


@pytest.mark.parametrize(
    ("gold", "right"),
    [
        ("2220", r"2\,220"),
        ("2220", "2 220"),
        ("2220", "2{,}220"),
        ("90^\\circ", "90°"),
        (r"3\sqrt{13}", "3√13"),
        (r"(2,\infty)", "(2, ∞)"),
        ("42", r"42~\text{inches}"),
        ("54", "54 square centimeters"),
        (r"\frac{1}{3}", r"0.\overline{3}"),
        (r"\frac{1}{6}", r"0.1\overline{6}"),
        ("6 - 5i", r"6 - 5\cdot i"),
        ("6 - 5i", "6 + (-5)i"),
        ("52_8", "{52}_{8}"),
        ("52_8", "(52)_{8}"),
        ("(15,-29)", "(x,y) = (15,-29)"),
        ("2x + 3", "f(x) = 2x+3"),
        ("1,-2", r"x = 1 \text{ or } x = -2"),
        (r"1\frac{4}{5}", r"\frac{9}{5}"),
        ("5", "The answer follows. " * 60 + r"So $\boxed{5}$."),
        (r"\text{(C)}", "C"),
        ("3.14", r"\pi"),
    ],
)
def test_the_equivalent_forms_of_each_family_are_rewarded(gold: str, right: str) -> None:
    assert math_equal(right, gold)


@pytest.mark.parametrize(
    ("latex", "normalized"),
    [
        (r"2\,220", "2220"),
        ("12 345 678", "12345678"),
        (r"\$32,\!348", "32348"),
        (r"5\quad 0", "5 0"),  # not a thousands group: a space between two numbers
        (r"x^2 100", "x^2 100"),  # a superscript's digit is not a thousands group
        (r"\left( 3, \dfrac{\pi}{2} \right)", r"( 3, \frac{\pi}{2} )"),
        (r"864 \mbox{ inches}^2", "864"),
        (r"\frac{270}7\text{ degrees}", r"\frac{270}7"),
        ("54 square centimeters", "54"),
        ("3h", "3h"),  # one letter bare: a variable, not hours
        (r"9\text{ cm} + 1", r"9\text{ cm} + 1"),  # a unit only at the end
        (r"0.1\overline{6}", r"\frac{1}{6}"),
        (r"137 \frac{1}{2}", r"(137+\frac{1}{2})"),
        ("(52)_{8}", "52_{8}"),
        ("−3√13", r"-3\sqrt{13}"),
        (r"\text{9}", "9"),
    ],
)
def test_normalize(latex: str, normalized: str) -> None:
    assert normalize(latex) == normalized


@pytest.mark.parametrize(
    ("latex", "reason"),
    [
        ("2x", None),
        (r"3\sqrt{2}", None),
        ("2(x+1)", None),
        (r"\log_2 8", None),
        (r"\sin 30", None),
        (r"\begin{pmatrix} -1 & 0 \\ 0 & -1 \end{pmatrix}", None),
        (r"\{1\pm\sqrt{5},-2\}", None),
        (r"\text{Evelyn}", None),
        ("5 0", "a number written next to another operand"),
        (r"\frac{1}{4} 2", "a number written next to another operand"),
        (r"\frac14 2", "a number written next to another operand"),
        ("x 2", "a number written next to another operand"),
        ("2 (3)", "a number written next to another operand"),
        (r"9\text{ cm} + 1", "words inside a mathematical answer"),
        ("5 ? 0", "an unexpected character"),
        (r"\frac{1}", "a command with a missing argument"),
        ("5+\\", "a backslash that ends the answer"),
    ],
)
def test_one_object_reason(latex: str, reason: str | None) -> None:
    found = one_object_reason(latex)
    assert found == reason if reason is None else found is not None and found.startswith(reason)


@pytest.mark.parametrize(
    ("latex", "size"),
    [
        (r"\pi", 1),
        (r"\sqrt{2}", 2),
        (r"2\sqrt{2}", 3),
        (r"\frac{\pi}{21}", 3),
        (r"\sqrt{10.3}", None),
    ],
)
def test_closed_form_size(latex: str, size: int | None) -> None:
    assert closed_form_size(latex) == size
