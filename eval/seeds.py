"""The seed-level test: does a training recipe change pass@(k, T), across independent trainings?

One trained policy against its base says what happened to that training run. A claim about a
*recipe* ("RL widens the boundary") needs the recipe replicated: S bases (pretraining seeds, or
independently made base checkpoints), each trained by the recipe one or more times (training
seeds). The unit of replication is the trained policy, and the estimate is the mean over bases of
the within-base paired difference ``trained - base``, averaged over that base's trainings.

Its variance has two parts, and the interval carries both:

- **between bases** (and trainings): bases differ, and so do the recipe's effects on them. The
  spread of the per-base differences ``d_s`` estimates it: ``V_seed = Var_s(d_s) / S``.
- **within evaluation**: which problems were drawn (shared by every base: all are evaluated on
  the same problems, so this part does not shrink with S) and which samples. The spread over
  problems of the seed-averaged per-problem difference estimates it, floored at the mean
  within-problem sampling variance as in :mod:`passkt.eval.intervals`:
  ``V_eval = max(Var_i(D_i) / P, W / (P S))``.

The interval is ``estimate ± c sqrt(V)`` with ``V = V_eval + V_seed`` and Cochran and Cox's
critical value ``c``: each part's Student-t quantile (P - 1 and S - 1 degrees of freedom)
weighted by its share of V. With few bases it is as wide as they warrant (S = 3 gives the
between-seed part 2 degrees of freedom); Welch-Satterthwaite degrees of freedom undercover there.
Each part also holds a share of the other's noise, so V counts some noise twice: the interval
errs on the long side.

Common random numbers. The evaluator seeds sample j of a task the same way in every run with the
same evaluation seed, so a trained policy and its base can share random numbers per sample. That
correlation makes the paired differences less noisy; ``Var_i(D_i)`` and ``Var_s(d_s)`` see the
actual spread, while the floor ``W`` assumes independent runs (an upper bound under a positive
correlation). The test is therefore right with and without common random numbers.

With one base (S = 1) there is no between-seed estimate: :attr:`SeedTest.replicated` is False
and the interval covers evaluation noise only. A finding about the recipe needs S >= 3: with
S = 2 one degree of freedom estimates the between-seed variance, and the interval undercovers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import erfc, sqrt

import numpy as np

from passkt.eval.estimator import Metric, metric_array
from passkt.eval.intervals import pass_at_k_within, t_quantile
from passkt.eval.outcomes import OutcomeTable

MIN_SEEDS = 3
"""Bases needed before the seed-level test calls anything a gain or a loss of the recipe."""

__all__ = [
    "SeedPair",
    "SeedTest",
    "cochran_cox_p",
    "interaction_counts",
    "seed_level_counts",
    "seed_level_test",
]


@dataclass(frozen=True)
class SeedPair:
    """One base and the policies one recipe trained from it (one per training seed)."""

    base: OutcomeTable
    trained: tuple[OutcomeTable, ...]


@dataclass(frozen=True)
class SeedTest:
    """The seed-level estimate of ``trained - base`` at one (k, T), with its interval."""

    k: int
    budget: int
    level: float
    estimate: float
    lower: float
    upper: float
    p_value: float
    per_seed: tuple[float, ...]
    """``d_s``: each base's mean difference over its trainings, in the order given."""
    problems: int
    seeds: int
    trainings: int
    """Trained policies in all."""
    se_eval: float
    se_seed: float
    df: float
    """Degrees of freedom of the parts, weighted by their variances (descriptive)."""

    @property
    def replicated(self) -> bool:
        """Whether the interval carries a usable between-seed variance: three or more bases.

        With two, one degree of freedom estimates it so poorly that the interval undercovers
        (0.89-0.90 at level 0.95 in ``tests/eval/test_seeds.py``'s simulation)."""
        return self.seeds >= MIN_SEEDS

    @property
    def significant(self) -> bool:
        """The interval excludes 0 and the recipe was replicated (:attr:`replicated`)."""
        return self.replicated and (self.lower > 0 or self.upper < 0)

    def verdict(self, margin: float | None = None) -> str:
        """One of four: ``gain`` or ``loss`` (the interval excludes 0), ``equivalent`` (it lies
        inside ``±margin``, a margin fixed before the data: two one-sided tests, each at
        ``(1 - level) / 2``), or ``inconclusive`` (neither: the data cannot tell a change from
        none). Unreplicated (fewer than ``MIN_SEEDS`` bases): ``inconclusive``."""
        if not self.replicated:
            return "inconclusive"
        if self.lower > 0:
            return "gain"
        if self.upper < 0:
            return "loss"
        if margin is not None and -margin < self.lower and self.upper < margin:
            return "equivalent"
        return "inconclusive"


