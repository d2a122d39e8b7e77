"""Math scoring is bounded: every comparison stays under its CPU limit, in any thread, and every
MATH-500 gold answer still scores 1. The adversarial corpus is in ``math_corpus.py``."""

from __future__ import annotations

import json
import threading
import time

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_corpus import ADVERSARIAL, FRAGMENTS  # tests/envs is on sys.path (rootdir import)
from real_data import DATA

from passkt.envs.math_guard import refusal
from passkt.envs.math_worker import DEFAULT_CPU_LIMIT_S, MathWorker, shared_worker

MATH500 = DATA / "math500.jsonl"

STEP_CPU_S = 1.0
"""The promise: one step of Math-v0 never uses more than this much CPU (env + scoring worker)."""
KILL_SLACK_S = 0.1
"""How far past its limit a comparison may run before the watchdog sees it (polls every 10 ms)."""


def _gold_answers() -> list[str]:
    lines = MATH500.read_text(encoding="utf-8").splitlines() if MATH500.is_file() else []
    return [json.loads(line)["answer"] for line in lines if line.strip()]


def _math_env(split: str) -> gym.Env:
    return gym.make("Math-v0", source="math500", path=str(MATH500), split=split)


def _timed_step(env: gym.Env, task_id: str, answer: str) -> tuple[float, dict, float]:
    """``(reward, info, cpu seconds)``: this process's CPU plus the scoring worker's."""
    worker = shared_worker()
    env.reset(options={"task_id": task_id})
    before, worker_before = time.process_time(), worker.cpu_s
    _, reward, terminated, _, info = env.step(f"<answer>{answer}</answer>")
    cpu = time.process_time() - before + worker.cpu_s - worker_before
    assert terminated
    return reward, info, cpu


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("e^{e^{e^{e^{e}}}}", "power tower of depth 4"),
        (r"\exp(\exp(\exp(9)))", "power tower of depth 3"),
        ("2^2^2^2", "power tower of depth 3"),
        (r"\binom{10^{10}}{5000000000}", "binomial of an exponential"),
        (r"{100000 \choose 3}", "binomial of 100000"),
        ("100000!", "factorial or binomial of 100000"),
        ("((3!)!)!", "factorial or binomial of an exponential or factorial"),
        ("(" * 11 + ")" * 11, "nested 11 deep"),
    ],
)
def test_guard_refuses_hopeless_answers_before_parsing(answer: str, reason: str) -> None:
    assert reason in (refusal(answer) or "")


@pytest.mark.parametrize("answer", [r"10,\!080", "5!", r"\binom{20}{10}", "2^{3^{4}}", "x^2+1"])
def test_guard_lets_ordinary_answers_through(answer: str) -> None:
    assert refusal(answer) is None


def test_guard_lets_every_math500_gold_answer_through() -> None:
    assert [a for a in _gold_answers() if refusal(a)] == []


@pytest.mark.slow  # starts two workers (seconds each)
def test_worker_is_killed_past_its_limit_and_replaced() -> None:
    worker = MathWorker(cpu_limit_s=0.05)
    try:
        # about 1 s of CPU when not stopped (the gold has the same variables, so it is compared)
        slow = worker.compare("(a+b+c+d)^{30}", ["a^{30}"])
        assert not slow.correct and "more than 0.05 s of CPU" in (slow.note or "")
        assert worker.restarts == 1 and 0.05 <= slow.cpu_s <= 0.05 + KILL_SLACK_S
        assert worker.compare("2", ["2"]).correct  # a fresh worker took over
    finally:
        worker.close()


def test_limit_holds_off_the_main_thread() -> None:
    worker = MathWorker(cpu_limit_s=0.05)
    verdicts = []
    thread = threading.Thread(
        target=lambda: verdicts.extend(
            [worker.compare(r"\int_0^{10^{10}} e^{x^2} dx", ["1"]), worker.compare("0.5", ["1/2"])]
        )
    )
    try:
        thread.start()
        thread.join()
    finally:
        worker.close()
    assert [v.correct for v in verdicts] == [False, True]
    assert "of CPU" in (verdicts[0].note or "")


def test_lone_surrogates_reach_the_worker_intact() -> None:
    assert not shared_worker().compare("\ud800", ["1"]).correct
    assert shared_worker().compare("1\udfff", ["1"]).note is None


@pytest.mark.slow  # starts two workers (seconds each)
def test_a_worker_killed_from_outside_is_replaced() -> None:
    worker = MathWorker()
    try:
        assert worker.compare("1", ["1"]).correct
        worker._proc.kill()  # e.g. the out-of-memory killer
        worker._proc.wait()
        assert worker.compare("2", ["2"]).correct
    finally:
        worker.close()


@pytest.mark.slow
def test_every_math500_gold_answer_scores_one_within_the_step_limit() -> None:
    steps = []
    for split in ("train", "test"):
        env = _math_env(split)
        for task in env.unwrapped.tasks:
            reward, info, cpu = _timed_step(env, task.task_id, task.answer)
            steps.append((cpu, reward, info["score_note"], task.answer))
    assert len(steps) == 500
    assert [s for s in steps if s[1] != 1.0 or s[2] is not None] == []
    assert max(steps)[0] < STEP_CPU_S


@pytest.mark.slow
def test_adversarial_corpus_never_exceeds_the_step_limit() -> None:
    env = _math_env("test")
    task_ids = [task.task_id for task in env.unwrapped.tasks]
    worst = 0.0
    for i, answer in enumerate(ADVERSARIAL):
        reward, _, cpu = _timed_step(env, task_ids[i % len(task_ids)], answer)
        assert reward == 0.0, answer
        worst = max(worst, cpu)
    assert worst < STEP_CPU_S
    assert DEFAULT_CPU_LIMIT_S + KILL_SLACK_S < STEP_CPU_S


MIXTURES = st.lists(st.sampled_from(FRAGMENTS + ADVERSARIAL), min_size=1, max_size=8).map("".join)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answer=MIXTURES, task=st.integers(0, 10_000))
def test_fuzzed_mixtures_never_exceed_the_step_limit(answer: str, task: int) -> None:
    env = FUZZ_ENV.setdefault("env", _math_env("test"))
    task_ids = [t.task_id for t in env.unwrapped.tasks]
    _, info, cpu = _timed_step(env, task_ids[task % len(task_ids)], answer)
    assert cpu < STEP_CPU_S, (answer, info["score_note"])


FUZZ_ENV: dict[str, gym.Env] = {}


@pytest.mark.slow  # the child starts its own worker
def test_a_forked_child_gets_its_own_worker() -> None:
    import os

    worker = shared_worker()
    assert worker.compare("1", ["1"]).correct
    parent_pid = worker._proc.pid
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        ok = worker.compare(r"\frac{1}{2}", ["0.5"]).correct and worker._proc.pid != parent_pid
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(child, 0)
    assert worker.compare("2", ["2"]).correct and worker._proc.pid == parent_pid
