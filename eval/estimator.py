"""The unbiased pass@k estimator and the PASS@(k,T) surface.

pass@k for one problem with ``c`` correct among ``n`` samples is the probability that ``k`` samples
drawn without replacement contain at least one correct one (Chen et al. 2021, "Evaluating Large
Language Models Trained on Code"):

    pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i = n-c+1}^{n} (1 - k / i)

The product form avoids huge binomials. We evaluate it in log space, ``-expm1(sum log1p(-k/i))``,
which keeps full relative precision both when pass@k is tiny (c = 1, large n) and when it is
close to 1; the tests check it against exact rational arithmetic up to n = 1024.

pass^k (Yao et al. 2024, tau-bench) is the reliability side: the probability that all ``k`` samples
drawn without replacement are correct, unbiased as ``C(c, k) / C(n, k)``. It is pass@k of the
failures read backwards (``pass^k(c) = 1 - pass@k(n - c)``), and we compute it from the same
log-space table so that a tiny pass^k keeps its relative precision too.

The PASS@(k,T) surface is the mean of per-problem pass@k over problems, for each k and budget T;
the pass^k(T) surface (:func:`reliability_surface`) is the mean of per-problem pass^k.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from passkt.eval.outcomes import OutcomeTable, freeze_arrays

__all__ = [
    "METRICS",
    "Metric",
    "Surface",
    "check_ks",
    "default_ks",
    "metric_array",
    "pass_at_k",
    "pass_at_k_array",
    "pass_at_k_matrix",
    "pass_hat_k",
    "pass_hat_k_array",
    "reliability_surface",
    "surface",
]

Metric = Literal["pass@k", "pass^k"]
"""``pass@k``: at least one of k samples succeeds (the boundary side); ``pass^k``: all k do
(the reliability side)."""

METRICS: tuple[Metric, ...] = ("pass@k", "pass^k")


def _check_int(value: Any, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return int(value)


def _check_n_k(n: Any, k: Any) -> tuple[int, int]:
    n, k = _check_int(n, "n"), _check_int(k, "k")
    if n < 1:
        raise ValueError(f"n (samples per problem) must be >= 1, got n={n}")
    if not 1 <= k <= n:
        raise ValueError(
            f"k must satisfy 1 <= k <= n, got k={k}, n={n}: pass@k and pass^k draw k of the n "
            "samples without replacement, so they are undefined for k > n"
        )
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
    counts = _check_counts(n, c)
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


def _check_counts(n: int, c: np.ndarray | Sequence[int]) -> np.ndarray:
    counts = np.asarray(c)
    if counts.size and not np.issubdtype(counts.dtype, np.integer):
        raise TypeError(f"c must hold integers (correct counts), got dtype {counts.dtype}")
    counts = counts.astype(np.int64)
    if counts.size and (counts.min() < 0 or counts.max() > n):
        bad = counts[(counts < 0) | (counts > n)].ravel()[:5].tolist()
        raise ValueError(f"correct counts must satisfy 0 <= c <= n={n}; got {bad}")
    return counts


def pass_hat_k_array(n: int, c: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """Vectorised :func:`pass_hat_k` over an array of correct counts ``c`` (any shape).

    Raises:
        ValueError: if a count lies outside ``[0, n]`` or ``k`` outside ``[1, n]``.
        TypeError: if ``n``, ``k`` or ``c`` are not integers.
    """
    n, k = _check_n_k(n, k)
    counts = _check_counts(n, c)
    # table[n - c] = log(C(c, k) / C(n, k)): the survival table read from the other end.
    return np.exp(_log_survival_table(n, k)[n - counts])


def pass_hat_k(n: int, c: int, k: int) -> float:
    """Unbiased pass^k for one problem: ``C(c, k) / C(n, k)``.

    Args:
        n: Samples drawn for the problem.
        c: How many of them were correct, ``0 <= c <= n``.
        k: Episodes that must all succeed, ``1 <= k <= n``.

    Returns:
        The probability that ``k`` of the ``n`` samples, drawn without replacement, are all
        correct: 0 when ``c < k``, 1 when ``c = n``; equal to pass@1 = c / n at ``k = 1``.

    Example:
        >>> round(pass_hat_k(4, 3, 2), 6)
        0.5
    """
    c = _check_int(c, "c")
    n, k = _check_n_k(n, k)
    if not 0 <= c <= n:
        raise ValueError(f"c (correct samples) must satisfy 0 <= c <= n, got c={c}, n={n}")
    return float(pass_hat_k_array(n, np.array([c]), k)[0])


def metric_array(metric: Metric, n: int, c: np.ndarray | Sequence[int], k: int) -> np.ndarray:
    """Per-problem ``metric`` (``"pass@k"`` or ``"pass^k"``) for every count in ``c``."""
    if metric == "pass@k":
        return pass_at_k_array(n, c, k)
    if metric == "pass^k":
        return pass_hat_k_array(n, c, k)
    raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")


def pass_at_k_matrix(
    counts: np.ndarray, n: int, ks: Sequence[int], metric: Metric = "pass@k"
) -> np.ndarray:
    """pass@k (or pass^k) for every k in ``ks`` and every entry of ``counts``.

    Args:
        counts: Correct counts of any shape, e.g. ``(num_tasks, num_budgets)``.
        n: Samples per problem.
        ks: The k grid.
        metric: ``"pass@k"`` (default) or ``"pass^k"``.

    Returns:
        Array of shape ``(len(ks), *counts.shape)``.
    """
    counts = np.asarray(counts)
    return (
        np.stack([metric_array(metric, n, counts, k) for k in ks])
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
    if out[0] < 1:
        raise ValueError(f"every k must lie in [1, n={n}], got {out}; use default_ks({n})")
    if out[-1] > n:
        raise ValueError(
            f"k={out[-1]} is more than the n={n} samples per problem: pass@k and pass^k are "
            f"undefined for k > n; every k must lie in [1, n={n}], e.g. default_ks({n}) = "
            f"{','.join(map(str, default_ks(n)))}"
        )
    return out


@dataclass(frozen=True, eq=False)
class Surface:
    """The PASS@(k,T) surface of one run (or its pass^k(T) surface).

    Attributes:
        name: Run name (from the ``OutcomeTable``).
        ks: The k grid, increasing.
        budgets: The T grid, increasing.
        values: Mean pass@k over problems, shape ``(len(ks), len(budgets))``.
        per_problem: Per-problem pass@k, shape ``(num_tasks, len(ks), len(budgets))``.
        task_ids: Problems in the order of ``per_problem``'s first axis.
        n: Samples per (problem, T).
        metric: ``"pass@k"`` (the default) or ``"pass^k"``: what ``values`` holds.
    """

    name: str
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    values: np.ndarray
    per_problem: np.ndarray
    task_ids: tuple[str, ...]
    n: int
    metric: Metric = "pass@k"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {METRICS}, got {self.metric!r}")
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

    @property
    def title(self) -> str:
        """``PASS@(k,T)`` or ``pass^k(T)``: the surface's name in captions."""
        return "PASS@(k,T)" if self.metric == "pass@k" else "pass^k(T)"

    def value(self, k: int, budget: int) -> float:
        """The surface (PASS@(k, T) or pass^k(T)) at a (k, T) on the grid."""
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
        """JSON-ready dict: ``values[i][j]`` is the metric at ks[i] and budgets[j]."""
        return {
            "name": self.name,
            "metric": self.metric,
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


def reliability_surface(table: OutcomeTable, ks: Sequence[int] | None = None) -> Surface:
    """pass^k(T) of a run: per-problem pass^k (all k episodes succeed) averaged over problems.

    The other half of PASS@(k,T): pass@k asks whether a problem is solved at all within k
    tries, pass^k whether it is solved every time. A policy can gain one while losing the other,
    so the two surfaces are read side by side.

    Args:
        table: The run's outcomes.
        ks: The k grid; default :func:`default_ks` of ``table.n``.

    Returns:
        A :class:`Surface` with ``metric="pass^k"``.
    """
    ks = default_ks(table.n) if ks is None else check_ks(ks, table.n)
    per_problem = np.moveaxis(pass_at_k_matrix(table.counts(), table.n, ks, "pass^k"), 1, 0)
    return Surface(
        name=table.name,
        ks=ks,
        budgets=table.budgets,
        values=per_problem.mean(axis=0),
        per_problem=per_problem,
        task_ids=table.task_ids,
        n=table.n,
        metric="pass^k",
    )
