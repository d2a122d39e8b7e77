"""Adversarial answer families, generated from every gold answer: hacks and equivalent forms.

Shared by ``test_math_reward.py`` and ``benchmarks/math_scoring.py``. Each family is a generator
``family(gold) -> list[answer]`` that applies to every gold of its kind (it returns nothing for
the others). ``WRONG_FAMILIES`` make answers that must never be rewarded: more mathematics after
a unit, numbers side by side, words or a number left of ``=``, interval endpoints without their
brackets, irrational numbers close to an exact gold (their value differs from the gold's, which
``math_mutations._value_changing`` checks with a strict parser and exact arithmetic).
``RIGHT_FAMILIES`` make answers that must be rewarded: thousands separators, Unicode, word units,
repeating decimals, complex numbers written another way, base forms, assignments, and a boxed
answer after long prose.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from fractions import Fraction

from math_mutations import _oracle

_INTEGER = re.compile(r"-?\d+")
_DECIMAL = re.compile(r"(-?)(\d*)\.(\d+)")
_FRACTION = re.compile(r"(-?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?")
_COMPLEX = re.compile(r"(-?\d+)\s*([+-])\s*(\d*)i")
_BASE = re.compile(r"([0-9A-Z]+)_\{?(\d+)\}?")
_INTERVAL = re.compile(r"(?:\\left)?\s*([(\[])(.*),(.*?)(?:\\right)?\s*([)\]])")
_TUPLE_NAMES = "xyzw"


def _is_equation(gold: str) -> bool:
    return "=" in gold or r"\in" in gold


def _is_text(gold: str) -> bool:
    return gold.startswith(r"\text{") and gold.endswith("}") and "}" not in gold[6:-1]


def _plain_number(gold: str) -> bool:
    """An integer, a decimal or a fraction, written plainly (no unit, no sign of a set)."""
    bare = gold.replace(" ", "")
    return bool(_INTEGER.fullmatch(bare) or _DECIMAL.fullmatch(bare) or _FRACTION.fullmatch(bare))


# --- wrong answers ----------------------------------------------------------------------------


def unit_then_more(gold: str) -> list[tuple[str, str]]:
    """A unit, then more mathematics: the unit must end the answer."""
    return [
        ("unit-then-more", rf"{gold}\text{{ cm}} + \frac{{1}}{{7}}"),
        ("unit-then-more", rf"{gold}\,\text{{cm}} - \sqrt{{2}}"),
        ("unit-then-more", rf"{gold}\text{{, or maybe }}\frac{{20}}{{2}}"),
        ("unit-then-more", rf"{gold} \text{{ inches}} \quad 3"),
        ("unit-then-more", rf"{gold}~\text{{square units, or }} 0"),
        ("unit-then-more", rf"{gold} cm + \frac{{1}}{{7}}"),
        ("unit-then-more", rf"{gold}\% \text{{ or }} 7"),
    ]


def juxtaposed_numbers(gold: str) -> list[tuple[str, str]]:
    """The gold next to a number whose product with it is the gold: two numbers, not a product."""
    before = [rf"1\quad {gold}", rf"5\quad {gold}"] if gold[:1].isdigit() else []
    return [
        *[("juxtaposed-numbers", answer) for answer in before],
        ("juxtaposed-numbers", rf"{gold}\quad 1"),
        ("juxtaposed-numbers", rf"{gold}\;1"),
        ("juxtaposed-numbers", rf"{gold}~~2"),
        ("juxtaposed-numbers", rf"\frac{{1}}{{2}}\quad 2\cdot({gold})"),
        ("juxtaposed-numbers", rf"I am not sure {gold}"),
    ]


def left_of_equals(gold: str) -> list[tuple[str, str]]:
    """Words or a number left of ``=``: not an assignment, not the gold's value."""
    if _is_equation(gold):
        return []
    other = "8" if gold.strip() == "7" else "7"
    return [
        ("left-of-equals", rf"\text{{odd}} = {gold}"),
        ("left-of-equals", rf"\text{{the answer}} = {gold}"),
        ("left-of-equals", f"{other} = {gold}"),
        ("left-of-equals", f"x + 1 = {gold}"),
    ]


def unbracketed_interval(gold: str) -> list[tuple[str, str]]:
    """An interval's endpoints without its brackets, or as a set."""
    if _kind(gold) != "Interval":
        return []
    match = _INTERVAL.fullmatch(gold.strip())
    if not match or "," in match.group(2) or match.group(2).strip() == "":
        return []
    low, high = match.group(2).strip(), match.group(3).strip()
    return [
        ("unbracketed-interval", f"{low}, {high}"),
        ("unbracketed-interval", rf"{low} \text{{ and }} {high}"),
        ("unbracketed-interval", rf"\{{{low}, {high}\}}"),
    ]


