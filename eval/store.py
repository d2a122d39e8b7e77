"""The result store: one run directory per evaluation, append-only and crash-safe.

A run directory holds these files:

- ``manifest.json``: what was asked for (env id and kwargs, policy, sampling parameters, ``n``,
  budgets, seed, split, task ids, chunk size) and where it ran (passkt, Python and key package
  versions, git commit, creation time). Written once, atomically.
- ``results.jsonl``: one line per (task, sample, T): the episode's outcome record
  (``Episode.to_record()`` without its messages) plus the index of the chunk it came from. The
  first line of each chunk also holds ``manifest_digest``, a hash of each request field of the
  manifest it was written under: reading refuses a manifest edited since (naming the field), so an
  edited seed or policy can neither relabel the data in a report nor mix two requests' chunks on
  resume.
- ``transcripts.jsonl``: the messages of the same episodes, in the same order, read only by the
  analyses that need them (``passkt.eval.transcripts``; runs written before it keep their
  messages in ``results.jsonl``).
- ``digests.jsonl``: one line per finished chunk, written last, with the SHA-256 of the bytes
  the chunk wrote to the two files above (``passkt.eval.chunk_digests``). Reading refuses a chunk
  whose results do not match; ``report`` and the analyses also refuse damaged transcripts, and
  ``--resume`` runs those chunks again (``passkt.eval.run_checks``).
- ``writer.lock``: held (``flock``) by the one process writing the run (``passkt.agents.run_lock``).

The evaluator runs tasks in fixed chunks and appends each finished chunk in one write that is
flushed and fsynced before the next chunk starts. A crash can therefore only leave (a) a torn last
line and (b) an unfinished last chunk. Reading drops both; resuming also cuts them off the file, so
the chunk runs again from its start and no line is ever duplicated. A chunk's size on disk is known
from the manifest, which is how an unfinished one is recognised.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from passkt.agents.folders import MARKER, FolderKindError, claim_folder, mark_folder
from passkt.agents.preflight import missing_top, remove_created
from passkt.agents.run_lock import LOCK_FILE, RunLock
from passkt.eval.chunk_digests import (
    DIGESTS_FILE,
    INTEGRITY,
    append_digest,
    digest_entry,
    truncate_digests,
)
from passkt.eval.env_failures import EnvFailures, env_failure_rule
from passkt.eval.manifest import (
    FORMAT_VERSION,
    MANIFEST_FILE,
    MATCH_KEYS,
    REPORT_KEYS,
    chunk_bounds,
    make_manifest,
)
from passkt.eval.outcome_stream import KeptRecords, NoRecords, OutcomeBuilder
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.run_checks import check_whole, load_digests, rebuildable
from passkt.eval.run_contents import RESULTS_FILE, RunContents, RunDirError
from passkt.eval.run_integrity import (
    DIGEST_KEY,
    SURROGATES,
    changed_fields,
    escape_surrogates,
    field_digests,
)
from passkt.eval.transcripts import (
    TRANSCRIPTS_FILE,
    append_lines,
    split_records,
    truncate_transcripts,
)

__all__ = [
    "DIGEST_KEY",
    "MANIFEST_FILE",
    "MATCH_KEYS",
    "RESULTS_FILE",
    "RunContents",
    "RunDirError",
    "RunStore",
    "check_digest",
    "chunk_bounds",
    "escape_surrogates",
    "load_run",
    "make_manifest",
    "manifest_digest",
    "read_run",
]

logger = logging.getLogger(__name__)

_JSON: dict[str, Any] = {"ensure_ascii": False, "default": str}


def _chunk_lines(manifest: Mapping[str, Any]) -> list[int]:
    """Lines each chunk writes: tasks in the chunk x n x budgets."""
    per_task = int(manifest["n"]) * len(manifest["budgets"])
    bounds = chunk_bounds(len(manifest["task_ids"]), int(manifest["chunk_tasks"]))
    return [(stop - start) * per_task for start, stop in bounds]


_DIGEST_FIELDS = (*MATCH_KEYS, *REPORT_KEYS)


def manifest_digest(manifest: Mapping[str, Any]) -> dict[str, str]:
    """A short hash of each field that decides the samples or what a report says (``MATCH_KEYS``
    and ``REPORT_KEYS``), by field."""
    return field_digests(manifest, _DIGEST_FIELDS)


def check_digest(path: Path, line: int, record: Mapping[str, Any], manifest: Mapping[str, Any]):
    """Refuse data written under other values of the manifest's fields, naming the fields.

    Raises:
        RunDirError: a request field of the manifest differs from the chunk's (or is corrupt).
    """
    try:
        changed = changed_fields(record, manifest, _DIGEST_FIELDS, optional=REPORT_KEYS)
    except ValueError as e:
        raise RunDirError(f"{path}: line {line}: {e}") from None
    if changed:
        raise RunDirError(
            f"{path.parent / MANIFEST_FILE}: field(s) {', '.join(changed)} differ from those "
            f"the results were written with ({path.name} line {line}); the manifest was edited "
            "after the run started. Restore the original manifest, or start a new run."
        )


def _summarize(value: Any) -> str:
    if isinstance(value, list) and len(value) > 6:
        return f"[{', '.join(map(repr, value[:3]))}, ... {len(value)} items]"
    return repr(value)


def _differences(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> list[str]:
    diffs = []
    for key in MATCH_KEYS:
        old, new = stored.get(key), requested.get(key)
        if old != new:
            diffs.append(f"{key} (stored {_summarize(old)}, requested {_summarize(new)})")
    return diffs


# ---------------------------------------------------------------------- reading


def read_manifest(directory: str | Path) -> dict[str, Any]:
    """A run's checked manifest, without reading its records (the error names the file)."""
    return _read_manifest(Path(directory))


