"""The unbiased pass@k estimator and the PASS@(k,T) surface.

pass@k for one problem with ``c`` correct among ``n`` samples is the probability that ``k`` samples
drawn without replacement contain at least one correct one (Chen et al. 2021, "Evaluating Large
Language Models Trained on Code"):

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form avoids huge binomials. We evaluate it in log space, ``-expm1(sum log1p(-k/i))``,
which keeps full relative precision both when pass@k is tiny (c = 1, large n) and when it is
close to 1; the tests check it against exact rational arithmetic up to n = 1024.

The PASS@(k,T) surface is the mean of per-problem pass@k over problems, for each k and budget T.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passkt.eval.outcomes import OutcomeTable, freeze_arrays

__all__ = [
    "Surface",
    "check_ks",
    "default_ks",
    "pass_at_k",
    "pass_at_k_array",
    "pass_at_k_matrix",
    "surface",
]


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def _check_n_k(n: Any, k: Any) -> tuple[int, int]:
    n, k = _check_int(n, "n"), _check_int(k, "k")
    if n < 1:
        raise ValueError(f"n (samples per problem) must be >= 1, got n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"k must satisfy 1 <= k <= n, got k={k}, n={n}")
    return n, k


def _log_survival_table(n: int, k: int) -> np.ndarray:
    """``table[c] = log(C(n-c, k) / C(n, k))`` for c = 0..n (``-inf`` once n - c < k)."""
    i = np.arange(n, 0, -1, dtype=np.float64)  # i = n, n-1, ..., 1
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(i > k, np.log1p(-k / i), -np.inf)
    return np.concatenate(([0.0], np.cumsum(terms)))  # (n + 1,)


def pass_at_k_array(n: int, c: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """Vectorised :func:`pass_at_k` over an array of correct counts ``c`` (any shape).

    Args:
        n: Samples per problem (the same for every entry).
        c: Correct counts, integers in ``[0, n]``.
        k: Samples drawn, ``1 <= k <= n``.

    Returns:
        float64 array of ``c``'s shape.

    Raises:
        ValueError: if a count lies outside ``[0, n]`` or ``k`` outside ``[1, n]``.
        TypeError: if ``n``, ``k`` or ``c`` are not integers.
    """
    n, k = _check_n_k(n, k)
    counts = np.asarray(c)
    if counts.size and not np.issubdtype(counts.dtype, np.integer):
        raise TypeError(f"c must hold integers (correct counts), got dtype {counts.dtype}")
    counts = counts.astype(np.int64)
    if counts.size and (counts.min() < 0 or counts.max() > n):
        bad = counts[(counts < 0) | (counts > n)].ravel()[:5].tolist()
        raise ValueError(f"correct counts must satisfy 0 <= c <= n={n}; got {bad}")
    return 0.0 - np.expm1(_log_survival_table(n, k)[counts])  # 0.0 - 0.0 is +0.0, not -0.0


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: ``1 - C(n-c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the problem.
        c: How many of them were correct, ``0 <= c <= n``.
        k: Budget of attempts, ``1 <= k <= n``.

    Returns:
        The probability that ``k`` of the ``n`` samples, drawn without replacement, contain a
        correct one: 0 when ``c = 0``, 1 when ``n - c < k``.

    Raises:
        ValueError: for ``c`` outside ``[0, n]`` or ``k`` outside ``[1, n]``.
        TypeError: when an argument is not an int.

    Example:
        >>> round(pass_at_k(4, 1, 2), 6)
        0.5
    """
    c = _check_int(c, "c")
    n, k = _check_n_k(n, k)
    if not 0 <= c <= n:
        raise ValueError(f"c (correct samples) must satisfy 0 <= c <= n, got c={c}, n={n}")
    if n - c < k:
        return 1.0
    if c == 0:
        return 0.0  # -expm1(0) would be -0.0
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    return float(-np.expm1(np.sum(np.log1p(-k / i))))


def pass_at_k_matrix(counts: np.ndarray, n: int, ks: Sequence[int]) -> np.ndarray:
    """pass@k for every k in ``ks`` and every entry of ``counts``.

    Args:
        counts: Correct counts of any shape, e.g. ``(num_tasks, num_budgets)``.
        n: Samples per problem.
        ks: The k grid.

    Returns:
        Array of shape ``(len(ks), *counts.shape)``.
    """
    counts = np.asarray(counts)
    return (
        np.stack([pass_at_k_array(n, counts, k) for k in ks])
        if len(ks)
        else np.empty((0, *counts.shape))
    )