def seed_level_test(
    pairs: Sequence[SeedPair], *, k: int, budget: int, level: float = 0.95
) -> SeedTest:
    """The seed-level test of ``trained - base`` pass@k at T = ``budget`` on shared problems.

    Raises:
        ValueError: If no pair is given, a pair has no trained policy, the runs share no
            problem, or a run lacks ``budget`` or has fewer than k samples.
    """
    if not pairs:
        raise ValueError("the seed-level test needs at least one (base, trained) pair")
    shared = set(pairs[0].base.task_ids)
    for pair in pairs:
        if not pair.trained:
            raise ValueError(f"base {pair.base.name!r} has no trained policy")
        for table in (pair.base, *pair.trained):
            shared &= set(table.task_ids)
    if not shared:
        raise ValueError("the runs share no problem")
    ids = sorted(shared)
    counts = []
    for pair in pairs:
        counts.append(
            (_counts(pair.base, ids, budget, k), [_counts(t, ids, budget, k) for t in pair.trained])
        )
    return seed_level_counts(counts, k=k, budget=budget, level=level)


def _counts(table: OutcomeTable, ids: list[str], budget: int, k: int) -> tuple[np.ndarray, int]:
    if budget not in table.budgets:
        raise ValueError(f"run {table.name!r} has no T = {budget} (T in {list(table.budgets)})")
    if table.n < k:
        raise ValueError(f"run {table.name!r} has n = {table.n} samples, fewer than k = {k}")
    index = {task: i for i, task in enumerate(table.task_ids)}
    rows = [index[task] for task in ids]
    return table.correct[rows, :, table.budgets.index(budget)].sum(axis=1), table.n


def seed_level_counts(
    pairs: Sequence[tuple[tuple[np.ndarray, int], Sequence[tuple[np.ndarray, int]]]],
    *,
    k: int,
    budget: int,
    level: float = 0.95,
    metric: Metric = "pass@k",
) -> SeedTest:
    """:func:`seed_level_test` on correct counts: ``[((base_counts, n), [(trained, n), ...])]``
    per base, every count array ``(P, ...)`` over the same problems in the same order.
    ``metric="pass^k"`` tests the change in pass^k instead of pass@k.

    Trailing axes beyond the first are independent cells (the calibration simulates many studies
    at once); :class:`SeedTest` fields are then arrays.
    """
    per_seed, v_eval, problems = _changes(pairs, k, metric)
    return _test(per_seed, v_eval, problems, k, budget, level, sum(len(t) for _, t in pairs))