def _read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / MANIFEST_FILE
    if path.exists() and not path.is_file():
        raise RunDirError(f"{path} is not a file (a folder?); the run directory was altered")
    if not path.is_file():
        if not directory.is_dir():
            raise RunDirError(f"{directory}: no such run directory")
        raise RunDirError(f"{directory} is not a passkt run directory (no {MANIFEST_FILE})")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RunDirError(f"{path}: not valid JSON ({e}); the manifest is corrupt") from e
    # Runs made before per-sample seeding have no "seeding" key; they resume seeded per chunk.
    missing = [k for k in (*MATCH_KEYS, "num_chunks") if k not in manifest and k != "seeding"]
    if missing or manifest.get("format") != FORMAT_VERSION:
        raise RunDirError(
            f"{path}: not a passkt manifest of format {FORMAT_VERSION} "
            f"(format {manifest.get('format')!r}, missing keys {missing})"
        )
    return manifest


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, bytes]]:
    """``(end_offset, record, raw)`` per complete line, one at a time; ``record`` None: a torn
    end."""
    if not path.exists():
        return
    if not path.is_file():
        raise RunDirError(f"{path} is not a file (a folder?); the run directory was altered")
    with path.open("rb") as f:
        end = 0
        for number, raw in enumerate(f, 1):
            end += len(raw)
            if not raw.endswith(b"\n"):  # no newline: the process died while writing this line
                yield end, None, raw
                return
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                rest = f.read()
                if b"\n" not in rest and not rest.strip():
                    yield end, None, raw  # garbage on the last line only: a torn write
                    return
                raise RunDirError(
                    f"{path}: line {number} is not valid JSON ({e}); the file was edited "
                    "or corrupted in the middle. Start a new run (another --out)."
                ) from e
            if not isinstance(record, dict):
                raise RunDirError(
                    f"{path}: line {number} is JSON but not an object ({type(record).__name__}); "
                    "every line must be a record. The file was edited; start a new run "
                    "(another --out)."
                )
            yield end, record, raw


