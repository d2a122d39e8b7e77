"""What a math answer is: the whole boxed (or answer) content, read as one value.

math-verify searches free text for anything that parses, which is right for grading a paper's
outputs and wrong for a reward that a policy is optimised against: given ``$2**100$`` it reads
the number ``2``, given ``\\frac{1}{2}**7`` it reads ``\\frac{1}{2}``, given ``2\\cdot(x=5)`` it
reads ``5``, it drops base subscripts (``40_9`` reads as ``40``), and it compares numbers after
rounding to six decimals (``0.5000004`` equals ``0.5``). This module fixes what is compared:

- **The whole content.** ``answer_content`` picks the text that must be the answer: the content
  of the last ``\\boxed{}`` (or ``\\fbox{}``) if there is one, else of the last ``$...$``,
  ``$$...$$``, ``\\(...\\)`` or ``\\[...\\]``, else the whole answer. That text is parsed as one
  LaTeX expression or not at all: a trailing operator, ``**``, an unbalanced brace or any other
  tail makes it unparseable, hence wrong, never a shorter match.
- **Exact values.** Decimals are read as the exact fractions they denote (``0.5`` is ``1/2``, and
  ``0.5000004`` is not), so numbers are compared exactly. The one tolerance is for a gold answer
  that is itself a decimal approximation: when the gold is a plain decimal with d places and s
  significant digits (``3.14``: 2 and 3) and the prediction is an irrational closed form without
  variables (``\\pi``, ``\\sqrt{2}``), the prediction counts when it rounds to the gold at d
  places *and* is written with fewer than s symbols (digits, constants, functions:
  ``closed_form_size``) and no decimal. A form with as many symbols as the gold has digits can be
  fitted to the gold (``\\frac{\\pi}{21}`` rounds to ``0.15``); one with a decimal in it carries
  the gold's digits (``\\sqrt{10.3}``, ``3.21+\\frac{\\sqrt2}{1000}`` for ``3.21``). A decimal
  or fraction prediction must equal a decimal gold exactly.
- **Bases.** A numeral with a base subscript (``40_9``, ``4210_{5}``) must carry the same base as
  the gold's (base 10 and no subscript are the same).
- **Equations as equations.** A prediction that is an equation matches a gold that is a value only
  when it assigns that value to variables: one letter, maybe subscripted, or a Greek letter
  (``x=5`` and ``x = 5`` match ``5``, ``(x,y) = (15,-29)`` matches ``(15,-29)``); an equation
  inside a larger expression (``2\\cdot(x=5)``, ``(x=5)+1``) does not parse, and ``5=3``,
  ``\\text{odd} = \\text{even}`` and ``7 = 1,-2`` are not values.

What else an answer may contain, and what it must not, is ``passkt.envs.math_grammar``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ParsedMath",
    "answer_content",
    "balanced",
    "base_subscripts",
    "closed_form_size",
    "decimal_places",
    "exact",
    "is_variable",
    "rounds_to",
    "significant_digits",
    "unwrap_assignment",
]

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_DELIMITED = re.compile(
    r"(?<!\\)\$\$(.+?)(?<!\\)\$\$|(?<!\\)\$(.+?)(?<!\\)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL
)
_BASE = re.compile(r"(?<![\\A-Za-z])[0-9A-Z]*[0-9][0-9A-Z]*\s*_\s*(?:\{\s*(\d+)\s*\}|(\d))")
_TEXT = re.compile(r"\\(?:text|textrm|mbox|mathrm)\s*\{[^{}]*\}")
_DECIMAL = re.compile(r"-?\d*\.(\d+)")


@dataclass(frozen=True)
class ParsedMath:
    """A parsed answer: math-verify's parse of its content plus what math-verify does not keep."""

    exprs: tuple[object, ...]
    """latex2sympy's parse of the normalized content (a sympy object, then the normalized text)."""
    bases: tuple[str, ...]
    """The base subscripts of its numerals, in order (``base_subscripts``)."""
    decimals: int | None
    """Decimal places when the content is a plain decimal number, else None."""
    significant: int | None = None
    """Significant digits when the content is a plain decimal number (``3.14``: 3), else None."""
    size: int | None = None
    """Symbols the content is written with (``closed_form_size``); None if it has a decimal."""
    text: str | None = None
    """The words of a text answer (``\\text{Evelyn}``: ``evelyn``); None for mathematics."""


