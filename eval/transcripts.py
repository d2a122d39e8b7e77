"""Transcripts apart from outcomes: a run's ``transcripts.jsonl`` next to its ``results.jsonl``.

Each result line used to carry the whole conversation (80% of its bytes), so ``report``,
``compare`` and resume parsed every transcript to read five fields, and their memory grew with
it. Now the evaluator writes the outcome record alone to ``results.jsonl`` (what surfaces,
boundaries and resume read) and the messages to ``transcripts.jsonl``, one line per episode in
the same order: ``{"chunk", "task_id", "sample", "budget", "messages"}``. Only the analyses that
read conversations (strategy diversity, segment perplexity) open it, through
:func:`attach_transcripts`, and only for the episodes they asked for.

A chunk's transcripts are written and fsynced before its results: a chunk counts as finished
when its result lines are on disk, and then its transcripts are too. Resuming cuts the
transcripts file back to the lines of the finished chunks (:func:`truncate_transcripts`). A run
whose result lines carry their messages themselves (no transcripts file) is read as well.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TRANSCRIPTS_FILE = "transcripts.jsonl"
TRANSCRIPT_KEYS = ("messages",)
"""Record keys that go to the transcripts file instead of the results file."""

Key = tuple[str, int, int]


def _key(record: Mapping[str, Any]) -> Key:
    return str(record["task_id"]), int(record["sample"]), int(record["budget"])


def split_records(
    chunk: int, records: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(outcomes, transcripts)``: the records without their messages, and the messages with the
    episode's key (``transcripts`` is empty when no record has messages)."""
    outcomes, transcripts = [], []
    for record in records:
        outcomes.append({k: v for k, v in record.items() if k not in TRANSCRIPT_KEYS})
        if any(k in record for k in TRANSCRIPT_KEYS):
            key = {"chunk": chunk, "task_id": record["task_id"], "sample": record["sample"]}
            extra = {k: record[k] for k in TRANSCRIPT_KEYS if k in record}
            transcripts.append({**key, "budget": record["budget"], **extra})
    return outcomes, transcripts


def append_lines(path: Path, lines: Iterable[Mapping[str, Any]]) -> bytes:
    """Append JSON lines in one write, flushed and fsynced; return the bytes written."""
    # A lone surrogate in a model's text is written as its JSON escape (``backslashreplace``
    # gives exactly that form inside a JSON string), so it reads back as the same string.
    payload = "".join(
        json.dumps(line, ensure_ascii=False, default=str) + "\n" for line in lines
    ).encode("utf-8", errors="backslashreplace")
    if not payload:
        return payload
    with path.open("ab") as f:
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    return payload


def truncate_transcripts(directory: Path, lines: int) -> None:
    """Cut ``transcripts.jsonl`` to its first ``lines`` lines (those of the finished chunks)."""
    truncate_lines(directory / TRANSCRIPTS_FILE, lines)


def truncate_lines(path: Path, lines: int) -> None:
    """Cut a JSON Lines file to its first ``lines`` complete lines, fsynced (absent: nothing)."""
    if not path.exists():
        return
    end, seen = 0, 0
    with path.open("rb") as f:
        for line in f:
            if seen == lines or not line.endswith(b"\n"):
                break
            end += len(line)
            seen += 1
        size = f.seek(0, os.SEEK_END)
    if end != size:
        with path.open("r+b") as f:
            f.truncate(end)
            f.flush()
            os.fsync(f.fileno())


def attach_transcripts(
    directory: str | Path, records: Sequence[dict[str, Any]]
) -> tuple[dict[str, Any], ...]:
    """``records`` with their messages, read from the run's transcripts file where they lack them.

    The file is streamed and only the wanted episodes' messages are kept, so memory follows the
    records asked for, not the run.

    Raises:
        ValueError: when a record's transcript is in neither file (names the file and episode).
    """
    missing = {_key(r): i for i, r in enumerate(records) if "messages" not in r}
    if not missing:
        return tuple(records)
    path = Path(directory) / TRANSCRIPTS_FILE
    found: dict[int, list[Any]] = {}
    if path.exists():
        with path.open("rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a torn last line: its chunk is unfinished
                entry = json.loads(line)
                index = missing.get(_key(entry))
                if index is not None:
                    found[index] = entry["messages"]
    if len(found) < len(missing):
        task, sample, budget = next(k for k, i in missing.items() if i not in found)
        raise ValueError(
            f"{path}: no transcript for task {task!r}, sample {sample}, T={budget}; the run's "
            "transcripts file is missing or incomplete, so its conversations cannot be analyzed"
        )
    return tuple({**r, "messages": found[i]} if i in found else r for i, r in enumerate(records))