def default_ks(n: int) -> tuple[int, ...]:
    """The default k grid: powers of two up to ``n``, and ``n`` itself as the last k.

    ``default_ks(64) == (1, 2, 4, 8, 16, 32, 64)``; when ``n`` is not a power of two it is appended,
    so pass@n (the boundary) is always on the grid: ``default_ks(10) == (1, 2, 4, 8, 10)``.
    """
    n = _check_int(n, "n")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks = [1 << e for e in range(n.bit_length()) if (1 << e) <= n]
    if ks[-1] != n:
        ks.append(n)
    return tuple(ks)


def check_ks(ks: Sequence[int], n: int) -> tuple[int, ...]:
    """Validate a k grid against ``n``: strictly increasing ints in ``[1, n]``."""
    out = tuple(_check_int(k, "k") for k in ks)
    if not out:
        raise ValueError("the k grid is empty; pass e.g. ks=default_ks(n)")
    if any(k1 >= k2 for k1, k2 in itertools.pairwise(out)):
        raise ValueError(f"ks must be strictly increasing, got {out}")
    if out[0] < 1 or out[-1] > n:
        raise ValueError(f"every k must lie in [1, n={n}], got {out}; use default_ks({n})")
    return out


@dataclass(frozen=True, eq=False)
class Surface:
    """The PASS@(k,T) surface of one run.

    Attributes:
        name: Run name (from the ``OutcomeTable``).
        ks: The k grid, increasing.
        budgets: The T grid, increasing.
        values: Mean pass@k over problems, shape ``(len(ks), len(budgets))``.
        per_problem: Per-problem pass@k, shape ``(num_tasks, len(ks), len(budgets))``.
        task_ids: Problems in the order of ``per_problem``'s first axis.
        n: Samples per (problem, T).
    """

    name: str
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    values: np.ndarray
    per_problem: np.ndarray
    task_ids: tuple[str, ...]
    n: int

    def __post_init__(self) -> None:
        shape = (len(self.task_ids), len(self.ks), len(self.budgets))
        if np.shape(self.per_problem) != shape or np.shape(self.values) != shape[1:]:
            raise ValueError(
                f"Surface {self.name!r}: per_problem must have shape {shape} and values "
                f"{shape[1:]}, got {np.shape(self.per_problem)} and {np.shape(self.values)}"
            )
        freeze_arrays(self, "values", "per_problem")

    @property
    def num_tasks(self) -> int:
        """Number of problems averaged over."""
        return len(self.task_ids)

    def value(self, k: int, budget: int) -> float:
        """PASS@(k, T) for a (k, T) on the grid."""
        return float(self.values[self._k_index(k), self._t_index(budget)])

    def _k_index(self, k: int) -> int:
        if k not in self.ks:
            raise ValueError(f"k={k} is not on the surface's k grid {self.ks}")
        return self.ks.index(k)

    def _t_index(self, budget: int) -> int:
        if budget not in self.budgets:
            raise ValueError(f"T={budget} is not on the surface's budget grid {self.budgets}")
        return self.budgets.index(budget)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: ``values[i][j]`` is pass@ks[i] at budgets[j]."""
        return {
            "name": self.name,
            "n": self.n,
            "num_tasks": self.num_tasks,
            "ks": list(self.ks),
            "budgets": list(self.budgets),
            "values": self.values.tolist(),
        }


def surface(table: OutcomeTable, ks: Sequence[int] | None = None) -> Surface:
    """PASS@(k,T) of a run: per-problem pass@k averaged over problems.

    Args:
        table: The run's outcomes.
        ks: The k grid; default :func:`default_ks` of ``table.n``.

    Returns:
        A :class:`Surface` with the mean and the per-problem values.
    """
    ks = default_ks(table.n) if ks is None else check_ks(ks, table.n)
    per_problem = pass_at_k_matrix(table.counts(), table.n, ks)  # (K, P, T)
    per_problem = np.moveaxis(per_problem, 1, 0)  # (P, K, T)
    return Surface(
        name=table.name,
        ks=ks,
        budgets=table.budgets,
        values=per_problem.mean(axis=0),
        per_problem=per_problem,
        task_ids=table.task_ids,
        n=table.n,
    )
