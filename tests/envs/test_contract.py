"""The contract inspection (``passkt.envs.contract.inspect_env``): which constructor arguments an
env takes, what it must prove, and what is checked before any run directory exists.

The third-party envs live in ``tests/third_party`` and import nothing from passkt; the broken envs
below are registered here, each with the one thing wrong that a check must catch.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import gymnasium as gym
import pytest

from passkt.agents.policy import Completion
from passkt.agents.rollout import rollout
from passkt.envs import contract
from passkt.envs.contract import EnvContractError, ReplayMismatchError, ToolBudget, inspect_env
from passkt.eval.cli import main
from passkt.eval.evaluate import evaluate

THIRD_PARTY = Path(__file__).resolve().parents[1] / "third_party"


@pytest.fixture(autouse=True)
def third_party(monkeypatch):
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    contract._ANNOUNCED.clear()  # each test sees its own announcements


def lookup_agent(env_id: str, lookups: int = 1):
    import kv_agents

    return kv_agents.make_policy(inspect_env(env_id), lookups=lookups)


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------------- **kwargs is not "accepts"


def _forwarding(**kwargs):
    """An adapter that forwards **kwargs to an env that takes every optional argument."""
    from kv_lookup import KVLookup

    return KVLookup(**kwargs)


gym.register("ForwardingKV-v0", entry_point=_forwarding)


def test_a_kwargs_constructor_that_swallows_arguments_takes_neither(caplog):
    with caplog.at_level(logging.WARNING, logger="passkt"):
        found = inspect_env("kv_variants:KVLookupKwargs-v0")
    assert not found.takes_budget and not found.takes_split
    assert found.make_kwargs({}, "train") == {}  # split= is not passed
    assert "takes **kwargs, but an env made with max_tool_calls=0" in caplog.text


def _strict(**kwargs):
    """An adapter that forwards **kwargs to a constructor without max_tool_calls."""
    from kv_lookup import KVLookupMinimal

    return KVLookupMinimal(**kwargs)


gym.register("StrictKV-v0", entry_point=_strict)


def test_a_kwargs_constructor_that_raises_is_named_in_the_fallback(caplog):
    with caplog.at_level(logging.WARNING, logger="passkt"):
        found = inspect_env("StrictKV-v0")
    assert not found.takes_budget
    assert "made with max_tool_calls=0, the constructor raised TypeError" in caplog.text
    assert "unexpected keyword argument 'max_tool_calls'" in caplog.text
    assert "did not end the probe episode" not in caplog.text


def test_a_kwargs_constructor_that_honours_them_proves_both():
    found = inspect_env("ForwardingKV-v0")
    assert found.takes_budget and found.takes_split and found.forkable
    assert found.task_ids == ("amber", "birch", "cedar", "delta", "ember")
    assert inspect_env("ForwardingKV-v0", split="train").task_ids[0] == "fjord"


def test_a_named_argument_counts_without_proof():
    named, var_keyword = contract.constructor_arguments("kv_lookup:KVLookup-v0")
    assert {"digits", "split", "max_tool_calls"} <= named and not var_keyword
    assert contract.constructor_arguments("kv_variants:KVLookupKwargs-v0") == (frozenset(), True)


def test_guess_the_number_behind_kwargs_is_budgeted_by_the_wrapper(caplog):
    """A random guesser solves 1 in 10 with one guess: T = 0 must read about 0.10, not the
    unbudgeted rate, and T must help."""
    import kv_agents

    with caplog.at_level(logging.WARNING, logger="passkt"):
        run = evaluate(
            "guess_number:GuessNumber-v0",
            kv_agents.make_guesser(None),
            n=20,
            limit=20,
            budgets=(0, 1, 3),
            ks=(1,),
            progress=False,
        )
    rates = [run.surface.value(1, t) for t in (0, 1, 3)]
    assert 0.05 <= rates[0] <= 0.17, rates  # 400 samples of a 1-in-10 guess
    assert rates[0] < rates[1] < rates[2], rates
    assert "did not end the probe episode" in caplog.text


def test_an_env_that_ignores_a_named_budget_is_an_error_mid_run():
    class Ignoring(gym.Env):
        observation_space = action_space = gym.spaces.Text(64)

        def __init__(self, max_tool_calls=0):
            pass

        def reset(self, *, seed=None, options=None):
            return "Say anything.", {}

        def step(self, action):
            return "Go on.", 0.0, False, False, {}

    gym.register("IgnoresBudget-v0", entry_point=Ignoring)

    class Talker:
        def generate(self, conversations, params):
            return [Completion("hi") for _ in conversations]

    with pytest.raises(EnvContractError, match=r"IgnoresBudget-v0: an episode went on after 2"):
        rollout(Talker(), "IgnoresBudget-v0", ["seed-0"], budgets=(1,))


# ---------------------------------------------------------------------- checked before writing


class _Base(gym.Env):
    observation_space = action_space = gym.spaces.Text(64)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "Question?", {}

    def step(self, action):
        return "Again.", 0.0, False, False, {}


class DictObservation(_Base):
    observation_space = gym.spaces.Dict({"text": gym.spaces.Text(64)})

    def reset(self, *, seed=None, options=None):
        return {"text": "Question?"}, {}


class DictObservationNoSpace(_Base):
    def reset(self, *, seed=None, options=None):
        return {"text": "Question?"}, {}


class StepsToBytes(_Base):
    def step(self, action):
        return b"Again.", 0.0, False, False, {}


class RaisesOnText(_Base):
    def step(self, action):
        raise KeyError(action)


class TextReward(_Base):
    def step(self, action):
        return "Again.", "zero", False, False, {}


class FlakyText(_Base):
    def step(self, action):
        return f"noise {random.random()}", 0.0, False, False, {}


for _cls in (
    DictObservation,
    DictObservationNoSpace,
    StepsToBytes,
    RaisesOnText,
    TextReward,
    FlakyText,
):
    gym.register(f"{_cls.__name__}-v0", entry_point=_cls)


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("DictObservation-v0", r"DictObservation-v0: observation_space is Dict\("),
        (
            "DictObservationNoSpace-v0",
            r"DictObservationNoSpace-v0: reset\(seed=0, options=None\) returned a dict "
            r"observation \(\{'text': 'Question\?'\}\); the env contract needs text",
        ),
        ("StepsToBytes-v0", r"StepsToBytes-v0: step\(''\) .* returned a bytes observation"),
        ("RaisesOnText-v0", r"RaisesOnText-v0: step\(''\) .* raised KeyError"),
        ("TextReward-v0", r"TextReward-v0: step\(''\) .* returned the reward 'zero'"),
    ],
)
def test_an_env_that_does_not_speak_text_fails_before_the_run_directory(env_id, message, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(EnvContractError, match=message):
        evaluate(env_id, "scripted:heuristic", out_dir=out, budgets=(0, 1), progress=False)
    assert not out.exists()


def test_the_train_commands_refuse_it_in_one_line_too(tmp_path, capsys):
    out = tmp_path / "run"
    for trainer in ("grpo", "sft"):
        argv = ["train", trainer, "--env", "DictObservation-v0"]
        with pytest.raises(SystemExit) as exit_info:
            main([*argv, "--policy", "hf:no-model", "--out", str(out)])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1, err
        assert "DictObservation-v0: observation_space is Dict(" in err
    assert not out.exists()


def test_a_nondeterministic_env_is_refused_before_a_shared_prefix_run(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(
        ReplayMismatchError, match=r"FlakyText-v0: two fresh envs .*\(--no-share-prefix\)"
    ):
        evaluate("FlakyText-v0", "scripted:heuristic", out_dir=out, budgets=(0, 2), progress=False)
    assert not out.exists()
    run = evaluate(
        "FlakyText-v0",
        "scripted:heuristic",
        budgets=(0, 2),
        limit=2,
        share_prefix=False,
        progress=False,
    )
    assert run.outcomes.num_tasks == 2  # without replays the env is fine


# ---------------------------------------------------------------------- records tell the truth


def test_a_budget_cut_off_never_pays_more_than_finishing():
    """Under TransformReward(r - 0.5) a wrong answer returns -0.5; running out of budget must
    not return the wrapper's old 0.0, and the cut-off turn is not a call."""
    import kv_variants

    env = ToolBudget(kv_variants.make_shaped(), max_tool_calls=0)
    env.reset(seed=0)
    _, reward, terminated, truncated, info = env.step("<get>amber</get>")
    assert (reward, terminated, truncated, info["tool_calls"]) == (-0.5, False, True, 0)

    result = rollout(
        lookup_agent("kv_variants:KVLookupShaped-v0"),
        "kv_variants:KVLookupShaped-v0",
        ["seed-0", "seed-1"],
        budgets=(0, 1, 2),
    )
    for e in result.episodes:
        if e.budget == 0:  # the lookup is cut: T calls recorded, the worst finishing return
            assert e.truncated and e.tool_calls == 0 and e.reward == -0.5 and not e.correct
        else:  # looked up, answered right: -0.5 for the lookup, +0.5 for the answer
            assert e.correct and e.tool_calls == 1 and e.reward == 0.0


