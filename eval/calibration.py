"""Calibration by simulation: do the intervals cover, and does ``compare`` stay quiet on A/A?

Problems get known success probabilities from a regime, outcomes are drawn as the evaluator
draws them (n independent samples per problem), and the same interval code that ``passkt report``
and ``passkt compare`` run is applied to many simulated runs at once (a simulated run is one
trailing axis of the counts, so 1000 runs cost one vectorised call). The target of every interval
is the population value: the mean over the regime's problem distribution, which a new benchmark
of the same size and a new evaluation would both redraw.

The same simulations check pass^k (``metric="pass^k"``): its cells and its paired gaps run through
the same interval code with the metric switched, against the population value ``mean p ** k``.

Used by ``tests/eval/test_calibration.py`` (the proof) and ``benchmarks/calibration.py`` (the
table in ``benchmarks/README.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from passkt.eval.estimator import METRICS, Metric
from passkt.eval.intervals import holm, paired_gap_intervals, pass_at_k_interval, pass_at_k_table
from passkt.eval.stats import bootstrap_means

__all__ = ["REGIMES", "CalibrationRow", "calibrate", "sharpen"]


def _hard(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Most problems unsolvable (p = 0), the rest rarely solved: the study's boundary regime."""
    p = rng.beta(0.3, 8.0, shape)
    p[rng.random(shape) < 0.6] = 0.0
    return p


REGIMES: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "easy": lambda rng, shape: rng.beta(2.0, 2.0, shape),
    "mixed": lambda rng, shape: rng.beta(0.5, 1.5, shape),
    "hard": _hard,
    "flat": lambda rng, shape: np.full(shape, 0.3),
}
"""Problem success probabilities: ``easy`` spread around 0.5, ``mixed`` skewed low, ``hard``
60% never solvable and the rest p ~ Beta(0.3, 8) (mean 0.036), ``flat`` every problem p = 0.3
(no between-problem variance at all: only sampling noise)."""


def sharpen(p: np.ndarray) -> np.ndarray:
    """Run b of a gap: ``p ** 0.7``, better where a is ever right, still 0 where a never is."""
    return p**0.7


@dataclass(frozen=True)
class CalibrationRow:
    """One measured rate.

    Attributes:
        regime: Key of :data:`REGIMES`.
        method: ``"score"`` or ``"bootstrap"``.
        target: What was measured: ``coverage pass@k``, ``coverage gap@k``, ``coverage boundary
            difference``, ``A/A headline``, ``A/A cell k=n`` or ``A/A any cell`` (with the
            correction used); for pass^k ``coverage pass^k`` and ``coverage gap^k`` (every k:
            pass^n is not a boundary).
        k: The k, or ``None``.
        rate: Coverage (nominal: the level) or false-positive rate (nominal: 1 - level).
        runs: Simulated runs.
    """

    regime: str
    method: str
    target: str
    k: int | None
    rate: float
    runs: int
    metric: Metric = "pass@k"

    def tolerance(self, level: float, sigmas: float = 3.0) -> float:
        """``sigmas`` binomial standard errors of a rate at its nominal value over the runs."""
        nominal = level if self.target.startswith("coverage") else 1 - level
        return sigmas * float(np.sqrt(nominal * (1 - nominal) / self.runs))


def _truth(
    regime: str, ks: Sequence[int], n: int, seed: int, metric: Metric = "pass@k"
) -> tuple[np.ndarray, np.ndarray]:
    """Population pass@k (or pass^k) of a and of ``sharpen(a)``, from a million problems
    (error ~1e-4)."""
    p = REGIMES[regime](np.random.default_rng([seed, 1]), (1_000_000,))
    k = np.asarray(ks, dtype=np.float64)[:, None]

    def population(q: np.ndarray) -> np.ndarray:
        if metric == "pass^k":
            return (q[None, :] ** k).mean(axis=1)
        return (1 - (1 - q[None, :]) ** k).mean(axis=1)

    return population(p), population(sharpen(p))


def _bootstrap_ci(values: np.ndarray, level: float, n_boot: int, seed: int):
    """The old method: percentile bootstrap over problems (axis 0), every other axis kept."""
    reps = bootstrap_means(values, n_boot, seed)  # (B, ...)
    alpha = 1 - level
    lower, upper = np.quantile(reps, [alpha / 2, 1 - alpha / 2], axis=0)
    p = np.minimum(1.0, 2 * np.minimum((reps <= 0).mean(axis=0), (reps >= 0).mean(axis=0)))
    return values.mean(axis=0), lower, upper, p


