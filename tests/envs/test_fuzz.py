"""Hypothesis fuzz: random and malformed actions never raise, always get a clear observation,
and every episode ends within T + 1 turns."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from passkt.envs import ENV_SPECS
from passkt.envs.protocol import ANSWER_RECEIVED, FINAL_NOTICE, TRUNCATED_MESSAGE

FRAGMENTS = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<information>",
    "</information>",
    "<",
    ">",
    "/",
    "search",
    "answer",
    " ",
    "\n",
    "Zanev",
    "東京",
    "é",
    "\x00",
    "\ud800",
    "😀",
    "\\frac{1}{2}",
    "1e400",
    "the",
]

HUGE = [
    "x" * 200_000,
    "<search>" + "river " * 30_000 + "</search>",
    "<think>" * 20_000,
    "<answer>" + "9" * 3_000 + "</answer>",
    "<search>" + "<search>" * 10_000,
]

ACTIONS = st.one_of(
    st.text(max_size=80),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=12).map("".join),
    st.builds(
        "<{0}>{1}</{0}>".format,
        st.sampled_from(["search", "answer", "think"]),
        st.text(max_size=40),
    ),
    st.sampled_from(HUGE),
    st.just(""),
)

# One env per id for the whole module: building the task list is the slow part.
ENVS = {env_id: gym.make(env_id) for env_id in ENV_SPECS}


STEPS = dict.fromkeys(ENV_SPECS, 0)
"""Actions applied per env (checked at the end: thousands per env)."""


def run_episode(env: gym.Env, seed: int, actions: list[str]) -> list[str]:
    """Play ``actions`` until the episode ends; return the actions left over."""
    budget = env.unwrapped.max_tool_calls
    obs, info = env.reset(seed=seed)
    assert obs in env.observation_space and obs.startswith(env.unwrapped.task.question)
    assert obs.endswith(FINAL_NOTICE) == (budget == 0)
    for turn, action in enumerate(actions, start=1):
        obs, reward, terminated, truncated, info = env.step(action)
        STEPS[env.spec.id] += 1
        assert isinstance(obs, str) and obs and obs in env.observation_space
        assert not (terminated and truncated)
        assert reward in (0.0, 1.0) and (reward == 0.0 or terminated)
        assert info["turns"] == turn <= budget + 1
        assert info["tool_calls"] <= budget
        if terminated:
            assert info["action"] == "answer" and obs == ANSWER_RECEIVED
            assert info["correct"] == (reward == 1.0) and info["answer"] is not None
            return actions[turn:]
        if truncated:
            assert obs == TRUNCATED_MESSAGE and turn == budget + 1 and info["answer"] is None
            return actions[turn:]
        assert info["tool_calls"] == turn
        assert obs.endswith(FINAL_NOTICE) == (turn == budget)
        if info["action"] == "search":
            assert obs.startswith("<information>") and "</information>" in obs
        else:
            assert info["action"] == "invalid" and obs.startswith("Invalid action: ")
            assert "<search>your query</search>" in obs and "<answer>your answer</answer>" in obs
    assert len(actions) < budget + 1, "the episode should have ended after T + 1 turns"
    return []


def run_episodes(env: gym.Env, seed: int, actions: list[str]) -> None:
    """Play all ``actions``, resetting (seed + 1, ...) whenever an episode ends."""
    while actions:
        actions = run_episode(env, seed, actions)
        seed += 1


@pytest.mark.parametrize("env_id", list(ENV_SPECS))
@settings(
    max_examples=350,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(seed=st.integers(0, 2**31 - 1), actions=st.lists(ACTIONS, min_size=1, max_size=8))
def test_random_actions(env_id: str, seed: int, actions: list[str]) -> None:
    run_episodes(ENVS[env_id], seed, actions)


@pytest.mark.parametrize("env_id", list(ENV_SPECS))
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 8))
def test_sampled_actions(env_id: str, seed: int, n: int) -> None:
    env = ENVS[env_id]
    env.action_space.seed(seed)
    run_episodes(env, seed, [env.action_space.sample() for _ in range(n)])


@pytest.mark.parametrize("env_id", list(ENV_SPECS))
def test_fuzz_volume(env_id: str) -> None:
    """Runs after the fuzz tests above (file order): each env took thousands of actions."""
    if STEPS[env_id] == 0:
        pytest.skip("run together with test_random_actions")
    assert STEPS[env_id] >= 1000, STEPS