def _changes(
    pairs: Sequence[tuple[tuple[np.ndarray, int], Sequence[tuple[np.ndarray, int]]]],
    k: int,
    metric: Metric,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each base's mean change ``d_s`` ``(S, ...)``, the evaluation variance of their mean, and
    the number of problems."""
    diffs, withins = [], []
    for (base_counts, base_n), trained in pairs:
        base_value = metric_array(metric, base_n, np.asarray(base_counts), k)
        base_within = pass_at_k_within(base_n, np.asarray(base_counts), [k], metric)[:, 0]
        values = [metric_array(metric, n, np.asarray(c), k) for c, n in trained]
        within = [pass_at_k_within(n, np.asarray(c), [k], metric)[:, 0] for c, n in trained]
        diffs.append(np.mean(values, axis=0) - base_value)  # (P, ...)
        withins.append(base_within + np.sum(within, axis=0) / len(trained) ** 2)
    d = np.stack(diffs, axis=1)  # (P, S, ...)
    problems, seeds = d.shape[0], d.shape[1]
    per_problem = d.mean(axis=1)  # D_i, (P, ...)
    mean_within = np.maximum(np.stack(withins, axis=1).mean(axis=(0, 1)), 0.0)
    v_eval = np.maximum(
        per_problem.var(axis=0, ddof=1) / problems, mean_within / (problems * seeds)
    )
    return d.mean(axis=0), v_eval, problems


def interaction_counts(
    first: Sequence[tuple[tuple[np.ndarray, int], Sequence[tuple[np.ndarray, int]]]],
    second: Sequence[tuple[tuple[np.ndarray, int], Sequence[tuple[np.ndarray, int]]]],
    *,
    k_first: int,
    k_second: int,
    level: float = 0.95,
    metric: Metric = "pass@k",
) -> SeedTest:
    """The seed-level test of a difference of changes: ``(trained - base)`` on the first problem
    set minus ``(trained - base)`` on the second (RL's boundary change on bridge minus its change
    on math), with the same bases in the same order in both. Each base's difference of changes
    is one replicate; the two problem sets' evaluation variances add (they are independent)."""
    if len(first) != len(second):
        raise ValueError(f"{len(first)} bases on one side, {len(second)} on the other")
    seeds_a, v_a, problems_a = _changes(first, k_first, metric)
    seeds_b, v_b, problems_b = _changes(second, k_second, metric)
    trainings = sum(len(t) for _, t in first) + sum(len(t) for _, t in second)
    return _test(seeds_a - seeds_b, v_a + v_b, min(problems_a, problems_b), k_first, -1, level,
                 trainings)  # fmt: skip


def _test(
    per_seed: np.ndarray,
    v_eval: np.ndarray,
    problems: int,
    k: int,
    budget: int,
    level: float,
    trainings: int,
) -> SeedTest:
    """The interval and p-value from the per-seed changes and the evaluation variance."""
    seeds = per_seed.shape[0]
    v_seed = per_seed.var(axis=0, ddof=1) / seeds if seeds > 1 else np.zeros_like(v_eval)
    variance = v_eval + v_seed
    estimate = per_seed.mean(axis=0)
    se = np.sqrt(variance)
    # Cochran and Cox's critical value: each part's t quantile (P - 1 and S - 1 degrees of
    # freedom), weighted by its variance. Welch-Satterthwaite degrees of freedom undercover with
    # S = 2 or 3 bases (0.89 and 0.93 at level 0.95 in the calibration); this does not.
    t_eval = t_quantile(level, problems - 1)
    t_seed = t_quantile(level, seeds - 1) if seeds > 1 else t_eval
    with np.errstate(divide="ignore", invalid="ignore"):
        quantile = np.where(variance > 0, (v_eval * t_eval + v_seed * t_seed) / variance, t_eval)
    lower = np.clip(estimate - quantile * se, -1.0, 1.0)
    upper = np.clip(estimate + quantile * se, -1.0, 1.0)
    # The p-value that agrees with the interval: the level at which it would just touch 0.
    with np.errstate(divide="ignore", invalid="ignore"):
        stat = np.where(se > 0, np.abs(estimate) / se, np.where(estimate != 0, np.inf, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(
            variance > 0,
            (v_eval * (problems - 1) + v_seed * max(seeds - 1, 1)) / variance,
            problems - 1,
        )
    p_value = cochran_cox_p(stat, v_eval, v_seed, problems - 1, seeds - 1 if seeds > 1 else 0)
    scalar = np.ndim(estimate) == 0
    convert = float if scalar else np.asarray
    return SeedTest(
        k=k,
        budget=budget,
        level=level,
        estimate=convert(estimate),
        lower=convert(lower),
        upper=convert(upper),
        p_value=convert(p_value),
        per_seed=tuple(float(x) for x in per_seed) if scalar else tuple(per_seed),
        problems=problems,
        seeds=seeds,
        trainings=trainings,
        se_eval=convert(np.sqrt(v_eval)),
        se_seed=convert(np.sqrt(v_seed)),
        df=convert(df),
    )


def _t_of_z(z: np.ndarray, df: int) -> np.ndarray:
    """The inverse of :func:`passkt.eval.intervals.t_to_z` (Peizer and Pratt's deviate solved
    for t), so that ``t_quantile(level, df) == _t_of_z(z_quantile(level), df)``."""
    z = np.asarray(z, dtype=np.float64)
    if df < 1:
        return z
    a = df - 2 / 3 + 1 / (10 * df)
    with np.errstate(over="ignore"):
        t = np.sqrt(df * np.expm1((df - 5 / 6) * (z / a) ** 2))
    return np.clip(t, z, 100 * z)  # t_quantile's bisection bracket [z, 100 z]


def cochran_cox_p(
    stat: np.ndarray, v_eval: np.ndarray, v_seed: np.ndarray, df_eval: int, df_seed: int
) -> np.ndarray:
    """The p-value that agrees with the seed-level interval at every level: the ``1 - level`` at
    which the interval, built the same way (Cochran and Cox's critical value, the two parts' t
    quantiles weighted by their variances), has half-width ``stat`` standard errors, so it just
    touches 0. Then ``p < 1 - level`` exactly when the level interval excludes 0.

    The critical value grows with the normal deviate z of the level, so z is found by bisection
    (80 halvings of [0, 40]) and ``p = erfc(z / sqrt 2)``.
    """
    stat = np.asarray(stat, dtype=np.float64)
    v_eval, v_seed = np.broadcast_arrays(np.asarray(v_eval, float), np.asarray(v_seed, float))
    variance = v_eval + v_seed
    weight = np.divide(v_seed, variance, out=np.zeros_like(variance), where=variance > 0)

    def critical(z: np.ndarray) -> np.ndarray:
        t_seed = _t_of_z(z, df_seed) if df_seed >= 1 else _t_of_z(z, df_eval)
        return (1 - weight) * _t_of_z(z, df_eval) + weight * t_seed

    lo, hi = np.zeros_like(stat + weight), np.full_like(stat + weight, 40.0)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = critical(mid) < stat
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    z = np.where(np.isinf(stat), np.inf, (lo + hi) / 2)
    return _two_sided(z)


def _two_sided(z: np.ndarray) -> np.ndarray:
    return np.vectorize(lambda x: erfc(x / sqrt(2)), otypes=[np.float64])(z)
