"""The tool-calling action format: parsing, the env under ``protocol="tools"``, and its agreement
with the text tags."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs import protocol as tags
from passkt.envs import tool_calls
from passkt.envs.contract import AgentInterface, EnvContractError, inspect_env
from passkt.envs.tool_calls import TOOL_ARGUMENTS, parse_tool_call, render_tool_call

texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)
tag_texts = st.lists(  # free text mixed with the tags a parser must not confuse
    st.one_of(
        texts,
        st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>"]),
    ),
    max_size=6,
).map("".join)


@given(name=st.sampled_from(sorted(TOOL_ARGUMENTS)), content=tag_texts, before=texts)
def test_a_rendered_call_parses_back_to_its_action(name, content, before):
    before = before.replace("<", " ")  # no tags of its own before the call
    action = parse_tool_call(before + render_tool_call(name, {TOOL_ARGUMENTS[name]: content}))
    assert (action.kind, action.content, action.error) == (name, content.strip(), None)


@given(text=tag_texts)
def test_any_text_parses_without_raising_and_invalid_says_why(text):
    action = parse_tool_call(text)
    assert action.kind in ("search", "answer", "invalid")
    assert (action.error is None) == (action.kind != "invalid")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "the turn is empty"),
        ("I think it is Paris.", "no tool call found"),
        ("<search>Paris</search>", "no tool call found"),
        ('<tool_call>{"name": "answer", "arguments": {"answer": "x"}}', "never closed"),
        ("<tool_call>{name: answer}</tool_call>", "not valid JSON"),
        ('<tool_call>["answer"]</tool_call>', 'must be a JSON object with a "name"'),
        ('<tool_call>{"name": "lookup", "arguments": {}}</tool_call>', "unknown tool 'lookup'"),
        ('<tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>', 'argument, "query"'),
        ('<tool_call>{"name": "answer", "arguments": {"answer": 4}}</tool_call>', "a string"),
        ('<think><tool_call>{"name": "answer"}</tool_call>', "<think> is never closed"),
    ],
)
def test_malformed_calls_are_invalid_with_their_reason(text, reason):
    action = parse_tool_call(text)
    assert action.kind == "invalid"
    assert reason in action.error


def test_the_first_call_counts_and_double_encoded_arguments_are_read():
    first = render_tool_call("search", {"query": "a"})
    second = render_tool_call("answer", {"answer": "b"})
    assert parse_tool_call(first + second).content == "a"
    encoded = json.dumps({"name": "answer", "arguments": json.dumps({"answer": " b "})})
    assert parse_tool_call(f"<tool_call>{encoded}</tool_call>").content == "b"
    hidden = f"<think>{first}</think>{second}"
    assert parse_tool_call(hidden).kind == "answer"


def episode(env_id, protocol, actions, budget):
    env = gym.make(env_id, protocol=protocol, max_tool_calls=budget)
    observation, info = env.reset(seed=0)
    steps = [(observation, 0.0, False, False, info)]
    for action in actions:
        steps.append(env.step(action))
        if steps[-1][2] or steps[-1][3]:
            break
    return steps


def in_tool_format(text: str) -> str:
    """The tag action ``text`` (``<kind>content</kind>``) as the same tool call."""
    action = tags.parse_action(text)
    if action.kind == "invalid":
        return text
    return render_tool_call(action.kind, {TOOL_ARGUMENTS[action.kind]: action.content})


@pytest.mark.parametrize("env_id", ["BridgeQA-v0", "ComparisonQA-v0"])
@given(
    turns=st.lists(
        st.one_of(
            st.builds(lambda q: f"<search>{q}</search>", st.sampled_from(["a", "Doc", "the x"])),
            st.builds(lambda a: f"<answer>{a}</answer>", st.sampled_from(["yes", "1990", ""])),
            st.just("no action"),
        ),
        max_size=6,
    ),
    budget=st.integers(0, 4),
)
def test_the_same_actions_give_the_same_episode_in_both_formats(env_id, turns, budget):
    """Observations equal up to the format's own wording; rewards, ends and info equal."""
    with_tags = episode(env_id, "passkt", turns, budget)
    with_tools = episode(env_id, "tools", [in_tool_format(t) for t in turns], budget)
    assert len(with_tags) == len(with_tools)
    wording = {
        tags.FINAL_NOTICE: tool_calls.FINAL_NOTICE,
        tags.TRUNCATED_MESSAGE: tool_calls.TRUNCATED_MESSAGE,
    }
    for (obs_a, *rest_a), (obs_b, *rest_b) in zip(with_tags, with_tools, strict=True):
        assert rest_a == rest_b
        if obs_a.startswith("Invalid action:"):
            assert obs_b.startswith("Invalid action:")
            assert obs_a.endswith(tags.FINAL_NOTICE) == obs_b.endswith(tool_calls.FINAL_NOTICE)
            continue
        for old, new in wording.items():
            obs_a = obs_a.replace(old, new)
        assert obs_a == obs_b


def test_the_tools_protocol_publishes_search_and_answer_and_math_publishes_none():
    bridge = inspect_env("BridgeQA-v0", {"protocol": "tools"}).protocol
    names = [tool["function"]["name"] for tool in bridge.tools]
    assert names == ["search", "answer"] and bridge.observation_role == "tool"
    assert bridge.stop == tool_calls.STOP
    assert inspect_env("BridgeQA-v0").protocol.tools == ()
    math = inspect_env("Math-v0", {"protocol": "tools", "max_tool_calls": 0}).protocol
    assert math.tools == () and math.observation_role == "user"


def test_the_sampled_action_of_the_tools_format_is_a_valid_call():
    env = gym.make("BridgeQA-v0", protocol="tools")
    env.action_space.seed(0)
    for _ in range(20):
        assert parse_tool_call(env.action_space.sample()).kind in ("search", "answer")


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        ("search", "must be a list"),
        ([{"type": "function"}], r"tools\[0\] must be"),
        ([{"name": "search"}], r"tools\[0\] must be"),
        ([tool_calls.TOOL_SCHEMAS[0]] * 2, "repeat a name"),
    ],
)
def test_bad_tool_schemas_are_refused(tools, match):
    with pytest.raises(EnvContractError, match=match):
        AgentInterface(tools=tools)


def test_tools_need_the_chat_layout():
    with pytest.raises(EnvContractError, match="layout='chat'"):
        AgentInterface(tools=tool_calls.TOOL_SCHEMAS, layout="stream")


def test_an_unknown_protocol_names_the_three():
    with pytest.raises(ValueError, match="'passkt', 'search-r1' or 'tools'"):
        gym.make("BridgeQA-v0", protocol="tool")
