"""A run replayed from its files alone: manifest, results and transcripts are enough to redo every
episode, turn for turn, with a fresh env and the agent seeded as docs/runs.md says."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import recorded_turn_seed
from passkt.agents.scripted import HeuristicPolicy
from passkt.eval.chunking import sample_seed
from passkt.eval.evaluate import evaluate


def _read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("env_id", ["BridgeQA-v0", "ComparisonQA-v0"])
def test_every_episode_replays_from_the_records(env_id, tmp_path):
    out = tmp_path / "run"
    evaluate(
        env_id, "scripted:heuristic", n=3, budgets=(0, 1, 2, 4), limit=6, seed=5,
        out_dir=out, progress=False,
    )  # fmt: skip
    manifest = json.loads((out / "manifest.json").read_text())
    results, transcripts = _read(out / "results.jsonl"), _read(out / "transcripts.jsonl")
    assert len(results) == len(transcripts) == 6 * 3 * 4
    agent = HeuristicPolicy(**manifest["policy_options"])
    budgets, shared = manifest["budgets"], manifest["share_prefix"]
    for record, transcript in zip(results, transcripts, strict=True):
        key = (record["task_id"], record["sample"], record["budget"])
        assert (transcript["task_id"], transcript["sample"], transcript["budget"]) == key
        own = sample_seed(manifest["seed"], record["task_id"], record["sample"])
        budget = record["budget"]
        env = gym.make(
            manifest["env_id"], **manifest["env_kwargs"], split=manifest["split"],
            max_tool_calls=budget,
        )  # fmt: skip
        observation, _ = env.reset(
            seed=recorded_turn_seed(own, budget, budgets, -1, shared),
            options={"task_id": record["task_id"]},
        )
        messages = transcript["messages"]
        assert messages[1] == {"role": "user", "content": observation}
        kinds, calls, info, done = [], 0, {}, False
        for index, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            turn = len(kinds)
            params = SamplingParams(
                temperature=manifest["sampling"]["temperature"],
                seeds=(recorded_turn_seed(own, budget, budgets, turn, shared),),
            )
            (completion,) = agent.generate([messages[:index]], params)
            assert completion.text == message["content"], (key, turn)
            observation, _, terminated, truncated, info = env.step(completion.text)
            kinds.append(info["action"])
            calls = info["tool_calls"]
            done = terminated or truncated
            if not done:
                assert messages[index + 1]["content"] == observation
        assert done
        assert kinds == record["actions"]
        assert calls == record["tool_calls"]
        assert info["correct"] == record["correct"]
