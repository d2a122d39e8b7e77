"""A cheap look at a LaTeX answer before any parser sees it: refuse what would take sympy ages.

latex2sympy evaluates some constructs while it parses (``\\binom{10^{10}}{5 \\cdot 10^9}`` is
computed there), so a check on the parsed tree comes too late for them. ``refusal`` reads the
raw text only, in time linear in its length, and names the first construct whose cost has no
useful bound: power towers (``e^{e^{e}}``), factorials and binomials of large or exponential
arguments, and very deep nesting. Everything it lets through still runs under the CPU limit of
``passkt.envs.math_worker``; the guard only keeps the common hopeless cases from costing a full
limit (and a worker restart) each.

Every MATH-500 gold answer passes the guard (``tests/envs/test_math_bound.py`` checks it).
"""

from __future__ import annotations

import re

__all__ = ["MAX_EXPONENT_DEPTH", "MAX_FACTORIAL_ARGUMENT", "MAX_NESTING", "refusal"]

MAX_NESTING = 10
"""Deepest nesting of ``{``, ``(`` and ``[`` allowed (MATH-500 gold answers reach 2; at 12 the
parser alone takes most of a second)."""

MAX_EXPONENT_DEPTH = 2
"""Most exponents stacked on one another: ``2^{3^{4}}`` is fine, ``2^{3^{4^{5}}}`` is refused."""

MAX_FACTORIAL_ARGUMENT = 10_000
"""Largest integer literal allowed inside the argument of ``!`` or a binomial."""

_OPEN, _CLOSE = "{([", "})]"
_EXPONENT_COMMANDS = re.compile(r"\\exp(?![a-zA-Z])")
_BINOMIAL = re.compile(r"\\[dt]?binom(?![a-zA-Z])|\\choose(?![a-zA-Z])")
_INTEGER = re.compile(r"\d[\d,]*")
_CONTROL_WORD = re.compile(r"\\[a-zA-Z]+|\\.")


def refusal(latex: str) -> str | None:
    """Why ``latex`` is too costly to compare, or None if the worker may try it.

    Args:
        latex: A predicted or gold answer as written.

    Returns:
        A short reason (``"power tower of depth 3"``), or None.
    """
    depth = _max_nesting(latex)
    if depth > MAX_NESTING:
        return f"brackets nested {depth} deep (limit {MAX_NESTING})"
    tower = _exponent_depth(latex)
    if tower > MAX_EXPONENT_DEPTH:
        return f"power tower of depth {tower} (limit {MAX_EXPONENT_DEPTH})"
    for argument in _factorial_arguments(latex):
        if "^" in argument or _EXPONENT_COMMANDS.search(argument) or "!" in argument:
            return "factorial or binomial of an exponential or factorial"
        largest = max((int(m.replace(",", "")) for m in _INTEGER.findall(argument)), default=0)
        if largest > MAX_FACTORIAL_ARGUMENT:
            return f"factorial or binomial of {largest} (limit {MAX_FACTORIAL_ARGUMENT})"
    return None


def _max_nesting(text: str) -> int:
    depth = deepest = 0
    for ch in text:
        if ch in _OPEN:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in _CLOSE:
            depth = max(depth - 1, 0)
    return deepest


def _group_end(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]`` (or the end of the text)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in _OPEN:
            depth += 1
        elif text[i] in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
    return len(text)


def _exponent_depth(text: str) -> int:
    """How many exponents are stacked, counting ``^`` and ``\\exp`` as one level each.

    A superscript's reach is its ``{...}`` group, or the one token after ``^``; a chain
    ``a^b^c`` counts as stacked (latex2sympy reads it as ``a^(b^c)``).
    """
    text = _EXPONENT_COMMANDS.sub("e^", text)
    # level[i]: the exponent depth at character i; scanning once keeps this linear.
    levels: list[tuple[int, int]] = []  # (end index, depth) of the superscripts we are inside
    deepest = 0
    i = 0
    while i < len(text):
        while levels and i >= levels[-1][0]:
            levels.pop()
        if text[i] == "^":
            depth = (levels[-1][1] if levels else 0) + 1
            deepest = max(deepest, depth)
            j = i + 1
            while j < len(text) and text[j] == " ":
                j += 1
            if j < len(text) and text[j] in _OPEN:
                end = _group_end(text, j)
            else:
                token = _CONTROL_WORD.match(text, j)
                end = token.end() if token else min(j + 1, len(text))
                if end < len(text) and text[end] == "^":  # a^b^c: the next ^ is inside
                    end = end + 1
                    levels.append((_reach(text, end), depth))
                    i = j
                    continue
            levels.append((end, depth))
            i = j
            continue
        i += 1
    return deepest


def _reach(text: str, start: int) -> int:
    """End of the exponent that starts at ``start`` (a group or one token)."""
    while start < len(text) and text[start] == " ":
        start += 1
    if start < len(text) and text[start] in _OPEN:
        return _group_end(text, start)
    token = _CONTROL_WORD.match(text, start)
    return token.end() if token else min(start + 1, len(text))


def _factorial_arguments(text: str) -> list[str]:
    """The texts that ``!`` and binomials apply to (``\\!`` is a LaTeX space, not a factorial)."""
    arguments = []
    for match in _BINOMIAL.finditer(text):
        start = match.end()
        for _ in range(2):  # \binom{n}{k}: both groups; n \choose k: the rest of the text
            while start < len(text) and text[start] == " ":
                start += 1
            if start < len(text) and text[start] in _OPEN:
                end = _group_end(text, start)
                arguments.append(text[start:end])
                start = end
        if match.group().startswith("\\choose"):
            arguments.append(text)
    for i, ch in enumerate(text):
        if ch != "!" or (i > 0 and text[i - 1] == "\\"):
            continue
        j = i
        while j > 0 and text[j - 1] == " ":
            j -= 1
        if j > 0 and text[j - 1] in _CLOSE:
            arguments.append(text[_group_start(text, j - 1) : j])
        else:
            k = j
            while k > 0 and (text[k - 1].isdigit() or text[k - 1] == ","):
                k -= 1
            arguments.append(text[k:j])
    return arguments


def _group_start(text: str, close: int) -> int:
    depth = 0
    for i in range(close, -1, -1):
        if text[i] in _CLOSE:
            depth += 1
        elif text[i] in _OPEN:
            depth -= 1
            if depth == 0:
                return i
    return 0
