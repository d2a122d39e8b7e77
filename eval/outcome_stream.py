"""Build an ``OutcomeTable`` from records one at a time, keeping about five bytes per record.

``OutcomeTable.from_records`` keeps a dict per cell; reading a large run that way held every
parsed line (about 2 KB each) until the table was built, so ``report`` and the end of ``evaluate``
grew by that much per episode. :class:`OutcomeBuilder`, told the run's grid (``n`` samples and the
budgets, from the manifest), keeps one byte per (task, sample, T) cell (unseen, wrong or right)
and the index of the record that filled it (four bytes, for the duplicate-cell message) in two
flat arrays, so each record's dict is dropped as soon as it is read and a million-episode run
costs a few megabytes. Records off that grid (or all, when no grid is given) go into a dict. It
accepts and refuses exactly what ``from_records`` does, with the same messages, checking each
record as it comes in the order ``from_records`` does (keys, types, duplicate cell, outcome,
category), and the whole-grid checks (missing cells, unlabeled tasks) in :meth:`build`.

``mark`` / ``rollback`` drop the records of an unfinished chunk that the store reads before it
knows the chunk is short: what was added since the latest ``mark`` can be undone.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from passkt.eval.outcomes import _MAX_LISTED, _RECORD_KEYS, OutcomeTable, _as_bool_cell, _as_int

__all__ = ["KeptRecords", "NoRecords", "OutcomeBuilder"]

_UNSEEN, _WRONG, _RIGHT = 0, 1, 2


class OutcomeBuilder:
    """Collects the outcome of each (task, sample, T); :meth:`build` makes the table.

    Args:
        n: The expected samples per (task, T), ``0 .. n - 1`` (the manifest's ``n``).
        budgets: The expected budgets (the manifest's). With both, each task takes ``n x
            len(budgets)`` bytes plus four per cell; any record off that grid is still taken.
    """

    def __init__(self, n: int = 0, budgets: Sequence[int] = ()) -> None:
        self._n = int(n) if budgets else 0
        self._code = {int(b): j for j, b in enumerate(budgets)} if self._n else {}
        self._cells = self._n * len(self._code)  # dense cells per task
        self._task_index: dict[str, int] = {}
        self._tasks: list[str] = []
        self._task_category: list[int] = []  # per task: a code into _categories, -1 until named
        self._category_code: dict[str, int] = {}
        self._categories: list[str] = []
        self._state = bytearray()  # task * cells + sample * len(budgets) + budget code
        self._first = array("I")  # the index of the record that filled each dense cell
        self._sparse: dict[tuple[int, int, int], tuple[bool, int]] = {}  # (task, sample, T)
        self._samples: set[int] = set()
        self._budgets: set[int] = set()
        self._count = 0
        self._error: ValueError | None = None  # the first error, raised in build()
        self._journal: list[Any] | None = None  # cells filled since mark(): ints and tuples
        self._journal_categories: list[int] = []  # tasks first labeled since mark()

    def __len__(self) -> int:
        return self._count

    def add(self, record: Mapping[str, Any]) -> None:
        """Take one record's fields; a bad record stops the builder (its error comes in build)."""
        if self._error is not None:
            return
        where = f"record {self._count}"
        try:
            for key in _RECORD_KEYS:
                if key not in record:
                    raise ValueError(
                        f"{where}: missing key {key!r}; every record needs {list(_RECORD_KEYS)}"
                    )
            sample = _as_int(record["sample"], "sample", where)
            budget = _as_int(record["budget"], "budget", where)
            task = str(record["task_id"])
            index = self._task_index.get(task)
            cell = self._cell(index, sample, budget)
            if index is not None:
                first = self._seen(cell)
                if first is not None:
                    raise ValueError(
                        f"{where}: duplicate cell (task_id={task!r}, sample={sample}, "
                        f"T={budget}), first seen in record {first}; "
                        "each (task, sample, T) must appear once "
                        "(was a run resumed without skipping finished work?)"
                    )
            correct = _as_bool_cell(record["correct"], where)
            category = record.get("category")
            code = -1
            if category is not None:
                category = str(category)
                code = self._category_code.get(category, -1)
                named = -1 if index is None else self._task_category[index]
                if named >= 0 and named != code:
                    raise ValueError(
                        f"{where}: task {task!r} has category {category!r} here but "
                        f"{self._categories[named]!r} in an earlier record"
                    )
        except ValueError as e:
            self._error = e
            return
        if index is None:
            index = self._task_index[task] = len(self._tasks)
            self._tasks.append(task)
            self._task_category.append(-1)
            self._state.extend(bytes(self._cells))
            self._first.frombytes(bytes(self._first.itemsize * self._cells))
            cell = self._cell(index, sample, budget)
        if category is not None and self._task_category[index] < 0:
            if code < 0:
                code = self._category_code[category] = len(self._categories)
                self._categories.append(category)
            self._task_category[index] = code
            if self._journal is not None:
                self._journal_categories.append(index)
        if isinstance(cell, int):
            self._state[cell] = _RIGHT if correct else _WRONG
            self._first[cell] = self._count
        else:
            self._sparse[cell] = (correct, self._count)
        if sample not in self._samples:
            self._samples.add(sample)
        if budget not in self._budgets:
            self._budgets.add(budget)
        if self._journal is not None:
            self._journal.append(cell)
        self._count += 1

    def _cell(self, task: int | None, sample: int, budget: int) -> int | tuple[int, int, int]:
        """The dense position of a cell, or its sparse key (task -1 while the task is new)."""
        code = self._code.get(budget)
        if task is None or code is None or not 0 <= sample < self._n:
            return (-1 if task is None else task, sample, budget)
        return task * self._cells + sample * len(self._code) + code

    def _seen(self, cell: int | tuple[int, int, int]) -> int | None:
        """The index of the record that filled this cell, or None."""
        if isinstance(cell, int):
            return None if self._state[cell] == _UNSEEN else self._first[cell]
        kept = self._sparse.get(cell)
        return None if kept is None else kept[1]

    def mark(self) -> tuple[Any, ...]:
        """A point to :meth:`rollback` to: only the latest mark can be rolled back to."""
        self._journal, self._journal_categories = [], []
        return (
            self._count,
            len(self._tasks),
            self._error,
            frozenset(self._samples),
            frozenset(self._budgets),
            len(self._categories),
        )

    def rollback(self, point: tuple[Any, ...]) -> None:
        """Forget every record added since ``point`` (and the tasks first seen in them)."""
        count, tasks, error, samples, budgets, categories = point
        if self._journal is None:
            raise RuntimeError("OutcomeBuilder.rollback needs a mark() first")
        for cell in self._journal:
            if isinstance(cell, int):
                if cell < len(self._state):
                    self._state[cell] = _UNSEEN
            else:
                del self._sparse[cell]
        for task in self._journal_categories:
            self._task_category[task] = -1
        for task in self._tasks[tasks:]:
            del self._task_index[task]
        for name in self._categories[categories:]:
            del self._category_code[name]
        del self._tasks[tasks:], self._task_category[tasks:], self._categories[categories:]
        del self._state[tasks * self._cells :], self._first[tasks * self._cells :]
        self._samples, self._budgets = set(samples), set(budgets)
        self._count, self._error = count, error
        self._journal, self._journal_categories = [], []

    def build(self, *, name: str = "run") -> OutcomeTable:
        """The table ``OutcomeTable.from_records`` makes from the same records.

        Raises:
            ValueError: as ``from_records``, at the same record and with the same message.
        """
        if self._error is not None:
            raise self._error
        if not self._count:
            raise ValueError(f"no records to build OutcomeTable {name!r} from")
        tasks = tuple(self._tasks)
        samples = sorted(self._samples)
        budgets = sorted(self._budgets)
        shape = (len(tasks), len(samples), len(budgets))
        correct = np.zeros(shape, dtype=bool)
        seen = np.zeros(shape, dtype=bool)
        if self._cells:  # the dense grid's samples and budgets that records used
            state = np.frombuffer(self._state, dtype=np.uint8)
            state = state.reshape(len(tasks), self._n, len(self._code))
            every = range(len(tasks))
            s_in = [j for j, s in enumerate(samples) if 0 <= s < self._n]  # table positions
            b_in = [j for j, b in enumerate(budgets) if b in self._code]
            stored = ([samples[j] for j in s_in], [self._code[budgets[j]] for j in b_in])
            picked = state[np.ix_(every, *stored)]  # a copy: the buffer is free again below
            correct[np.ix_(every, s_in, b_in)] = picked == _RIGHT
            seen[np.ix_(every, s_in, b_in)] = picked != _UNSEEN
            del state
        if self._sparse:
            s_pos = {s: j for j, s in enumerate(samples)}
            b_pos = {b: j for j, b in enumerate(budgets)}
            for (task, sample, budget), (value, _) in self._sparse.items():
                correct[task, s_pos[sample], b_pos[budget]] = value
                seen[task, s_pos[sample], b_pos[budget]] = True
        if self._count != seen.size:
            missing = np.argwhere(~seen)
            listed = ", ".join(
                f"(task_id={tasks[t]!r}, sample={samples[s]}, T={budgets[b]})"
                for t, s, b in missing[:5]
            )
            raise ValueError(
                f"run {name!r}: {len(missing)} missing (task, sample, T) cell(s) of the "
                f"{shape[0]} x {shape[1]} x {shape[2]} grid, e.g. {listed}; "
                "finish the run (resume it) or select the complete tasks and budgets"
            )
        cats = None
        if any(code >= 0 for code in self._task_category):
            unlabeled = [t for t, c in zip(tasks, self._task_category, strict=True) if c < 0]
            if unlabeled:
                raise ValueError(
                    f"run {name!r}: some records carry a category but task(s) "
                    f"{unlabeled[:_MAX_LISTED]} have none"
                )
            cats = tuple(self._categories[code] for code in self._task_category)
        return OutcomeTable(tasks, tuple(budgets), correct, cats, name)


class KeptRecords(list):
    """A sink for the store's reader that keeps the records themselves (for the analyses)."""

    def add(self, record: Mapping[str, Any]) -> None:
        self.append(record)

    def mark(self) -> int:
        return len(self)

    def rollback(self, point: int) -> None:
        del self[point:]


class NoRecords(KeptRecords):
    """A sink that keeps nothing: resuming needs only where the finished chunks end."""

    def add(self, record: Mapping[str, Any]) -> None:
        pass