def test_t0_is_the_prefix_of_t1_on_the_fallback_budget():
    import kv_agents

    result = rollout(
        kv_agents.make_guesser(None),
        "guess_number:GuessNumber-v0",
        [f"seed-{i}" for i in range(10)],
        n=8,
        budgets=(0, 1, 2),
    )
    by_key = {(e.task_id, e.sample, e.budget): e for e in result.episodes}
    for (task_id, sample, budget), e in by_key.items():
        if budget == 0:
            longer = by_key[task_id, sample, 1]
            assert e.actions[0] == longer.actions[0]  # the same first guess
            assert e.correct <= longer.correct
    assert sum(e.correct for e in result.episodes if e.budget == 0) > 0


def test_manifest_stop_strings_and_missing_fields_are_what_the_run_saw(tmp_path):
    runs = {}
    for env_id in ("kv_lookup:KVLookupMinimal-v0", "kv_lookup:KVLookup-v0"):
        out = tmp_path / env_id.rpartition(":")[2]
        evaluate(
            env_id, lookup_agent(env_id), out_dir=out, n=1, budgets=(1,), limit=2, progress=False
        )
        runs[env_id] = out
    minimal = json.loads((runs["kv_lookup:KVLookupMinimal-v0"] / "manifest.json").read_text())
    full = json.loads((runs["kv_lookup:KVLookup-v0"] / "manifest.json").read_text())
    assert minimal["sampling"]["stop"] == []  # no protocol: the agent got no stop strings
    assert full["sampling"]["stop"] == ["</get>", "</answer>"]
    for run in runs.values():  # no info["f1"]: null, never a made-up 0.0
        assert all(r["f1"] is None for r in records(run))


