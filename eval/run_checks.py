"""The checks of a whole run against its chunk digests (``passkt.eval.chunk_digests``).

``load_digests`` reads a run's digests (refusing a run whose digests were deleted or whose
manifest stopped saying it keeps them); ``check_whole`` refuses, for ``report`` and the analyses,
a run whose results lost finished chunks or whose transcripts were edited, truncated or deleted;
``rebuildable`` is what ``--resume`` keeps of such a run (the damaged chunks run again).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from passkt.eval.chunk_digests import (
    DIGESTS_FILE,
    INTEGRITY,
    first_bad_transcript_chunk,
    read_digests,
)
from passkt.eval.manifest import MANIFEST_FILE
from passkt.eval.run_contents import RESULTS_FILE, RunContents, RunDirError
from passkt.eval.transcripts import TRANSCRIPTS_FILE

__all__ = ["check_whole", "load_digests", "rebuildable"]

logger = logging.getLogger(__name__)


def load_digests(directory: Path, manifest: Mapping[str, Any]) -> tuple[dict[str, Any], ...] | None:
    """The run's chunk digests; None for a run from before them. Refuses a run whose digests
    were deleted or whose manifest no longer says it keeps them."""
    try:
        digests = read_digests(directory)
    except ValueError as e:
        raise RunDirError(str(e)) from None
    keeps = manifest.get("integrity") == INTEGRITY
    if digests is None and keeps:
        if (directory / RESULTS_FILE).is_file() and (directory / RESULTS_FILE).stat().st_size:
            raise RunDirError(
                f"{directory / DIGESTS_FILE} is missing, so the results cannot be checked; the "
                "run directory was altered. Restore the file, or start a new run (another --out)."
            )
        return ()
    if digests is not None and not keeps:
        raise RunDirError(
            f"{directory / MANIFEST_FILE}: field integrity was removed or changed but the run "
            f"keeps {DIGESTS_FILE}; the manifest was edited. Restore the original manifest."
        )
    return None if digests is None else tuple(digests)


def _bad_transcripts(directory: Path, contents: RunContents) -> int | None:
    """The first finished chunk whose transcripts do not match their digest, or None."""
    if contents.digests is None:
        return None
    return first_bad_transcript_chunk(
        directory / TRANSCRIPTS_FILE, contents.digests, len(contents.finished_chunks)
    )


def check_whole(directory: Path, contents: RunContents) -> None:
    """Refuse a run whose results lost finished chunks, or whose transcripts were edited,
    truncated or deleted, naming the file and the chunk (what ``report`` and the analyses read).

    Raises:
        RunDirError: with the command that runs the damaged chunks again.
    """
    if contents.missing_chunks > 0:
        first = len(contents.finished_chunks)
        raise RunDirError(
            f"{directory / RESULTS_FILE}: chunks {first} to {first + contents.missing_chunks - 1}"
            f" are recorded in {DIGESTS_FILE} but missing from the file (it was truncated or "
            f"deleted); `passkt eval --resume --out {directory}` with the run's arguments runs "
            "them again"
        )
    bad = _bad_transcripts(directory, contents)
    if bad is not None:
        raise RunDirError(
            f"{directory / TRANSCRIPTS_FILE}: chunk {bad} does not match its digest (the file "
            f"was edited, truncated or deleted); `passkt eval --resume --out {directory}` with "
            f"the run's arguments runs chunks {bad} to {len(contents.finished_chunks) - 1} again "
            "and rebuilds them"
        )


def rebuildable(directory: Path, contents: RunContents) -> RunContents:
    """What a resume keeps: the finished chunks before the first one whose results were cut off
    or whose transcripts do not match their digest; that one and the rest run again (with the
    same seeds), which rebuilds them. Says so on the log, naming the file and the chunks."""
    if contents.digests is None:
        return contents
    keep = len(contents.finished_chunks)
    if contents.missing_chunks > 0:
        logger.warning(
            "%s: chunks %d to %d are recorded in %s but missing from the file; running them again",
            directory / RESULTS_FILE,
            keep,
            keep + contents.missing_chunks - 1,
            DIGESTS_FILE,
        )
    bad = _bad_transcripts(directory, contents)
    if bad is not None:
        logger.warning(
            "%s: chunk %d does not match its digest (edited, truncated or deleted); running "
            "chunks %d to %d again to rebuild it",
            directory / TRANSCRIPTS_FILE,
            bad,
            bad,
            keep - 1,
        )
        keep = bad
    return replace(
        contents,
        finished_chunks=contents.finished_chunks[:keep],
        valid_bytes=contents.chunk_ends[keep - 1] if keep else 0,
        digests=contents.digests[:keep],
        chunk_ends=contents.chunk_ends[:keep],
    )
