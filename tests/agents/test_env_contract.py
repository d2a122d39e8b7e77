"""The env contract: fallbacks for missing capabilities, wrappers respected, forks and replays.

The third-party envs (``tests/third_party/kv_lookup.py``) import nothing from passkt; the
wrapped passkt envs are registered here with Gymnasium's own wrappers.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import gymnasium as gym
import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.envs import contract
from passkt.envs.contract import AgentInterface, EnvContractError, ReplayMismatchError, ToolBudget
from passkt.eval.evaluate import env_info, evaluate

THIRD_PARTY = Path(__file__).resolve().parents[1] / "third_party"
BRIDGE = {"hops": 2}


@pytest.fixture(autouse=True)
def third_party(monkeypatch):
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    contract._ANNOUNCED.clear()  # each test sees its own announcements


def agent(lookups: int = 1):
    import kv_agents

    return kv_agents.make_policy(contract.inspect_env("kv_lookup:KVLookup-v0"), lookups=lookups)


def outcomes(result) -> list[tuple]:
    return [
        (e.task_id, e.sample, e.budget, e.correct, e.reward, e.tool_calls, e.actions, e.messages)
        for e in result.episodes
    ]


# ---------------------------------------------------------------------- fallbacks


def test_a_minimal_env_is_evaluated_with_each_fallback_announced_once(caplog):
    import kv_lookup  # noqa: F401  (registers the envs)

    with caplog.at_level(logging.WARNING, logger="passkt"):
        runs = [
            evaluate("KVLookupMinimal-v0", agent(), n=2, budgets=(0, 1, 2), limit=6, progress=False)
            for _ in range(2)
        ]
    table = runs[0].outcomes
    assert table.task_ids == tuple(f"seed-{i}" for i in range(6))  # tasks are seeds
    # T = 0: the agent looks up first, and the budget wrapper truncates that turn; T >= 1: solved
    assert runs[0].surface.value(1, 0) == 0.0
    assert runs[0].surface.value(1, 1) == runs[0].surface.value(1, 2) == 1.0
    messages = [r.getMessage() for r in caplog.records]
    for needle in ("no `tasks` list", "no `protocol`", "no max_tool_calls", "no fork", "correct"):
        assert sum(needle in m for m in messages) == 1, (needle, messages)


def test_seed_tasks_are_disjoint_between_splits_and_name_their_form():
    import kv_lookup  # noqa: F401

    info = env_info("KVLookupMinimal-v0", split="train")
    assert info.contract.task_ids is None and info.tasks == ()
    assert contract.seed_task_ids("train", 2) == ["seed-1000000", "seed-1000001"]
    with pytest.raises(EnvContractError, match="tasks are reset seeds named seed-N"):
        evaluate("KVLookupMinimal-v0", agent(), task_ids=["amber"], budgets=(1,), progress=False)


def test_success_is_the_last_reward_at_its_maximum_without_info_correct():
    import kv_lookup  # noqa: F401

    result = rollout(agent(), "KVLookupMinimal-v0", ["seed-3"], budgets=(1,))
    (episode,) = result.episodes
    assert episode.correct and episode.reward == 1.0 and episode.tool_calls == 1
    wrong = rollout(agent(lookups=0), "KVLookupMinimal-v0", ["seed-3"], budgets=(1,))
    assert wrong.episodes[0].correct == (wrong.episodes[0].reward == 1.0)


def test_the_budget_wrapper_counts_turns_and_truncates_after_the_last_call():
    import kv_lookup

    env = ToolBudget(kv_lookup.KVLookupMinimal(), max_tool_calls=1)
    _, info = env.reset(seed=0)
    assert info["tool_calls"] == 0
    *_, terminated, truncated, info = env.step("<get>amber</get>")
    assert (terminated, truncated, info["tool_calls"]) == (False, False, 1)
    _, reward, terminated, truncated, _ = env.step("<get>birch</get>")
    assert (reward, terminated, truncated) == (0.0, False, True)


def test_the_env_protocol_sets_prompt_and_stops():
    import kv_lookup

    seen = []

    class Recorder:
        def generate(self, conversations, params):
            seen.append((conversations[0], params.stop))
            return agent().generate(conversations, params)

    rollout(Recorder(), "kv_lookup:KVLookup-v0", ["amber"], budgets=(1,))
    (first, stop), _ = seen
    assert stop == ("</get>", "</answer>")
    assert first[0] == {"role": "system", "content": kv_lookup.PROMPT}
    # an explicit stop list is the caller's: it is kept
    rollout(Recorder(), "kv_lookup:KVLookup-v0", ["amber"], params=SamplingParams(stop=("X",)))
    assert seen[-1][1] == ("X",)


def test_a_malformed_protocol_fails_before_the_run_directory_exists(tmp_path):
    class BadProtocol(gym.Env):
        observation_space = action_space = gym.spaces.Text(64)

        def __init__(self):
            self.protocol = {"stop": ["</a>"], "system": "hi"}

        def reset(self, *, seed=None, options=None):
            return "q", {}

        def step(self, action):
            return "", 1.0, True, False, {}

    gym.register("BadProtocol-v0", entry_point=BadProtocol)
    out = tmp_path / "run"
    with pytest.raises(EnvContractError, match=r"protocol has unknown keys \['system'\]"):
        evaluate("BadProtocol-v0", agent(), budgets=(1,), out_dir=out, progress=False)
    assert not out.exists()
    with pytest.raises(EnvContractError, match=r"must contain '\{observation\}' exactly once"):
        AgentInterface(prompt_template="no slot")


def test_the_documented_module_id_of_a_passkt_env_is_accepted():
    info = env_info("passkt.envs:BridgeQA-v0", BRIDGE)
    assert info.contract.forkable and info.contract.protocol.name == "passkt"
    assert [t.task_id for t in info.tasks] == [
        t.task_id for t in env_info("BridgeQA-v0", BRIDGE).tasks
    ]


def test_unknown_modules_and_ids_say_how_to_fix_them():
    with pytest.raises(EnvContractError, match="cannot import module 'no_such_module'"):
        env_info("no_such_module:Env-v0")
    with pytest.raises(EnvContractError, match="--import MODULE"):
        env_info("KVLookupMaximal-v0")


def test_py_policy_specs_fail_early_and_clearly(tmp_path):
    from passkt.agents.specs import load_policy, parse_spec

    with pytest.raises(ValueError, match="py:MODULE:FACTORY"):
        parse_spec("py:kv_agents")
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="has no callable 'nope'"):
        evaluate("kv_lookup:KVLookup-v0", "py:kv_agents:nope", out_dir=out, progress=False)
    assert not out.exists()
    with pytest.raises(ValueError, match="has no generate"):
        load_policy("py:kv_lookup:KVLookupMinimal")  # a factory that returns an env


# ---------------------------------------------------------------------- wrappers and forks


def _shaped(**kwargs):
    from passkt.envs.bridge_qa import BridgeQAEnv

    return gym.wrappers.TransformReward(BridgeQAEnv(**kwargs), lambda r: r - 0.1)


def _marked(**kwargs):
    from passkt.envs.bridge_qa import BridgeQAEnv

    env = BridgeQAEnv(**kwargs)
    return gym.wrappers.TransformObservation(env, lambda o: "[seen] " + o, env.observation_space)


class Opaque(gym.Wrapper):
    """A wrapper passkt does not know: branches must be replayed."""


def _opaque(**kwargs):
    from passkt.envs.bridge_qa import BridgeQAEnv

    return Opaque(BridgeQAEnv(**kwargs))


for _id, _entry in (("ShapedBridge-v0", _shaped), ("MarkedBridge-v0", _marked)):
    gym.register(_id, entry_point=_entry)
gym.register("OpaqueBridge-v0", entry_point=_opaque)


def bridge_ids(n: int = 3) -> list[str]:
    return [t.task_id for t in env_info("BridgeQA-v0", BRIDGE).tasks[:n]]


def test_a_reward_shaping_wrapper_shapes_every_episode_and_branch():
    tasks = env_info("BridgeQA-v0", BRIDGE).tasks
    ids = bridge_ids()
    runs = [
        rollout(
            OraclePolicy(tasks),
            "ShapedBridge-v0",
            ids,
            budgets=(0, 1, 2, 3),
            env_kwargs=BRIDGE,
            share_prefix=share,
        )
        for share in (True, False)
    ]
    assert outcomes(runs[0]) == outcomes(runs[1])  # forked branches = branches run on their own
    for e in runs[0].episodes:
        # the return GRPO optimizes: -0.1 a step, +1 for a right answer
        assert e.reward == pytest.approx(float(e.correct) - 0.1 * len(e.turns))
    solved = [e for e in runs[0].episodes if e.budget >= 2]
    assert all(e.correct for e in solved)  # success from info["correct"], not reward == 1
    assert all(e.reward == pytest.approx(0.7) for e in solved)


def test_an_observation_wrapper_is_seen_in_every_turn_and_branch():
    tasks = env_info("BridgeQA-v0", BRIDGE).tasks
    ids = bridge_ids(2)
    runs = [
        rollout(
            OraclePolicy(tasks),
            "MarkedBridge-v0",
            ids,
            budgets=(0, 1, 3),
            env_kwargs=BRIDGE,
            share_prefix=share,
        )
        for share in (True, False)
    ]
    assert outcomes(runs[0]) == outcomes(runs[1])
    for e in runs[0].episodes:
        users = [m["content"] for m in e.messages if m["role"] == "user"]
        assert users and all(u.startswith("[seen] ") for u in users)
    branch = next(e for e in runs[0].episodes if e.budget == 1)
    assert "no tool calls left" in branch.messages[-2]["content"]


def test_the_replay_fork_gives_the_native_fork_outcomes():
    ids = bridge_ids()
    runs = {
        env_id: rollout(
            HeuristicPolicy(seed=1),
            env_id,
            ids,
            n=3,
            budgets=(0, 1, 2, 3),
            env_kwargs=BRIDGE,
            seed=5,
        )
        for env_id in ("BridgeQA-v0", "OpaqueBridge-v0")
    }
    assert outcomes(runs["BridgeQA-v0"]) == outcomes(runs["OpaqueBridge-v0"])
    assert (
        runs["BridgeQA-v0"].stats.generated_tokens == runs["OpaqueBridge-v0"].stats.generated_tokens
    )


class Flaky(gym.Env):
    """Not deterministic given its seed: replays cannot reproduce it."""

    observation_space = action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        return "Say anything.", {}

    def step(self, action):
        return f"noise {random.random()}", 0.0, False, False, {}


gym.register("Flaky-v0", entry_point=Flaky)


def test_a_replay_that_differs_is_an_error_naming_the_fix():
    from passkt.agents.policy import Completion

    class Chatty:
        def generate(self, conversations, params):
            return [Completion("hello") for _ in conversations]

    with pytest.raises(ReplayMismatchError, match=r"not deterministic.*--no-share-prefix"):
        rollout(Chatty(), "Flaky-v0", ["seed-0"], budgets=(2, 3))


def test_grpo_samples_the_wrapped_return():
    from types import SimpleNamespace

    from passkt.agents.train.config import GRPOConfig
    from passkt.agents.train.grpo import sample_groups

    tasks = env_info("BridgeQA-v0", BRIDGE, split="train").tasks[:2]
    config = GRPOConfig(
        policy="hf:unused", env_id="ShapedBridge-v0", env_kwargs=BRIDGE, t_train=3, group_size=2
    )
    run = SimpleNamespace(policy=OraclePolicy(tasks), rank=0)
    episodes, _ = sample_groups(run, config, [t.task_id for t in tasks], step=0)
    assert len(episodes) == 4 and all(e.correct for e in episodes)
    # what GRPO's advantages are computed from: the shaped return, not the env's raw 1.0
    assert [e.reward for e in episodes] == pytest.approx(
        [1.0 - 0.1 * len(e.turns) for e in episodes]
    )
    assert all(e.reward < 1.0 for e in episodes)