def _scan(directory: Path, make_sink: Callable[[dict[str, Any]], Any]) -> RunContents:
    """Read the results line by line, handing each record of a finished chunk to a sink.

    ``make_sink(manifest)`` makes the sink (``KeptRecords``, ``OutcomeBuilder``), which takes a
    chunk's records as they are read and rolls them back when the file ends before the chunk
    does: one line is held here at a time. Each finished chunk's bytes must match its digest; a
    chunk without one is unfinished (the process died before writing it).
    """
    manifest = _read_manifest(directory)
    digests = load_digests(directory, manifest)
    sink = make_sink(manifest)
    results = directory / RESULTS_FILE
    expected = _chunk_lines(manifest)
    limit = len(expected) if digests is None else min(len(expected), len(digests))
    finished: list[int] = []
    ends: list[int] = []
    valid_bytes = count = in_chunk = 0
    torn = False
    first, point = {}, sink.mark()  # the chunk's first record, and where the chunk began
    hasher = hashlib.sha256()
    wrong: tuple[int, Any] | None = None
    for end, record, raw in _lines(results):
        if record is None:
            torn = True
            break
        count += 1
        if count == 1:  # before the chunk sizes, which an edited n or budgets would change
            check_digest(results, 1, record, manifest)
        if len(finished) == limit:
            continue  # lines beyond the manifest's chunks (refused below) or without a digest
        chunk = len(finished)
        if in_chunk == 0:
            first, point, hasher = record, sink.mark(), hashlib.sha256()
        if wrong is None and record.get("chunk") != chunk:
            wrong = (count, record.get("chunk"))
        sink.add(record)
        hasher.update(raw)
        in_chunk += 1
        if in_chunk < expected[chunk]:
            continue
        if digests is not None and hasher.hexdigest() != digests[chunk]["results"]:
            raise RunDirError(
                f"{results}: chunk {chunk} (lines {count - in_chunk + 1}-{count}) does not match "
                f"its digest in {DIGESTS_FILE}: the results were edited. Restore the file, or "
                "start a new run (another --out)."
            )
        if wrong is not None:  # an unfinished chunk is dropped, not judged
            raise RunDirError(
                f"{results}: line {wrong[0]} belongs to chunk {wrong[1]!r} but chunk {chunk} "
                "was expected there; the file does not follow this manifest. Start a new run "
                "(another --out)."
            )
        check_digest(results, count - in_chunk + 1, first, manifest)
        finished.append(chunk)
        ends.append(end)
        valid_bytes, in_chunk = end, 0
    if in_chunk:
        sink.rollback(point)
    position = sum(expected[: len(finished)])
    if count > position and len(finished) == len(expected):
        raise RunDirError(
            f"{results}: {count - position} line(s) beyond the {len(expected)} chunks of the "
            "manifest; the file does not follow this manifest."
        )
    return RunContents(
        manifest, (), tuple(finished), valid_bytes, count - position, torn, digests, tuple(ends)
    )


def read_run(directory: str | Path) -> RunContents:
    """Read a run directory, keeping only the chunks that were written in full.

    Raises:
        RunDirError: when the directory has no valid manifest, a line in the middle of the
            results file is corrupt or out of chunk order, or a finished chunk's results or
            transcripts do not match its digest (``check_whole``).
    """
    records = KeptRecords()
    contents = _scan(Path(directory), lambda manifest: records)
    check_whole(Path(directory), contents)
    return replace(contents, records=tuple(records))


def read_env_failures(directory: str | Path) -> EnvFailures:
    """The env failures of a run directory's finished chunks, with the run's rule
    (``passkt.eval.env_failures``)."""
    failures = EnvFailures()

    def sink(manifest: dict[str, Any]) -> EnvFailures:
        failures.rule = env_failure_rule(manifest)
        return failures

    contents = _scan(Path(directory), sink)
    check_whole(Path(directory), contents)
    return failures


def load_run(
    directory: str | Path, *, partial: bool = False, name: str | None = None
) -> tuple[dict[str, Any], OutcomeTable]:
    """The manifest and the outcomes of a run directory.

    Args:
        directory: A run directory written by ``evaluate(..., out_dir=...)``.
        partial: Accept an unfinished run and return the tasks of its finished chunks.
        name: Run name of the table (default: the manifest's ``name``).

    Raises:
        RunDirError: for a missing or corrupt run, or an unfinished one without ``partial``.
    """
    builder = OutcomeBuilder()

    def in_grid(manifest: dict[str, Any]) -> OutcomeBuilder:
        # the records' outcomes only, in the manifest's grid: a run's lines are never all held
        nonlocal builder
        builder = OutcomeBuilder(int(manifest["n"]), manifest["budgets"])
        return builder

    contents = _scan(Path(directory), in_grid)
    check_whole(Path(directory), contents)
    manifest = contents.manifest
    total = int(manifest["num_chunks"])
    if not contents.complete and not partial:
        raise RunDirError(
            f"{directory}: the run is unfinished ({len(contents.finished_chunks)} of {total} "
            "chunks); finish it with `passkt eval --resume --out DIR` and the original arguments, "
            "or read the finished part (`passkt report --partial`, load_run(partial=True))"
        )
    if not contents.finished_chunks:
        raise RunDirError(f"{directory}: no finished chunk yet; nothing to load")
    if contents.torn or contents.dropped_lines:
        logger.warning(
            "%s: ignoring an unfinished chunk (%d line(s)%s)",
            directory,
            contents.dropped_lines,
            ", torn last line" if contents.torn else "",
        )
    label = escape_surrogates(str(name or manifest.get("name", "run")))  # plots need valid text
    table = builder.build(name=label)
    if env_failure_rule(manifest) == "drop":
        failed = read_env_failures(directory).tasks
        kept = [t for t in table.task_ids if t not in failed]
        if not kept:
            raise RunDirError(
                f"{directory}: every task has an env failure and the run drops such tasks "
                "(env_failures=drop); nothing is left to report"
            )
        if failed:
            table = table.select(kept)
    return manifest, table


