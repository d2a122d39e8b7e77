"""Chance floors of closed-answer tasks: what a uniform guesser reaches, and the boundary beyond it.

On a question with a closed answer set of m choices (yes/no, "which of the two"), a guesser that
picks uniformly among them is right with probability ``1 / m`` per episode, so its pass@k is
``1 - (1 - 1/m) ** k``: 0.9999 at k = 16 for m = 2. A boundary (pass@n) measured on such tasks
says little unless it is read against that floor.

An env declares a task's answer set as ``info["choices"]`` at reset (an optional capability,
``docs/env-contract.md``); ``answer_set_sizes`` reads it back for a finished run. A task without
one is open: its chance is 0.

**Boundary beyond chance.** A problem is beyond chance at T when a one-sided binomial test rejects
"answered no better than a uniform guess": ``P(X >= c)`` for ``X ~ Binomial(n, 1/m)``, with the
Benjamini-Hochberg procedure at level ``alpha`` (default 0.05) over the problems at that T. The
list it returns is a set of discoveries whose expected share of chance's problems is at most
``alpha``; for a pure guesser every problem is chance's, and then the list is empty with
probability at least ``1 - alpha`` (a per-problem test without the correction would list about
``alpha`` of all problems). An open problem (chance 0) is beyond chance once it is solved. With
few samples no problem can be told from a guess: at n = 4 and m = 2 the smallest p-value is 1/16.
The count gets a Wilson interval over problems; the share of the raw boundary that chance alone
explains is ``1 - beyond / raw``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from passkt.eval.boundary import boundary_size_interval
from passkt.eval.evaluate import env_info
from passkt.eval.intervals import score_interval
from passkt.eval.outcomes import OutcomeTable, Record, freeze_arrays

__all__ = [
    "CHANCE_ALPHA",
    "ChanceFloor",
    "answer_set_sizes",
    "benjamini_hochberg",
    "binomial_tail",
    "chance_floor",
]

logger = logging.getLogger(__name__)

CHANCE_ALPHA = 0.05
"""False-discovery level of the boundary beyond chance."""


def answer_set_sizes(
    env_id: str, env_kwargs: Mapping[str, Any], split: str, task_ids: Sequence[str]
) -> dict[str, int]:
    """The size of each task's declared closed answer set (``info["choices"]`` at reset).

    Tasks without a declared set are left out. The env is made once and each task reset once
    (no policy runs). An env without a task list, or one that cannot be made here (a data file
    that moved), declares nothing: the report then has no chance floor, and says why in the log.
    """
    try:
        info = env_info(env_id, env_kwargs, split)
        if info.contract is None or info.contract.task_ids is None:
            return {}
        kwargs = info.contract.make_kwargs(env_kwargs, split)
        env = gym.make(env_id.rpartition(":")[2], **kwargs, disable_env_checker=True)
    except Exception as e:  # a report without a chance floor is still a report
        logger.warning("%s: no chance floor (the env could not be made: %s)", env_id, e)
        return {}
    sizes = {}
    try:
        known = set(info.contract.task_ids)
        for task_id in task_ids:
            if task_id not in known:
                continue
            _, reset_info = env.reset(options={"task_id": task_id})
            choices = reset_info.get("choices")
            if choices:
                sizes[task_id] = len(set(choices))
    finally:
        env.close()
    return sizes


def binomial_tail(n: int, p: float) -> np.ndarray:
    """``tail[c] = P(X >= c)`` for ``X ~ Binomial(n, p)``, c = 0..n (exact, by math.comb)."""
    pmf = [math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(n + 1)]
    return np.minimum(np.cumsum(pmf[::-1])[::-1], 1.0)


def benjamini_hochberg(p_values: np.ndarray, alpha: float) -> np.ndarray:
    """Which of ``p_values`` (1-D) the Benjamini-Hochberg step-up procedure rejects at ``alpha``."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    passed = np.flatnonzero(p[order] <= alpha * np.arange(1, m + 1) / m)
    rejected = np.zeros(m, dtype=bool)
    if passed.size:
        rejected[order[: passed[-1] + 1]] = True
    return rejected


