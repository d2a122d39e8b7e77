"""One writer per run directory: an exclusive ``flock`` on ``DIR/writer.lock``.

Two ``passkt eval`` processes on one ``--out`` would both run every chunk and append it, leaving
each record twice and the run unreadable. The store therefore takes an exclusive lock on a file
in the run directory before it reads or writes anything there, and holds it until the run ends.
The lock belongs to the open file, so the operating system drops it when the process dies in any
way (SIGKILL included): a crashed run never blocks its own ``--resume``. The lock file holds the
pid of the current holder, which the refusal names.

``flock`` is advisory and POSIX-only. On a system without ``fcntl`` (Windows) no lock is taken
and a warning is logged once. Network file systems may not honour it either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from passkt.envs.errors import PassktError

__all__ = ["LOCK_FILE", "RunLock", "RunLockedError"]

logger = logging.getLogger(__name__)

LOCK_FILE = "writer.lock"
_PID_WAIT_S = 0.5
"""How long to wait for a holder that has just locked to write its pid (for the message)."""


class RunLockedError(PassktError, ValueError):
    """Another live process is writing this run directory."""


_HELD: set[int] = set()
"""The file descriptors of the locks this process holds."""


def _drop_inherited() -> None:
    """In a child made by ``os.fork`` (an env worker): close the copies of the parent's lock
    files. A ``flock`` lasts while any descriptor of it is open, so a child that kept them (one
    hung in an env step, say) would hold the run after its parent was killed."""
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_inherited)


class RunLock:
    """An exclusive, non-blocking lock on a run directory. Use :meth:`acquire`."""

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd

    @classmethod
    def acquire(cls, directory: Path, advice: str | None = None) -> RunLock:
        """Lock ``directory`` (which must exist) for this process, or refuse at once.

        Args:
            directory: The run directory.
            advice: What the refusal tells the user to do instead (default: the eval CLI's
                ``--resume`` / ``--out``).

        Raises:
            RunLockedError: another process holds the lock; the message gives its pid.
        """
        path = directory / LOCK_FILE
        try:
            import fcntl  # optional: fcntl
        except ImportError:  # pragma: no cover - Windows
            logger.warning("no fcntl here: %s is not protected from a second writer", path)
            return cls(path, None)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            advice = advice or "then use --resume, or choose another --out"
            raise RunLockedError(
                f"{directory} is being written by another passkt process (pid {holder}); wait "
                f"for it to finish or stop it (kill {holder}), {advice}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _HELD.add(fd)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        """Whether this object still holds the lock."""
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up (closing the file releases it); safe to call twice."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            _HELD.discard(fd)
            os.close(fd)


def _holder(fd: int) -> str:
    """The pid written by the lock's holder (it writes it right after locking)."""
    deadline = time.monotonic() + _PID_WAIT_S
    while True:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        if text.isdigit() or time.monotonic() > deadline:
            return text or "unknown"
        time.sleep(0.01)
