"""A math answer as a value, and whether two values are equal: what the scoring worker runs.

``parse_math`` reads an answer's whole final content (``passkt.envs.math_answer``) as one LaTeX
expression with math-verify's normalization and latex2sympy, after cheap guards against answers
too costly to compare (``passkt.envs.math_guard`` and a bound on the parsed tree);
``math_equal_parsed`` compares two parsed answers as values. Neither bounds its own time: the
worker process (``passkt.envs.math_worker``) calls them under a CPU limit, and
``passkt.envs.scoring.math_equal`` is the bounded entry point.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from passkt.envs.math_answer import (
    ParsedMath,
    answer_content,
    balanced,
    base_subscripts,
    closed_form_size,
    decimal_places,
    exact,
    is_variable,
    rounds_to,
    significant_digits,
    unwrap_assignment,
)
from passkt.envs.math_grammar import is_text_answer, normalize, one_object_reason, text_answer
from passkt.envs.math_guard import refusal

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_MATH_CHARS",
    "MAX_MATH_DIGITS",
    "MAX_SYMBOLIC_POWER",
    "math_equal_parsed",
    "parse_math",
]

MAX_MATH_CHARS = 1000
"""Longer final answers (the content of the box, or the whole answer when there is none) are not
compared (not equal): a final answer is short, and sympy's cost grows quickly with its size."""

MAX_ANSWER_CHARS = 100_000
"""Longer answers, prose included, are not compared: finding the box is linear in the length,
and prose before a short boxed answer is normal."""

MAX_MATH_DIGITS = 100_000
"""Upper bound on the decimal digits of any number an expression can denote (estimated from its
parse tree before any evaluation). ``10^{100000}`` is compared; ``9^{9^{9}}`` or ``(10^{10})!``,
which sympy would try to expand for minutes, count as not equal."""

MAX_SYMBOLIC_POWER = 64
"""Highest integer power of a sum or product with variables that is compared: sympy expands
``(x+y+z+1)^{200}`` into millions of terms, which would take minutes and gigabytes."""

# math-verify logs a warning on every call without timeouts; the comparison runs without them on
# purpose (the worker process bounds its CPU time instead), so that message is noise for our users.
_TIMEOUT_WARNING = "Timeout is disabled"


class _DropTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_TIMEOUT_WARNING)


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


def parse_math(answer: str) -> ParsedMath | str:
    """The parsed value of an answer's whole content, or the reason it is too costly to compare.

    The content is ``answer_content(answer)`` (the last ``\\boxed{}``, else the last ``$...$``,
    else everything), normalized by ``passkt.envs.math_grammar.normalize`` (Unicode, spacing,
    thousands separators, units at the end, ...). What is left must be one object
    (``one_object_reason``): words, kept as text, or one LaTeX expression for latex2sympy, and
    nothing shorter is ever tried. An answer that is not one object gives a ``ParsedMath`` with
    no expressions (not equal to anything). Unbounded in time by itself: the worker process
    (``passkt.envs.math_worker``) calls it.
    """
    if not isinstance(answer, str):
        return _UNPARSED
    if len(answer) > MAX_ANSWER_CHARS:
        return f"not compared: longer than {MAX_ANSWER_CHARS} characters"
    content = answer_content(answer)
    if content is None:
        return _UNPARSED
    if len(content) > MAX_MATH_CHARS:
        return f"not compared: a final answer longer than {MAX_MATH_CHARS} characters"
    reason = refusal(content)
    if reason is not None:
        return f"not compared: {reason}"
    content = normalize(content)
    if not content or not balanced(content) or one_object_reason(content) is not None:
        return _UNPARSED
    if is_text_answer(content):
        return ParsedMath((), (), None, text=text_answer(content))
    parsed = _parse_whole(content)
    reason = _too_costly(parsed)
    if reason is not None:
        return f"not compared: {reason}"
    return ParsedMath(
        tuple(parsed),
        base_subscripts(content),
        decimal_places(content),
        significant=significant_digits(content),
        size=closed_form_size(content),
    )


_UNPARSED = ParsedMath((), (), None)


