"""The noise floor: how much two evaluations of the same policy differ by chance alone.

Evaluate the reference policy (the base model) more than once, with different evaluation seeds
and everything else equal. Every pair of those runs is an A/A comparison: its gaps and its
boundary swaps (problems one evaluation solved at least once and the other never did) are pure
sampling noise. For one trained-vs-base comparison the floor is descriptive: a difference between
RL (or SFT) and the base is marked **beyond the noise floor** when it is outside it:

- a gap cell: significant after Holm's correction *and* larger in size than the same cell's gap
  in every base-vs-base pair;
- the boundary: more problems only the trained policy solves than the largest one-sided swap
  count of any base-vs-base pair, *and* a boundary difference whose CI is above 0 (a gain); or,
  mirrored, more problems only the base solves and a CI below 0 (a loss: the boundary narrowed).

With R repeats there are R (R - 1) / 2 pairs; two or three repeats give a rough floor, so the
report prints the floor itself next to every result for the reader to judge. Beyond the floor is
said of one trained policy against its base; a claim about a training recipe (a gain, a loss, no
change) needs the seed-level test of several independently trained policies
(:mod:`passkt.eval.seeds`). :class:`Findings` and :func:`findings` keep their names (the study's
compare metrics store them as ``finding_*`` keys).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passkt.eval.boundary import BoundaryDifference, boundary_comparison
from passkt.eval.outcomes import OutcomeTable, Record, freeze_arrays
from passkt.eval.stats import Comparison, compare

__all__ = ["Findings", "NoiseFloor", "findings", "noise_floor"]


@dataclass(frozen=True, eq=False)
class NoiseFloor(Record):
    """Gaps and boundary swaps between repeated evaluations of one policy.

    Attributes:
        names: The repeated runs.
        pairs: ``(name_i, name_j)`` for every pair, i < j.
        ks: The k grid.
        budgets: The T grid.
        gaps: Gap ``run_j - run_i`` of each pair, ``(len(pairs), len(ks), len(budgets))``.
        budget: T of the boundary sets.
        swaps: Per pair, ``(only_i, only_j)``: problems solved at least once by one run and
            never by the other.
        of: What the runs evaluate, as the report says it ("the same policy"; with peers, "the
            same policy and of others made the same way").
    """

    names: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    gaps: np.ndarray
    budget: int
    swaps: tuple[tuple[int, int], ...]
    of: str = "the same policy"

    def __post_init__(self) -> None:
        freeze_arrays(self, "gaps")

    @property
    def max_abs_gap(self) -> np.ndarray:
        """Largest ``|gap|`` over the pairs, per (k, T)."""
        return np.abs(self.gaps).max(axis=0)

    @property
    def max_swap(self) -> int:
        """Largest one-sided swap count over the pairs."""
        return max(max(pair) for pair in self.swaps)

    def to_markdown(self, digits: int = 3) -> str:
        """The floor as the report shows it: swaps per pair and the largest |gap| per (k, T)."""
        lines = [
            f"Noise floor: {len(self.names)} evaluations of {self.of} "
            f"({', '.join(self.names)}), {len(self.pairs)} pair(s). Boundary swaps at "
            f"T = {self.budget} (solved at least once by one evaluation, never by the other): "
            + "; ".join(
                f"{a} only {sa}, {b} only {sb}"
                for (a, b), (sa, sb) in zip(self.pairs, self.swaps, strict=True)
            )
            + f". Largest one-sided swap count: {self.max_swap}.\n",
            f"Largest |gap| between evaluations of {self.of}, per cell (rows T, columns k):\n",
            "| T \\ k | " + " | ".join(str(k) for k in self.ks) + " |",
            "|---:|" + "---:|" * len(self.ks),
        ]
        for j, t in enumerate(self.budgets):
            cells = " | ".join(f"{self.max_abs_gap[i, j]:.{digits}f}" for i in range(len(self.ks)))
            lines.append(f"| {t} | {cells} |")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the per-cell maximum |gap| and the largest swap count."""
        return {
            **super().to_dict(),
            "max_abs_gap": self.max_abs_gap.tolist(),
            "max_swap": self.max_swap,
        }


def noise_floor(
    repeats: Sequence[OutcomeTable],
    ks: Sequence[int],
    budgets: Sequence[int],
    budget: int,
    of: str = "the same policy",
) -> NoiseFloor:
    """The floor from two or more evaluations of the same policy on the same problems.

    Args:
        repeats: The evaluations (distinct names; different evaluation seeds, or policies made
            by the same recipe, e.g. pretrained with other seeds).
        ks: The k grid of the comparisons the floor is read against.
        budgets: Their T grid.
        budget: T of the boundary sets.
        of: What the runs evaluate, for the report's sentences.

    Raises:
        ValueError: for fewer than two runs or repeated names.
    """
    if len(repeats) < 2:
        raise ValueError("a noise floor needs at least two evaluations of the same policy")
    names = tuple(t.name for t in repeats)
    if len(set(names)) != len(names):
        raise ValueError(f"repeated evaluations need distinct names, got {names}")
    pairs, gaps, swaps = [], [], []
    for a, b in itertools.combinations(repeats, 2):
        cmp = compare(a, b, ks=ks, budgets=budgets)
        bc = boundary_comparison(a, b, budget)
        pairs.append((a.name, b.name))
        gaps.append(cmp.gap)
        swaps.append((len(bc.only_a), len(bc.only_b)))
    return NoiseFloor(
        names, tuple(pairs), tuple(cmp.ks), tuple(cmp.budgets), np.stack(gaps), int(budget),
        tuple(swaps), of,
    )  # fmt: skip


@dataclass(frozen=True, eq=False)
class Findings(Record):
    """Which differences of one comparison lie beyond the noise floor (descriptive: one trained
    policy against its base; a recipe's verdict comes from :mod:`passkt.eval.seeds`).

    Attributes:
        cells: ``(k, T)`` of the gap cells beyond the floor (either sign).
        boundary: Whether the trained run's boundary gain is beyond the floor.
        only_b: Problems only run b solves at the boundary budget.
        max_swap: The floor's largest one-sided swap count.
        of: What the floor's runs evaluate (for the sentence).
        loss: Whether run b's boundary *loss* is beyond the floor (the same test, mirrored: more
            problems only run a solves than any base-vs-base swap count, and a CI of the size
            difference below 0).
        only_a: Problems only run a (the reference) solves.
    """

    cells: tuple[tuple[int, int], ...]
    boundary: bool
    only_b: int
    max_swap: int
    of: str = "the same policy"
    loss: bool = False
    only_a: int = 0

    def to_markdown(self, name_b: str, name_a: str) -> str:
        """One paragraph: what of ``name_b - name_a`` is beyond the floor, and that this
        describes one comparison (a claim about a recipe needs the seed-level test)."""
        listed = ", ".join(f"(k={k}, T={t})" for k, t in self.cells) or "none"
        gain = "yes" if self.boundary else "no"
        loss = "yes" if self.loss else "no"
        return (
            f"**Beyond the noise floor** ({name_b} vs {name_a}): gap cells significant after "
            f"Holm and larger than every base-vs-base gap: {listed}. Boundary: {self.only_b} "
            f"problem(s) only {name_b} solves and {self.only_a} only {name_a} solves, against at "
            f"most {self.max_swap} between evaluations of {self.of}; boundary gain beyond the "
            f"floor: {gain}; boundary loss beyond the floor: {loss}. This describes one "
            f"{name_b}-vs-{name_a} comparison; a claim about a recipe needs the seed-level test "
            "(`passkt.eval.seeds`, several independently trained policies).\n"
        )


def findings(
    cmp: Comparison, floor: NoiseFloor, bd: BoundaryDifference, only_b: int, only_a: int = 0
) -> Findings:
    """The differences of ``cmp`` (and its boundary ``bd``) beyond ``floor`` (descriptive).

    ``only_b`` / ``only_a``: problems solved at the boundary budget by one run and never by the
    other (``boundary_comparison``); a gain needs ``only_b`` above the floor's largest swap
    count and a CI of the size difference above 0, a loss the mirror image.
    """
    if floor.ks != cmp.ks or floor.budgets != cmp.budgets or floor.budget != bd.budget:
        raise ValueError(
            f"the noise floor's grid (ks={floor.ks}, T={floor.budgets}, boundary T="
            f"{floor.budget}) differs from the comparison's (ks={cmp.ks}, T={cmp.budgets}, "
            f"boundary T={bd.budget}); build the floor on the same grid"
        )
    outside = cmp.significant & (np.abs(cmp.gap) > floor.max_abs_gap)
    cells = tuple((cmp.ks[i], cmp.budgets[j]) for i, j in zip(*np.nonzero(outside), strict=True))
    gain = only_b > floor.max_swap and bd.difference_lower > 0
    loss = only_a > floor.max_swap and bd.difference_upper < 0
    return Findings(
        cells, bool(gain), int(only_b), floor.max_swap, floor.of, bool(loss), int(only_a)
    )
