"""Answer scoring: HotpotQA exact match and F1, math-verify equivalence, GSM8K numbers.

``normalize_answer``, ``exact_match`` and ``f1_score`` follow the official HotpotQA script
(``hotpot_evaluate_v1.py``) character for character, so reported numbers are comparable with
published ones. ``math_equal`` reads the whole final answer (the last ``\\boxed{}``, else the
last ``$...$``, else all of it) by one grammar, as one object of the gold's kind
(``passkt.envs.math_grammar``), and compares it with the gold as a value (exact numbers, bases,
equations as equations: ``passkt.envs.math_answer``), with math-verify's ``verify`` for
structured answers; ``number_equal`` compares the last number
of a prediction with a gold number exactly (as fractions). ``score_answer`` dispatches on
``Task.answer_type``.

Scoring never evaluates model output as code and never raises on strange predictions: anything
that cannot be read is simply not correct.
"""

from __future__ import annotations

import logging
import re
import string
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

from passkt.envs.math_value import (
    MAX_MATH_CHARS,
    MAX_MATH_DIGITS,
    MAX_SYMBOLIC_POWER,
    math_equal_parsed,
    parse_math,
)
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


def math_equal(prediction: str, gold: str, *, cpu_limit_s: float = DEFAULT_CPU_LIMIT_S) -> bool:
    """Whether a predicted math answer equals the gold answer, read by one grammar.

    ``\\frac{1}{2}`` equals ``0.5``, ``\\boxed{3}`` equals ``3``, ``2\\sqrt{2}`` equals
    ``\\sqrt{8}``, ``x = 5`` equals ``5``, ``2\\,220`` and ``2 220`` equal ``2220``. The content
    of the last ``\\boxed{}`` (else of the last ``$...$``, else the whole answer), after the
    normalizations of ``passkt.envs.math_grammar`` (Unicode, spacing, thousands separators,
    units at the end, repeating decimals, mixed numbers), must be all one object of the gold's
    kind: ``$2**100$``, ``2 +``, ``9\\text{ cm} + \\frac{1}{7}`` or ``5\\quad 0`` are not
    ``2``, ``9`` or ``0``, never a prefix of them; numbers side by side are not a product, an
    interval needs its brackets, and a variable the gold lacks makes it wrong. Numbers are
    compared exactly (``0.5000004`` is not ``0.5``); the one tolerance is for a gold written as
    a decimal, which accepts a short irrational closed form that rounds to it (``\\pi`` for
    ``3.14``, not ``\\frac{\\pi}{21}`` for ``0.15``). Base subscripts must agree (``40_9`` is
    not ``40_{10}``). The rules, with their reasons, are in ``passkt.envs.math_answer`` and
    ``passkt.envs.math_grammar``.

    Bounded in any thread and process: the comparison runs in a worker process that is killed
    once it has used ``cpu_limit_s`` of CPU (``passkt.envs.math_worker``), after cheap checks that
    refuse hopeless inputs before parsing (``passkt.envs.math_guard``: power towers, huge
    factorials and binomials, deep nesting; final answers longer than ``MAX_MATH_CHARS``) and after
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
