"""Progress off a terminal: plain lines at a steady interval, never carriage-return frames."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from passkt.agents.progress import LineProgress

ROOT = Path(__file__).resolve().parents[2]


def test_line_progress_writes_at_start_at_each_interval_and_at_the_end(tmp_path):
    log = tmp_path / "log.txt"
    with log.open("w") as file:
        bar = LineProgress(10, "work", interval=0.0, file=file, unit="task")
        for _ in range(10):
            bar.update(1)
        bar.set_postfix(loss="0.5")
        bar.close()
        bar.close()
    lines = log.read_text().splitlines()
    assert len(lines) == 12  # start, one per update (interval 0), the end once
    assert lines[0].startswith("work: 0/10 task (0%) in 0:00")
    assert lines[-1].startswith("work: 10/10 task (100%)") and lines[-1].endswith("loss=0.5")
    quiet = LineProgress(5, "q", interval=3600, file=log.open("w"))
    quiet.update(5)
    quiet.close()
    assert len(log.read_text().splitlines()) == 2


def test_eval_redirected_to_a_file_logs_lines_not_frames(tmp_path):
    env = {**os.environ, "PASSKT_PROGRESS_SECONDS": "0.05", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "passkt", "eval", "--limit", "30", "--n", "4", "--chunk-tasks",
         "1", "--chunk-seconds", "0.01", "--no-report", "--out", str(tmp_path / "run")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("BridgeQA-v0 tasks:")]
    assert lines[0].startswith("BridgeQA-v0 tasks: 0/30 task (0%)")
    assert lines[-1].startswith("BridgeQA-v0 tasks: 30/30 task (100%)")


def test_every_bar_goes_through_progress_bar():
    """No module of the package makes a tqdm bar itself (it would draw frames into log files)."""
    offenders = []
    for folder in ("agents", "envs", "eval", "study", "passkt"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "progress.py":
                continue
            if re.search(r"\btqdm\(", path.read_text(encoding="utf-8")):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
