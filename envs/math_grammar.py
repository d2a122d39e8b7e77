"""The one grammar of a math answer: what is normalized away, and what must be left.

A reward that a policy is optimised against must not ignore any part of an answer: whatever the
scorer skips, the policy learns to fill with hedges (``9\\text{ cm} + \\frac{1}{7}`` for 9,
``5\\quad 0`` for 0). So an answer's content (``passkt.envs.math_answer.answer_content``) goes
through a fixed list of normalizations that do not change its value, and then all of what is left
must be one mathematical object; ``one_object_reason`` says why it is not.

The normalizations (``normalize``), in order:

- **Unicode** is written as LaTeX: ``°`` ``√`` ``∞`` ``π`` ``−`` ``×`` ``·`` ``≤`` ``±`` ``½`` and
  the like (``3√13`` is ``3\\sqrt{13}``, ``(2, ∞)`` is ``(2, \\infty)``).
- **Sizing and style**: ``\\left``/``\\right`` (and ``\\bigl`` ...), ``\\displaystyle``,
  ``\\dfrac``/``\\tfrac`` (as ``\\frac``), ``\\mbox``/``\\mathrm``/``\\textrm`` (as ``\\text``),
  dollar signs, and ``\\text{}`` around a bare number (``\\text{9}`` is 9).
- **Thousands separators** between digit groups of three: a thin space or other LaTeX space, a
  space, ``{,}`` or ``,\\!`` (``2\\,220``, ``2 220``, ``32{,}348`` are 2220 and 32348). A plain
  comma is left to the parser, which reads ``2,220`` as 2220 and ``1,-2`` as a list.
- **Spacing** (``\\,`` ``\\;`` ``\\quad`` ``~`` ...) becomes a plain space: a space separates,
  it never joins (``5\\quad 0`` is two numbers, not ``5 \\cdot 0``).
- **Bases**: ``{52}_{8}`` and ``(52)_{8}`` are ``52_{8}``.
- **Repeating decimals**: ``0.\\overline{3}`` is ``\\frac{1}{3}``, ``0.1\\overline{6}`` is
  ``\\frac{1}{6}``.
- **Mixed numbers**: an integer followed by a proper fraction of integers is their sum
  (``1\\frac{4}{5}`` and ``137 \\frac{1}{2}``, as MATH writes them, are ``\\frac{9}{5}`` and
  ``\\frac{275}{2}``); with an improper fraction (``3\\frac{5}{2}``) it is two numbers.
- **Units, at the end only**: a final degree sign, ``\\%``, and unit words (``cm``, ``square
  centimeters``, ``inches``, ``dollars`` ..., bare or in ``\\text{}``, with an optional ``^2`` or
  ``^3``) are dropped, repeatedly, from the end. A unit anywhere else stays, and then the answer is
  not one object (``9\\text{ cm} + \\frac{1}{7}``).
- ``and`` / ``or`` between answers are commas (``1 \\text{ and } 2`` lists two values).

What must be left (``one_object_reason``): a sequence of operands joined by operators, where two
operands written side by side are a product only when a reader would read them as one: a
coefficient and a symbol (``2x``, ``3\\sqrt{2}``, ``5i``, ``2(x+1)``, ``\\frac{1}{2}\\pi``). A
number written right after any operand (``5 0``, ``\\frac{1}{4} 2``, ``x 2``, ``\\sqrt13``, which
TeX reads as ``\\sqrt{1}3``), or a numeric fraction or bracket after one (``3\\frac{1}{2}``, a
mixed number or a product? ``5 (0)``), is refused; so are words inside mathematics (a
``\\text{}`` that is neither the whole answer nor a unit at its end) and characters that are
neither LaTeX nor ASCII, an approximation or an ellipsis (``\\approx``, ``\\ldots``), and a
numeral with a subscript that is not a number (``5_{x}``). The value comparison
(``passkt.envs.math_value``) adds what needs the parsed value: the answer must be of the gold's
kind, use no variable the gold does not, and be an equation only where the gold is one or as an
assignment ``x = ...``.
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["UNIT_WORDS", "is_text_answer", "normalize", "one_object_reason", "text_answer"]

_UNICODE = {
    "\u2212": "-",  # minus sign
    "\u2013": "-",
    "\u00d7": r"\times ",
    "\u22c5": r"\cdot ",
    "\u00b7": r"\cdot ",
    "\u00f7": r"\div ",
    "\u2264": r"\le ",
    "\u2265": r"\ge ",
    "\u2260": r"\ne ",
    "\u00b1": r"\pm ",
    "\u2213": r"\mp ",
    "\u221e": r"\infty ",
    "\u03c0": r"\pi ",
    "\u03b8": r"\theta ",
    "\u222a": r"\cup ",
    "\u2229": r"\cap ",
    "\u2208": r"\in ",
    "\u00b0": r"^{\circ}",
    "\u00b2": "^{2}",
    "\u00b3": "^{3}",
    "\u00bd": r"\frac{1}{2}",
    "\u2153": r"\frac{1}{3}",
    "\u2154": r"\frac{2}{3}",
    "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}",
    "\u00a0": " ",  # no-break space
    "\u2009": " ",  # thin space
    "\u202f": " ",  # narrow no-break space
    "\u2007": " ",  # figure space
}
_UNICODE_CHARS = re.compile("[" + "".join(_UNICODE) + "]")
_UNICODE_ROOT = re.compile(r"\u221a\s*(\d+(?:\.\d+)?|[A-Za-z]|\{)")

_SIZING = re.compile(r"\\(?:left|right|[bB]igg?[lr]?)\s*\.?|\\displaystyle|\\textstyle")
_FRAC = re.compile(r"\\[dtc]frac(?![A-Za-z])")
_TEXT_COMMANDS = re.compile(r"\\(?:mbox|mathrm|textrm|textnormal|textbf|textit|mathbf)(?![A-Za-z])")
_DOLLAR = re.compile(r"\\\$")
_TEXT_NUMBER = re.compile(r"\\text\s*\{\s*(-?[\d.,]+)\s*\}")

_SPACE = r"(?:(?<!\\)\\[,;:! ]|~|\\quad|\\qquad|\\thinspace|\\enspace|\s)"
_THOUSANDS = re.compile(rf"(?<![\d.^_])\d{{1,3}}(?:(?:{_SPACE}+|\{{,\}}|,\\!)\d{{3}})+(?![\d])")
_SEPARATOR = re.compile(rf"{_SPACE}+|\{{,\}}|,\\!")
_SPACING = re.compile(rf"(?:{_SPACE})+")
_GROUPED_BASE = re.compile(r"(?<![}\w])[({]\s*([0-9A-Z]+)\s*[)}]\s*_")
_REPEATING = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|dot)\s*\{?\s*(\d+)\s*\}?")
_MIXED = re.compile(
    r"(?<![\d.}^_A-Za-z])(\d+)\s*\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))"
)
_AND_OR = re.compile(r"\\text\{\s*(?:and|or)\s*\}|(?<![A-Za-z\\])(?:and|or)(?![A-Za-z])")


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


UNIT_WORDS = _word_set(
    """
    cm centimeter centimeters centimetre centimetres mm millimeter millimeters m meter meters
    metre metres km kilometer kilometers kilometre kilometres in inch inches ft foot feet yd yard
    yards mi mile miles unit units sq square cubic cu
    g gram grams kg kilogram kilograms mg lb lbs pound pounds oz ounce ounces ton tons
    l liter liters litre litres ml milliliter milliliters gal gallon gallons
    s sec second seconds min minute minutes h hr hrs hour hours day days week weeks month months
    year years
    mph kph kmh
    cent cents dollar dollars euro euros
    degree degrees deg radian radians rad
    percent
    """
)
"""Words read as a unit when they end an answer (and only then)."""

_UNIT_PHRASE = r"[A-Za-z]+(?:[.\s]+[A-Za-z]+)*\.?"
_TRAILING_UNIT = re.compile(
    r"(?:\\text\s*\{\s*(" + _UNIT_PHRASE + r")\}|(?<![A-Za-z\\])(" + _UNIT_PHRASE + r"))"
    r"\s*(?:\^\s*\{?\s*[23]\s*\}?)?\s*$"
)
_TRAILING_MARK = re.compile(
    r"(?:\^\s*\{?\s*\\circ\s*\}?|\\circ|\\degree|\\%|%|\\text\s*\{\s*\}|\.)\s*$"
)


def normalize(content: str) -> str:
    """``content`` with the normalizations of this module's docstring applied, stripped."""
    text = _UNICODE_ROOT.sub(lambda m: r"\sqrt" + _braced(m.group(1)), content)
    text = _UNICODE_CHARS.sub(lambda m: _UNICODE[m.group()], text)
    text = _SIZING.sub("", text)
    text = _FRAC.sub(r"\\frac", text)
    text = _TEXT_COMMANDS.sub(r"\\text", text)
    text = _DOLLAR.sub("", text)
    text = _TEXT_NUMBER.sub(r"\1", text)
    text = _THOUSANDS.sub(lambda m: _SEPARATOR.sub("", m.group()), text)
    text = _SPACING.sub(" ", text).strip()
    text = _GROUPED_BASE.sub(r"\1_", text)
    text = _REPEATING.sub(_repeating_fraction, text)
    text = _MIXED.sub(_mixed_number, text)
    text = _without_trailing_units(text)
    return text if is_text_answer(text) else _AND_OR.sub(",", text).strip()


