"""Wrong answers made from gold answers, and right answers written another way.

Shared by ``test_math_reward.py`` and ``benchmarks/math_scoring.py``. ``mutations(gold)`` gives
answers whose value differs from the gold's (or that are not one well-formed expression at all):
trailing operators and powers, the gold inside a larger expression, a changed digit, a nudged
decimal, another base. Whether a mutation really changes the value is decided by an oracle that
does not use the scorer: latex2sympy (a strict parser) and sympy's exact arithmetic; a mutation
the oracle finds equal to the gold is dropped. ``equivalent_forms(gold)`` gives forms a grader
must accept: wrappings, ``\\dfrac``, decimal vs fraction, units, ``\\text{}``.
"""

from __future__ import annotations

import re
from fractions import Fraction

REWARDED_BEFORE = [
    # (gold, a wrong answer the scorer used to reward): the five found on MATH-500
    ("2", "$2**2**2**2**2$"),
    ("2", "$2**100$"),
    (r"\frac{1}{2}", r"\frac{1}{2}**7"),
    ("40_9", "40_0"),
    (".0000672", "0.0000670"),
]
"""The cases the issue found rewarded (one adversarial, four mutations)."""

REGRESSION = [
    *REWARDED_BEFORE,
    ("2", "$2 + $"),
    ("2", "2 +"),
    ("2", r"\boxed{2 +}"),
    ("2", "2**2"),
    ("2", r"\boxed{2)}"),
    ("2", r"\boxed{2"),
    ("2", "2}"),
    (r"\frac{1}{2}", r"\frac{1}{2}^{7}"),
    (r"\frac{1}{2}", r"$\frac{1}{2} \cdot$"),
    ("x=5", r"2\cdot(x=5)"),
    ("x=5", "(x=5)+1"),
    ("5", "5=3"),
    ("3", "5=3"),
    ("5", "2x=10"),
    ("40_9", "40_{10}"),
    ("40_9", "40"),
    ("40_9", "40_8"),
    ("4210_{5}", "4210_{6}"),
    ("0.5", "0.5000004"),
    ("0.5", "0.51"),
    (".0000672", "0.0000673"),
    (r"\frac{1}{3}", "0.333333"),
    ("3.14", "3.1416"),
    ("3.14", r"\frac{22}{7}"),
    ("3.14", r"\sqrt{10}"),
]
"""(gold, wrong answer) pairs from every class the issue names: prefixes, trailing operators,
unbalanced tails, equations inside expressions, base subscripts, absolute tolerances."""

ACCEPTED = [
    ("x=5", "5"),
    ("5", "5."),
    ("5", r"\boxed{5.}"),
    ("5", "x=5"),
    ("5", "x = 5"),
    ("x=5", "x = 5"),
    ("40_9", "40_{9}"),
    ("4210_{5}", "4210_5"),
    ("0.5", r"\frac{1}{2}"),
    (r"\frac{1}{2}", "0.5"),
    (r"\frac12", r"\dfrac{1}{2}"),
    (".0000672", "0.0000672"),
    (".0000672", r"6.72\cdot10^{-5}"),
    ("3.14", r"\pi"),
    ("1.41", r"\sqrt{2}"),
    ("5.4 \\text{ cents}", "5.4"),
    (r"\text{Evelyn}", "Evelyn"),
    (r"\$18.90", "18.90"),
    ("90^\\circ", "90"),
    ("10", r"10\text{ cm}"),
    (r"\frac{14}{3}", r"The final answer is $\boxed{\frac{14}{3}}$."),
    ("1,-2", "-2, 1"),
    (r"\sqrt{8}", r"2\sqrt{2}"),
]
"""(gold, right answer written another way) pairs that must still be rewarded."""

_INTEGER = re.compile(r"\d+")
_DECIMAL = re.compile(r"^-?\d*\.\d+$")
_FRACTION = re.compile(r"^(-?)\\[dt]?frac\{?(\d+)\}?\{?(\d+)\}?$")


def _oracle(latex: str) -> object | None:
    """latex2sympy's strict parse of ``latex`` (None if it is not one expression)."""
    from latex2sympy2_extended import latex2sympy

    try:
        return latex2sympy(latex)
    except Exception:
        return None


