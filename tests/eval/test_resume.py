"""A real ``passkt eval`` killed with SIGKILL mid-run, resumed, equals an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from passkt.eval.cli import main
from passkt.eval.evaluate import evaluate
from passkt.eval.store import MATCH_KEYS, RESULTS_FILE, load_run
from passkt.eval.transcripts import TRANSCRIPTS_FILE

TASKS, N, BUDGETS = 24, 8, (0, 1, 2, 3, 5)
LINES = TASKS * N * len(BUDGETS)
ARGS = [
    "eval",
    "--env-kwargs",
    'source_options={"num_tasks": 40}',
    "--limit",
    str(TASKS),
    "--n",
    str(N),
    "--chunk-tasks",
    "1",
    "--seed",
    "3",
    "--no-progress",
    "--no-report",
]


def _count_lines(path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL (POSIX)")
def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path, capsys):
    run = tmp_path / "killed"
    results = run / RESULTS_FILE
    proc = subprocess.Popen(
        [sys.executable, "-m", "passkt.eval.cli", *ARGS, "--out", str(run)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    # Kill once a few chunks (N x 5 lines each) are on disk, well before the 24th.
    while _count_lines(results) < 3 * N * len(BUDGETS) and proc.poll() is None:
        assert time.monotonic() < deadline, "the run wrote nothing within 60 s"
        time.sleep(0.002)
    if proc.poll() is not None:  # it ended by itself: too fast to catch, or it failed
        pytest.fail(f"the run ended before SIGKILL: {proc.stderr.read().decode()[-2000:]}")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    written = _count_lines(results)
    assert 0 < written < LINES, f"killed too late: {written} of {LINES} lines"

    assert main([*ARGS, "--out", str(run), "--resume"]) == 0
    assert "resuming:" in capsys.readouterr().err

    reference = evaluate(
        "BridgeQA-v0",
        "scripted:heuristic",
        env_kwargs={"source_options": {"num_tasks": 40}},
        n=N,
        budgets=BUDGETS,
        limit=TASKS,
        chunk_tasks=1,
        seed=3,
        out_dir=tmp_path / "reference",
        progress=False,
    )
    resumed_lines = results.read_text(encoding="utf-8").splitlines()
    reference_lines = (tmp_path / "reference" / RESULTS_FILE).read_text().splitlines()
    assert resumed_lines == reference_lines  # every record, byte for byte, in order
    transcripts = [
        (d / TRANSCRIPTS_FILE).read_text(encoding="utf-8") for d in (run, tmp_path / "reference")
    ]
    assert transcripts[0] == transcripts[1]  # and every transcript
    cells = [(r["task_id"], r["sample"], r["budget"]) for r in map(json.loads, resumed_lines)]
    assert len(cells) == len(set(cells)) == LINES  # nothing missing, nothing twice
    manifest, table = load_run(run)
    assert table == reference.outcomes
    assert all(manifest[key] == reference.manifest[key] for key in MATCH_KEYS)