# ---------------------------------------------------------------------- writing


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_manifest(directory: Path, manifest: Mapping[str, Any]) -> None:
    path = directory / MANIFEST_FILE
    tmp = path.with_suffix(".json.tmp")
    with tmp.open("w", encoding="utf-8", errors=SURROGATES) as f:
        json.dump(manifest, f, indent=2, ensure_ascii=False)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(directory)


def _check_out_dir(directory: Path) -> None:
    """Refuse an unusable ``--out`` before writing anything; create it (for its lock) if new."""
    for parent in (directory, *directory.parents):
        if parent.exists():
            if not parent.is_dir():
                where = "" if parent == directory else f" ({parent} is a file)"
                raise RunDirError(
                    f"{directory} cannot be a run directory{where}; choose another --out"
                )
            break
    if directory.is_dir():
        names = {p.name for p in directory.iterdir()}
        if (
            names
            and MANIFEST_FILE not in names
            and names - {LOCK_FILE, MARKER, MANIFEST_FILE + ".tmp"}
        ):
            raise RunDirError(
                f"{directory} is not empty and is not a passkt run directory (no "
                f"{MANIFEST_FILE}); choose another --out"
            )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RunDirError(
            f"{directory}: cannot create the run directory ({e}); choose another --out"
        ) from e


def _holds_no_results(directory: Path) -> bool:
    """Empty, or only a manifest and no results: nothing would be lost by starting over."""
    digests = directory / DIGESTS_FILE
    if digests.is_file() and digests.stat().st_size > 0:
        return False  # a chunk finished here (its results may have been deleted since)
    names = {p.name for p in directory.iterdir()} - {LOCK_FILE, TRANSCRIPTS_FILE, DIGESTS_FILE}
    names -= {MARKER}
    return names <= {MANIFEST_FILE, MANIFEST_FILE + ".tmp"} or (
        names <= {MANIFEST_FILE, RESULTS_FILE}
        and (directory / MANIFEST_FILE).exists()
        and (directory / RESULTS_FILE).exists()
        and (directory / RESULTS_FILE).stat().st_size == 0
    )