def _same_value(a: object, b: object) -> bool:
    from sympy import Basic, nsimplify, simplify

    if not (isinstance(a, Basic) and isinstance(b, Basic)):
        return a == b
    try:
        if a == b:
            return True
        if a.is_number and b.is_number:
            difference = nsimplify(a, rational=True) - nsimplify(b, rational=True)
            return bool(abs(complex(difference)) == 0)
        return bool(simplify(a - b) == 0)
    except Exception:
        return False


def _value_changing(gold: str, candidates: list[tuple[str, str]]) -> list[tuple[str, str]]:
    gold_value = _oracle(gold)
    kept = []
    for kind, wrong in candidates:
        if wrong.strip() == gold.strip():
            continue
        if kind == "base":  # the oracle reads 40_9 as 40: another base is another number
            kept.append((kind, wrong))
            continue
        value = _oracle(wrong)
        if value is not None and gold_value is not None and _same_value(value, gold_value):
            continue  # not value-changing (e.g. 0^{3} for gold 0)
        kept.append((kind, wrong))
    return kept


def _digit_changes(gold: str) -> list[tuple[str, str]]:
    out = []
    for match in _INTEGER.finditer(gold):
        before, after = gold[: match.start()], gold[match.end() :]
        if before.endswith(("\\", "_", "_{")):  # a command or a base, changed elsewhere
            continue
        if before.endswith("^") and re.search(r"\\(?:mbox|text)", before):
            continue  # the power of a unit (cm^2), not of the value
        number = int(match.group())
        out.append(("digit", f"{before}{number + 1}{after}"))
        if len(out) >= 2:
            break
    return out


def _decimal_nudges(gold: str) -> list[tuple[str, str]]:
    if not _DECIMAL.match(gold):
        return []
    last = int(gold[-1])
    return [
        ("decimal-last-digit", gold[:-1] + str((last + 1) % 10)),
        ("decimal-tail", gold + "000004"),
    ]


def _base_changes(gold: str) -> list[tuple[str, str]]:
    match = re.search(r"_\{?(\d+)\}?$", gold)
    if not match:
        return []
    digits, base = gold[: match.start()], int(match.group(1))
    return [("base", f"{digits}_{{{b}}}") for b in (0, 10, base + 1) if b != base]


def mutations(gold: str) -> list[tuple[str, str]]:
    """Value-changing (or malformed) answers made from ``gold``, as ``(kind, answer)`` pairs."""
    candidates = [
        ("trailing-operator", f"{gold} +"),
        ("trailing-power", f"{gold}**7"),
        ("dollar-prefix", f"${gold}**2$"),
        ("dollar-trailing", f"${gold} + $"),
        ("boxed-trailing", rf"\boxed{{{gold} \cdot}}"),
        ("times-two", rf"2\cdot({gold})"),
        ("plus-one", f"({gold})+1"),
        *_digit_changes(gold),
        *_decimal_nudges(gold),
        *_base_changes(gold),
    ]
    return _value_changing(gold, candidates)


def _decimal_of(gold: str) -> str | None:
    match = _FRACTION.match(gold.replace(" ", ""))
    if not match:
        return None
    sign, numerator, denominator = match.groups()
    value = Fraction(int(numerator), int(denominator))
    rest = value.denominator
    for p in (2, 5):
        while rest % p == 0:
            rest //= p
    if rest != 1 or value.denominator == 1:
        return None
    return sign + str(float(value))


def equivalent_forms(gold: str) -> list[str]:
    """``gold`` written in ways a grader must accept."""
    forms = [
        gold,
        rf"\boxed{{{gold}}}",
        f"${gold}$",
        rf"So the answer is $\boxed{{{gold}}}$.",
    ]
    if r"\frac" in gold:
        forms.append(gold.replace(r"\frac", r"\dfrac"))
    decimal = _decimal_of(gold)
    if decimal is not None:
        forms.append(decimal)
    if re.fullmatch(r"-?\d+", gold):
        forms += [rf"{gold}\text{{ cm}}", rf"\text{{{gold}}}"]
    text = re.fullmatch(r"\\text\{([A-Za-z ]+)\}", gold)
    if text:
        forms.append(text.group(1))
    return forms
