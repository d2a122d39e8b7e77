"""Build an ``OutcomeTable`` from records one at a time, keeping only a few numbers per record.

``OutcomeTable.from_records`` keeps a dict per cell; reading a large run that way held every
parsed line (about 2 KB each) until the table was built, so ``report`` and the end of ``evaluate``
grew by that much per episode. :class:`OutcomeBuilder` keeps, per record, the task's index, the
sample, the budget, the outcome and a category code in growing typed arrays (about 30 bytes), so
the dict can be dropped as soon as it is read. It accepts and refuses exactly what
``from_records`` does, with the same messages: per-record checks (keys, types) when a record is
added, the whole-grid checks (duplicate and missing cells, categories) in :meth:`build`, and an
error of either kind is reported at the first record where ``from_records`` would stop.

``mark`` / ``rollback`` drop the records of an unfinished chunk that the store reads before it
knows the chunk is short.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np

from passkt.eval.outcomes import _RECORD_KEYS, OutcomeTable, _as_bool_cell, _as_int

__all__ = ["KeptRecords", "NoRecords", "OutcomeBuilder"]


class OutcomeBuilder:
    """Collects (task, sample, T, correct, category) per record; :meth:`build` makes the table."""

    def __init__(self) -> None:
        self._task_index: dict[str, int] = {}
        self._tasks: list[str] = []
        self._category_code: dict[str, int] = {}
        self._categories: list[str] = []
        self._task = array("q")
        self._sample = array("q")
        self._budget = array("q")
        self._correct = array("b")
        self._category = array("q")  # -1: the record has no category
        self._error: ValueError | None = None  # the first per-record error, raised in build()

    def __len__(self) -> int:
        return len(self._task)

    def add(self, record: Mapping[str, Any]) -> None:
        """Take one record's fields; a bad record stops the builder (its error comes in build)."""
        if self._error is not None:
            return
        where = f"record {len(self)}"
        try:
            for key in _RECORD_KEYS:
                if key not in record:
                    raise ValueError(
                        f"{where}: missing key {key!r}; every record needs {list(_RECORD_KEYS)}"
                    )
            sample = _as_int(record["sample"], "sample", where)
            budget = _as_int(record["budget"], "budget", where)
            correct = _as_bool_cell(record["correct"], where)
        except ValueError as e:
            self._error = e
            return
        task = str(record["task_id"])
        index = self._task_index.get(task)
        if index is None:
            index = self._task_index[task] = len(self._tasks)
            self._tasks.append(task)
        category = record.get("category")
        code = -1
        if category is not None:
            category = str(category)
            code = self._category_code.get(category, -1)
            if code < 0:
                code = self._category_code[category] = len(self._categories)
                self._categories.append(category)
        self._task.append(index)
        self._sample.append(sample)
        self._budget.append(budget)
        self._correct.append(correct)
        self._category.append(code)

    def mark(self) -> tuple[int, int, bool]:
        """A point to :meth:`rollback` to (records and tasks so far)."""
        return len(self), len(self._tasks), self._error is not None

    def rollback(self, point: tuple[int, int, bool]) -> None:
        """Forget every record added since ``point`` (and the tasks first seen in them)."""
        records, tasks, failed = point
        for column in (self._task, self._sample, self._budget, self._correct, self._category):
            del column[records:]
        for task in self._tasks[tasks:]:
            del self._task_index[task]
        del self._tasks[tasks:]
        if not failed:
            self._error = None

    def build(self, *, name: str = "run") -> OutcomeTable:
        """The table ``OutcomeTable.from_records`` makes from the same records.

        Raises:
            ValueError: as ``from_records``, at the same record and with the same message.
        """
        task = np.array(self._task, dtype=np.int64)
        sample = np.array(self._sample, dtype=np.int64)
        budget = np.array(self._budget, dtype=np.int64)
        category = np.array(self._category, dtype=np.int64)
        found = (self._duplicate(task, sample, budget), self._conflict(task, category))
        errors = sorted((e for e in found if e is not None), key=lambda e: e[0])
        if errors:
            raise errors[0][1]
        if self._error is not None:
            raise self._error
        if not len(self):
            raise ValueError(f"no records to build OutcomeTable {name!r} from")
        samples, s_pos = np.unique(sample, return_inverse=True)
        budgets, b_pos = np.unique(budget, return_inverse=True)
        tasks = tuple(self._tasks)
        shape = (len(tasks), len(samples), len(budgets))
        if len(self) != shape[0] * shape[1] * shape[2]:
            seen = np.zeros(shape, dtype=bool)
            seen[task, s_pos, b_pos] = True
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
        correct = np.zeros(shape, dtype=bool)
        correct[task, s_pos, b_pos] = np.array(self._correct, dtype=bool)
        cats = None
        if (category >= 0).any():
            labeled = np.full(len(tasks), -1, dtype=np.int64)
            labeled[task[category >= 0]] = category[category >= 0]  # all equal per task (checked)
            unlabeled = [tasks[i] for i in np.flatnonzero(labeled < 0)]
            if unlabeled:
                raise ValueError(
                    f"run {name!r}: some records carry a category but task(s) "
                    f"{unlabeled[:10]} have none"
                )
            cats = tuple(self._categories[c] for c in labeled)
        return OutcomeTable(tasks, tuple(int(b) for b in budgets), correct, cats, name)

    def _duplicate(self, task, sample, budget) -> tuple[int, ValueError] | None:
        """The first record that repeats an earlier cell, as ``from_records`` reports it."""
        if not len(task):
            return None
        _, s_pos = np.unique(sample, return_inverse=True)
        _, b_pos = np.unique(budget, return_inverse=True)
        key = (task * (s_pos.max() + 1) + s_pos) * (b_pos.max() + 1) + b_pos
        order = np.argsort(key, kind="stable")  # equal cells stay in record order
        repeat = np.flatnonzero(key[order][1:] == key[order][:-1]) + 1
        if not len(repeat):
            return None
        i = int(order[repeat].min())
        first = int(np.flatnonzero(key == key[i])[0])
        message = (
            f"record {i}: duplicate cell (task_id={self._tasks[task[i]]!r}, sample={sample[i]}, "
            f"T={budget[i]}), first seen in record {first}; each (task, sample, T) must appear "
            "once (was a run resumed without skipping finished work?)"
        )
        return i, ValueError(message)

    def _conflict(self, task, category) -> tuple[int, ValueError] | None:
        """The first record whose category differs from its task's first one."""
        labeled = np.flatnonzero(category >= 0)
        if not len(labeled):
            return None
        first = np.full(len(self._tasks), -1, dtype=np.int64)
        tasks, at = np.unique(task[labeled], return_index=True)  # each task's earliest label
        first[tasks] = category[labeled[at]]
        bad = labeled[category[labeled] != first[task[labeled]]]
        if not len(bad):
            return None
        i = int(bad[0])
        message = (
            f"record {i}: task {self._tasks[task[i]]!r} has category "
            f"{self._categories[category[i]]!r} here but "
            f"{self._categories[first[task[i]]]!r} in an earlier record"
        )
        return i + 0.5, ValueError(message)  # after a duplicate at the same record


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
