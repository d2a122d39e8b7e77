"""Agents in the tool format: scripted agents, ``passkt eval`` and a transformers model's token
record, each against the text tags they must agree with."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import ChatTokens, rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.cli import main
from passkt.envs import tool_calls
from passkt.envs.tool_calls import parse_tool_call
from passkt.eval.store import RESULTS_FILE

OUTCOME = ("task_id", "sample", "budget", "correct", "reward", "f1", "answer", "tool_calls")
OUTCOME += ("terminated", "truncated", "actions")


def outcomes(result):
    return [{key: getattr(e, key) for key in OUTCOME} for e in result.episodes]


def both_formats(policy, env_id, tasks, **kwargs):
    ids = [task.task_id for task in tasks]
    runs = [
        rollout(policy, env_id, ids, env_kwargs={"protocol": protocol}, **kwargs)
        for protocol in ("passkt", "tools")
    ]
    return runs


@pytest.mark.parametrize("env_id", ["BridgeQA-v0", "ComparisonQA-v0"])
@pytest.mark.parametrize("make", [OraclePolicy, lambda tasks: HeuristicPolicy(3)])
def test_scripted_surfaces_are_identical_in_both_formats(env_id, make):
    tasks = gym.make(env_id).unwrapped.tasks[:40]
    tags, tools = both_formats(make(tasks), env_id, tasks, n=4, budgets=(0, 1, 2, 3, 5), seed=7)
    assert outcomes(tags) == outcomes(tools)
    assert len({e.correct for e in tags.episodes}) == 2  # a surface that is neither 0 nor 1
    for episode in tools.episodes:  # and the second run really spoke tool calls
        turns = [m for m in episode.messages if m["role"] == "assistant"]
        assert all(parse_tool_call(m["content"]).kind != "invalid" for m in turns)
        assert all(m["role"] != "user" for m in episode.messages[2:])


def test_the_eval_cli_gives_the_same_surface_in_the_tool_format(tmp_path, capsys):
    runs = {}
    for protocol in ("passkt", "tools"):
        out = tmp_path / protocol
        argv = ["eval", "--env", "BridgeQA-v0", "--policy", "scripted:oracle", "--n", "2"]
        argv += ["--limit", "12", "--budgets", "0,1,2,3,5", "--out", str(out), "--no-progress"]
        argv += ["--env-kwargs", f"protocol={protocol}", "--no-report"]
        assert main(argv) == 0
        printed = capsys.readouterr().out
        records = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
        records = [{k: r[k] for k in OUTCOME} for r in records if "task_id" in r]
        runs[protocol] = (records, printed.split("| T")[1:])
    assert runs["passkt"] == runs["tools"]
    assert len(runs["tools"][0]) == 12 * 2 * 5


@pytest.fixture(scope="module")
def tools_checkpoint(tmp_path_factory):
    from passkt.agents.tiny import CHATML_TOOLS_TEMPLATE, make_tiny_checkpoint

    folder = tmp_path_factory.mktemp("tiny-tools") / "qwen2-tools"
    return make_tiny_checkpoint(folder, seed=1, chat_template=CHATML_TOOLS_TEMPLATE)


def test_a_transformers_model_sees_the_tools_and_its_record_is_the_template(tools_checkpoint):
    pytest.importorskip("torch")
    from passkt.agents.hf import HFPolicy

    policy = HFPolicy(tools_checkpoint, batch_size=8)
    tasks = gym.make("BridgeQA-v0").unwrapped.tasks[:3]
    params = SamplingParams(max_new_tokens=24, seed=0)
    result = rollout(
        policy, "BridgeQA-v0", [t.task_id for t in tasks], budgets=(2,), params=params,
        env_kwargs={"protocol": "tools"},
    )  # fmt: skip
    tools = list(tool_calls.TOOL_SCHEMAS)
    for episode in result.episodes:
        assert episode.done and episode.tool_calls <= 2
        roles = [m["role"] for m in episode.messages]
        assert roles[:3] == ["system", "user", "assistant"] and "user" not in roles[2:]
        shown = policy.tokenizer.decode(episode.token_ids, skip_special_tokens=False)
        rendered = policy.tokenizer.apply_chat_template(
            episode.messages, tools=tools, tokenize=False
        )
        # The record is the template's rendering, up to the end-of-turn after the last turn.
        assert rendered.startswith(shown) and '"name": "search"' in shown
        assert shown.count("<tool_response>") == roles.count("tool")
        policy_text = policy.tokenizer.decode(
            [i for i, m in zip(episode.token_ids, episode.policy_mask, strict=True) if m]
        )
        assert "<tools>" not in policy_text  # the schemas are prompt, never trained on


def test_a_call_the_template_writes_is_the_action_the_env_reads(tools_checkpoint):
    """What a model trained on the template emits (a rendered assistant call) parses back."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tools_checkpoint)
    chat = ChatTokens(tokenizer, tool_calls.TOOL_SCHEMAS, "tool")
    for name, arguments in (("search", {"query": "Mira Oskan"}), ("answer", {"answer": "1871"})):
        call = {"type": "function", "function": {"name": name, "arguments": arguments}}
        messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": ""}]
        messages[1]["tool_calls"] = [call]
        text = tokenizer.apply_chat_template(messages, tokenize=False)
        turn = text.split("<|im_start|>assistant")[-1].split("<|im_end|>")[0]
        action = parse_tool_call(turn)
        assert (action.kind, action.content) == (name, next(iter(arguments.values())))
    suffix = chat.encode("<|im_end|>\n<|im_start|>user\n<tool_response>\nobs\n</tool_response>")
    assert chat.observation_ids("obs")[: len(suffix)] == suffix
