"""Math-v0 on MATH-500 after a reset on a task id it does not have (the other split's).

The failed reset raises ``UnknownTaskError``; the episode before it is over, and every later
``step`` raises ``UnknownTaskError`` again, naming the failed reset, until a reset succeeds.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from real_data import DATA

from passkt.envs import UnknownTaskError

MATH500 = DATA / "math500.jsonl"


def _env(split: str) -> gym.Env:
    return gym.make("Math-v0", source="math500", path=str(MATH500), split=split)


def _task_of_the_other_split() -> str:
    return _env("train").unwrapped.tasks[0].task_id


@pytest.mark.parametrize("episode_before", [False, True])
def test_every_step_after_a_failed_reset_says_so(episode_before: bool) -> None:
    env = _env("test")
    if episode_before:  # an episode in progress must not go on after the failed reset
        env.reset(seed=0)
    unknown = _task_of_the_other_split()
    with pytest.raises(UnknownTaskError, match="no task with task_id"):
        env.reset(options={"task_id": unknown})
    for _ in range(2):
        with pytest.raises(UnknownTaskError, match=r"step\(\) after a failed reset: .*" + unknown):
            env.step("<answer>1</answer>")


def test_a_reset_that_succeeds_after_a_failed_one_starts_a_new_episode() -> None:
    env = _env("test").unwrapped  # Gymnasium's passive checker breaks after a failed first reset
    env.reset(seed=0)
    with pytest.raises(UnknownTaskError):
        env.reset(options={"task_id": _task_of_the_other_split()})
    task = env.tasks[3]
    _, info = env.reset(options={"task_id": task.task_id})
    assert info["task_id"] == task.task_id
    _, reward, terminated, truncated, _ = env.step(f"<answer>{task.answer}</answer>")
    assert (reward, terminated, truncated) == (1.0, True, False)
