"""Answer scoring: HotpotQA exact match and F1, math-verify equivalence, GSM8K numbers.

``normalize_answer``, ``exact_match`` and ``f1_score`` follow the official HotpotQA script
(``hotpot_evaluate_v1.py``) character for character, so reported numbers are comparable with
published ones. ``math_equal`` asks ``math-verify`` whether two LaTeX answers are the same
mathematical object; ``number_equal`` compares the last number of a prediction with a gold number
exactly (as fractions). ``score_answer`` dispatches on ``Task.answer_type``.

Scoring never evaluates model output as code and never raises on strange predictions: anything
that cannot be read is simply not correct.
"""

from __future__ import annotations

import logging
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_MATH_CHARS",
    "MAX_MATH_DIGITS",
    "Score",
    "exact_match",
    "f1_score",
    "math_equal",
    "normalize_answer",
    "number_equal",
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

# An answer that already says where its math is (boxed, $...$, \(...\), \[...\]) is parsed as it is;
# a bare answer (``\frac{1}{2}``, ``0.5``) is treated as one LaTeX expression. ``\$`` is a dollar
# sign, not a delimiter.
_LATEX_DELIMITED = re.compile(r"\\boxed|(?<!\\)\$|\\\(|\\\[")

# math-verify logs a warning on its first call without timeouts; math_equal runs without them on
# purpose (see its docstring), so that one message is noise for our users.
_TIMEOUT_WARNING = "Timeout is disabled"


class _DropTimeoutWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_TIMEOUT_WARNING)


for _name in ("math_verify.parser", "math_verify.grader"):
    logging.getLogger(_name).addFilter(_DropTimeoutWarning())


def math_equal(prediction: str, gold: str, *, timeout_s: int | None = None) -> bool:
    """Whether a predicted math answer equals the gold answer (``math-verify`` parse + verify).

    ``\\frac{1}{2}`` equals ``0.5``, ``\\boxed{3}`` equals ``3``, ``2\\sqrt{2}`` equals
    ``\\sqrt{8}``. A bare answer is read as one LaTeX expression; text with ``\\boxed{}`` or ``$``
    delimiters is searched for its final answer as math-verify does.

    Safety without timeouts: math-verify's own timeouts use ``signal.alarm``, which only works on
    the main thread and cancels any alarm the caller (e.g. ``pytest-timeout``) has set. By default
    they are off, and pathological inputs are refused before sympy evaluates them: answers longer
    than ``MAX_MATH_CHARS``, and expressions whose numbers could exceed ``MAX_MATH_DIGITS`` digits
    (power towers, factorials of huge numbers). So this function is safe in any thread.

    Args:
        prediction: The predicted answer (a bare answer or text with a ``\\boxed{}``).
        gold: The gold answer (e.g. a MATH-500 ``answer`` field).
        timeout_s: Optionally also use math-verify's signal timeout of this many seconds per parse
            and comparison. Honoured only on the main thread; elsewhere it is ignored.

    Returns:
        True if the two are mathematically equal; False otherwise, including when either cannot
        be parsed. Never raises for any input strings.
    """
    if not isinstance(prediction, str) or not isinstance(gold, str):
        return False
    if len(prediction) > MAX_MATH_CHARS or len(gold) > MAX_MATH_CHARS:
        return False
    if timeout_s is not None and threading.current_thread() is not threading.main_thread():
        timeout_s = None  # signal.alarm is main-thread only; the guards above still apply
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    try:
        gold_parsed = parse(_delimit(gold), parsing_timeout=timeout_s)  # type: ignore[arg-type]
        pred_parsed = parse(_delimit(prediction), parsing_timeout=timeout_s)  # type: ignore[arg-type]
        if not gold_parsed or not pred_parsed:
            return False
        if _too_large(gold_parsed) or _too_large(pred_parsed):
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout_s))
    except (Exception, TimeoutException):  # math-verify catches most errors itself: last net
        logger.debug("math_equal failed on %.80r vs %.80r", prediction, gold, exc_info=True)
        return False


def _delimit(answer: str) -> str:
    return answer if _LATEX_DELIMITED.search(answer) else f"\\boxed{{{answer}}}"


def _too_large(parsed: Iterable[object]) -> bool:
    """Whether any parsed sympy expression could denote a number of more than MAX_MATH_DIGITS."""
    from sympy import Basic

    limit = float(MAX_MATH_DIGITS)
    return any(isinstance(e, Basic) and _log10_bound(e, limit) > limit for e in parsed)


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


def score_answer(task: Task, prediction: str) -> Score:
    """Score a prediction against a task's answer and aliases, by ``task.answer_type``.

    ``"text"``: correct if any gold answer matches exactly (``exact_match``); F1 is the best over
    the gold answers. ``"math"``: ``math_equal`` against any gold answer. ``"number"``:
    ``number_equal`` against any gold answer. For math and number, F1 is 1.0 if correct else 0.0.

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
        correct = any(math_equal(prediction, gold) for gold in task.answers)
    elif task.answer_type == "number":
        correct = any(number_equal(prediction, gold) for gold in task.answers)
    else:
        raise ValueError(
            f"Task {task.task_id!r} has answer_type {task.answer_type!r}; "
            "expected 'text', 'math' or 'number'."
        )
    return Score(correct=correct, f1=1.0 if correct else 0.0)
