"""Answer scoring: HotpotQA exact match and F1, math-verify equivalence, GSM8K numbers.

``normalize_answer``, ``exact_match`` and ``f1_score`` follow the official HotpotQA script
(``hotpot_evaluate_v1.py``) character for character, so reported numbers are comparable with
published ones. ``math_equal`` reads the whole final answer (the last ``\\boxed{}``, else the
last ``$...$``, else all of it) as one LaTeX expression and compares it with the gold as a value
(exact numbers, bases, equations as equations: ``passkt.envs.math_answer``), with math-verify's
normalization and ``verify`` for structured answers; ``number_equal`` compares the last number
of a prediction with a gold number exactly (as fractions). ``score_answer`` dispatches on
``Task.answer_type``.

Scoring never evaluates model output as code and never raises on strange predictions: anything
that cannot be read is simply not correct.
"""

from __future__ import annotations

import logging
import math
import re
import string
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from passkt.envs.math_answer import (
    ParsedMath,
    answer_content,
    balanced,
    base_subscripts,
    decimal_places,
    exact,
    unwrap_assignment,
    within_decimal_precision,
)
from passkt.envs.math_guard import refusal
from passkt.envs.math_worker import DEFAULT_CPU_LIMIT_S, compare_math
from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_MATH_CHARS",
    "MAX_MATH_DIGITS",
    "MAX_SYMBOLIC_POWER",
    "Score",
    "exact_match",
    "f1_score",
    "math_equal",
    "math_equal_parsed",
    "normalize_answer",
    "number_equal",
    "parse_math",
    "score_answer",
]

# ---------------------------------------------------------------------------------------------
# HotpotQA (official normalization, exact match and token F1)
# ---------------------------------------------------------------------------------------------

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_SPECIAL_ANSWERS = ("yes", "no", "noanswer")


def normalize_answer(text: str) -> str:
    """Normalize an answer as the official HotpotQA script does.

    Lowercase, drop ASCII punctuation, replace the articles *a*, *an*, *the* by a space, and
    collapse whitespace to single spaces (in that order, as in ``hotpot_evaluate_v1.py``).

    Args:
        text: Any answer text.

    Returns:
        The normalized text.
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> bool:
    """Whether the two answers are equal after ``normalize_answer`` (HotpotQA EM)."""
    return normalize_answer(prediction) == normalize_answer(gold)


def f1_score(prediction: str, gold: str) -> float:
    """HotpotQA token F1 between a prediction and one gold answer.

    As in the official script, when either normalized side is ``yes``, ``no`` or ``noanswer`` the
    score is 0 unless both sides are equal: a yes/no question earns no partial credit.

    Args:
        prediction: The predicted answer.
        gold: The gold answer.

    Returns:
        F1 in [0, 1] over the bags of normalized tokens.
    """
    pred_norm, gold_norm = normalize_answer(prediction), normalize_answer(gold)
    if (pred_norm in _SPECIAL_ANSWERS or gold_norm in _SPECIAL_ANSWERS) and pred_norm != gold_norm:
        return 0.0
    pred_tokens, gold_tokens = pred_norm.split(), gold_norm.split()
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------------------------------------
# Math (math-verify)
# ---------------------------------------------------------------------------------------------

MAX_MATH_CHARS = 1000
"""Longer predictions or gold answers are not compared (not equal): a final answer is short, and
sympy's cost grows quickly with expression size."""

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