def near_exact(gold: str) -> list[tuple[str, str]]:
    """Irrational numbers close to a numeric gold: within 10^-8 of any number (``3\\sqrt{13}``,
    ``\\frac{\\pi}{6}``), and for a plain number also within its last decimal place."""
    from sympy import Basic

    oracle = _oracle(gold)
    if not (_plain_number(gold) or (isinstance(oracle, Basic) and oracle.is_number)):
        return []
    answers = [rf"{gold}+\frac{{1}}{{10^{{9}}}}", rf"{gold}-\frac{{\sqrt{{2}}}}{{10^{{8}}}}"]
    if _plain_number(gold):
        answers += _near_decimals(gold)
    return [("near-exact", answer) for answer in answers]


def _near_decimals(gold: str) -> list[str]:
    """Closed forms that round to a plain number at its decimal places, or nearly."""
    decimal = _DECIMAL.fullmatch(gold.replace(" ", ""))
    places = len(decimal.group(3)) if decimal else 0
    value = _number(gold)
    answers = [
        rf"{gold}+\frac{{\sqrt{{2}}}}{{10^{{6}}}}",
        rf"\sqrt{{({gold})^{{2}}+10^{{-7}}}}",
        rf"{gold}+\frac{{\sqrt2}}{{{10 ** (places + 1)}}}",
    ]
    if value > 0:
        square = round(float(value) ** 2, places + 1)
        answers.append(rf"\sqrt{{{square}}}")  # \sqrt{10.3} for 3.21
        n = round(3.141592653589793 / float(value))
        if n > 0:
            answers.append(rf"\frac{{\pi}}{{{n}}}")  # \frac{\pi}{21} for 0.15
        m = round(float(value) / 3.141592653589793)
        if m > 0:
            answers.append(rf"{m}\pi")
        answers.append(rf"\sqrt{{{round(float(value) ** 2)}}}")
    return answers


def _number(gold: str) -> Fraction:
    bare = gold.replace(" ", "")
    fraction = _FRACTION.fullmatch(bare)
    if fraction:
        sign, numerator, denominator = fraction.groups()
        return Fraction(int(numerator), int(denominator)) * (-1 if sign else 1)
    return Fraction(bare)


WRONG_FAMILIES: dict[str, Callable[[str], list[tuple[str, str]]]] = {
    "unit-then-more": unit_then_more,
    "juxtaposed-numbers": juxtaposed_numbers,
    "left-of-equals": left_of_equals,
    "unbracketed-interval": unbracketed_interval,
    "near-exact": near_exact,
}
"""Families of answers that must never be rewarded."""


@functools.lru_cache(maxsize=1024)
def wrong_answers(gold: str) -> list[tuple[str, str]]:
    """Every wrong-family answer for ``gold``; near numbers only where their value differs."""
    candidates = [pair for family in WRONG_FAMILIES.values() for pair in family(gold)]
    return [pair for pair in candidates if pair[0] != "near-exact" or _differs(gold, pair[1])]


def _differs(gold: str, answer: str) -> bool:
    """Whether a strict parse of ``answer`` has another value than ``gold``'s (exact sympy;
    the near numbers differ by 10^-7 or more, far above the 60-digit evaluation's error)."""
    from sympy import Basic, N

    a, b = _oracle(answer), _oracle(gold)
    if not (isinstance(a, Basic) and isinstance(b, Basic)):
        return True
    try:
        return bool(abs(N((a - b).doit(), 60)) > 1e-40)
    except TypeError:  # not two numbers (58,500 + 10^-9 is a list): another value
        return True


# --- right answers ----------------------------------------------------------------------------


def thousands(gold: str) -> list[str]:
    """An integer of four or more digits with its thousands separated, as people write them."""
    match = re.fullmatch(r"(\\\$)?(-?)(\d{4,})", re.sub(r",(?:\\!)?", "", gold))
    if not match:
        return []
    dollar, sign, digits = match.groups()
    groups = []
    while digits:
        groups.insert(0, digits[-3:])
        digits = digits[:-3]
    prefix = (dollar or "") + sign
    return [
        prefix + separator.join(groups) for separator in (r"\,", " ", "{,}", ",", r"\ ", r",\!")
    ]


_UNICODE_FORMS = [
    (r"\^\\circ", "°"),
    (r"\\infty(?![A-Za-z])", "∞"),
    (r"\\pi(?![A-Za-z])", "π"),
    (r"\\cdot(?![A-Za-z])", "·"),
    (r"\\pm(?![A-Za-z])", "±"),
    (r"\\le(?![A-Za-z])", "≤"),
]


def unicode_forms(gold: str) -> list[str]:
    """LaTeX commands written as the Unicode characters models also use."""
    forms = [re.sub(latex, char, gold) for latex, char in _UNICODE_FORMS if re.search(latex, gold)]
    root = re.sub(r"\\sqrt\{(\d+)\}|\\sqrt(\d)", lambda m: "√" + (m.group(1) or m.group(2)), gold)
    if root != gold:
        forms.append(root)
    if gold.startswith("-"):
        forms.append("\u2212" + gold[1:])
    return forms