class RunStore:
    """Appends finished chunks to a run directory. Open it with :meth:`RunStore.open`."""

    def __init__(self, directory: Path, manifest: dict[str, Any], finished: Iterable[int]) -> None:
        self.directory = directory
        self.manifest = manifest
        self.finished_chunks: frozenset[int] = frozenset(finished)
        self._expected = _chunk_lines(manifest)
        self._lock: RunLock | None = None
        self._fresh = False
        """Whether this store started the run (no chunk was on disk when it opened)."""
        self._created_top: Path | None = None
        """The outermost folder this store created for the directory (None: none)."""

    def close(self) -> None:
        """Release the run directory's writer lock (the OS also does when the process dies)."""
        if self._lock is not None:
            self._lock.release()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def results_path(self) -> Path:
        """The ``results.jsonl`` file."""
        return self.directory / RESULTS_FILE

    @classmethod
    def open(cls, directory: str | Path, manifest: dict[str, Any], *, resume: bool) -> RunStore:
        """Create a run directory, or reopen one to resume it.

        A new directory (missing, empty, or holding only the manifest of a run that never
        finished a chunk, e.g. one whose model failed to load) gets ``manifest``. With
        ``resume=True`` an existing run must have been made for the same request (every key of
        ``MATCH_KEYS``); its unfinished last chunk and any torn line are cut off the results
        file so that chunk runs again.

        The store holds the directory's writer lock (``passkt.agents.run_lock``) until
        :meth:`close`, so a second writer is refused at once.

        Raises:
            RunDirError: for a non-empty directory without ``resume``, a directory that is not a
                run, or a run made for a different request (the differing keys are listed).
            passkt.agents.run_lock.RunLockedError: another process is writing the directory.
        """
        directory = Path(directory)
        try:
            claim_folder(directory, "eval-run")
        except FolderKindError as e:
            raise RunDirError(str(e)) from None
        created = missing_top(directory)
        _check_out_dir(directory)
        lock = RunLock.acquire(directory)
        try:
            store = cls._open_locked(directory, manifest, resume=resume)
        except BaseException:
            lock.release()
            remove_created(directory, created)
            raise
        store._lock = lock
        store._created_top = created
        mark_folder(directory, "eval-run")
        return store

    def discard_if_empty(self) -> None:
        """Undo the opening of a run that never stored a chunk (its model failed to load, say):
        its manifest, lock and empty files go, and the directory too if this store made it."""
        if not self._fresh or self.finished_chunks:
            return
        for name in (MANIFEST_FILE, RESULTS_FILE, TRANSCRIPTS_FILE, DIGESTS_FILE, MARKER):
            path = self.directory / name
            if path.is_file() and (name in (MANIFEST_FILE, MARKER) or path.stat().st_size == 0):
                path.unlink()
        self.close()
        remove_created(self.directory, self._created_top)

    @classmethod
    def _open_locked(cls, directory: Path, manifest: dict[str, Any], *, resume: bool) -> RunStore:
        if _holds_no_results(directory):
            truncate_transcripts(directory, 0)  # of a first chunk that never finished
            truncate_digests(directory, 0)
            _write_manifest(directory, manifest)
            store = cls(directory, manifest, ())
            store._fresh = True
            return store
        if not resume:
            raise RunDirError(
                f"{directory} already holds a run; pass --resume to continue it "
                "or choose another --out"
            )
        contents = rebuildable(directory, _scan(directory, lambda manifest: NoRecords()))
        diffs = _differences(contents.manifest, manifest)
        if diffs:
            raise RunDirError(
                f"{directory} was made for a different request, so it cannot be resumed with "
                f"this one; differing keys: {'; '.join(diffs)}. Repeat the original arguments "
                "or choose another --out"
            )
        store = cls(directory, contents.manifest, contents.finished_chunks)
        store._truncate(contents)
        return store

    def _truncate(self, contents: RunContents) -> None:
        if contents.digests is None:
            finished = sum(self._expected[c] for c in contents.finished_chunks)
        else:
            finished = sum(d["transcript_lines"] for d in contents.digests)
            truncate_digests(self.directory, len(contents.digests))
        truncate_transcripts(self.directory, finished)
        path = self.results_path
        if not path.exists() or path.stat().st_size == contents.valid_bytes:
            return
        logger.info(
            "%s: dropping an unfinished chunk (%d line(s)%s) before resuming",
            path,
            contents.dropped_lines,
            ", torn last line" if contents.torn else "",
        )
        with path.open("r+b") as f:
            f.truncate(contents.valid_bytes)
            f.flush()
            os.fsync(f.fileno())

    def append_chunk(self, chunk: int, records: Sequence[Mapping[str, Any]]) -> None:
        """Append one finished chunk's records in one write, flushed and fsynced.

        Raises:
            ValueError: if the chunk is already stored, out of order, or has the wrong size.
        """
        if chunk in self.finished_chunks:
            raise ValueError(f"chunk {chunk} is already stored in {self.results_path}")
        if chunk != len(self.finished_chunks):
            raise ValueError(
                f"chunks must be appended in order: expected chunk {len(self.finished_chunks)}, "
                f"got {chunk}"
            )
        if len(records) != self._expected[chunk]:
            raise ValueError(
                f"chunk {chunk} must have {self._expected[chunk]} records (tasks x n x budgets), "
                f"got {len(records)}"
            )
        # transcripts first: once a chunk's results are on disk, its transcripts are too
        outcomes, transcripts = split_records(chunk, records)
        written = append_lines(self.directory / TRANSCRIPTS_FILE, transcripts)
        digest = {DIGEST_KEY: manifest_digest(self.manifest)}
        results = append_lines(
            self.results_path,
            ({"chunk": chunk, **(digest if i == 0 else {}), **r} for i, r in enumerate(outcomes)),
        )
        if self.manifest.get("integrity") == INTEGRITY:  # last: the chunk is finished now
            append_digest(self.directory, digest_entry(chunk, results, written, len(transcripts)))
        self.finished_chunks = self.finished_chunks | {chunk}