@dataclass(frozen=True, eq=False)
class ChanceFloor(Record):
    """Chance floors of one run's closed-answer tasks.

    Attributes:
        name: Run name.
        ks: The k grid.
        budgets: The T grid.
        num_tasks: Problems of the run.
        num_closed: Problems with a declared closed answer set.
        chance: Mean over problems of a uniform guesser's pass@k, ``(len(ks),)``: the same at
            every T (a guess needs no tool call); 0 for an open problem.
        raw: Boundary size (solved at least once in n) per T.
        raw_lower: Its lower CI bound (over problems and samples), per T.
        raw_upper: Its upper CI bound.
        beyond: Problems beyond chance per T (binomial test, Benjamini-Hochberg at ``alpha``).
        beyond_lower: Wilson lower bound of that count over problems.
        beyond_upper: Its upper bound.
        explained: Share of the raw boundary that chance alone explains, ``1 - beyond / raw``
            per T (NaN where the raw boundary is empty: undefined).
        alpha: False-discovery level of the test.
        level: Confidence level of the intervals.
        n: Samples per (problem, T).
    """

    name: str
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    num_tasks: int
    num_closed: int
    chance: np.ndarray
    raw: np.ndarray
    raw_lower: np.ndarray
    raw_upper: np.ndarray
    beyond: np.ndarray
    beyond_lower: np.ndarray
    beyond_upper: np.ndarray
    explained: np.ndarray
    alpha: float
    level: float
    n: int

    def __post_init__(self) -> None:
        names = ("chance", "raw", "raw_lower", "raw_upper", "beyond", "beyond_lower")
        freeze_arrays(self, *names, "beyond_upper", "explained")

    def to_markdown(self, digits: int = 3) -> str:
        """The chance PASS@(k,T) grid and, per T, the raw boundary beside the one beyond chance."""
        header = "| T \\ k | " + " | ".join(str(k) for k in self.ks) + " |"
        rule = "|---:|" + "|".join("---:" for _ in self.ks) + "|"
        chance = " | ".join(f"{c:.{digits}f}" for c in self.chance)
        grid = "\n".join(f"| {t} | {chance} |" for t in self.budgets)
        rows = []
        for j, t in enumerate(self.budgets):
            explained = self.explained[j]
            share = "undefined (empty boundary)" if np.isnan(explained) else f"{explained:.0%}"
            rows.append(
                f"| {t} | {self.raw[j]:.0f} [{self.raw_lower[j]:.1f}, {self.raw_upper[j]:.1f}] | "
                f"{self.beyond[j]:.0f} [{self.beyond_lower[j]:.1f}, {self.beyond_upper[j]:.1f}] | "
                f"{share} |"
            )
        note = ""
        if 0.5**self.n > self.alpha / self.num_tasks:
            note = (
                f" With n = {self.n} a two-choice problem cannot be told from a guess even when "
                f"every sample is right (p = 2^-{self.n} = {0.5**self.n:.2g}); take more samples."
            )
        return (
            f"Chance floors of **{self.name}**: {self.num_closed} of {self.num_tasks} problems "
            'declare a closed answer set (`info["choices"]`); a uniform guesser among them '
            "reaches this PASS@(k,T) (open problems count 0; the same at every T, since a guess "
            "needs no tool call):\n\n"
            f"{header}\n{rule}\n{grid}\n\n"
            f"Boundary beyond chance: problems solved more often than a uniform guess would be "
            f"(one-sided binomial test per problem, Benjamini-Hochberg at false-discovery level "
            f"{self.alpha:.2g} over the problems at each T), with {self.level:.0%} CIs; the last "
            f"column is the share of the raw boundary that chance alone explains.{note}\n\n"
            "| T | boundary (solved once in n) | beyond chance | explained by chance |\n"
            "|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
        )


def chance_floor(
    table: OutcomeTable,
    sizes: Mapping[str, int],
    ks: Sequence[int],
    *,
    alpha: float = CHANCE_ALPHA,
    level: float = 0.95,
) -> ChanceFloor | None:
    """Chance pass@k and the boundary beyond chance of a run (``None``: no closed answer sets).

    Args:
        table: The run.
        sizes: Answer-set size per task id (``answer_set_sizes``); tasks missing are open.
        ks: The k grid of the report.
        alpha: False-discovery level of the per-problem tests.
        level: Confidence level of the intervals.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), e.g. 0.05; got {alpha!r}")
    guess = np.array([1.0 / sizes[t] if t in sizes else 0.0 for t in table.task_ids])  # (P,)
    if not guess.any():
        return None
    ks = tuple(ks)
    chance = np.array([np.mean(1.0 - (1.0 - guess) ** k) for k in ks])
    counts = table.counts()  # (P, T)
    tails = {p: binomial_tail(table.n, p) for p in set(guess.tolist())}
    p_values = np.stack([tails[p][counts[i]] for i, p in enumerate(guess)])  # (P, T)
    p_values[counts == 0] = 1.0  # never solved: nothing to test
    flags = np.stack([benjamini_hochberg(p_values[:, j], alpha) for j in range(counts.shape[1])])
    flags = flags.T.astype(np.float64)  # (P, T)
    num = table.num_tasks
    _, lower, upper, _ = score_interval(flags, np.zeros_like(flags), level, num)
    raw = [boundary_size_interval(table, t, level) for t in table.budgets]
    raw_size = np.array([r[0] for r in raw], dtype=np.float64)
    beyond = flags.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        explained = np.where(raw_size > 0, 1.0 - beyond / raw_size, np.nan)
    return ChanceFloor(
        name=table.name,
        ks=ks,
        budgets=table.budgets,
        num_tasks=num,
        num_closed=int((guess > 0).sum()),
        chance=chance,
        raw=raw_size,
        raw_lower=np.array([r[1] for r in raw]),
        raw_upper=np.array([r[2] for r in raw]),
        beyond=beyond,
        beyond_lower=lower * num,
        beyond_upper=upper * num,
        explained=explained,
        alpha=alpha,
        level=level,
        n=table.n,
    )