def _group_end(text: str, open_brace: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_brace`` (``\\{`` and ``\\}`` skipped)."""
    depth, i = 0, open_brace
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def answer_content(text: str) -> str | None:
    """The LaTeX that must be the whole answer, or None when its box is never closed.

    The content of the last ``\\boxed{...}``; else of the last math delimiters (``$...$``,
    ``$$...$$``, ``\\(...\\)``, ``\\[...\\]``; ``\\$`` is a dollar sign); else all of ``text``;
    stripped, and without a final full stop (``5.`` is ``5``: not a change of value).
    """
    boxes = list(_BOXED.finditer(text))
    if boxes:
        start = boxes[-1].end() - 1
        end = _group_end(text, start)
        return None if end is None else _without_full_stop(text[start + 1 : end])
    segments = list(_DELIMITED.finditer(text))
    if segments:
        last = segments[-1]
        return _without_full_stop(next(group for group in last.groups() if group is not None))
    return _without_full_stop(text)


def _without_full_stop(content: str) -> str:
    """``content`` stripped, without the one full stop that ends a sentence (``5.`` is 5)."""
    content = content.strip()
    return content[:-1].rstrip() if content.endswith(".") else content


def balanced(latex: str) -> bool:
    """Whether every ``{``, ``(`` and ``[`` is closed in order (``\\{``, ``\\left[`` ... count)."""
    pairs = {"}": "{", ")": "(", "]": "["}
    stack: list[str] = []
    i = 0
    while i < len(latex):
        ch = latex[i]
        if ch == "\\" and i + 1 < len(latex) and latex[i + 1] in "{}":
            ch = latex[i + 1]
            i += 1
        if ch in "{([":
            stack.append(ch)
        elif ch in pairs:
            # intervals close with the other bracket: (0, 1] and [0, 1) are balanced
            if not stack or (ch == "}") != (stack[-1] == "{"):
                return False
            stack.pop()
        i += 1
    return not stack


def base_subscripts(latex: str) -> tuple[str, ...]:
    """The bases written as subscripts of numerals (``40_9`` -> ``("9",)``; base 10 left out)."""
    bases = []
    for match in _BASE.finditer(latex):
        base = (match.group(1) or match.group(2)).lstrip("0") or "0"
        if base != "10":
            bases.append(base)
    return tuple(bases)


def decimal_places(latex: str) -> int | None:
    """Places after the point when ``latex`` is a plain decimal number (units in ``\\text{}``,
    ``\\$`` and spacing aside): ``"3.14"`` -> 2, ``"5.4 \\text{ cents}"`` -> 1, ``"\\frac12"`` ->
    None."""
    bare = _TEXT.sub("", latex)
    bare = re.sub(r"\\[$,!;: ]|\\quad|\s", "", bare)
    match = _DECIMAL.fullmatch(bare)
    return len(match.group(1)) if match else None


def significant_digits(latex: str) -> int | None:
    """Significant digits of a plain decimal number as written (``"0.150"`` -> 3), else None."""
    places = decimal_places(latex)
    if places is None:
        return None
    digits = re.sub(r"\D", "", _TEXT.sub("", latex))
    return max(len(digits.lstrip("0")), 1)


_DECIMAL_LITERAL = re.compile(r"\d\.\d|(?<!\d)\.\d")
_SIZE_TOKEN = re.compile(
    r"\d|\\(?!frac\b|cdot\b|times\b|left\b|right\b)[A-Za-z]+|(?<![A-Za-z\\])e(?![A-Za-z])"
)


def closed_form_size(latex: str) -> int | None:
    """How many symbols ``latex`` is written with: digits, constants and functions (``\\pi``,
    ``e``, ``\\sqrt``, ``\\ln`` ...; ``\\frac`` and operators are free). None when it contains a
    decimal number: a decimal inside a closed form is itself an approximation.
    ``\\pi`` -> 1, ``2\\sqrt{2}`` -> 3, ``\\frac{\\pi}{21}`` -> 3."""
    if _DECIMAL_LITERAL.search(latex):
        return None
    return len(_SIZE_TOKEN.findall(latex))


def exact(expr: object) -> object:
    """``expr`` with each sympy ``Float`` replaced by the exact fraction of its decimal digits."""
    from sympy import Basic, Float, Rational  # start-up cost: sympy, 0.25 s, for math answers only

    if not isinstance(expr, Basic):
        return expr
    floats = expr.atoms(Float)
    if not floats:
        return expr
    return expr.xreplace({f: Rational(str(f)) for f in floats})


_VARIABLE = re.compile(
    r"[A-Za-z](?:_.*)?|alpha|beta|gamma|delta|theta|lambda|mu|phi|psi|rho|sigma|tau|omega"
)


def is_variable(expr: object) -> bool:
    """Whether ``expr`` is a variable a reader would assign to: one letter, maybe subscripted
    (``x``, ``x_1``), or a Greek letter; not a word (``\\text{odd}``)."""
    return bool(getattr(expr, "is_Symbol", False) and _VARIABLE.fullmatch(expr.name))


def _is_assignable(expr: object) -> bool:
    """A variable, or a function of variables named by one letter (``f(x)``, ``p(x, y)``)."""
    from sympy.core.function import AppliedUndef  # start-up cost: sympy, for math answers only

    if isinstance(expr, AppliedUndef):
        name = type(expr).__name__
        return len(name) == 1 and all(is_variable(arg) for arg in expr.args)
    return is_variable(expr)


def unwrap_assignment(pred: object, gold: object) -> object | None:
    """The value of a predicted assignment compared with a gold value, or ``pred`` itself.

    ``x = 5`` against a gold ``5`` is ``5``, ``f(x) = 2x + 3`` is ``2x + 3``, and
    ``(x, y) = (15, -29)`` is ``(15, -29)``, ``x = 1, x = -2`` is the list ``1, -2``; any
    other equation against a value (``5 = 3``, ``2x = 10``, ``\\text{odd} = \\text{even}``, a
    chain) is None: it is not a value. Against a gold equation, ``pred`` is kept.
    """
    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy import And, Eq, FiniteSet, Tuple

    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy.core.relational import Relational

    if isinstance(gold, Relational | And):
        return pred
    if isinstance(pred, FiniteSet) and pred and all(isinstance(e, Eq) for e in pred):
        values = [unwrap_assignment(e, gold) for e in pred]  # x = 1, x = -2: the list 1, -2
        same_variable = len({e.lhs for e in pred}) == 1
        return FiniteSet(*values) if same_variable and None not in values else None
    if not isinstance(pred, Relational | And):
        return pred
    if not isinstance(pred, Eq):
        return None
    lhs, rhs = pred.lhs, pred.rhs
    names = list(lhs) if isinstance(lhs, Tuple) else [lhs]
    if isinstance(lhs, Tuple) and not (isinstance(rhs, Tuple) and len(rhs) == len(lhs)):
        return None
    if not all(_is_assignable(name) for name in names) or len(set(names)) != len(names):
        return None
    if set(names) & getattr(rhs, "free_symbols", set()):
        return None
    return rhs


def rounds_to(
    pred: object, pred_size: int | None, gold: object, places: int, significant: int
) -> bool:
    """Whether a closed form ``pred`` may stand for a decimal gold that is itself rounded.

    The gold ``3.14`` (``places`` 2, ``significant`` 3) accepts ``\\pi``: an irrational number
    without variables that rounds to the gold at its places, written with fewer symbols than the
    gold has significant digits (``closed_form_size``) and without a decimal in it. A form of as
    many symbols as the gold has digits can be tuned to land on any gold (``\\frac{\\pi}{21}``
    on ``0.15``, ``\\sqrt{10.3}`` or ``3.21+\\frac{\\sqrt2}{1000}`` on ``3.21``); one with
    fewer cannot encode the gold's digits, so it is a closed form of the value, not a fit.
    """
    from sympy import Abs, Basic, N, Rational  # start-up cost: sympy, 0.25 s, for math answers only

    if pred_size is None or pred_size >= significant:
        return False
    if not (isinstance(pred, Basic) and isinstance(gold, Rational)):
        return False
    if not pred.is_number or pred.free_symbols or pred.is_rational is not False:
        return False
    try:
        distance = N(Abs(pred - gold), 30)
        return bool(distance.is_real) and distance <= Rational(1, 2 * 10**places)
    except (TypeError, ValueError, ArithmeticError):
        return False
