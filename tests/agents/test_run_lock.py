"""One writer per run directory: real ``passkt eval`` processes started (or resumed) at the same
moment on one ``--out``; exactly one writes, the others are refused naming its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from passkt.agents.run_lock import LOCK_FILE, RunLock, RunLockedError
from passkt.eval.chunk_digests import DIGESTS_FILE
from passkt.eval.store import RESULTS_FILE, RunDirError, read_run

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX flock")

ARGS = [
    "eval",
    "--env-kwargs",
    'source_options={"num_tasks": 30}',
    "--limit",
    "20",
    "--n",
    "6",
    "--chunk-tasks",
    "1",
    "--seed",
    "5",
    "--no-progress",
    "--no-report",
]
LINES = 20 * 6 * 5

# Each process imports everything, says it is ready, then waits for the go file: they reach the
# store together however slowly a loaded machine imports.
_LAUNCHER = """
import os, sys, time
from passkt.eval.cli import main
ready, go = sys.argv[1:3]
open(os.path.join(ready, str(os.getpid())), "w").close()
while not os.path.exists(go):
    time.sleep(0.001)
sys.exit(main(sys.argv[3:]))
"""


def _race(tmp_path: Path, argv: list[str], processes: int) -> list[tuple[int, int, str]]:
    """Start ``processes`` CLIs on the same arguments at once: ``[(pid, exit code, stderr)]``."""
    race = tmp_path / f"race-{time.monotonic_ns()}"
    ready, go = race / "ready", race / "go"
    ready.mkdir(parents=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(ready), str(go), *argv],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    deadline = time.monotonic() + 300
    while len(list(ready.iterdir())) < processes:  # every one imported and waiting
        if time.monotonic() > deadline or any(proc.poll() is not None for proc in procs):
            break  # a process that died before the go is reported by the checks below
        time.sleep(0.01)
    go.touch()
    out = []
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        out.append((proc.pid, proc.returncode, err))
    return out


def _check_one_winner(outcomes: list[tuple[int, int, str]]) -> None:
    winners = [pid for pid, code, _ in outcomes if code == 0]
    assert len(winners) == 1, outcomes
    for pid, code, err in outcomes:
        if pid != winners[0]:
            assert code == 2 and err.count("\n") == 1, err
            assert f"another passkt process (pid {winners[0]})" in err, err


def _lines(run: Path) -> list[str]:
    return (run / RESULTS_FILE).read_text(encoding="utf-8").splitlines()


@pytest.mark.slow
def test_simultaneous_starts_and_resumes_leave_one_writer(tmp_path):
    run = tmp_path / "run"
    _check_one_winner(_race(tmp_path, [*ARGS, "--out", str(run)], processes=3))
    complete = _lines(run)
    assert len(complete) == LINES and read_run(run).complete  # every record exactly once

    # A crash after 7 chunks (a torn eighth line), then three resumes at once.
    contents = read_run(run)
    cut = sum(len(line.encode()) + 1 for line in complete[: 7 * 30])
    with open(run / RESULTS_FILE, "r+b") as f:
        f.truncate(cut + 40)
    digests = (run / DIGESTS_FILE).read_bytes().splitlines(keepends=True)
    (run / DIGESTS_FILE).write_bytes(b"".join(digests[:7]))  # as a crash leaves them
    assert len(read_run(run).finished_chunks) == 7 and contents.complete
    _check_one_winner(_race(tmp_path, [*ARGS, "--out", str(run), "--resume"], processes=3))
    assert _lines(run) == complete  # byte for byte what the first run wrote


def test_second_writer_is_refused_while_the_first_lives_and_not_after_it_dies(
    tmp_path, lock_holder
):
    run = tmp_path / "run"
    run.mkdir()
    holder = lock_holder(run)
    with pytest.raises(RunLockedError, match=rf"another passkt process \(pid {holder.pid}\)"):
        RunLock.acquire(run)
    assert holder.poll() is None  # refused while the holder still runs: no waiting
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = RunLock.acquire(run)  # the OS dropped the dead holder's lock
    assert lock.held and (run / LOCK_FILE).read_text().strip() == str(os.getpid())
    lock.release()


def test_store_holds_the_lock_until_closed(tmp_path):
    from passkt.eval.store import RunStore, make_manifest

    manifest = make_manifest(
        env_id="BridgeQA-v0",
        env_kwargs={},
        split="test",
        policy="scripted:heuristic",
        policy_options=None,
        sampling={},
        n=1,
        budgets=[0],
        seed=0,
        share_prefix=False,
        chunk_tasks=1,
        task_ids=["a"],
    )
    store = RunStore.open(tmp_path / "run", manifest, resume=False)
    with pytest.raises(RunLockedError, match=f"pid {os.getpid()}"):
        RunStore.open(tmp_path / "run", manifest, resume=True)
    store.close()
    RunStore.open(tmp_path / "run", manifest, resume=True).close()


def test_out_under_a_regular_file_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        from passkt.eval.store import RunStore

        RunStore.open(tmp_path / "file" / "run", {}, resume=False)
    assert not (tmp_path / "file" / "run").exists()