def _parse_whole(content: str) -> tuple[object, ...]:
    """``(value, normalized text)``, or ``(normalized text,)`` when the content is not one
    expression. math-verify's normalization without its unit stripping (which drops everything
    after a ``\\text{}``: ``passkt.envs.math_grammar`` strips units, at the end only), then
    latex2sympy on all of it: math-verify's own ``parse`` is not used, as it searches the text
    for anything parseable (an ``answer`` word followed by a fraction, the last part of
    ``a = b = c``, a leading number)."""
    # start-up cost: latex2sympy, 0.3 s, for math answers only
    from latex2sympy2_extended import latex2sympy

    # start-up cost: latex2sympy, 0.3 s, for math answers only
    from latex2sympy2_extended.math_normalization import NormalizationConfig, normalize_latex

    # start-up cost: math-verify, 0.3 s, for math answers only
    from math_verify.grader import should_treat_as_complex

    config = NormalizationConfig(
        basic_latex=True, units=False, malformed_operators=True, nits=True, boxed="none"
    )
    try:
        normalized = normalize_latex(content, config=config)
    except Exception:  # a last net: normalization is regular expressions
        logger.debug("normalization failed on %.80r", content, exc_info=True)
        return ()
    try:
        value = latex2sympy(
            normalized,
            is_real=not should_treat_as_complex(normalized),
            convert_degrees=False,
            normalization_config=None,
        )
    except Exception:  # not one expression: only the same text can equal it
        return (normalized,)
    return (value, normalized)


def math_equal_parsed(gold: ParsedMath, prediction: ParsedMath) -> bool:
    """Whether two ``parse_math`` results are the same value (no timeout; see ``parse_math``).

    Text answers equal the same words. Otherwise base subscripts must agree, and the value must
    pass ``_same_value``: of the gold's kind, with no variable the gold lacks, exact numbers,
    an equation only as an assignment, a tolerance only for a rounded decimal gold.
    """
    if gold.text is not None or prediction.text is not None:
        return _same_text(gold, prediction)
    if not gold.exprs or not prediction.exprs or gold.bases != prediction.bases:
        return False
    for gold_expr in gold.exprs:
        for pred_expr in prediction.exprs:
            if isinstance(gold_expr, str) or isinstance(pred_expr, str):
                if isinstance(gold_expr, str) and gold_expr == pred_expr:
                    return True  # the same normalized text
                continue
            try:
                if _same_value(gold_expr, pred_expr, gold, prediction):
                    return True
            except Exception:  # math-verify catches most errors itself: last net
                logger.debug(
                    "compare failed on %.80r vs %.80r", pred_expr, gold_expr, exc_info=True
                )
    return False


def _same_text(gold: ParsedMath, prediction: ParsedMath) -> bool:
    """Words equal words; a one-letter choice also equals its letter (``\\text{(C)}``, ``C``)."""
    if gold.text is not None and prediction.text is not None:
        return gold.text == prediction.text
    if gold.text is not None and prediction.exprs:
        name = getattr(prediction.exprs[0], "name", None)
        return len(gold.text) == 1 and isinstance(name, str) and name.lower() == gold.text
    return False


def _same_value(gold_expr: object, pred_expr: object, gold: ParsedMath, pred: ParsedMath) -> bool:
    """The value rules of ``math_equal_parsed`` for one parsed gold and prediction."""
    from math_verify import verify  # start-up cost: math-verify, 0.3 s, for math answers only

    gold_value = _imaginary_unit(exact(gold_expr))
    value = unwrap_assignment(_imaginary_unit(exact(pred_expr)), gold_value)
    if value is None:
        return False
    gold_value = _assigned_value(gold_value, value)
    if _kind(value) != _kind(gold_value):
        return False
    if _has_relation(value) and not _has_relation(gold_value):
        return False  # 7 = 1,-2 is the list {7 = 1, -2}
    if not _names(value) <= _names(gold_value):
        return False  # I am not sure \cdot 0, 9\text{cm}+1: a variable the gold does not have
    if (
        gold.decimals is not None
        and gold.significant is not None
        and rounds_to(value, pred.size, gold_value, gold.decimals, gold.significant)
    ):
        return True
    return bool(verify([gold_value], [value], timeout_seconds=None))


def _imaginary_unit(expr: object) -> object:
    """``expr`` with the letter ``i`` read as the imaginary unit: latex2sympy reads it so only in
    some spellings (``5i``), not in others (``6 - 5\\cdot i``, ``6 + (-5)i``)."""
    from sympy import Basic, I  # start-up cost: sympy, 0.25 s, for math answers only

    if not isinstance(expr, Basic):
        return expr
    letters = {s: I for s in expr.free_symbols if getattr(s, "name", None) == "i"}
    return expr.xreplace(letters) if letters else expr


