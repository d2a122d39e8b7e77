"""How the study runs a stage's units: failures with their logs, SIGTERM, jobs in subprocesses
with the caller's selection, and GPUs split among the jobs."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

STUDY_DIR = Path(__file__).resolve().parents[2] / "study"

from passkt.study import pipeline as study  # noqa: E402
from passkt.study.profile import StudyError  # noqa: E402


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_a_failing_unit_fails_the_stage_with_its_log(tmp_path):
    profile = tmp_path / "broken.toml"
    text = (STUDY_DIR / "profiles" / "tiny.toml").read_text()
    profile.write_text(re.sub(r"\npretrain = .*\n", '\nmodel = "/no/such/model"\n', text))
    args = ["--out", str(tmp_path / "s"), "--profile", str(profile), "--limit-eval", "1"]
    study.run(["splits", *args, "--limit-train", "1", "--categories", "B,C"])
    study.run(["base", *args, "--limit-train", "1"])
    with pytest.raises(StudyError, match=r"failed: .*B/base \(exit 1, log .*B_base\.log\)"):
        study.run(["eval-base", *args, "--limit-train", "1", "--categories", "B,C", "--jobs", "2"])
    log = tmp_path / "s/logs/eval-base/B_base.log"
    assert "/no/such/model" in log.read_text()
    assert not (tmp_path / "s/eval/B/base/done.json").exists()
    shutil.rmtree(tmp_path / "s")


_SIGTERM_CHILD = """
import sys, time
from pathlib import Path

from passkt.study import pipeline as study
from passkt.study.stages import Unit

class Where:
    out = Path(sys.argv[1])

def work():
    print("working", flush=True)
    time.sleep(120)

study.stop_on_sigterm()
try:
    study.run_unit(Where, "eval-base", Unit("slow", Where.out / "u", work), None)
except study.Terminated:
    sys.exit(143)
"""


def test_a_unit_stopped_by_sigterm_is_recorded_as_aborted(tmp_path):
    import signal
    import subprocess

    child = subprocess.Popen(
        [sys.executable, "-c", _SIGTERM_CHILD, str(tmp_path), str(STUDY_DIR)],
        stdout=subprocess.PIPE,
        text=True,
    )
    while child.stdout.readline().strip() != "working":  # the unit's work is running
        assert child.poll() is None
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 143
    (line,) = _lines(tmp_path / "timings.jsonl")
    assert line["unit"] == "slow" and line["status"] == "aborted" and "SIGTERM" in line["error"]


def test_each_job_gets_its_own_gpus_when_cuda_devices_exist():
    from passkt.study.pipeline import cuda_devices, gpu_slots

    assert gpu_slots(4, ["0", "1", "2", "3", "4", "5", "6", "7"]) == ["0,1", "2,3", "4,5", "6,7"]
    assert gpu_slots(2, ["3", "5"]) == ["3", "5"]
    assert gpu_slots(3, ["0", "1"]) == ["0", "1", "0"]  # more jobs than GPUs: they share
    assert gpu_slots(4, []) == []
    assert cuda_devices({"CUDA_VISIBLE_DEVICES": "2, 5"}) == ["2", "5"]
    assert cuda_devices({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_the_jobs_of_a_stage_run_on_disjoint_gpus(tmp_path, monkeypatch):
    import subprocess
    import threading
    from types import SimpleNamespace

    import passkt.study.pipeline as pipeline

    running: list[str] = []
    seen: list[list[str]] = []
    lock = threading.Lock()

    def fake_run(command, stdout, stderr, env):
        with lock:
            running.append(env["CUDA_VISIBLE_DEVICES"])
            seen.append(list(running))
        threading.Event().wait(0.05)
        with lock:
            running.remove(env["CUDA_VISIBLE_DEVICES"])
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(pipeline.subprocess, "run", fake_run)
    monkeypatch.setattr(pipeline, "cuda_devices", lambda: ["0", "1", "2", "3"])
    units = [SimpleNamespace(key=f"eval/A/s{i}") for i in range(6)]
    caller = SimpleNamespace(out=tmp_path, categories=["A"], seeds=[0], method=None)
    pipeline._run_children(caller, "eval", units, jobs=2)
    assert all(set(group) <= {"0,1", "2,3"} for group in seen)
    assert all(len(group) == len(set(group)) for group in seen)  # never two jobs on one group
    assert len(seen) == 6


@pytest.mark.parametrize("method", [None, "grpo"])
def test_a_units_subprocess_works_with_the_callers_selection(tmp_path, monkeypatch, method):
    """A unit run in a subprocess (--jobs) selects the caller's categories, seeds and method:
    a comparison's noise floor is the selected seeds' bases, not every seed's."""
    import subprocess
    from types import SimpleNamespace

    import passkt.study.pipeline as pipeline

    commands = []

    def fake_run(command, stdout, stderr, env):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(pipeline.subprocess, "run", fake_run)
    caller = SimpleNamespace(out=tmp_path, categories=["A", "C"], seeds=[0, 1], method=method)
    units = [SimpleNamespace(key=f"{c}/s{s}") for c in "AC" for s in (0, 1)]
    pipeline._run_children(caller, "compare", units, jobs=2)
    assert len(commands) == 4
    for command in commands:
        args = pipeline._parser().parse_args(command[command.index("compare") :])
        assert (args.categories, args.seeds, args.method) == ("A,C", "0,1", method)
        assert args.only in {u.key for u in units}
