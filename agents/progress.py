"""Progress of long work: a bar on a terminal, a line at a steady interval anywhere else.

A tqdm bar redraws itself with carriage returns; sent to a file (``passkt study run ... 2> log``,
a batch job, CI) every redraw stays in it, thousands of frames. :func:`progress_bar` gives a tqdm
bar only when stderr is a terminal; otherwise a :class:`LineProgress` that writes one plain line
(``desc: done/total (pct) elapsed, eta, postfix``) when it starts, every ``PASSKT_PROGRESS_SECONDS``
seconds (default 30) while it runs, and when it ends. Both take the calls passkt makes:
``update``, ``set_postfix_str``, ``set_postfix``, ``close``.

Only the outermost bar of a command logs lines (a nested bar, ``leave=False``, is the inner loop
of one step of the outer one and stays silent off a terminal).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

from tqdm.auto import tqdm

__all__ = ["LineProgress", "progress_bar"]

DEFAULT_INTERVAL = 30.0


def _interval() -> float:
    try:
        value = float(os.environ.get("PASSKT_PROGRESS_SECONDS", DEFAULT_INTERVAL))
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class LineProgress:
    """A progress report for a log file: a line at start, every ``interval`` seconds, and at
    the end."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        initial: int = 0,
        interval: float | None = None,
        file: TextIO | None = None,
        unit: str = "it",
    ) -> None:
        self.total, self.desc, self.n, self.unit = total, desc, initial, unit
        self.initial = initial
        self.interval = _interval() if interval is None else interval
        self.file = file
        self.postfix = ""
        self.start = self.last = time.monotonic()
        self.closed = False
        self._write()

    def _write(self) -> None:
        elapsed = time.monotonic() - self.start
        if self.total:
            done = f"{self.n}/{self.total} {self.unit} ({100 * self.n / self.total:.0f}%)"
        else:
            done = f"{self.n} {self.unit}"
        rate = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        eta = ""
        if self.total and rate > 0 and self.n < self.total:
            eta = f", eta {_clock((self.total - self.n) / rate)}"
        postfix = f", {self.postfix}" if self.postfix else ""
        print(
            f"{self.desc}: {done} in {_clock(elapsed)}{eta}{postfix}",
            file=self.file or sys.stderr,
            flush=True,
        )
        self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.monotonic() - self.last >= self.interval:
            self._write()

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        self.postfix = text

    def set_postfix(self, **values: Any) -> None:
        self.postfix = ", ".join(f"{key}={value}" for key, value in values.items())

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._write()


class _Silent:
    """No output at all (``disable=True``, or an inner bar off a terminal)."""

    n = 0

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str = "", refresh: bool = True) -> None:
        pass

    def set_postfix(self, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass


def _on_terminal() -> bool:
    return sys.stderr.isatty()


def progress_bar(
    *,
    total: int | None,
    desc: str,
    disable: bool = False,
    initial: int = 0,
    leave: bool = True,
    unit: str = "it",
    **tqdm_options: Any,
) -> Any:
    """A tqdm bar on a terminal (stderr), a :class:`LineProgress` elsewhere (inner bars,
    ``leave=False``, are silent there), nothing when ``disable``."""
    if disable:
        return _Silent()
    if _on_terminal():
        return tqdm(total=total, desc=desc, initial=initial, leave=leave, unit=unit, **tqdm_options)
    if not leave:
        return _Silent()
    return LineProgress(total, desc, initial=initial, unit=unit)