def _braced(token: str) -> str:
    return token if token == "{" else "{" + token + "}"


def _repeating_fraction(match: re.Match[str]) -> str:
    """``0.1\\overline{6}`` as the exact fraction it denotes (``\\frac{1}{6}``)."""
    whole, fixed, period = match.group(1) or "0", match.group(2), match.group(3)
    head = Fraction(int(whole + fixed), 10 ** len(fixed))
    value = head + Fraction(int(period), 10 ** len(fixed) * (10 ** len(period) - 1))
    return rf"\frac{{{value.numerator}}}{{{value.denominator}}}"


def _mixed_number(match: re.Match[str]) -> str:
    """``1\\frac{4}{5}`` as ``(1+\\frac{4}{5})`` when the fraction is proper; else unchanged
    (``3\\frac{5}{2}`` is then refused as two numbers side by side)."""
    whole, numerator, denominator = (
        match.group(1),
        match.group(2) or match.group(3),
        match.group(4) or match.group(5),
    )
    if int(numerator) >= int(denominator):
        return match.group()
    return rf"({whole}+\frac{{{numerator}}}{{{denominator}}})"


def _without_trailing_units(text: str) -> str:
    """``text`` without the units, degree signs and percent signs that end it."""
    while True:
        stripped = _TRAILING_MARK.sub("", text).rstrip()
        match = _TRAILING_UNIT.search(stripped)
        if match and _is_unit(match.group(1), match.group(2), stripped[: match.start()].rstrip()):
            stripped = stripped[: match.start()].rstrip()
        if stripped == text or not stripped:
            return stripped if stripped else text
        text = stripped


