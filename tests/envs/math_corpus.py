"""An adversarial corpus of short LaTeX answers that make sympy compute for minutes or forever.

Shared by ``test_math_bound.py`` and ``benchmarks/math_scoring.py``. Families: power towers,
huge binomials, factorials, high powers of sums, deep nesting, and sums/products/integrals with
huge bounds; plus ``mixtures`` that a fuzzer combines.
"""

from __future__ import annotations

TOWERS = [
    "e^{e^{e^{e^{e}}}}",
    "9^{9^{9}}",
    "10^{10^{10}}",
    "2^{2^{2^{2^{2}}}}",
    "2^2^2^2^2",
    "x^{x^{x^{x}}}",
    r"\exp(\exp(\exp(9)))",
    r"\exp(10^{6})",
    r"e^{10^{7}}",
    "99999999999^{99999999}",
    "10^{100001}",
    "2^{400000}",
]
BINOMIALS = [
    r"\binom{10^{10}}{5000000000}",
    r"\binom{100000}{50000}",
    r"{10^{9} \choose 10^{5}}",
    r"\dbinom{99999}{49999}",
    r"\binom{10000}{5000}",
    r"\tbinom{2^{40}}{2^{20}}",
]
FACTORIALS = [
    "100000!",
    "(10^{10})!",
    "((3!)!)!",
    "9999!",
    "10000!!",
    r"\Gamma(10^{10})",
    "(9!)!",
    "(x+1)!",
]
SYMBOLIC_POWERS = [
    "(x+y+z+1)^{200}",
    "(x+1)^{1000}",
    "(x+1)^{64}",
    "(a+b+c+d)^{30}",
    "(x+y)^{64}(x-y)^{64}",
    r"\left(x+\frac{1}{x}\right)^{60}",
    "(x+1)^{64}-(x-1)^{64}",
    "x^{1000000}",
    "(2x+3y)^{64}",
    r"(\sqrt{2}+\sqrt{3})^{64}",
]
NESTING = [
    r"\frac{1}{" * 40 + "2" + "}" * 40,
    "(" * 29 + "x+1" + ")" * 29,
    r"\sqrt{" * 25 + "2" + "}" * 25,
    r"\frac{1}{" * 12 + "x" + "}" * 12,
    "{" * 200 + "}" * 200,
    "(" * 500,
]
ANALYSIS = [
    r"\sum_{n=1}^{10^{9}} n",
    r"\prod_{k=1}^{10^{6}} k",
    r"\int_0^{10^{10}} e^{x^2} dx",
    r"\lim_{n\to\infty} (1+1/n)^n",
    r"\sqrt[1000000]{2}",
    "10^{-100000}",
    "1e400",
    r"\sin(10^{100})",
]
ADVERSARIAL = TOWERS + BINOMIALS + FACTORIALS + SYMBOLIC_POWERS + NESTING + ANALYSIS
"""Every hand-written adversarial answer."""

FRAGMENTS = [
    "^{",
    "}",
    "(",
    ")",
    "!",
    r"\binom{",
    r"\exp(",
    r"\frac{",
    "}{",
    "x+1",
    "10^{10}",
    "99999",
    "e",
    "x",
    "+",
    "*",
    r"\cdot",
    r"\sqrt{",
    "64",
    "200",
]
"""Pieces a fuzzer strings together into new mixtures."""
