"""Server mode of the TRL route: no rollout before the step's weight sync, no refused sync ignored.

A stand-in ``trl vllm-serve`` on 127.0.0.1 (a few bounded requests, answers shaped as vLLM's)
records the order of the requests and can refuse a sync with ``{"success": false}`` and HTTP 200,
as vLLM does when a prefix-cache reset meets requests in flight. TRL's own ``VLLMClient`` sends
the requests; two threads stand for two training processes.
"""

from __future__ import annotations

import json
import threading
import time
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.train import trl as adapter
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.trl_vllm import ServerSyncError, guard_sync_answers, refused_sync

pytest.importorskip("trl", reason="the TRL route needs the trl extra")
requests = pytest.importorskip("requests")

MAX_REQUESTS = 32
UPDATE_SECONDS = 0.3
"""How long the stand-in takes to apply new weights: the window a process without the barrier
samples in."""


class StandIn(ThreadingHTTPServer):
    """Answers TRL's sync endpoints and ``/v1/completions``; records ``(path, time)``."""

    def __init__(self, success: bool = True) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.success = success
        self.seen: list[str] = []
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: StandIn

    def log_message(self, *args: Any) -> None:  # keep pytest's output clean
        pass

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(size) or b"{}")
        with self.server.lock:
            if len(self.server.seen) >= MAX_REQUESTS:
                self.send_error(429)
                return
        if self.path == "/update_weights":
            time.sleep(UPDATE_SECONDS)
        with self.server.lock:
            self.server.seen.append(self.path)
        if self.path == "/v1/completions":
            answer = {"choices": [completion(prompt) for prompt in body["prompt"]]}
        else:
            answer = {"success": self.server.success}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def completion(prompt: list[int]) -> dict[str, Any]:
    """One choice as vLLM's completions endpoint writes it with token ids (EOS = 2)."""
    return {
        "prompt_token_ids": prompt,
        "token_ids": [5, 2],
        "logprobs": {
            "tokens": ["token_id:5", "token_id:2"],
            "token_logprobs": [-0.5, -0.1],
            "top_logprobs": [None, None],
        },
    }


@pytest.fixture
def serve():
    servers = []

    def start(success: bool = True) -> StandIn:
        server = StandIn(success)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def client(url: str) -> Any:
    """TRL's ``VLLMClient`` on ``url``, without the handshake that needs vLLM installed."""
    from trl.generation.vllm_client import VLLMClient

    made = VLLMClient.__new__(VLLMClient)
    made.session, made.base_url, made.model = requests.Session(), url, "stand-in"
    made.communicator, made._updating_weights = None, False
    return made


class Tokenizer:
    eos_token_id = 2

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


def trainer(url: str, barrier: threading.Barrier) -> Any:
    """What the rollout function reads from TRL's ``GRPOTrainer`` in server mode."""
    return types.SimpleNamespace(
        use_vllm=True,
        vllm_generation=types.SimpleNamespace(mode="server", vllm_client=client(url)),
        accelerator=types.SimpleNamespace(wait_for_everyone=barrier.wait),
        processing_class=Tokenizer(),
        eos_token_ids=[2],
    )


def test_a_refused_sync_is_an_error_naming_the_step(serve):
    server = serve(success=False)
    main = client(server.url)
    guard_sync_answers(main.session, lambda: 7)
    with pytest.raises(ServerSyncError, match=r"/reset_prefix_cache at step 7"):
        main.reset_prefix_cache()
    with pytest.raises(ServerSyncError, match=r"/update_weights at step 7"):
        main._post(f"{server.url}/update_weights", json={"update_info": {}})
    assert server.seen == ["/reset_prefix_cache", "/update_weights"]


def test_an_accepted_sync_and_vllms_older_empty_answer_pass():
    assert not refused_sync("/reset_prefix_cache", 200, {"success": True})
    assert not refused_sync("/reset_prefix_cache", 200, None)  # before vLLM 0.26: no body
    assert not refused_sync("/v1/completions", 200, {"success": False})
    assert refused_sync("/update_weights", 200, {"success": False})


def test_an_accepted_sync_goes_on(serve):
    server = serve(success=True)
    main = client(server.url)
    guard_sync_answers(main.session, lambda: 0)
    main.reset_prefix_cache()
    assert server.seen == ["/reset_prefix_cache"]


def run_step(server: StandIn) -> list[str]:
    """One step on two processes: process 0 syncs (update, reset) then samples; process 1
    samples at once. Returns the order the server saw."""
    barrier = threading.Barrier(2, timeout=10)
    rollout = adapter.PassktRollout(GRPOConfig(policy="hf:m"))
    params = SamplingParams(max_new_tokens=4)
    errors: list[BaseException] = []

    def process(rank: int) -> None:
        try:
            owner = trainer(server.url, barrier)
            if rank == 0:  # TRL's VLLMGeneration.sync_weights on the main process
                sync = owner.vllm_generation.vllm_client
                sync._post(f"{server.url}/update_weights", json={"update_info": {}})
                sync.reset_prefix_cache()
            with rollout.policy(owner) as policy:
                assert len(policy.generate_ids([[1, rank]], params)) == 1
        except BaseException as e:  # reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=process, args=(rank,)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert not errors, errors
    return list(server.seen)


def test_no_process_samples_before_the_steps_sync_is_done(serve):
    seen = run_step(serve())
    assert sorted(seen) == sorted(
        ["/update_weights", "/reset_prefix_cache", *2 * ["/v1/completions"]]
    )
    reset = seen.index("/reset_prefix_cache")
    assert all(i > reset for i, path in enumerate(seen) if path == "/v1/completions"), seen


def test_without_the_barrier_a_process_samples_stale_weights(serve, monkeypatch):
    """The order test can fail: with the barrier gone, process 1 samples during the update."""
    monkeypatch.setattr(adapter, "wait_for_sync", lambda trainer: None)
    seen = run_step(serve())
    assert seen.index("/v1/completions") < seen.index("/reset_prefix_cache"), seen
