"""What a run directory holds once read: ``RunContents``, and ``RunDirError`` for one that
cannot be used. Shared by ``passkt.eval.store`` (which re-exports both) and
``passkt.eval.run_checks``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from passkt.envs.errors import PassktError

__all__ = ["RESULTS_FILE", "RunContents", "RunDirError"]

RESULTS_FILE = "results.jsonl"


class RunDirError(PassktError, ValueError):
    """A run directory that cannot be used for the request (or read): the message says why."""


@dataclass(frozen=True)
class RunContents:
    """What a run directory holds, with unfinished work separated out.

    Attributes:
        manifest: The manifest.
        records: Lines of the finished chunks, in file order.
        finished_chunks: Indexes of the finished chunks (always ``0 .. m-1``).
        valid_bytes: Length of the file prefix holding exactly the finished chunks.
        dropped_lines: Complete lines of an unfinished last chunk (ignored).
        torn: Whether the file ended in a torn (partly written) line.
    """

    manifest: dict[str, Any]
    records: tuple[dict[str, Any], ...]
    finished_chunks: tuple[int, ...]
    valid_bytes: int
    dropped_lines: int
    torn: bool
    digests: tuple[dict[str, Any], ...] | None = None
    """The chunks' digest lines (``passkt.eval.chunk_digests``); None for a run without them."""
    chunk_ends: tuple[int, ...] = ()
    """Byte offset in the results file just past each finished chunk."""

    @property
    def missing_chunks(self) -> int:
        """Chunks with a digest whose results are not on disk (the file was cut or deleted)."""
        return 0 if self.digests is None else len(self.digests) - len(self.finished_chunks)

    @property
    def complete(self) -> bool:
        """Whether every chunk of the manifest is on disk."""
        return len(self.finished_chunks) == int(self.manifest["num_chunks"])
