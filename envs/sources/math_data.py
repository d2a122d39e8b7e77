"""Math task sources: MATH-500 (``math500``) and GSM8K (``gsm8k``), category A of the study.

Both read JSON Lines (or a JSON list) from a local file, a saved dataset folder, or a Hugging Face
hub dataset through ``datasets`` when the user names one (``path="HuggingFaceH4/MATH-500"``,
``path="openai/gsm8k"``; ``passkt.envs.sources.records``). Splits follow the rule of every
file-based source: a record is in the test split iff ``is_test_id(task_id, test_fraction)``.

- MATH-500 records: ``problem``, ``answer`` (LaTeX, compared with math-verify), ``unique_id``
  (the task id; the record's index when absent), and optionally ``solution``, ``subject``,
  ``level``. Tasks have ``answer_type="math"``.
- GSM8K records: ``question`` and ``answer``, whose last line is ``#### <number>``; the task's
  answer is that number with thousands commas removed, ``answer_type="number"``; the worked
  solution above it is kept in ``metadata["solution"]``. Task ids are ``gsm8k-<index>``.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any

from passkt.envs.errors import DatasetFormatError
from passkt.envs.sources.hotpotqa import check_split_options, is_test_id, require
from passkt.envs.sources.records import records_from
from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)

__all__ = ["load_gsm8k", "load_math500"]

_MATH500_HINT = (
    "MATH-500 is prm800k/math_splits/test.jsonl in github.com/openai/prm800k; pass path=<file>, "
    "or path='HuggingFaceH4/MATH-500' to load it from the Hugging Face hub "
    "(pip install 'passkt[hub]')."
)
_GSM8K_HINT = (
    "GSM8K is grade_school_math/data/test.jsonl in github.com/openai/grade-school-math; pass "
    "path=<file>, or path='openai/gsm8k' to load it from the Hugging Face hub "
    "(pip install 'passkt[hub]')."
)
_GSM8K_NUMBER = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)")


def _check_category(category: str, source: str) -> None:
    if category != "math":
        raise ValueError(
            f"Source {source!r} only has the category 'math', got {category!r}. "
            "Use source='hotpotqa' for 'comparison' and 'bridge'."
        )


_MakeTask = Callable[[int, tuple[str, str], dict[str, Any], str], Task]
"""``(index, (origin, label), record, split) -> Task``; raises ``DatasetFormatError``."""


def _math500_task(index: int, where: tuple[str, str], record: dict[str, Any], split: str) -> Task:
    origin, label = where
    if "unique_id" in record:
        task_id = require(record, "unique_id", str, where)
        where = (origin, f"{label} (unique_id {task_id!r})")
    else:
        task_id = f"math500-{index}"
    answer = require(record, "answer", str, where)
    if not answer.strip():
        raise DatasetFormatError(*where, "answer", "empty answer")
    return Task(
        task_id=task_id,
        category="math",
        question=require(record, "problem", str, where),
        answer=answer,
        answer_type="math",
        source="math500",
        split=split,
        metadata={key: record[key] for key in ("subject", "level", "solution") if key in record},
    )


def _gsm8k_task(index: int, where: tuple[str, str], record: dict[str, Any], split: str) -> Task:
    question = require(record, "question", str, where)
    solution, marker, final = require(record, "answer", str, where).rpartition("####")
    number = final.strip().replace(",", "")
    if not marker or not _GSM8K_NUMBER.fullmatch(number):
        found = f"after '####' found {final.strip()[:40]!r}" if marker else "no '####' found"
        raise DatasetFormatError(
            *where, "answer", f"expected the answer to end with '#### <number>'; {found}"
        )
    return Task(
        task_id=f"gsm8k-{index}",
        category="math",
        question=question,
        answer=number,
        answer_type="number",
        source="gsm8k",
        split=split,
        metadata={"solution": solution.strip()},
    )


_SOURCES: dict[str, tuple[str, _MakeTask]] = {
    "math500": (_MATH500_HINT, _math500_task),
    "gsm8k": (_GSM8K_HINT, _gsm8k_task),
}
"""Source name -> (where to get the data, the record -> task function)."""


def _load(
    source: str,
    category: str,
    split: str,
    path: str | os.PathLike[str] | None,
    dataset: str | None,
    hf_config: str | None,
    hf_split: str,
    test_fraction: float,
    limit: int | None,
) -> list[Task]:
    """Check the options, read the records (a file or the hub) and build the tasks of ``split``.

    Each loader is this with its own ``_SOURCES`` entry. Stops at ``limit`` tasks; ids are unique.
    """
    hint, make_task = _SOURCES[source]
    _check_category(category, source)
    check_split_options(split, test_fraction, limit)
    origin, records = records_from(path, dataset, hf_config=hf_config, hf_split=hf_split, hint=hint)
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for index, (label, record) in enumerate(records):
        if not isinstance(record, dict):
            raise DatasetFormatError(
                origin, label, "(record)", f"expected a JSON object, got {type(record).__name__}"
            )
        task = make_task(index, (origin, label), record, split)
        if task.task_id in seen:
            raise DatasetFormatError(
                origin,
                label,
                "unique_id",
                f"duplicate id {task.task_id!r} (also record {seen[task.task_id]})",
            )
        seen[task.task_id] = label
        if is_test_id(task.task_id, test_fraction) != (split == "test"):
            continue
        if limit is not None and len(tasks) >= limit:
            break
        tasks.append(task)
    logger.debug("Loaded %d %s tasks from %s", len(tasks), split, origin)
    return tasks


def load_math500(
    category: str,
    split: str,
    *,
    path: str | os.PathLike[str] | None = None,
    dataset: str | None = None,
    hf_config: str | None = None,
    hf_split: str = "test",
    test_fraction: float = 1 / 3,
    limit: int | None = None,
) -> list[Task]:
    """Load MATH-500 problems as math tasks of one split.

    Args:
        category: Must be ``"math"``.
        split: ``"train"`` or ``"test"``; a problem is in test iff
            ``is_test_id(unique_id, test_fraction)``.
        path: A JSON Lines file (or JSON list) with ``problem``, ``answer``, ``unique_id``, a
            saved dataset folder, or the hub name ``"HuggingFaceH4/MATH-500"`` (needs
            ``pip install 'passkt[hub]'``, and network unless ``datasets`` has it cached).
        dataset: The same as a hub name in ``path``.
        hf_config: Hub configuration, if the dataset has several.
        hf_split: Hub split to read.
        test_fraction: Share of problems in the test split.
        limit: Keep at most this many tasks (the first ones in file order).

    Returns:
        Tasks with ``answer_type="math"``, in file order.

    Raises:
        ValueError: For a category other than ``"math"``, bad options, or no/both of path and
            dataset.
        FileNotFoundError: If ``path`` does not exist.
        DatasetFormatError: If a record is malformed (names the file, record and key).
    """
    return _load(
        "math500", category, split, path, dataset, hf_config, hf_split, test_fraction, limit
    )


def load_gsm8k(
    category: str,
    split: str,
    *,
    path: str | os.PathLike[str] | None = None,
    dataset: str | None = None,
    hf_config: str | None = "main",
    hf_split: str = "test",
    test_fraction: float = 1 / 3,
    limit: int | None = None,
) -> list[Task]:
    """Load GSM8K problems as math tasks of one split, with numeric answers.

    Args:
        category: Must be ``"math"``.
        split: ``"train"`` or ``"test"``; a problem is in test iff
            ``is_test_id("gsm8k-<index>", test_fraction)``.
        path: A JSON Lines file (or JSON list) with ``question`` and ``answer``, a saved dataset
            folder, or the hub name ``"openai/gsm8k"`` (needs ``pip install 'passkt[hub]'``,
            and network unless ``datasets`` has it cached).
        dataset: The same as a hub name in ``path``.
        hf_config: Hub configuration (``"main"``).
        hf_split: Hub split to read.
        test_fraction: Share of problems in the test split.
        limit: Keep at most this many tasks (the first ones in file order).

    Returns:
        Tasks with ``answer_type="number"``, in file order.

    Raises:
        ValueError: For a category other than ``"math"``, bad options, or no/both of path and
            dataset.
        FileNotFoundError: If ``path`` does not exist.
        DatasetFormatError: If a record is malformed, e.g. an answer without ``#### <number>``.
    """
    return _load("gsm8k", category, split, path, dataset, hf_config, hf_split, test_fraction, limit)
