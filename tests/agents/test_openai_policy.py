"""OpenAIPolicy over real HTTP against a loopback server backed by the tiny checkpoint."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("torch")

from passkt.agents.openai_policy import (
    OpenAIPolicy,
    ServerRequestError,
    ServerTimeoutError,
    completion_from_choice,
    infer_stop,
)
from passkt.agents.policy import SamplingParams

SERVER = Path(__file__).with_name("openai_server.py")
STOPS = ("e", "a")  # common single characters: the random tiny model emits them often


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    """Base URL of a server process on 127.0.0.1 (stopped after the module; bounded to 120 s)."""
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(tiny_checkpoint), "--max-seconds", "120"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    first_line: list[str] = []
    reader = threading.Thread(target=lambda: first_line.append(proc.stdout.readline()))
    reader.start()
    reader.join(timeout=60)
    try:
        if not first_line or not first_line[0].startswith("PORT "):
            pytest.fail(f"the test server did not start (got {first_line!r})")
        yield f"http://127.0.0.1:{int(first_line[0].split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def control(server: str, **settings) -> dict:
    """Set (or, with no settings, read) the server's test hooks."""
    data = json.dumps(settings).encode() if settings else None
    with urllib.request.urlopen(f"{server}/_control", data=data, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def fresh_server(server):
    control(server, fail_next=0, delay_next=0, report_stop_reason=True, max_n=None)
    return server


def policy(server: str, **kwargs) -> OpenAIPolicy:
    return OpenAIPolicy(f"{server}/v1", "tiny", **{"timeout": 10, "backoff": 0.01, **kwargs})


def test_batch_returns_n_completions_each_with_the_stop_string_kept(
    fresh_server, tiny_policy, conversations
):
    params = SamplingParams(max_new_tokens=30, stop=STOPS, n=2, seed=11)
    out = policy(fresh_server, concurrency=3).generate(conversations, params)
    assert len(out) == 6
    stopped = 0
    for i, completion in enumerate(out):
        # the server samples with HFPolicy(seed = seed + conversation index): recompute locally
        local = tiny_policy.generate([conversations[i // 2]], replace(params, seed=11 + i // 2))[
            i % 2
        ]
        assert completion.finish_reason == local.finish_reason
        # logprobs came back over the wire (approx: the two processes may use other thread counts)
        assert completion.logprobs == pytest.approx(local.logprobs, abs=1e-5)
        if local.finish_reason == "stop" and any(s in local.text for s in STOPS):
            stopped += 1
            assert completion.text.endswith(STOPS) and local.text.startswith(completion.text)
            assert not any(s in completion.text[:-1] for s in STOPS)
        else:
            assert completion.text == local.text
        assert completion.token_ids == ()  # chat APIs give no ids unless asked
    assert stopped >= 2


def test_token_ids_when_the_server_returns_them(fresh_server, tiny_policy, conversations):
    params = SamplingParams(max_new_tokens=8, stop=(), seed=2)
    out = policy(fresh_server, token_ids=True).generate(conversations[:1], params)
    assert out[0].token_ids == tiny_policy.generate(conversations[:1], params)[0].token_ids


def test_servers_that_do_not_report_the_stop_need_inference(fresh_server, conversations):
    control(fresh_server, report_stop_reason=False)
    params = SamplingParams(max_new_tokens=30, stop=STOPS, n=2, seed=11)
    out = policy(fresh_server).generate(conversations, params)
    # "e" and "a" are not tags, so nothing can be inferred and nothing is appended
    assert not any(c.text.endswith(STOPS) for c in out if c.finish_reason == "stop")


def test_wrong_model_name_lists_what_the_server_offers(fresh_server, conversations):
    bad = OpenAIPolicy(f"{fresh_server}/v1", "nope", timeout=10)
    with pytest.raises(ServerRequestError, match=r"model 'nope' is not served at .*offers: tiny"):
        bad.generate(conversations[:1], SamplingParams(max_new_tokens=2))


@pytest.mark.parametrize("status", [503, 429])
def test_transient_failures_are_retried(fresh_server, conversations, status):
    control(fresh_server, fail_next=2, fail_status=status)
    before = control(fresh_server)["failed"]
    out = policy(fresh_server, max_retries=3).generate(
        conversations[:1], SamplingParams(max_new_tokens=3, seed=0)
    )
    assert len(out) == 1 and control(fresh_server)["failed"] == before + 2


def test_persistent_failures_give_up_with_the_status(fresh_server, conversations):
    control(fresh_server, fail_next=5, fail_status=503)
    with pytest.raises(ServerRequestError, match=r"kept failing with HTTP 503 \(2 attempts\)"):
        policy(fresh_server, max_retries=1).generate(conversations[:1], SamplingParams())


def test_concurrent_retries_warn_once(conversations, caplog):
    """Every row of a batch failing and retrying against a dead server: one warning, then the
    error (not one warning per row and retry)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "tiny", max_retries=3, backoff=0.01)
    with caplog.at_level("DEBUG", logger="passkt"), pytest.raises(ServerRequestError):
        dead.generate(conversations[:4], SamplingParams())
    retries = [r for r in caplog.records if r.getMessage().startswith("retrying")]
    assert len(retries) >= 3 and [r.levelname for r in retries].count("WARNING") == 1


def test_timeout_gives_a_clear_error(fresh_server, conversations):
    control(fresh_server, delay_next=1, delay_seconds=2.0)
    slow = policy(fresh_server, timeout=0.3, max_retries=0)
    with pytest.raises(ServerTimeoutError, match=r"within timeout=0.3 s \(1 attempt\)"):
        slow.generate(conversations[:1], SamplingParams(max_new_tokens=2))


def test_fewer_choices_than_n_are_topped_up(fresh_server, conversations):
    control(fresh_server, max_n=1)
    before = control(fresh_server)["chat_requests"]
    out = policy(fresh_server).generate(conversations[:1], SamplingParams(max_new_tokens=4, n=3))
    assert len(out) == 3 and control(fresh_server)["chat_requests"] - before == 3


def test_connection_refused_is_clear(conversations):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens there
    dead = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "tiny", max_retries=1, backoff=0.01)
    with pytest.raises(ServerRequestError, match=r"could not connect .*Is the server running"):
        dead.generate(conversations[:1], SamplingParams())


# --------------------------------------------------------------------------- pure helpers


def test_infer_stop_finds_the_open_tag():
    stops = ("</search>", "</answer>")
    assert infer_stop("<think>x</think> <answer>Paris", stops) == "</answer>"
    assert infer_stop("<search>a</search> then <search>b", stops) == "</search>"
    assert infer_stop("<answer>x</answer>", stops) is None
    assert infer_stop("<search>q</search><answer>A", stops) == "</answer>"
    assert infer_stop("plain text", (*stops, "\n\n")) is None


@pytest.mark.parametrize(
    "choice, expected",
    [
        ({"message": {"content": "<answer>A"}, "finish_reason": "stop"}, "<answer>A</answer>"),
        (  # vLLM-style: reported, put back as reported
            {"message": {"content": "x"}, "finish_reason": "stop", "stop_reason": "</search>"},
            "x</search>",
        ),
        (  # reported EOS: nothing to put back even if a tag is open
            {"message": {"content": "<answer>A"}, "finish_reason": "stop", "stop_reason": None},
            "<answer>A",
        ),
        ({"message": {"content": "<answer>A"}, "finish_reason": "length"}, "<answer>A"),
        (  # a server that already kept the stop string
            {
                "message": {"content": "<answer>A</answer>"},
                "finish_reason": "stop",
                "stop_reason": "</answer>",
            },
            "<answer>A</answer>",
        ),
    ],
)
def test_completion_from_choice_restores_stops(choice, expected):
    completion = completion_from_choice(choice, ("</search>", "</answer>"))
    assert completion.text == expected
    assert completion.finish_reason == choice["finish_reason"]


def test_completion_from_choice_reads_logprobs_and_token_ids():
    entries = [{"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.5}]
    choice = {
        "message": {"content": "ab"},
        "finish_reason": "length",
        "logprobs": {"content": entries},
    }
    completion = completion_from_choice(choice, ())
    assert (completion.token_ids, completion.logprobs) == ((5, 7), (-0.5, -1.5))
    entries[0]["token"] = "ab"
    assert completion_from_choice(choice, ()).token_ids == ()


def test_arguments_are_validated():
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        OpenAIPolicy("http://127.0.0.1:1/v1", "m", timeout=-1)
    with pytest.raises(ValueError, match="concurrency >= 1"):
        OpenAIPolicy("http://127.0.0.1:1/v1", "m", concurrency=0)


def test_api_key_env_names_the_variable_that_holds_the_key(monkeypatch):
    monkeypatch.setenv("PASSKT_TEST_KEY", "sk-from-env")
    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m", api_key_env="PASSKT_TEST_KEY")
    assert policy.client.api_key == "sk-from-env"
    monkeypatch.delenv("PASSKT_TEST_KEY")
    with pytest.raises(ValueError, match=r"PASSKT_TEST_KEY.*not set; export"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", api_key_env="PASSKT_TEST_KEY")
    with pytest.raises(ValueError, match="not both"):
        OpenAIPolicy("http://127.0.0.1:9/v1", "m", api_key="k", api_key_env="PASSKT_TEST_KEY")
