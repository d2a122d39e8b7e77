"""``OutcomeTable``: the success/failure of every (task, sample, T) cell of one evaluation run.

Everything in the statistics half of the evaluator (estimator, bootstrap, comparisons, tables,
plots) reads this one structure. :meth:`OutcomeTable.from_records` builds it from result records;
the result store streams its JSONL lines into it with ``passkt.eval.outcome_stream``.
:meth:`OutcomeTable.to_dict` / :meth:`OutcomeTable.from_dict` give a compact JSON form.

Shapes: ``correct[task, sample, budget_index]`` is ``True`` when that sample, run with at most
``budgets[budget_index]`` tool calls, answered the task correctly.
"""

from __future__ import annotations

import difflib
import itertools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

__all__ = ["OutcomeTable", "Record", "freeze_arrays"]

_RECORD_KEYS = ("task_id", "sample", "budget", "correct")
_MAX_LISTED = 10


def _readonly(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return array


def _jsonable(value: Any) -> Any:
    """Arrays, tuples and nested records as plain JSON types."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, (np.integer, np.floating, np.bool_)):
        return value.item()
    return value


class Record:
    """Mixin for the frozen result records: ``to_dict()`` over all dataclass fields."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field; 2-D arrays are indexed ``[k_index][T_index]``."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


def freeze_arrays(record: object, *names: str) -> None:
    """Replace the named array fields of a frozen dataclass by read-only float64 copies."""
    for name in names:
        object.__setattr__(
            record, name, _readonly(np.asarray(getattr(record, name), dtype=np.float64))
        )


def _as_bool_cell(value: Any, where: str) -> bool:
    """Accept ``True/False``, ``0/1`` or ``0.0/1.0`` (a binary reward); reject anything else."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and value in (0, 1):
        return bool(value)
    raise ValueError(
        f"{where}: 'correct' must be a bool (or 0/1), got {value!r}; "
        "store the binary outcome, not a score such as F1"
    )


def _as_int(value: Any, what: str, where: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{where}: {what!r} must be an int, got {value!r}")
    return int(value)


@dataclass(frozen=True, eq=False)
class OutcomeTable:
    """Binary outcomes of one run over tasks x samples x tool-call budgets.

    Attributes:
        task_ids: One id per task, unique, in the order of ``correct``'s first axis.
        budgets: The T grid (max tool calls), strictly increasing non-negative ints.
        correct: Bool array of shape ``(num_tasks, n, num_budgets)``; read-only after creation.
        categories: Optional task category per task (same order as ``task_ids``).
        name: Run name used in tables, legends and comparisons (e.g. ``"base"``, ``"rl"``).
    """

    task_ids: tuple[str, ...]
    budgets: tuple[int, ...]
    correct: np.ndarray
    categories: tuple[str, ...] | None = None
    name: str = "run"

    def __post_init__(self) -> None:
        task_ids = tuple(str(t) for t in self.task_ids)
        budgets = tuple(_as_int(b, "budget", "OutcomeTable.budgets") for b in self.budgets)
        correct = np.asarray(self.correct)
        if correct.dtype != np.bool_:
            if not np.issubdtype(correct.dtype, np.number) or not np.isin(correct, (0, 1)).all():
                raise ValueError(
                    f"OutcomeTable {self.name!r}: correct must be a bool array (or 0/1), "
                    f"got dtype {correct.dtype}"
                )
            correct = correct.astype(bool)
        if correct.ndim != 3:
            raise ValueError(
                f"OutcomeTable {self.name!r}: correct must have shape (num_tasks, n, num_budgets), "
                f"got {correct.ndim} dimensions {correct.shape}"
            )
        if not task_ids:
            raise ValueError(f"OutcomeTable {self.name!r}: needs at least one task")
        if correct.shape[0] != len(task_ids):
            raise ValueError(
                f"OutcomeTable {self.name!r}: correct has {correct.shape[0]} tasks on axis 0 but "
                f"task_ids has {len(task_ids)}"
            )
        if correct.shape[1] < 1:
            raise ValueError(f"OutcomeTable {self.name!r}: needs at least one sample per task")
        if correct.shape[2] != len(budgets):
            raise ValueError(
                f"OutcomeTable {self.name!r}: correct has {correct.shape[2]} budgets on axis 2 "
                f"but budgets has {len(budgets)} ({budgets})"
            )
        if len(set(task_ids)) != len(task_ids):
            dups = sorted(t for t, count in Counter(task_ids).items() if count > 1)
            raise ValueError(
                f"OutcomeTable {self.name!r}: task_ids must be unique; "
                f"repeated: {dups[:_MAX_LISTED]}"
            )
        if any(b < 0 for b in budgets) or any(b1 >= b2 for b1, b2 in itertools.pairwise(budgets)):
            raise ValueError(
                f"OutcomeTable {self.name!r}: budgets must be non-negative and strictly "
                f"increasing (sort them, drop repeats), got {budgets}"
            )
        categories = self.categories
        if categories is not None:
            categories = tuple(str(c) for c in categories)
            if len(categories) != len(task_ids):
                raise ValueError(
                    f"OutcomeTable {self.name!r}: categories has {len(categories)} entries but "
                    f"there are {len(task_ids)} tasks"
                )
        object.__setattr__(self, "task_ids", task_ids)
        object.__setattr__(self, "budgets", budgets)
        object.__setattr__(self, "correct", _readonly(correct))
        object.__setattr__(self, "categories", categories)
        object.__setattr__(self, "name", str(self.name))

    # ------------------------------------------------------------------ basic views
    @property
    def n(self) -> int:
        """Samples per (task, T)."""
        return int(self.correct.shape[1])

    @property
    def num_tasks(self) -> int:
        """Number of tasks (problems)."""
        return len(self.task_ids)

    def counts(self) -> np.ndarray:
        """Successes among the ``n`` samples, shape ``(num_tasks, num_budgets)``, int64."""
        return self.correct.sum(axis=1, dtype=np.int64)

    def budget_index(self, budget: int) -> int:
        """Position of ``budget`` in :attr:`budgets`; a clear error when it was not evaluated."""
        try:
            return self.budgets.index(int(budget))
        except ValueError:
            raise ValueError(
                f"run {self.name!r} has no budget T={budget}; evaluated budgets: {self.budgets}"
            ) from None

    def select(self, task_ids: Iterable[str]) -> OutcomeTable:
        """A table with only ``task_ids``, in that order.

        Raises:
            ValueError: if an id is unknown (close names are suggested) or the selection is empty.
        """
        wanted = [str(t) for t in task_ids]
        position = {t: i for i, t in enumerate(self.task_ids)}
        missing = [t for t in wanted if t not in position]
        if missing:
            hint = difflib.get_close_matches(missing[0], self.task_ids, n=3)
            raise ValueError(
                f"run {self.name!r} has no task(s) {missing[:_MAX_LISTED]}"
                + (f"; did you mean {hint}?" if hint else "")
            )
        rows = [position[t] for t in wanted]
        cats = None if self.categories is None else tuple(self.categories[i] for i in rows)
        return OutcomeTable(tuple(wanted), self.budgets, self.correct[rows], cats, self.name)

    def select_budgets(self, budgets: Iterable[int]) -> OutcomeTable:
        """A table with only the given budgets (sorted)."""
        chosen = sorted({int(b) for b in budgets})
        cols = [self.budget_index(b) for b in chosen]
        return OutcomeTable(
            self.task_ids, tuple(chosen), self.correct[:, :, cols], self.categories, self.name
        )

    def with_name(self, name: str) -> OutcomeTable:
        """The same outcomes under another run name."""
        return OutcomeTable(self.task_ids, self.budgets, self.correct, self.categories, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OutcomeTable):
            return NotImplemented
        return (
            self.task_ids == other.task_ids
            and self.budgets == other.budgets
            and self.categories == other.categories
            and self.name == other.name
            and np.array_equal(self.correct, other.correct)
        )

    __hash__ = None  # type: ignore[assignment]  # holds an array

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_records(
        cls, records: Iterable[Mapping[str, Any]], *, name: str = "run"
    ) -> OutcomeTable:
        """Build a table from one record per (task, sample, T).

        Each record needs ``task_id``, ``sample`` (int), ``budget`` (int, the T) and ``correct``
        (bool or 0/1); an optional ``category`` is kept. Tasks keep their first-seen order;
        samples and budgets are sorted. Every task must have every (sample, T) of the grid spanned
        by all records.

        Raises:
            ValueError: on a missing key, a duplicate cell (both record positions are named), a
                missing cell (the first ones are named), or inconsistent categories.
        """
        cells: dict[tuple[str, int, int], bool] = {}
        first_seen: dict[tuple[str, int, int], int] = {}
        task_order: dict[str, None] = {}
        category: dict[str, str] = {}
        for i, record in enumerate(records):
            where = f"record {i}"
            for key in _RECORD_KEYS:
                if key not in record:
                    raise ValueError(
                        f"{where}: missing key {key!r}; every record needs {list(_RECORD_KEYS)}"
                    )
            task = str(record["task_id"])
            cell = (
                task,
                _as_int(record["sample"], "sample", where),
                _as_int(record["budget"], "budget", where),
            )
            if cell in cells:
                raise ValueError(
                    f"{where}: duplicate cell (task_id={cell[0]!r}, sample={cell[1]}, "
                    f"T={cell[2]}), first seen in record {first_seen[cell]}; "
                    "each (task, sample, T) must appear once "
                    "(was a run resumed without skipping finished work?)"
                )
            cells[cell] = _as_bool_cell(record["correct"], where)
            first_seen[cell] = i
            task_order.setdefault(task, None)
            if record.get("category") is not None:
                cat = str(record["category"])
                if category.setdefault(task, cat) != cat:
                    raise ValueError(
                        f"{where}: task {task!r} has category {cat!r} here but "
                        f"{category[task]!r} in an earlier record"
                    )
        if not cells:
            raise ValueError(f"no records to build OutcomeTable {name!r} from")
        tasks = tuple(task_order)
        samples = sorted({c[1] for c in cells})
        budgets = sorted({c[2] for c in cells})
        return cls._from_cells(cells, tasks, samples, budgets, category, name)

    @classmethod
    def _from_cells(
        cls,
        cells: Mapping[tuple[str, int, int], bool],
        tasks: Sequence[str],
        samples: Sequence[int],
        budgets: Sequence[int],
        category: Mapping[str, str],
        name: str,
    ) -> OutcomeTable:
        expected = len(tasks) * len(samples) * len(budgets)
        if len(cells) != expected:
            missing = [
                (t, s, b) for t in tasks for s in samples for b in budgets if (t, s, b) not in cells
            ]
            listed = ", ".join(f"(task_id={t!r}, sample={s}, T={b})" for t, s, b in missing[:5])
            raise ValueError(
                f"run {name!r}: {len(missing)} missing (task, sample, T) cell(s) of the "
                f"{len(tasks)} x {len(samples)} x {len(budgets)} grid, e.g. {listed}; "
                "finish the run (resume it) or select the complete tasks and budgets"
            )
        s_pos = {s: j for j, s in enumerate(samples)}
        b_pos = {b: j for j, b in enumerate(budgets)}
        t_pos = {t: j for j, t in enumerate(tasks)}
        correct = np.zeros((len(tasks), len(samples), len(budgets)), dtype=bool)
        for (t, s, b), value in cells.items():
            correct[t_pos[t], s_pos[s], b_pos[b]] = value
        cats = None
        if category:
            unlabeled = [t for t in tasks if t not in category]
            if unlabeled:
                raise ValueError(
                    f"run {name!r}: some records carry a category but task(s) "
                    f"{unlabeled[:_MAX_LISTED]} have none"
                )
            cats = tuple(category[t] for t in tasks)
        return cls(tuple(tasks), tuple(budgets), correct, cats, name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``correct`` is one 0/1 string per (task, T), samples in order.

        The string form (``"0110..."``) keeps a 100 x 64 x 5 table around 40 kB of JSON.
        """
        digits = np.where(self.correct, "1", "0")  # (P, n, T)
        rows = [
            ["".join(digits[i, :, j]) for j in range(len(self.budgets))]
            for i in range(self.num_tasks)
        ]
        return {
            "name": self.name,
            "task_ids": list(self.task_ids),
            "budgets": list(self.budgets),
            "n": self.n,
            "categories": None if self.categories is None else list(self.categories),
            "correct": rows,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutcomeTable:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: when a key is missing or ``correct`` does not match the stated shape.
        """
        for key in ("task_ids", "budgets", "n", "correct"):
            if key not in data:
                raise ValueError(f"OutcomeTable dict: missing key {key!r} (made by to_dict?)")
        n, num_b = int(data["n"]), len(data["budgets"])
        rows = data["correct"]
        if len(rows) != len(data["task_ids"]):
            raise ValueError(
                f"OutcomeTable dict: 'correct' has {len(rows)} rows for "
                f"{len(data['task_ids'])} task_ids"
            )
        correct = np.zeros((len(rows), n, num_b), dtype=bool)
        for i, row in enumerate(rows):
            if len(row) != num_b or any(len(s) != n or set(s) - {"0", "1"} for s in row):
                raise ValueError(
                    f"OutcomeTable dict: 'correct' row {i} (task {data['task_ids'][i]!r}) must be "
                    f"{num_b} strings of {n} characters '0'/'1'"
                )
            for j, s in enumerate(row):
                correct[i, :, j] = np.frombuffer(s.encode("ascii"), dtype=np.uint8) == ord("1")
        cats = data.get("categories")
        return cls(
            tuple(data["task_ids"]),
            tuple(data["budgets"]),
            correct,
            None if cats is None else tuple(cats),
            str(data.get("name", "run")),
        )