def test_policy_options_reach_the_factory_and_the_manifest(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "--env", "kv_lookup:KVLookup-v0", "--policy", "py:kv_agents:make_policy"]
    argv += ["--policy-options", "lookups=0", "--n", "1", "--budgets", "1", "--ks", "1"]
    argv += ["--out", str(out), "--no-progress", "--no-report"]
    assert main(argv) == 0
    capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["policy_options"] == {"lookups": 0}
    # lookups=0: the agent answers at once, never looks up
    assert all(r["actions"] and r["tool_calls"] == 0 for r in records(out))
    with pytest.raises(SystemExit):
        main(["eval", "--policy-options", "lookups", "--out", str(tmp_path / "bad")])
    assert "bad --policy-options item 'lookups'" in capsys.readouterr().err


def test_compare_writes_next_to_the_first_run_not_into_the_cwd(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    for name, lookups in (("a", 1), ("b", 0)):
        evaluate(
            "kv_lookup:KVLookup-v0",
            lookup_agent("kv_lookup:KVLookup-v0", lookups),
            out_dir=runs / name,
            n=2,
            budgets=(0, 1),
            progress=False,
        )
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert main(["compare", str(runs / "a"), str(runs / "b")]) == 0
    capsys.readouterr()
    assert list(cwd.iterdir()) == []
    (written,) = [p for p in runs.iterdir() if p.name.startswith("compare-")]
    assert (written / "comparison.md").is_file() or any(written.iterdir())
