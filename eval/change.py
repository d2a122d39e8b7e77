"""Boundary and reliability together: trained - base in pass@n, pass@1 and pass^k at each T.

A policy can widen what it solves at all (pass@n, the boundary) while solving it less reliably
(pass^k), or become more reliable at what it could already do without widening anything. One
table with the three changes per T reads both off at once:

- **boundary**: the change in pass@n (problems solved at least once in n samples);
- **pass@1**: the change in the mean success rate;
- **pass^k**: the change in the chance that k independent episodes all succeed, at a stated k
  (default :data:`DEFAULT_RELIABILITY_K`, or n if smaller).

Each cell is the paired gap of :func:`passkt.eval.stats.compare` (same intervals, same tests);
cells marked significant are so after Holm's correction over the table's 3 x |T| cells.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from passkt.eval.intervals import holm
from passkt.eval.outcomes import OutcomeTable, Record, freeze_arrays
from passkt.eval.stats import METHOD_TEXT, compare

__all__ = ["DEFAULT_RELIABILITY_K", "Change", "change", "reading", "reliability_k"]

DEFAULT_RELIABILITY_K = 8
"""The k of pass^k in the three-way table (tau-bench reports pass^k up to k = 8)."""

ROWS = ("boundary", "pass@1", "pass^k")


def reliability_k(n: int, k: int | None = None) -> int:
    """The stated k: ``k`` if given (refused above ``n``), else ``min(8, n)``."""
    if k is None:
        return min(DEFAULT_RELIABILITY_K, n)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"the k of pass^k must be a positive int, got {k!r}")
    if k > n:
        raise ValueError(
            f"k={k} is more than the n={n} samples per problem: pass^k is undefined for k > n; "
            f"give a k from 1 to {n}"
        )
    return int(k)


def reading(boundary: str, reliability: str) -> str:
    """The table's words for one T, from the boundary's and pass^k's verdicts (``gain``,
    ``loss``, ``equivalent``, ``inconclusive``): e.g. ``more reliable; wider not shown`` or
    ``wider but less reliable``. An inconclusive change is never read as none: only an
    ``equivalent`` one (inside a pre-registered margin) is ``as wide`` / ``as reliable``."""
    wide = {"gain": "wider", "loss": "narrower", "equivalent": "as wide"}.get(boundary, "")
    rely = {"gain": "more reliable", "loss": "less reliable", "equivalent": "as reliable"}.get(
        reliability, ""
    )
    if wide and rely:
        joint = " and " if (boundary == reliability or "as" in (wide[:2], rely[:2])) else " but "
        return wide + joint + rely
    if wide:
        return f"{wide}; a change in reliability not shown"
    if rely:
        return f"{rely}; wider not shown"
    return "neither change shown"


@dataclass(frozen=True, eq=False)
class Change(Record):
    """The three-way change of run ``b`` against run ``a`` per budget.

    Attributes:
        name_a: Reference run (e.g. base).
        name_b: Compared run (e.g. RL).
        budgets: The T grid.
        n: Samples per problem (the boundary is pass@n).
        k: The k of pass^k.
        num_tasks: Shared problems.
        estimate: Gap per row (boundary, pass@1, pass^k) and T, ``(3, len(budgets))``.
        lower: Lower CI bound, same shape.
        upper: Upper CI bound.
        p: Two-sided p-value of each cell.
        p_holm: ``p`` after Holm's correction over the whole table.
        level: Confidence level.
        method: Interval method (``"score"`` or ``"bootstrap"``).
    """

    name_a: str
    name_b: str
    budgets: tuple[int, ...]
    n: int
    k: int
    num_tasks: int
    estimate: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    p: np.ndarray
    p_holm: np.ndarray
    level: float
    method: str

    def __post_init__(self) -> None:
        freeze_arrays(self, "estimate", "lower", "upper", "p", "p_holm")

    def word(self, row: int, j: int) -> str:
        """``gain``, ``loss`` or ``inconclusive`` of one cell (after Holm's correction)."""
        if self.p_holm[row, j] >= 1 - self.level:
            return "inconclusive"
        return "gain" if self.estimate[row, j] > 0 else "loss"

    def reading(self, j: int) -> str:
        """Boundary and reliability at the j-th T, in words."""
        return reading(self.word(0, j), self.word(2, j))

    def to_markdown(self, digits: int = 3) -> str:
        """The table: rows T, columns the three changes and the reading."""
        alpha = 1 - self.level
        header = [
            "T",
            f"boundary (pass@{self.n})",
            "pass@1",
            f"pass^{self.k}",
            "reading",
        ]
        rows = []
        for j, t in enumerate(self.budgets):
            cells = [
                f"{self.estimate[r, j]:+.{digits}f} [{self.lower[r, j]:+.{digits - 1}f}, "
                f"{self.upper[r, j]:+.{digits - 1}f}]" + ("*" if self.p_holm[r, j] < alpha else "")
                for r in range(len(ROWS))
            ]
            rows.append([str(t), *cells, self.reading(j)])
        lines = ["| " + " | ".join(header) + " |", "|---:|---:|---:|---:|:---|"]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        return (
            f"Boundary and reliability, **{self.name_b} - {self.name_a}** on {self.num_tasks} "
            f"shared problems ({self.level:.0%} paired CI: {METHOD_TEXT[self.method]}). "
            f"`*`: significant after Holm's correction over the table's {self.p.size} cells "
            f"(family-wise level {alpha:.2g}); the reading uses the boundary and pass^{self.k}.\n\n"
            + "\n".join(lines)
            + "\n"
        )


def change(
    a: OutcomeTable,
    b: OutcomeTable,
    *,
    k: int | None = None,
    budgets: Sequence[int] | None = None,
    level: float = 0.95,
    method: str = "score",
    n_boot: int = 1000,
    seed: int | None = 0,
) -> Change:
    """The three-way change of ``b`` against ``a`` on their shared tasks, per T.

    Args:
        a: Reference run (e.g. base).
        b: Compared run; changes are ``b - a``.
        k: The k of pass^k (default ``min(8, n)``); more than n is refused.
        budgets: T grid; default the budgets both runs evaluated.
        level: Confidence level and family-wise level of the Holm correction.
        method: ``"score"`` or ``"bootstrap"`` (as in :func:`passkt.eval.stats.compare`).
        n_boot: Resamples of the bootstrap method.
        seed: Seed of the bootstrap method.
    """
    n = min(a.n, b.n)
    k = reliability_k(n, k)
    boundary = compare(a, b, sorted({1, n}), budgets, n_boot, seed, level, method)  # type: ignore[arg-type]
    reliable = compare(
        a,
        b,
        (k,),
        boundary.budgets,
        n_boot,
        seed,
        level,
        method,
        metric="pass^k",  # type: ignore[arg-type]
    )
    rows = [(boundary, -1), (boundary, 0), (reliable, 0)]
    p = np.stack([cmp.gap_p[i] for cmp, i in rows])
    return Change(
        name_a=a.name,
        name_b=b.name,
        budgets=boundary.budgets,
        n=n,
        k=k,
        num_tasks=len(boundary.task_ids),
        estimate=np.stack([cmp.gap[i] for cmp, i in rows]),
        lower=np.stack([cmp.gap_lower[i] for cmp, i in rows]),
        upper=np.stack([cmp.gap_upper[i] for cmp, i in rows]),
        p=p,
        p_holm=holm(p),
        level=level,
        method=method,
    )