def _assigned_value(gold: object, pred: object) -> object:
    """A gold assignment (``x = 5``, ``x \\in [-2, 7]``) as its value when ``pred`` is a value."""
    from sympy import Eq  # start-up cost: sympy, 0.25 s, for math answers only

    if isinstance(gold, Eq) and is_variable(gold.lhs) and not _has_relation(pred):
        return gold.rhs
    return gold


def _kind(expr: object) -> str:
    """The kind of object an answer is: a value, an interval, a set, a tuple or a relation."""
    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy import And, FiniteSet, Interval, Or, Tuple, Union

    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy.core.relational import Relational

    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy.matrices import MatrixBase

    if isinstance(expr, Interval | Union):
        return "interval"
    if isinstance(expr, FiniteSet):
        return "set"
    if isinstance(expr, Tuple | MatrixBase):
        return "tuple"
    if isinstance(expr, Relational | And | Or):
        return "relation"
    return "value"


def _has_relation(expr: object) -> bool:
    """Whether an equation, inequality or truth value occurs anywhere in ``expr``
    (``7 = 1,-2`` is the list ``{7 = 1, -2}``)."""
    from sympy import Basic  # start-up cost: sympy, 0.25 s, for math answers only
    from sympy.logic.boolalg import Boolean  # start-up cost: sympy, for math answers only

    if not isinstance(expr, Basic):
        return False
    return isinstance(expr, Boolean) or bool(expr.atoms(Boolean))


def _names(expr: object) -> set[str]:
    """The names of the free variables of ``expr``."""
    return {getattr(s, "name", str(s)) for s in getattr(expr, "free_symbols", set())}


def _too_costly(parsed: Iterable[object]) -> str | None:
    """Why a parsed answer is too costly to compare (huge numbers, high powers of sums), or None."""
    from sympy import Basic, Pow  # start-up cost: sympy, 0.25 s, for math answers only

    limit = float(MAX_MATH_DIGITS)
    for expr in parsed:
        if not isinstance(expr, Basic):
            continue
        if _log10_bound(expr, limit) > limit:
            return f"a number of more than {MAX_MATH_DIGITS} digits"
        for power in expr.atoms(Pow):
            base, exponent = power.args
            if (
                exponent.is_Number
                and abs(float(exponent)) > MAX_SYMBOLIC_POWER
                and base.free_symbols
                and not base.is_Symbol
            ):
                return f"a power {exponent} of an expression (limit {MAX_SYMBOLIC_POWER})"
    return None


_FACTORIAL_LIKE = frozenset(
    {
        "factorial",
        "factorial2",
        "subfactorial",
        "binomial",
        "gamma",
        "RisingFactorial",
        "FallingFactorial",
        "fibonacci",
        "lucas",
    }
)
"""Functions whose value grows like n! in their argument (a cost bound, not an exact list)."""


def _log10_bound(expr: object, limit: float) -> float:
    """An upper bound on log10 of the largest number ``expr`` or its parts can evaluate to.

    Walks the unevaluated tree only; returns ``inf`` as soon as the bound passes ``limit``.
    """
    # start-up cost: sympy, 0.25 s, for math answers only
    from sympy import Basic, Float, Pow, Rational

    if isinstance(expr, Rational):  # includes Integer
        return math.log10(max(abs(int(expr.p)), int(expr.q), 1))
    if isinstance(expr, Float):
        value = abs(float(expr))
        if value == math.inf:  # beyond double range: refuse
            return math.inf
        return abs(math.log10(value)) if value > 0.0 else 1.0
    if not isinstance(expr, Basic) or not expr.args:
        return 1.0  # symbols, constants (pi, E, I), infinities
    bounds = [_log10_bound(arg, limit) for arg in expr.args]
    top = max(bounds)
    if top > limit:
        return math.inf
    if type(expr).__name__ == "exp":  # exp(x) <= 10^(0.44 x): a power of e, not a plain function
        return math.inf if top > math.log10(limit) else 0.4343 * 10**top
    if isinstance(expr, Pow):
        base, exponent = bounds
        # |b^e| <= 10^(|e| * log10|b|), and |e| <= 10^(bound of e)
        return math.inf if exponent > math.log10(limit) else base * 10**exponent
    if type(expr).__name__ in _FACTORIAL_LIKE:
        # n! <= n^n and binomial(n, k) <= 2^n, so n * log10(n) digits at most
        if top > math.log10(limit):
            return math.inf
        n = 10**top
        return n * max(math.log10(n), 1.0)
    return sum(bounds) + 1.0  # sums, products, other functions: log10|a*b| <= sum of the parts
