"""``OpenAIPolicy`` in the tool format: ``tools`` out, ``tool_calls`` back, over real HTTP against
the loopback stand-in server (``openai_server.py``), and the message conversions it relies on."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import gymnasium as gym
import pytest
from hypothesis import given
from hypothesis import strategies as st

pytest.importorskip("openai")

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.openai_policy import OpenAIPolicy, completion_from_choice, openai_messages
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.envs.tool_calls import (
    TOOL_ARGUMENTS,
    TOOL_SCHEMAS,
    parse_tool_call,
    render_tool_call,
)

SERVER = Path(__file__).with_name("openai_server.py")
OUTCOME = ("task_id", "budget", "correct", "answer", "tool_calls", "truncated", "actions")


@contextmanager
def serving(model: str, max_seconds: int = 120):
    """Base URL of a stand-in server on 127.0.0.1 serving ``model`` (bounded to max_seconds)."""
    command = [sys.executable, str(SERVER), model, "--max-seconds", str(max_seconds)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    first_line: list[str] = []
    reader = threading.Thread(target=lambda: first_line.append(proc.stdout.readline()))
    reader.start()
    reader.join(timeout=60)
    try:
        if not first_line or not first_line[0].startswith("PORT "):
            pytest.fail(f"the test server did not start (got {first_line!r})")
        yield f"http://127.0.0.1:{int(first_line[0].split()[1])}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run(policy, tasks, **kwargs):
    ids = [task.task_id for task in tasks]
    return rollout(policy, "BridgeQA-v0", ids, env_kwargs={"protocol": "tools"}, **kwargs)


@pytest.mark.parametrize("scripted", ["oracle", "heuristic"])
def test_a_served_scripted_agent_plays_the_episodes_it_plays_in_process(scripted):
    """The server runs the same scripted agent behind the OpenAI tools API: every call crosses
    the wire as ``tool_calls`` and every reply as a ``tool`` message, and the episodes are equal
    (greedy: the server seeds a request its own way)."""
    tasks = gym.make("BridgeQA-v0").unwrapped.tasks[:15]
    local = OraclePolicy(tasks) if scripted == "oracle" else HeuristicPolicy(0)
    budgets, params = (0, 1, 2, 4), SamplingParams(temperature=0.0)
    with serving(f"scripted:{scripted}") as url:
        remote = OpenAIPolicy(url, "tiny", timeout=10, concurrency=4)
        served = run(remote, tasks, budgets=budgets, params=params)
    in_process = run(local, tasks, budgets=budgets, params=params)
    for a, b in zip(served.episodes, in_process.episodes, strict=True):
        assert [getattr(a, k) for k in OUTCOME] == [getattr(b, k) for k in OUTCOME]
        assert a.messages == b.messages
    assert {e.correct for e in served.episodes} == {True, False}
    assert all("search" in e.actions for e in served.episodes if e.budget)


@pytest.mark.slow
def test_a_served_model_that_writes_no_calls_still_ends_its_episodes(tiny_checkpoint):
    """A random model never writes a call: each turn is an invalid action, and episodes end."""
    tasks = gym.make("BridgeQA-v0").unwrapped.tasks[:2]
    with serving(str(tiny_checkpoint)) as url:
        params = SamplingParams(max_new_tokens=8, seed=0)
        result = run(OpenAIPolicy(url, "tiny", timeout=30), tasks, budgets=(2,), params=params)
    for episode in result.episodes:
        assert episode.truncated and episode.actions == ["invalid"] * 3
        assert [m["role"] for m in episode.messages[3:]] == ["tool", "assistant"] * 2


def test_the_conversation_goes_out_as_calls_and_tool_replies():
    search = render_tool_call("search", {"query": "Mira"})
    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": f"<think>look</think>\n{search}"},
        {"role": "tool", "content": "<information>Doc 1</information>"},
        {"role": "assistant", "content": "no call here"},
        {"role": "tool", "content": "Invalid action: no tool call found."},
        {"role": "assistant", "content": "<tool_call>{bad json</tool_call>"},
        {"role": "tool", "content": "Invalid action: not valid JSON."},
    ]
    sent = openai_messages(conversation)
    roles = ["system", "user", "assistant", "tool", "assistant", "user", "assistant", "user"]
    assert [m["role"] for m in sent] == roles
    call = sent[2]["tool_calls"][0]
    assert sent[2]["content"] == "<think>look</think>"
    assert call["function"] == {"name": "search", "arguments": json.dumps({"query": "Mira"})}
    assert sent[3]["tool_call_id"] == call["id"]
    assert sent[6]["content"] == "<tool_call>{bad json</tool_call>"


texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)
tagged = st.lists(
    st.one_of(texts, st.sampled_from(["<tool_call>", "</tool_call>", "<answer>", "\n"])),
    max_size=5,
).map("".join)


@given(
    name=st.sampled_from(sorted(TOOL_ARGUMENTS)),
    value=tagged,
    thought=tagged.map(lambda t: t.replace("<think>", "").replace("</think>", "")),
    before=texts.map(lambda t: t.replace("<", " ")),
)
def test_a_turn_with_a_call_goes_out_and_comes_back_as_the_same_action(
    name, value, thought, before
):
    """A turn (words, a thought that may hold call tags, then a call whose argument may hold
    tags) goes out as content plus ``tool_calls``, and the reply built from that message parses
    to the turn's action: the thought stays in the content, calls inside it included."""
    think = f"<think>{thought}</think>"
    turn = f"{before}{think}{render_tool_call(name, {TOOL_ARGUMENTS[name]: value})}"
    (sent,) = openai_messages([{"role": "assistant", "content": turn}])
    (call,) = sent["tool_calls"]
    assert call["function"]["name"] == name
    assert json.loads(call["function"]["arguments"]) == {TOOL_ARGUMENTS[name]: value}
    assert sent["content"] == f"{before}{think}".strip()
    back = completion_from_choice({"message": sent, "finish_reason": "tool_calls"}, ())
    action = parse_tool_call(back.text)
    assert (action.kind, action.content, action.error) == (name, value.strip(), None)


@pytest.mark.parametrize(
    ("arguments", "kind", "content"),
    [
        ('{"query": "Port Hollis"}', "search", "Port Hollis"),
        ('{"query": ', "invalid", ""),
        ('{"q": "x"}', "invalid", ""),
        ({"query": "as a dict"}, "search", "as a dict"),
    ],
)
def test_a_reply_with_tool_calls_becomes_the_action_the_env_reads(arguments, kind, content):
    function = {"name": "search", "arguments": arguments}
    call = {"id": "c", "type": "function", "function": function}
    message = {"content": None, "tool_calls": [call]}
    completion = completion_from_choice({"message": message, "finish_reason": "tool_calls"}, ())
    action = parse_tool_call(completion.text)
    assert (action.kind, action.content) == (kind, content)


def test_tools_are_sent_and_stop_strings_are_not():
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    params = SamplingParams(stop=("</tool_call>",), tools=TOOL_SCHEMAS)
    kwargs = policy._request_kwargs([{"role": "user", "content": "q"}], params, 1, None)
    assert kwargs["tools"] == list(TOOL_SCHEMAS) and "stop" not in kwargs