def _is_unit(in_text: str | None, bare: str | None, head: str) -> bool:
    """Whether the words that end an answer are a unit of the value before them (``head``).

    In ``\\text{}`` any unit word counts after any operand; bare, only words of two letters or
    more right after a number or a bracket (``3h`` is 3 times h, not 3 hours).
    """
    words = (in_text or bare or "").replace(".", " ").split()
    if not words or not all(word.lower() in UNIT_WORDS for word in words):
        return False
    if not head or head.endswith(("=", "+", "-", ",", "^", "_")):
        return False
    return in_text is not None or (
        all(len(word) > 1 for word in words) and head[-1] in "0123456789})"
    )


# --- text answers -----------------------------------------------------------------------------

_TEXT_ONLY = re.compile(r"\\text\s*\{([^{}]*)\}")
_WORDS = re.compile(r"[A-Za-z]{2,}(?:[ -][A-Za-z]+)*|\([A-Za-z]\)")


def is_text_answer(latex: str) -> bool:
    """Whether ``latex`` is words, not mathematics: one ``\\text{}`` or a bare phrase of words."""
    return bool(_TEXT_ONLY.fullmatch(latex) or _WORDS.fullmatch(latex))


def text_answer(latex: str) -> str:
    """The words of a text answer, compared case-insensitively (``\\text{(C)}`` is ``c``)."""
    match = _TEXT_ONLY.fullmatch(latex)
    words = match.group(1) if match else latex
    return " ".join(words.strip().strip("()").lower().split())


