"""Per-chunk digests: a run's results and transcripts cannot be altered without a trace.

Each finished chunk appends one line to ``digests.jsonl``, after its transcripts and its results:
``{"chunk", "results", "transcripts", "transcript_lines"}``, the SHA-256 of the chunk's bytes in
``results.jsonl`` and in ``transcripts.jsonl`` and how many transcript lines it wrote. A chunk
counts as finished once its digest line is on disk (a crash before that leaves an unfinished
chunk, which reading drops and resuming runs again).

Reading checks every finished chunk's result bytes against its digest and refuses an edited chunk
by file and chunk (``passkt.eval.store``). ``report`` and the analyses also check the transcripts
(``first_bad_transcript_chunk``) and refuse a run whose transcripts were edited, truncated or
deleted; ``--resume`` runs those chunks again instead (with the same seeds), which rebuilds them.
A run's manifest says that it keeps digests (``"integrity"``); a run without them is read
unverified.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from passkt.eval.transcripts import truncate_lines

__all__ = [
    "DIGESTS_FILE",
    "INTEGRITY",
    "append_digest",
    "digest_entry",
    "first_bad_transcript_chunk",
    "read_digests",
    "sha256",
    "truncate_digests",
]

DIGESTS_FILE = "digests.jsonl"
INTEGRITY = "sha256-per-chunk"
"""The manifest's ``integrity`` value of a run that keeps ``digests.jsonl``."""


def sha256(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def digest_entry(chunk: int, results: bytes, transcripts: bytes, transcript_lines: int) -> dict:
    """The ``digests.jsonl`` line of one chunk, from the exact bytes it appended."""
    return {
        "chunk": chunk,
        "results": sha256(results),
        "transcripts": sha256(transcripts),
        "transcript_lines": transcript_lines,
    }


def append_digest(directory: Path, entry: Mapping[str, Any]) -> None:
    """Append one chunk's digest line, flushed and fsynced."""
    with (directory / DIGESTS_FILE).open("ab") as f:
        f.write(json.dumps(dict(entry)).encode("ascii") + b"\n")
        f.flush()
        os.fsync(f.fileno())


def read_digests(directory: Path) -> list[dict[str, Any]] | None:
    """The digest lines, in chunk order (a torn last line is left out); None without the file.

    Raises:
        ValueError: a line in the middle is not a digest of the next chunk (the file was edited).
    """
    path = directory / DIGESTS_FILE
    if not path.exists():
        return None
    if not path.is_file():
        raise ValueError(f"{path} is not a file (a folder?); the run directory was altered")
    entries: list[dict[str, Any]] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                break  # torn by a crash: that chunk is unfinished
            try:
                entry = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                entry = None
            if (
                not isinstance(entry, dict)
                or entry.get("chunk") != len(entries)
                or not all(isinstance(entry.get(k), str) for k in ("results", "transcripts"))
                or not isinstance(entry.get("transcript_lines"), int)
            ):
                raise ValueError(
                    f"{path}: line {number} is not the digest of chunk {len(entries)}; the file "
                    "was edited. Restore it, or start a new run (another --out)."
                )
            entries.append(entry)
    return entries


def truncate_digests(directory: Path, chunks: int) -> None:
    """Cut ``digests.jsonl`` to the lines of its first ``chunks`` chunks."""
    truncate_lines(directory / DIGESTS_FILE, chunks)


def first_bad_transcript_chunk(
    path: Path, digests: Sequence[Mapping[str, Any]], chunks: int
) -> int | None:
    """The first of the first ``chunks`` chunks whose transcript lines do not match their digest
    (edited, truncated or deleted), or None when all match. Reads the file once, line by line."""
    if chunks == 0:
        return None
    if not path.is_file():
        bad = [c for c in range(chunks) if digests[c]["transcript_lines"] > 0]
        return bad[0] if bad else None
    with path.open("rb") as f:
        for chunk in range(chunks):
            expected = digests[chunk]
            hasher = hashlib.sha256()
            for _ in range(expected["transcript_lines"]):
                raw = f.readline()
                if not raw.endswith(b"\n"):
                    return chunk
                hasher.update(raw)
            if hasher.hexdigest() != expected["transcripts"]:
                return chunk
    return None