def math_equal(prediction: str, gold: str, *, cpu_limit_s: float = DEFAULT_CPU_LIMIT_S) -> bool:
    """Whether a predicted math answer equals the gold answer (``math-verify`` parse + verify).

    ``\\frac{1}{2}`` equals ``0.5``, ``\\boxed{3}`` equals ``3``, ``2\\sqrt{2}`` equals
    ``\\sqrt{8}``, ``x = 5`` equals ``5``. The whole content of the last ``\\boxed{}`` (else of
    the last ``$...$``, else the whole answer) must be one expression equal to the gold:
    ``$2**100$``, ``2 +`` or ``\\frac{1}{2}**7`` are not ``2`` or ``\\frac{1}{2}``, never a prefix
    of them. Numbers are compared exactly (``0.5000004`` is not ``0.5``); the one tolerance is
    for a gold written as a decimal, which accepts an irrational closed form that rounds to it
    (``\\pi`` for ``3.14``). Base subscripts must agree (``40_9`` is not ``40_{10}``). The
    rules, with their reasons, are in ``passkt.envs.math_answer``.

    Bounded in any thread and process: the comparison runs in a worker process that is killed
    once it has used ``cpu_limit_s`` of CPU (``passkt.envs.math_worker``), after cheap checks that
    refuse hopeless inputs before parsing (``passkt.envs.math_guard``: power towers, huge
    factorials and binomials, deep nesting; answers longer than ``MAX_MATH_CHARS``) and after
    parsing (numbers of more than ``MAX_MATH_DIGITS`` digits, high powers of sums).

    Args:
        prediction: The predicted answer (a bare answer or text with a ``\\boxed{}``).
        gold: The gold answer (e.g. a MATH-500 ``answer`` field).
        cpu_limit_s: CPU seconds the comparison may use.

    Returns:
        True if the two are mathematically equal; False otherwise, including when either cannot
        be parsed or the comparison is too costly. Never raises for any input strings.
    """
    if not isinstance(prediction, str) or not isinstance(gold, str):
        return False
    return compare_math(prediction, [gold], cpu_limit_s=cpu_limit_s).correct


def parse_math(answer: str) -> ParsedMath | str:
    """The parsed value of an answer's whole content, or the reason it is too costly to compare.

    The content is ``answer_content(answer)`` (the last ``\\boxed{}``, else the last ``$...$``,
    else everything); it is parsed as one LaTeX expression by math-verify (its normalization:
    ``\\dfrac``, ``\\text{}`` units, ``\\!``, ``\\$``), and nothing shorter is ever tried. An
    answer that cannot be parsed whole gives a ``ParsedMath`` with no expressions (not equal to
    anything). Unbounded in time by itself: the worker process (``passkt.envs.math_worker``)
    calls it.
    """
    if not isinstance(answer, str):
        return _UNPARSED
    if len(answer) > MAX_MATH_CHARS:
        return f"not compared: longer than {MAX_MATH_CHARS} characters"
    reason = refusal(answer)
    if reason is not None:
        return f"not compared: {reason}"
    content = answer_content(answer)
    if not content or not balanced(content):
        return _UNPARSED
    parsed = _parse_whole(content)
    reason = _too_costly(parsed)
    if reason is not None:
        return f"not compared: {reason}"
    return ParsedMath(tuple(parsed), base_subscripts(content), decimal_places(content))


_UNPARSED = ParsedMath((), (), None)


