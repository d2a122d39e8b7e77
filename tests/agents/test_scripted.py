"""Scripted policies and policy specs."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.policy import Policy, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.agents.specs import load_policy, parse_spec


def tasks_of(env_id: str, count: int, **kwargs):
    return list(gym.make(env_id, **kwargs).unwrapped.tasks[:count])


@pytest.mark.parametrize("hops", [2, 3])
def test_oracle_solves_bridge_tasks_exactly_from_their_depth(hops):
    tasks = tasks_of("BridgeQA-v0", 40, hops=hops)
    ids = [t.task_id for t in tasks]
    budgets = tuple(range(hops + 2))
    result = rollout(
        OraclePolicy(tasks), "BridgeQA-v0", ids, budgets=budgets, env_kwargs={"hops": hops}
    )
    for episode in result.episodes:
        assert episode.correct == (episode.budget >= hops), (episode.task_id, episode.budget)


def test_oracle_answers_math_and_comparison():
    for env_id, budget in (("Math-v0", 0), ("ComparisonQA-v0", 2)):
        tasks = tasks_of(env_id, 30, max_tool_calls=budget)
        result = rollout(OraclePolicy(tasks), env_id, [t.task_id for t in tasks], budgets=(budget,))
        assert all(e.correct for e in result.episodes)


def test_oracle_refuses_unknown_questions():
    policy = OraclePolicy(tasks_of("BridgeQA-v0", 3))
    with pytest.raises(KeyError, match="does not know"):
        policy.generate([[{"role": "user", "content": "What is love?"}]], SamplingParams())


def pass_at(result, budget):
    solved: dict[str, list[bool]] = {}
    for e in result.episodes:
        if e.budget == budget:
            solved.setdefault(e.task_id, []).append(e.correct)
    per_task = np.array(list(solved.values()))
    return per_task.mean(), per_task.any(axis=1).mean()


def test_heuristic_surface_is_neither_flat_nor_perfect():
    tasks = tasks_of("BridgeQA-v0", 50)
    result = rollout(
        HeuristicPolicy(0), "BridgeQA-v0", [t.task_id for t in tasks], n=16, budgets=(1, 3)
    )
    _, p16_t1 = pass_at(result, 1)
    p1_t3, p16_t3 = pass_at(result, 3)
    assert p16_t3 > p1_t3 + 0.1  # more samples help
    assert p16_t3 > p16_t1 + 0.1  # more depth helps
    assert p1_t3 > 0.0 and p16_t3 < 1.0


def test_heuristic_is_seeded_and_greedy_mode_is_deterministic():
    tasks = tasks_of("ComparisonQA-v0", 10)
    ids = [t.task_id for t in tasks]

    def texts(policy, seed, params=SamplingParams()):
        result = rollout(
            policy, "ComparisonQA-v0", ids, n=3, budgets=(3,), seed=seed, params=params
        )
        return [e.messages for e in result.episodes]

    assert texts(HeuristicPolicy(1), 0) == texts(HeuristicPolicy(1), 0)
    assert texts(HeuristicPolicy(1), 0) != texts(HeuristicPolicy(2), 0)
    greedy = SamplingParams(temperature=0.0)
    assert texts(HeuristicPolicy(1), 0, greedy) == texts(HeuristicPolicy(2), 7, greedy)


def test_heuristic_rejects_bad_rate():
    with pytest.raises(ValueError, match="answer_rate"):
        HeuristicPolicy(answer_rate=1.5)


def test_specs_build_policies_and_explain_mistakes():
    tasks = tasks_of("BridgeQA-v0", 2)
    assert isinstance(load_policy("scripted:oracle", tasks=tasks), OraclePolicy)
    assert isinstance(load_policy("scripted:heuristic", seed=3), Policy)
    assert parse_spec("openai:http://127.0.0.1:8000/v1#m") == (
        "openai",
        "http://127.0.0.1:8000/v1#m",
    )
    with pytest.raises(ValueError, match="Did you mean 'scripted'"):
        parse_spec("scriptd:oracle")
    with pytest.raises(ValueError, match="Did you mean 'heuristic'"):
        parse_spec("scripted:heuristc")
    with pytest.raises(ValueError, match="URL#MODEL"):
        parse_spec("openai:http://127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="KIND:TARGET"):
        parse_spec("Qwen2.5-7B")
    with pytest.raises(ValueError, match="needs the task list"):
        load_policy("scripted:oracle")