def calibrate(
    regime: str,
    method: str,
    *,
    runs: int = 1000,
    num_problems: int = 100,
    n: int = 16,
    ks: Sequence[int] = (1, 2, 4, 8, 16),
    level: float = 0.95,
    n_boot: int = 1000,
    seed: int = 0,
    metric: Metric = "pass@k",
) -> list[CalibrationRow]:
    """Coverage of pass@k, gap and boundary-difference intervals, and A/A false positives.

    Each of ``runs`` simulated studies draws ``num_problems`` problems from the regime, then
    three independent evaluations with ``n`` samples each: run a, its repeat a' (for A/A) and a
    run b whose problems are ``sharpen``-ed (for the gaps). ``ks`` must end with ``n``. With
    ``metric="pass^k"`` the same studies measure pass^k's intervals instead.

    Returns:
        One :class:`CalibrationRow` per (target, k).
    """
    if method not in ("score", "bootstrap"):
        raise ValueError(f"method must be 'score' or 'bootstrap', got {method!r}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    ks = tuple(ks)
    if ks[-1] != n:
        raise ValueError(f"ks must end with n = {n} (the boundary), got {ks}")
    rng = np.random.default_rng([seed, 0])
    p = REGIMES[regime](rng, (num_problems, runs))  # (P, R)
    counts_a = rng.binomial(n, p)
    counts_again = rng.binomial(n, p)
    counts_b = rng.binomial(n, sharpen(p))
    truth_a, truth_b = _truth(regime, ks, n, seed, metric)
    table = pass_at_k_table(n, ks, metric)  # (K, n + 1)

    def per_problem(counts: np.ndarray) -> np.ndarray:
        return np.moveaxis(table[:, counts], 0, 1)  # (P, K, R)

    if method == "score":
        _, lo, hi = pass_at_k_interval(counts_a, n, ks, level, metric)  # (K, R)
        gap = paired_gap_intervals(counts_a, n, counts_b, n, ks, level, metric)
        aa = paired_gap_intervals(counts_a, n, counts_again, n, ks, level, metric)
        gap_lo, gap_hi = gap.gap_lower, gap.gap_upper
        aa_p, aa_wide_p = aa.gap_p, aa.widening_p
    else:
        _, lo, hi, _ = _bootstrap_ci(per_problem(counts_a), level, n_boot, seed)
        diff = per_problem(counts_b) - per_problem(counts_a)
        _, gap_lo, gap_hi, _ = _bootstrap_ci(diff, level, n_boot, seed + 1)
        diff_aa = per_problem(counts_again) - per_problem(counts_a)
        _, _, _, aa_p = _bootstrap_ci(diff_aa, level, n_boot, seed + 2)
        _, _, _, aa_wide_p = _bootstrap_ci(diff_aa[:, -1] - diff_aa[:, 0], level, n_boot, seed + 3)

    alpha = 1 - level
    truth_gap = (truth_b - truth_a)[:, None]
    rows = []

    def row(target: str, k: int | None, hits: np.ndarray) -> None:
        rate = float(np.mean(hits))
        rows.append(CalibrationRow(regime, method, target, k, rate, runs, metric))

    for i, k in enumerate(ks):
        row(f"coverage {metric}", k, (lo[i] <= truth_a[i]) & (truth_a[i] <= hi[i]))
    gap_name = "coverage gap@k" if metric == "pass@k" else "coverage gap^k"
    for i, k in enumerate(ks if metric == "pass^k" else ks[:-1]):
        row(gap_name, k, (gap_lo[i] <= truth_gap[i]) & (truth_gap[i] <= gap_hi[i]))
    if metric == "pass@k":
        row(
            "coverage boundary difference",
            n,
            (gap_lo[-1] <= truth_gap[-1]) & (truth_gap[-1] <= gap_hi[-1]),
        )
    row("A/A headline (widening)", None, aa_wide_p < alpha)
    row("A/A cell k=n", n, aa_p[-1] < alpha)
    row("A/A any cell, uncorrected", None, (aa_p < alpha).any(axis=0))
    holm_p = np.stack([holm(aa_p[:, r]) for r in range(runs)], axis=1)
    row("A/A any cell, Holm", None, (holm_p < alpha).any(axis=0))
    return rows