def word_units(gold: str) -> list[str]:
    """A plain number followed by a unit, in words or in ``\\text{}``, at the end."""
    if gold.endswith(r"^\circ"):
        number = gold[: -len(r"^\circ")]
        return [f"{number} degrees", rf"{number}\text{{ degrees}}", rf"{number}^{{\circ}}"]
    if not _plain_number(gold):
        return []
    return [
        f"{gold} square centimeters",
        rf"{gold}~\text{{inches}}",
        rf"{gold}\text{{ cm}}^2",
        rf"{gold} \mbox{{ meters}}",
        f"{gold} dollars",
    ]


def repeating_decimals(gold: str) -> list[str]:
    """A fraction whose decimal repeats, written with ``\\overline``."""
    match = _FRACTION.fullmatch(gold.replace(" ", ""))
    if not match:
        return []
    value = _number(gold)
    sign, value = ("-" if value < 0 else ""), abs(value)
    whole, rest = divmod(value.numerator, value.denominator)
    digits, seen = [], {}
    while rest and rest not in seen:  # at most q - 1 digits: MATH-500's longest period is 272
        seen[rest] = len(digits)
        rest *= 10
        digits.append(str(rest // value.denominator))
        rest %= value.denominator
    if not rest:
        return []  # terminating: another family writes its decimal
    start = seen[rest]
    fixed, period = "".join(digits[:start]), "".join(digits[start:])
    return [rf"{sign}{whole}.{fixed}\overline{{{period}}}"]


def complex_forms(gold: str) -> list[str]:
    """``a + bi`` with the unit multiplied explicitly or the coefficient in brackets."""
    match = _COMPLEX.fullmatch(gold.replace(" ", ""))
    if not match:
        return []
    real, sign, coefficient = match.groups()
    coefficient = coefficient or "1"
    signed = f"-{coefficient}" if sign == "-" else coefficient
    return [
        rf"{real} {sign} {coefficient}\cdot i",
        f"{real} + ({signed})i",
        rf"{real} {sign} {coefficient} \times i",
    ]


def base_forms(gold: str) -> list[str]:
    """A numeral with its base, its digits in braces or brackets."""
    match = _BASE.fullmatch(gold)
    if not match:
        return []
    digits, base = match.groups()
    return [f"{{{digits}}}_{{{base}}}", f"({digits})_{{{base}}}", f"{digits}_{{{base}}}"]


def assignments(gold: str) -> list[str]:
    """A value, tuple or list assigned to its variables: ``x = 5``, ``(x,y) = (15,-29)``,
    ``x = 1, x = -2``."""
    if _is_equation(gold) or _is_text(gold):
        return []
    if _kind(gold) == "Tuple":
        items = _tuple_items(gold)
        if 2 <= len(items) <= len(_TUPLE_NAMES):
            names = _TUPLE_NAMES[: len(items)]
            return [f"({','.join(names)}) = {gold}", f"({', '.join(names)}) = {gold}"]
    if _plain_number(gold) or "_" in gold:
        return [f"x = {gold}", f"y={gold}"]
    if _kind(gold) == "FiniteSet" and r"\pm" not in gold:
        values = _tuple_items("(" + gold.strip().removeprefix(r"\{").removesuffix(r"\}") + ")")
        return [", ".join(f"x = {v.strip()}" for v in values), f"x = {gold}"]
    return []


def _kind(gold: str) -> str:
    """The type of the oracle's parse of ``gold`` (``Tuple``, ``Interval``, ``Integer`` ...)."""
    return type(_oracle(gold)).__name__


def _tuple_items(gold: str) -> list[str]:
    inner = re.sub(r"\\left|\\right", "", gold).strip()[1:-1]
    depth, items, current = 0, [], ""
    for ch in inner:
        depth += (ch in "({[") - (ch in ")}]")
        if ch == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += ch
    return [*items, current]


_PROSE = (
    "We work through the problem carefully. First, write down what is given: the quantities "
    r"$a = 3$ and $b = 4$ satisfy $a^2 + b^2 = 25$, so $c = 5$. "
    "Next we check the edge cases, since an answer of 0 or 1 would be suspicious here. "
)


def long_prose(gold: str) -> list[str]:
    """A boxed answer after about 1,200 characters of reasoning with other mathematics in it."""
    prose = _PROSE * (1 + 1200 // len(_PROSE))
    return [rf"{prose}Therefore the answer is $\boxed{{{gold}}}$."]


RIGHT_FAMILIES: dict[str, Callable[[str], list[str]]] = {
    "thousands": thousands,
    "unicode": unicode_forms,
    "word-units": word_units,
    "repeating-decimals": repeating_decimals,
    "complex-forms": complex_forms,
    "base-forms": base_forms,
    "assignments": assignments,
    "long-prose": long_prose,
}
"""Families of answers that must be rewarded."""