# --- one object ---------------------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")
_COMMAND = re.compile(r"\\([A-Za-z]+|.)")
_OPERATORS = frozenset("+-*/=<>,;:&|")
_OPERATOR_COMMANDS = _word_set(
    """
    cdot times div pm mp le leq ge geq ne neq lt gt approx cup cap setminus in notin to
    rightarrow leftarrow Rightarrow implies iff subset subseteq supset supseteq mid colon land
    lor wedge vee equiv vert lvert rvert Vert mod bmod circ prime
    """
) | {"\\", "|", ",", ";", ":", "!", " "}
_NOT_ONE_VALUE = _word_set("approx sim simeq cong propto ldots cdots dots")
"""An approximation or an ellipsis: ``5 \\approx 5.0``, ``3.14\\ldots`` is not one value."""
_FUNCTIONS = _word_set(
    """
    sin cos tan cot sec csc arcsin arccos arctan sinh cosh tanh log ln lg exp max min gcd lcm
    det deg arg operatorname
    """
)
_TWO_ARGUMENTS = frozenset({"frac", "binom", "dbinom", "tbinom"})
_ONE_ARGUMENT = frozenset({"sqrt", "overline", "bar", "hat", "vec", "mathbb", "mathcal"})
_OPENERS = {"(": ")", "[": "]", "{": "}"}
_BRACKET_CLOSERS = (")", "]", "}")


class _NotOne(Exception):
    """Raised inside the scanner with the reason the text is not one object."""


