"""Where two runs' pass@k curves cross, and the one headline test of a comparison.

Both are read off a :class:`passkt.eval.stats.Comparison`'s gap and its intervals; see the
definitions in :mod:`passkt.eval.stats`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from passkt.eval.outcomes import Record

__all__ = ["Crossover", "Headline", "find_crossover", "parse_headline", "with_significance"]


@dataclass(frozen=True)
class Crossover(Record):
    """Where the gap first changes sign along k at one budget.

    Attributes:
        budget: The T.
        sign_at_k_min: Sign of the gap at the smallest k (-1, 0 or +1).
        k: Crossover k interpolated linearly in log2 k between the bracketing grid points, or
            ``None`` when the sign never flips (or the gap at the smallest k is 0).
        bracket: ``(k_lo, k_hi)``: the last grid k with the starting sign (or a zero gap) and
            the first with the opposite sign; ``None`` when there is no crossover.
        significant: Set by :func:`compare`: the gap's CI excludes 0 on the starting side at
            the smallest k and on the opposite side at some k >= k_hi, so the curves really
            cross rather than wobble around each other within noise.
        k_range: Set by :func:`compare`: ``(k_from, k_to)``, the grid k's between which the
            crossover lies at the CI level: ``k_from`` is the last k of the leading run of k's
            whose gap CI is on the starting side (``None``: not even the smallest k is), ``k_to``
            the first later k whose CI is on the opposite side (``None``: none on the grid).
            ``None`` when there is no crossover.
    """

    budget: int
    sign_at_k_min: int
    k: float | None
    bracket: tuple[int, int] | None
    significant: bool = False
    k_range: tuple[int | None, int | None] | None = None


def find_crossover(
    ks: Sequence[int], gap: Sequence[float], budget: int = 0, tol: float = 1e-12
) -> Crossover:
    """The first sign change of ``gap`` along ``ks`` relative to its sign at ``ks[0]``.

    Gaps within ``tol`` of 0 count as 0: a zero gap neither starts nor completes a crossover.
    """
    gap = np.asarray(gap, dtype=np.float64)
    signs = np.where(np.abs(gap) <= tol, 0, np.sign(gap)).astype(int)
    start = int(signs[0])
    if start == 0:
        return Crossover(int(budget), 0, None, None)
    flipped = np.flatnonzero(signs == -start)
    if flipped.size == 0:
        return Crossover(int(budget), start, None, None)
    j = int(flipped[0])
    g_lo, g_hi = float(gap[j - 1]), float(gap[j])
    x_lo, x_hi = math.log2(ks[j - 1]), math.log2(ks[j])
    frac = g_lo / (g_lo - g_hi)  # in [0, 1): g_lo has the start sign or is 0, g_hi the opposite
    k_cross = 2.0 ** (x_lo + frac * (x_hi - x_lo))
    return Crossover(int(budget), start, k_cross, (int(ks[j - 1]), int(ks[j])))


def with_significance(
    cross: Crossover, ks: Sequence[int], lower: np.ndarray, upper: np.ndarray
) -> Crossover:
    if cross.bracket is None:
        return cross
    start = cross.sign_at_k_min
    on_start = (upper < 0) if start < 0 else (lower > 0)
    on_other = (lower > 0) if start < 0 else (upper < 0)
    before = bool(on_start[0])
    after_idx = ks.index(cross.bracket[1])
    after = bool(np.any(on_other[after_idx:]))
    lead = 0
    while lead < len(ks) and on_start[lead]:
        lead += 1
    k_from = ks[lead - 1] if lead else None
    later = np.flatnonzero(on_other[max(lead, 1) :])
    k_to = ks[max(lead, 1) + int(later[0])] if later.size else None
    return dataclasses.replace(cross, significant=before and after, k_range=(k_from, k_to))


@dataclass(frozen=True)
class Headline(Record):
    """The single test named before looking at the data, read at the nominal level.

    Attributes:
        kind: ``"widening"`` (``gap(k_max) - gap(k_min)`` at ``budget``) or ``"gap"`` (at
            ``(k, budget)``).
        budget: The T.
        k: The k of a ``gap`` headline (``None`` for a widening).
        estimate: The difference.
        lower: Lower CI bound.
        upper: Upper CI bound.
        p_value: Two-sided p-value against no difference (not adjusted: one test).
        significant: ``p_value < 1 - level``.
    """

    kind: str
    budget: int
    k: int | None
    estimate: float
    lower: float
    upper: float
    p_value: float
    significant: bool

    @property
    def label(self) -> str:
        """``widening at T=5`` or ``gap at (k=64, T=5)``."""
        if self.kind == "widening":
            return f"widening at T={self.budget}"
        return f"gap at (k={self.k}, T={self.budget})"


def parse_headline(
    spec: str | None, ks: Sequence[int], budgets: Sequence[int]
) -> tuple[str, int | None, int]:
    """``"widening@T"`` or ``"gap@K,T"`` (default: the widening at the largest T) -> parts."""
    if spec is None:
        return "widening", None, int(budgets[-1])
    kind, _, where = spec.partition("@")
    try:
        numbers = [int(x) for x in where.split(",")] if where else []
    except ValueError:
        numbers = []
    if kind == "widening" and len(numbers) == 1 and numbers[0] in budgets:
        return "widening", None, numbers[0]
    if kind == "gap" and len(numbers) == 2 and numbers[0] in ks and numbers[1] in budgets:
        return "gap", numbers[0], numbers[1]
    raise ValueError(
        f"headline test {spec!r} is not 'widening@T' or 'gap@K,T' with k in {tuple(ks)} and "
        f"T in {tuple(budgets)}, e.g. 'widening@{budgets[-1]}' or 'gap@{ks[-1]},{budgets[-1]}'"
    )
