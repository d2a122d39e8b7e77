"""Math answers are compared in a separate worker process that is killed past a CPU-time limit.

sympy has no way to stop a computation from outside, and math-verify's own timeouts use
``signal.alarm``, which works on the main thread only and replaces any alarm the caller set. A
worker process can always be stopped: the parent watches the worker's CPU time (not wall time,
so a loaded machine does not turn slow answers into wrong ones) while it waits for the reply, and
kills it with SIGKILL once one comparison has used more than the limit. This works from any
thread and any process. The next comparison starts a fresh worker. As a backstop for a parent
that dies mid-comparison, the worker also sets ``RLIMIT_CPU`` on itself before each comparison.
The worker's CPU time is read from ``/proc`` (Linux); where there is none, the parent waits at
most ``4 x limit + 1`` seconds of wall time instead.

One worker serves a whole process (comparisons are serialised by a lock; each takes
milliseconds). A forked child notices that the worker belongs to its parent and starts its own.
The worker parses each gold answer once and keeps it (a task's gold is compared many times).
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from passkt.envs.math_value import math_equal_parsed, parse_math

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_CPU_LIMIT_S", "MathVerdict", "MathWorker", "compare_math", "shared_worker"]

DEFAULT_CPU_LIMIT_S = 0.75
"""CPU seconds one comparison (a prediction against all gold answers of a task) may use. The
slowest MATH-500 gold answer takes about 0.4 s (``benchmarks/math_scoring.py``), so a correct
answer is not cut off, and a step stays under one second of CPU in all."""

_STARTUP_WALL_S = 300.0
"""How long to wait for a new worker to import sympy and math-verify (wall time: a loaded
machine may be slow, and nothing is being compared yet)."""
_POLL_S = 0.01
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_MEMORY_LIMIT_BYTES = 4 << 30


@dataclass(frozen=True)
class MathVerdict:
    """The outcome of one bounded comparison."""

    correct: bool
    """Whether the prediction equals one of the gold answers."""
    note: str | None = None
    """Why the answer was not compared (too costly), or None when it was."""
    cpu_s: float = 0.0
    """CPU seconds the worker spent on this comparison."""


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux ``/proc``), or None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


class MathWorker:
    """A math-verify worker process plus the watchdog that bounds each comparison's CPU time.

    Args:
        cpu_limit_s: CPU seconds one ``compare`` may use before the worker is killed.
    """

    def __init__(self, cpu_limit_s: float = DEFAULT_CPU_LIMIT_S) -> None:
        if not (isinstance(cpu_limit_s, int | float) and 0 < cpu_limit_s < math.inf):
            raise ValueError(f"cpu_limit_s must be a positive number, got {cpu_limit_s!r}")
        self.cpu_limit_s = float(cpu_limit_s)
        self.cpu_s = 0.0
        """CPU seconds all comparisons of this object have used (in the worker)."""
        self.restarts = 0
        """How many workers were killed for exceeding the limit."""
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = os.getpid()
        self._lock = threading.Lock()
        self._buffer = b""

    def compare(self, prediction: str, golds: list[str]) -> MathVerdict:
        """Whether ``prediction`` equals any of ``golds``, within the CPU limit.

        Never raises for any strings: an answer that cannot be compared in time is not correct,
        and the verdict's ``note`` says so.
        """
        request = json.dumps({"prediction": prediction, "golds": golds}).encode() + b"\n"
        with self._lock:
            proc = self._ensure_started()
            start_cpu = _process_cpu_s(proc.pid) or 0.0
            try:
                proc.stdin.write(request)  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
                reply = self._wait_reply(proc, start_cpu)
            except OSError:  # the worker died (killed from outside, out of memory)
                reply = None
            if reply is None:
                used = self._stop(proc, start_cpu)
                self.cpu_s += used
                return MathVerdict(
                    False,
                    f"not compared: the comparison used more than {self.cpu_limit_s:g} s of CPU",
                    used,
                )
            self.cpu_s += reply["cpu_s"]
            return MathVerdict(bool(reply["correct"]), reply.get("note"), float(reply["cpu_s"]))

    def close(self) -> None:
        """Stop the worker (a later ``compare`` starts a new one)."""
        with self._lock:
            if self._proc is not None and self._owner == os.getpid():
                self._proc.kill()
                self._proc.wait()
                for pipe in (self._proc.stdin, self._proc.stdout):
                    if pipe is not None:
                        pipe.close()
            self._proc = None

    # --- internals ----------------------------------------------------------------------------

    def _ensure_started(self) -> subprocess.Popen[bytes]:
        if self._owner != os.getpid():  # forked: the pipes lead to the parent's worker
            self._proc, self._owner, self._buffer = None, os.getpid(), b""
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONIOENCODING": "utf-8"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "passkt.envs.math_worker", str(self.cpu_limit_s)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            bufsize=0,
            close_fds=True,
        )
        self._proc, self._buffer = proc, b""
        ready = self._read_line(proc, deadline=time.monotonic() + _STARTUP_WALL_S)
        if ready is None or json.loads(ready).get("ready") is not True:
            proc.kill()
            proc.wait()
            self._proc = None
            raise RuntimeError(
                "the math scoring worker did not start (python -m passkt.envs.math_worker); "
                "check that math-verify is installed: pip install 'math-verify[antlr4_13_2]'"
            )
        return proc

    def _read_line(
        self, proc: subprocess.Popen[bytes], *, deadline: float, start_cpu: float | None = None
    ) -> bytes | None:
        """One line from the worker; None when it dies, passes the deadline or the CPU limit."""
        fd = proc.stdout.fileno()  # type: ignore[union-attr]
        wait = _POLL_S
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([fd], [], [], wait)
            if readable:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
                continue
            if time.monotonic() > deadline:
                return None
            if start_cpu is not None:
                used = _process_cpu_s(proc.pid)
                if used is not None and used - start_cpu > self.cpu_limit_s:
                    return None
                # The single-threaded worker cannot use CPU faster than wall time passes, so
                # there is no need to look again before the rest of its budget could be spent.
                left = self.cpu_limit_s - (used - start_cpu) if used is not None else 0.0
                wait = max(_POLL_S, left)
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _wait_reply(self, proc: subprocess.Popen[bytes], start_cpu: float) -> dict | None:
        if _process_cpu_s(proc.pid) is None:  # no /proc (macOS): bound wall time instead
            deadline = time.monotonic() + 4 * self.cpu_limit_s + 1.0
        else:  # a last resort only (a worker stopped by a debugger): CPU is what counts
            deadline = time.monotonic() + max(60.0, 100 * self.cpu_limit_s)
        line = self._read_line(proc, deadline=deadline, start_cpu=start_cpu)
        return None if line is None else json.loads(line)

    def _stop(self, proc: subprocess.Popen[bytes], start_cpu: float) -> float:
        """Kill a worker that ran too long; return the CPU seconds its last comparison used."""
        used = _process_cpu_s(proc.pid)
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()
        self._proc, self._buffer = None, b""
        self.restarts += 1
        logger.debug("killed the math scoring worker after %.2f s of CPU", (used or 0) - start_cpu)
        return max((used or start_cpu) - start_cpu, 0.0)


_SHARED: dict[float, MathWorker] = {}
_SHARED_LOCK = threading.Lock()


def shared_worker(cpu_limit_s: float = DEFAULT_CPU_LIMIT_S) -> MathWorker:
    """The process-wide worker for this limit (started on first use)."""
    with _SHARED_LOCK:
        worker = _SHARED.get(cpu_limit_s)
        if worker is None:
            worker = _SHARED[cpu_limit_s] = MathWorker(cpu_limit_s)
        return worker


@atexit.register
def _close_shared() -> None:
    for worker in list(_SHARED.values()):
        worker.close()


def compare_math(
    prediction: str, golds: list[str], *, cpu_limit_s: float = DEFAULT_CPU_LIMIT_S
) -> MathVerdict:
    """``shared_worker(cpu_limit_s).compare(prediction, golds)``."""
    return shared_worker(cpu_limit_s).compare(prediction, golds)


# --- the worker side ----------------------------------------------------------------------------


def _limit_self(cpu_limit_s: float) -> None:
    """Backstop: SIGXCPU/SIGKILL from the kernel if the parent is gone and stops watching."""
    try:
        import resource  # POSIX only

        used = resource.getrusage(resource.RUSAGE_SELF)
        spent = used.ru_utime + used.ru_stime
        soft = math.ceil(spent + cpu_limit_s) + 2
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        if hard == resource.RLIM_INFINITY or soft < hard:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):
        return


def _serve(cpu_limit_s: float) -> None:
    import resource  # POSIX only

    try:
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > _MEMORY_LIMIT_BYTES:
            resource.setrlimit(resource.RLIMIT_AS, (_MEMORY_LIMIT_BYTES, hard))
    except (ValueError, OSError):
        pass
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    sys.stdout = sys.stderr  # nothing else may write into the reply channel
    gold_cache = lru_cache(maxsize=4096)(parse_math)
    math_equal_parsed(gold_cache("1"), parse_math("1"))  # import and warm up latex2sympy
    out.write(b'{"ready": true}\n')
    for raw in sys.stdin.buffer:
        request = json.loads(raw)
        _limit_self(cpu_limit_s)
        start = time.process_time()
        correct, note = False, None
        try:
            prediction = parse_math(request["prediction"])
            if isinstance(prediction, str):
                note = prediction
            else:
                for gold in request["golds"]:
                    parsed_gold = gold_cache(gold)
                    if not isinstance(parsed_gold, str) and math_equal_parsed(
                        parsed_gold, prediction
                    ):
                        correct = True
                        break
        except MemoryError:
            note = "not compared: the comparison ran out of memory"
        reply = {"correct": correct, "note": note, "cpu_s": time.process_time() - start}
        out.write(json.dumps(reply).encode() + b"\n")


if __name__ == "__main__":
    _serve(float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CPU_LIMIT_S)