class _Scanner:
    """A single left-to-right pass over normalized LaTeX that checks how operands are joined.

    Only the structure is read (numbers, letters, commands, brackets, operators); the value is
    latex2sympy's job. Linear in the length of the text.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.has_text = False

    def sequence(self, closers: tuple[str, ...]) -> bool:
        """Operands and operators up to one of ``closers`` (or the end); whether all numeric."""
        previous: bool | None = None  # None: after an operator; else whether the operand is numeric
        numeric = True
        while True:
            self._skip_spaces()
            if self.pos >= len(self.text) or self.text.startswith(closers, self.pos):
                return numeric
            if self._operator():
                previous = None
                continue
            operand_numeric = self._operand()
            if previous is not None and operand_numeric:
                raise _NotOne("a number written next to another operand, with no operator")
            previous = operand_numeric
            numeric = numeric and operand_numeric

    def _skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def _operator(self) -> bool:
        text, pos = self.text, self.pos
        if text[pos] in _OPERATORS:
            self.pos += 1
            return True
        command = _COMMAND.match(text, pos)
        if command and command.group(1) in _NOT_ONE_VALUE:
            raise _NotOne(f"an approximation or an ellipsis ({command.group()})")
        if command and command.group(1) in _OPERATOR_COMMANDS and text[pos : pos + 2] != "\\\\":
            self.pos = command.end()
            return True
        if command and command.group(1) == "\\":  # a matrix row break
            self.pos = command.end()
            return True
        return False

    def _operand(self) -> bool:
        """Read one operand with its sub- and superscripts; whether it is a number."""
        numeric = self._atom()
        while True:
            self._skip_spaces()
            if self.pos < len(self.text) and self.text[self.pos] in "!'":  # n!, f'
                self.pos += 1
                continue
            if self.pos < len(self.text) and self.text[self.pos] in "^_":
                subscript = self.text[self.pos] == "_"
                self.pos += 1
                if not self._argument() and subscript and numeric:
                    raise _NotOne("a number with a subscript that is not a base")
                continue
            return numeric

    def _atom(self) -> bool:
        text = self.text
        if self.pos >= len(text):
            raise _NotOne("an operator with nothing after it")
        ch = text[self.pos]
        number = _NUMBER.match(text, self.pos)
        if number:
            self.pos = number.end()
            return True
        if ch.isascii() and ch.isalpha():
            self.pos += 1
            return False
        if ch in _OPENERS:
            self.pos += 1
            inner = self.sequence(_BRACKET_CLOSERS if ch != "{" else ("}",))
            return self._close(inner)
        if ch == "\\":
            return self._command()
        raise _NotOne(f"an unexpected character {ch!r}")

    def _close(self, inner_numeric: bool) -> bool:
        if self.pos >= len(self.text) or self.text[self.pos] not in ")]}":
            raise _NotOne("an unclosed bracket")
        self.pos += 1
        return inner_numeric

    def _command(self) -> bool:
        text = self.text
        command = _COMMAND.match(text, self.pos)
        if command is None:
            raise _NotOne("a backslash that ends the answer")
        name = command.group(1)
        self.pos = command.end()
        if name == "{":  # \{ ... \}: a set
            self.sequence((r"\}",))
            if not text.startswith(r"\}", self.pos):
                raise _NotOne("an unclosed set")
            self.pos += 2
            return False
        if name == "text":
            self.has_text = True
            self._skip_spaces()
            self._group_or_token()
            return False
        if name in ("begin", "end"):
            self._group_or_token()
            if name == "begin":  # a matrix: its cells are sequences
                self.sequence((r"\end",))
                if text.startswith(r"\end", self.pos):
                    self.pos += 4
                    self._group_or_token()
            return False
        if name in _TWO_ARGUMENTS:
            first = self._argument()
            second = self._argument()
            return first and second
        if name in _ONE_ARGUMENT:
            self._skip_spaces()
            if name == "sqrt" and self.pos < len(text) and text[self.pos] == "[":
                self.pos += 1
                self.sequence(("]",))
                self._close(True)
            self._argument()
            return False
        if name in _FUNCTIONS:
            if name == "operatorname":
                self._argument()
            while True:  # \log_2 8, \sin^2 x: scripts, then the argument
                self._skip_spaces()
                if self.pos < len(text) and text[self.pos] in "^_":
                    self.pos += 1
                    self._argument()
                    continue
                break
            self._skip_spaces()
            if self.pos < len(text) and not self._at_operator():
                self._operand()
            return False
        return False  # a constant or a Greek letter: a symbol

    def _at_operator(self) -> bool:
        start = self.pos
        found = self._operator()
        self.pos = start
        return found

    def _argument(self) -> bool:
        """A command's argument as TeX reads it: one group, one digit, letter or command."""
        self._skip_spaces()
        if self.pos >= len(self.text):
            raise _NotOne("a command with a missing argument")
        ch = self.text[self.pos]
        if ch == "{":
            self.pos += 1
            inner = self.sequence(("}",))
            return self._close(inner)
        if ch.isdigit():
            self.pos += 1
            return True
        return self._atom()

    def _group_or_token(self) -> bool:
        self._skip_spaces()
        if self.pos < len(self.text) and self.text[self.pos] == "{":
            end = self.text.find("}", self.pos)
            if end < 0:
                raise _NotOne("an unclosed group")
            self.pos = end + 1
        return False


def one_object_reason(latex: str) -> str | None:
    """Why normalized ``latex`` is not one mathematical object, or None when it may be one.

    Text answers (``is_text_answer``) are one object. Otherwise the scanner of this module reads
    the whole text: a number next to another operand with no operator, words inside mathematics,
    an unexpected character or an unclosed bracket give a reason.
    """
    if is_text_answer(latex):
        return None
    scanner = _Scanner(latex)
    try:
        scanner.sequence(())
        if scanner.pos < len(latex):
            raise _NotOne(f"text left over: {latex[scanner.pos : scanner.pos + 20]!r}")
    except _NotOne as reason:
        return str(reason)
    if scanner.has_text:
        return "words inside a mathematical answer"
    return None