def _parse_whole(content: str) -> tuple[object, ...]:
    """``(value, normalized text)``, or ``(normalized text,)`` when the content is not one
    expression. math-verify's normalization, then latex2sympy on all of it: math-verify's own
    ``parse`` is not used, as it searches the text for anything parseable (an ``answer`` word
    followed by a fraction, the last part of ``a = b = c``, a leading number)."""
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.math_normalization import normalize_latex
    from math_verify import LatexExtractionConfig
    from math_verify.grader import should_treat_as_complex

    try:
        normalized = normalize_latex(content, config=LatexExtractionConfig().normalization_config)
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

    Numbers are compared exactly (decimals as the fractions they denote), base subscripts must
    agree, an equation equals a value only as an assignment ``x = value``, and a decimal gold
    accepts an irrational closed form that rounds to it (``passkt.envs.math_answer``); the rest
    is math-verify's ``verify`` (sets, intervals, tuples, matrices, equations, symbolic forms).
    """
    if not gold.exprs or not prediction.exprs or gold.bases != prediction.bases:
        return False
    from math_verify import verify

    for gold_expr in gold.exprs:
        for pred_expr in prediction.exprs:
            if isinstance(gold_expr, str) or isinstance(pred_expr, str):
                if isinstance(gold_expr, str) and gold_expr == pred_expr:
                    return True  # the same normalized text
                continue
            try:
                exact_gold = exact(gold_expr)
                value = unwrap_assignment(exact(pred_expr), exact_gold)
                if value is None:
                    continue
                if gold.decimals is not None and within_decimal_precision(
                    value, exact_gold, gold.decimals
                ):
                    return True
                if verify([exact_gold], [value], timeout_seconds=None):
                    return True
            except Exception:  # math-verify catches most errors itself: last net
                logger.debug(
                    "compare failed on %.80r vs %.80r", pred_expr, gold_expr, exc_info=True
                )
    return False


def _too_costly(parsed: Iterable[object]) -> str | None:
    """Why a parsed answer is too costly to compare (huge numbers, high powers of sums), or None."""
    from sympy import Basic, Pow

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


# ---------------------------------------------------------------------------------------------
# Numbers (GSM8K)
# ---------------------------------------------------------------------------------------------

# A number: optional minus sign (not after a word character or a closing bracket, so the ``-`` of
# ``10-5`` is an operator), digits with optional thousands commas, an optional decimal part, and
# an optional ``/denominator``.
_NUMBER = re.compile(
    r"(?:(?<![\w)\]}])-)?"
    r"(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:/\d+)?"
)
_MAX_NUMBER_CHARS = 100


def _last_number(text: str) -> Fraction | None:
    """The last number written in ``text`` as an exact fraction, or None if there is none."""
    last = None
    for match in _NUMBER.finditer(text):
        last = match.group()
    if last is None or len(last) > _MAX_NUMBER_CHARS:
        return None
    numerator, _, denominator = last.replace(",", "").partition("/")
    try:
        value = Fraction(numerator)
        return value / int(denominator) if denominator else value
    except (ValueError, ZeroDivisionError):
        return None


def number_equal(prediction: str, gold: str) -> bool:
    """Whether the last number in ``prediction`` equals the number in ``gold`` exactly.

    Numbers are read with their sign, thousands commas, decimals and an optional ``/d`` fraction,
    and compared as exact fractions: ``"1,234"`` equals ``1234``, ``"$18"`` and ``"18.0"`` equal
    ``18``, ``"7/2"`` equals ``3.5``. Surrounding text (units, currency, a final period) is ignored.

    Args:
        prediction: The predicted answer; its last number counts.
        gold: The gold answer (e.g. the number after ``####`` in GSM8K).

    Returns:
        True if both contain a number and the numbers are equal.
    """
    if not isinstance(prediction, str) or not isinstance(gold, str):
        return False
    pred_value, gold_value = _last_number(prediction), _last_number(gold)
    return pred_value is not None and gold_value is not None and pred_value == gold_value


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Score:
    """How one prediction scored against a task's gold answers."""

    correct: bool
    """Exact match (text), mathematical equivalence (math) or numeric equality (number)."""
    f1: float
    """HotpotQA token F1 for text answers; 1.0 or 0.0 (= correct) for math and number answers."""
    note: str | None = None
    """Why a math answer was not compared (too costly to compare; it scores 0), else None."""


def score_answer(task: Task, prediction: str) -> Score:
    """Score a prediction against a task's answer and aliases, by ``task.answer_type``.

    ``"text"``: correct if any gold answer matches exactly (``exact_match``); F1 is the best over
    the gold answers. ``"math"``: equal to any gold answer (as ``math_equal``), with one CPU
    limit for the whole comparison; ``Score.note`` says why a too-costly answer scored 0.
    ``"number"``: ``number_equal`` against any gold answer. For math and number, F1 is 1.0 if
    correct else 0.0.

    Args:
        task: The task, with ``answer``, ``aliases`` and ``answer_type``.
        prediction: The agent's final answer text.

    Returns:
        The ``Score``.

    Raises:
        ValueError: If ``task.answer_type`` is not one of ``"text"``, ``"math"``, ``"number"``.
    """
    if task.answer_type == "text":
        correct = any(exact_match(prediction, gold) for gold in task.answers)
        return Score(correct=correct, f1=max(f1_score(prediction, gold) for gold in task.answers))
    if task.answer_type == "math":
        text = prediction if isinstance(prediction, str) else ""
        verdict = compare_math(text, list(task.answers))
        return Score(correct=verdict.correct, f1=float(verdict.correct), note=verdict.note)
    if task.answer_type == "number":
        correct = any(number_equal(prediction, gold) for gold in task.answers)
    else:
        raise ValueError(
            f"Task {task.task_id!r} has answer_type {task.answer_type!r}; "
            "expected 'text', 'math' or 'number'."
        )
    return Score(correct=correct, f1=1.0 if correct else 0.0)
