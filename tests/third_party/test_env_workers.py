"""Envs that crash, hang or raise on model text: env workers turn each failure into a recorded
env failure of one episode, and runs finish, resume and score the same with any number of workers.

The envs and the agent are ``crashy.py`` (a real SIGSEGV, a step that never returns, an exception
on one action in 50); every command runs as the ``passkt`` console script in a fresh process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import crashy  # noqa: E402  (registers Crashy-v0)

from passkt.agents.env_workers import ENV_FAILURE_KINDS  # noqa: E402
from passkt.agents.rollout import rollout  # noqa: E402

FAILS = {"segv": "signal", "hang": "timeout", "raise": "exception"}


def passkt(*argv: str, ok: bool = True, background: bool = False):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    command = [sys.executable, "-m", "passkt", *argv]
    if background:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    if ok:
        assert done.returncode == 0, f"passkt {' '.join(argv)}\n{done.stderr[-3000:]}"
    return done


def eval_args(fail: str, out: Path, *extra: str) -> list[str]:
    # a 20 ms step, so that a SIGKILL after the first chunk lands in the middle of the run
    return [
        "eval", "--env", "crashy:Crashy-v0", "--env-kwargs", f"fail={fail},step_seconds=0.02",
        "--policy", "py:crashy:make_agent", "--n", "4", "--budgets", "0,1,3",
        "--env-step-timeout", "0.5", "--no-progress", "--no-report", "--out", str(out),
        "--env-workers", "2", "--chunk-tasks", "1", *extra,
    ]  # fmt: skip


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("fail", sorted(FAILS))
def test_a_failing_env_ends_episodes_not_the_run_and_resumes_byte_for_byte(fail, tmp_path):
    """Each failure mode runs to the end with two workers; every env failure is recorded with its
    kind and turn and counted in the summary line; a run killed with SIGKILL mid-way and resumed
    writes the same results and transcripts, byte for byte, as one that ran through."""
    whole = tmp_path / "whole"
    done = passkt(*eval_args(fail, whole))
    rows = records(whole)
    failed = [r for r in rows if "env_error" in r]
    assert failed, "the agent's text must meet the env's failure"
    assert {r["env_error"]["kind"] for r in failed} <= {FAILS[fail], "lost"}
    assert any(r["env_error"]["kind"] == FAILS[fail] for r in failed)
    for r in failed:
        assert r["correct"] is False and r["truncated"] is True
        assert 0 <= r["env_error"]["turn"] < len(r["actions"]) or r["env_error"]["turn"] == -1
    assert f"{len(failed)} episode(s) in" in done.stderr and "ended by the env" in done.stderr
    # the same run, killed once its first chunk is on disk, then resumed
    cut = tmp_path / "cut"
    process = passkt(*eval_args(fail, cut), background=True)
    deadline = time.monotonic() + 300
    digests = cut / "digests.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if digests.exists() and digests.read_text().count("\n") >= 1:
            break
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = digests.read_text().count("\n")
    assert 1 <= finished < 6, finished
    resumed = passkt(*eval_args(fail, cut, "--resume"))
    assert f"{finished} of 6 chunks done" in resumed.stderr
    for name in ("results.jsonl", "transcripts.jsonl"):
        assert (cut / name).read_bytes() == (whole / name).read_bytes(), name


def _episodes(fail: str, workers: int) -> list[str]:
    result = rollout(
        crashy.NoisyAgent(seed=3),
        "Crashy-v0",
        crashy.WORDS[:6],
        n=5,
        budgets=(0, 1, 2, 4),
        env_kwargs={"fail": fail, "split": "test"},
        seed=11,
        env_workers=workers,
        env_step_timeout=1.0,
    )
    return [json.dumps(e.to_record(), sort_keys=True) for e in result.episodes]


@pytest.mark.slow
@pytest.mark.parametrize("fail", ["segv", "raise"])
def test_records_do_not_depend_on_the_number_of_workers(fail):
    """One worker and three give the same records (a crash's neighbours in its worker are rebuilt
    by replay); an exception is the same env failure in this process (0 workers) too."""
    one = _episodes(fail, 1)
    assert any('"env_error"' in r for r in one)
    assert _episodes(fail, 3) == one
    if fail == "raise":
        assert _episodes(fail, 0) == one


def test_an_env_that_never_fails_gives_the_same_records_in_workers_and_in_process():
    assert _episodes("none", 2) == _episodes("none", 0)


def test_every_env_failure_kind_is_documented():
    runs = (Path(__file__).resolve().parents[2] / "docs" / "runs.md").read_text()
    for kind in ENV_FAILURE_KINDS:
        assert f"`{kind}`" in runs


@pytest.mark.slow
@pytest.mark.parametrize("fail", sorted(FAILS))
def test_train_grpo_goes_on_past_a_failing_env(fail, tmp_path):
    """GRPO with env workers on an env that segfaults, hangs or raises on one action in three:
    both steps run, the failures are counted in the step metrics and left out of the update."""
    from passkt.agents.tiny import make_tiny_checkpoint

    model = make_tiny_checkpoint(tmp_path / "model", hidden_size=32)
    out = tmp_path / "grpo"
    done = passkt(
        "train", "grpo", "--env", "crashy:Crashy-v0", "--env-kwargs", f"fail={fail},every=3",
        "--policy", f"hf:{model}", "--t-train", "2", "--group-size", "4",
        "--tasks-per-step", "2", "--limit", "4", "--max-new-tokens", "6", "--max-steps", "2",
        "--env-workers", "2", "--env-step-timeout", "0.3", "--no-progress", "--out", str(out),
    )  # fmt: skip
    assert "trained 2 steps" in done.stderr
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    failures = [s["episode/env_failures"] for s in steps if "episode/env_failures" in s]
    assert len(failures) == 2 and sum(failures) > 0


@pytest.mark.parametrize(
    ("fail", "label", "outcome"),
    [("segv", "control inside", "signal"), ("hang", "NUL", "timeout"), ("none", None, None)],
)
def test_check_env_names_the_hostile_text_that_crashed_or_hung(fail, label, outcome):
    done = passkt(
        "check-env", "crashy:Crashy-v0", "--env-kwargs", f"fail={fail}", "--timeout", "0.5",
        ok=False,
    )  # fmt: skip
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 25
    failed = {
        row.split(":")[0][2:]: row.split("|")[2].strip() for row in rows if "| ok |" not in row
    }
    if outcome is None:
        assert done.returncode == 0 and not failed
    else:
        assert done.returncode == 1 and failed[label] == outcome
        assert set(failed.values()) == {outcome}


def test_env_failures_are_counted_or_their_tasks_dropped_and_reported(tmp_path):
    """``count`` keeps every task (a failure scores 0); ``drop`` leaves out each task with an
    env failure; report and compare name the count and the rule."""
    from passkt.eval.evaluate import evaluate
    from passkt.eval.reports import write_comparison, write_report
    from passkt.eval.store import load_run, read_env_failures

    runs = {}
    for rule in ("count", "drop"):
        runs[rule] = tmp_path / rule
        evaluate(
            "Crashy-v0", crashy.NoisyAgent(seed=1), env_kwargs={"fail": "raise", "every": 20},
            n=4, budgets=(0, 2), out_dir=runs[rule], env_failures=rule, env_workers=0,
            progress=False,
        )  # fmt: skip
    failures = read_env_failures(runs["count"])
    assert failures.rule == "count" and 0 < len(failures.tasks) < 6
    assert failures.episodes == sum("env_error" in r for r in records(runs["count"]))
    _, counted = load_run(runs["count"])
    _, dropped = load_run(runs["drop"])
    assert len(counted.task_ids) == 6
    assert set(dropped.task_ids) == set(counted.task_ids) - set(failures.tasks)
    report = write_report(runs["drop"]).markdown
    assert "their tasks left out of the surface (env_failures=drop)" in report
    compared = write_comparison([runs["count"], runs["drop"]], tmp_path / "cmp").markdown
    assert compared.count("**Env failures**") == 2
