"""A small OpenAI-compatible chat server backed by a local checkpoint, for tests.

Run: ``python openai_server.py MODEL [--name NAME] [--env ENV_ID] [--max-seconds S]``, where MODEL
is a checkpoint folder or ``scripted:oracle`` / ``scripted:heuristic`` (answering the tasks of
``--env``'s test split). It binds a free port
on 127.0.0.1, prints ``PORT <n>`` on stdout, and serves until it is terminated, its parent dies,
or ``--max-seconds`` pass (so a crashed test run never leaves it behind).

Endpoints (the subset of the OpenAI API that ``OpenAIPolicy`` uses, with vLLM's extensions):
- ``GET /v1/models``;
- ``POST /v1/chat/completions``: messages, n, temperature, top_p, top_k, max_tokens, stop, seed,
  logprobs, return_tokens_as_token_ids. Completions are real samples from ``HFPolicy``. As in
  vLLM, the stop string is cut from the content and reported in ``stop_reason``. With ``tools``
  the request's ``tool_calls`` and ``tool`` messages are read back into passkt's tool format, the
  tools go to the chat template, and a reply's first ``<tool_call>`` is returned as
  ``tool_calls`` (finish reason ``tool_calls``), as ``vllm serve --tool-call-parser hermes`` does.
- ``POST /_control`` (test hooks, JSON): ``fail_next`` (answer the next k chat requests with
  ``fail_status``, default 503), ``delay_next`` / ``delay_seconds`` (sleep before the next k),
  ``report_stop_reason`` (false: behave like servers that do not report it), ``max_n`` (return at
  most this many choices); ``GET /_control`` returns the state and request counters.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from passkt.agents.policy import SamplingParams
from passkt.envs.tool_calls import render_tool_call, tool_calls_in


class State:
    def __init__(self, policy: Any, name: str) -> None:
        self.policy, self.name = policy, name
        self.lock = threading.Lock()  # guards the counters and the model
        self.control: dict[str, Any] = {
            "fail_next": 0,
            "fail_status": 503,
            "delay_next": 0,
            "delay_seconds": 0.0,
            "report_stop_reason": True,
            "max_n": None,
        }
        self.counters = {"chat_requests": 0, "failed": 0, "delayed": 0}


def choice_payload(state: State, index: int, completion: Any, body: dict) -> dict:
    text, stop_reason = completion.text, None
    if completion.finish_reason == "stop":
        found = [(text.find(s), s) for s in body.get("stop") or [] if s in text]
        if found:
            at, stop_reason = min(found)
            text = text[:at]
    choice: dict[str, Any] = {
        "index": index,
        "message": {"role": "assistant", "content": text},
        "finish_reason": completion.finish_reason,
    }
    if state.control["report_stop_reason"]:
        choice["stop_reason"] = stop_reason
    if body.get("logprobs") and hasattr(state.policy, "tokenizer"):  # scripted agents have none
        as_ids = body.get("return_tokens_as_token_ids")
        tokens = state.policy.tokenizer.convert_ids_to_tokens(list(completion.token_ids))
        choice["logprobs"] = {
            "content": [
                {
                    "token": f"token_id:{i}" if as_ids else token,
                    "logprob": lp,
                    "bytes": None,
                    "top_logprobs": [],
                }
                for i, token, lp in zip(
                    completion.token_ids, tokens, completion.logprobs, strict=True
                )
            ]
        }
    return choice


def passkt_messages(messages: list[dict]) -> list[dict]:
    """OpenAI messages as passkt's tool format writes them: a call is part of the turn's text."""
    out = []
    for message in messages:
        calls = message.get("tool_calls") or []
        text = message.get("content") or ""
        for call in calls:
            function = call["function"]
            text = f"{text}\n{render_tool_call(function['name'], function['arguments'])}".strip()
        out.append({"role": message["role"], "content": text})
    return out


def call_message(text: str) -> tuple[dict, bool]:
    """The reply of a tool-format request: its first call as ``tool_calls``, if it has one."""
    calls = tool_calls_in(text)
    try:
        call = json.loads(calls[0]) if calls else None
    except ValueError:
        call = None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return {"role": "assistant", "content": text}, False
    rest = text[: text.find("<tool_call>")].strip()
    arguments = json.dumps(call.get("arguments", {}))
    function = {"name": call["name"], "arguments": arguments}
    tool_call = {"id": f"call_{time.monotonic_ns()}", "type": "function", "function": function}
    return {"role": "assistant", "content": rest or None, "tool_calls": [tool_call]}, True


def chat(state: State, body: dict) -> tuple[int, dict]:
    if body.get("model") != state.name:
        message = f"The model `{body.get('model')}` does not exist."
        return 404, {"error": {"message": message, "type": "NotFoundError", "code": 404}}
    stop = body.get("stop") or ()
    params = SamplingParams(
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
        top_k=int(body.get("top_k", 0)),
        max_new_tokens=int(body.get("max_tokens") or 16),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        n=min(int(body.get("n", 1)), state.control["max_n"] or 10**6),
        seed=body.get("seed"),
        tools=tuple(body.get("tools") or ()),
    )
    messages = passkt_messages(body["messages"]) if params.tools else body["messages"]
    with state.lock:
        completions = state.policy.generate([messages], params)
    choices = [choice_payload(state, i, c, body) for i, c in enumerate(completions)]
    if params.tools:
        for choice, completion in zip(choices, completions, strict=True):
            choice["message"], called = call_message(completion.text)
            if called:
                choice["finish_reason"] = "tool_calls"
    return 200, {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": state.name,
        "choices": choices,
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the test output clean
            pass

        def reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                pass

        def body(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/v1/models":
                models = [{"id": state.name, "object": "model", "owned_by": "passkt-tests"}]
                self.reply(200, {"object": "list", "data": models})
            elif self.path == "/_control":
                with state.lock:
                    self.reply(200, {**state.control, **state.counters})
            else:
                self.reply(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            if self.path == "/_control":
                with state.lock:
                    state.control.update(self.body())
                self.reply(200, state.control)
                return
            if self.path != "/v1/chat/completions":
                self.reply(404, {"error": {"message": f"no route {self.path}"}})
                return
            body = self.body()
            fail, delay = False, 0.0
            with state.lock:
                state.counters["chat_requests"] += 1
                if state.control["fail_next"] > 0:
                    fail = True
                    state.control["fail_next"] -= 1
                    state.counters["failed"] += 1
                elif state.control["delay_next"] > 0:
                    delay = float(state.control["delay_seconds"])
                    state.control["delay_next"] -= 1
                    state.counters["delayed"] += 1
            if fail:
                status = int(state.control["fail_status"])
                self.reply(status, {"error": {"message": "injected failure", "code": status}})
                return
            if delay:
                time.sleep(delay)
            try:
                self.reply(*chat(state, body))
            except (KeyError, TypeError, ValueError) as e:
                self.reply(400, {"error": {"message": f"bad request: {e}", "code": 400}})

    return Handler


def load_backend(model: str, env_id: str) -> Any:
    """The policy behind the server: a checkpoint, or a scripted agent on ``env_id``'s tasks."""
    if model.startswith("scripted:"):
        import gymnasium as gym  # a scripted backend only

        import passkt.envs  # noqa: F401  (registers the envs)
        from passkt.agents.specs import load_policy

        return load_policy(model, tasks=gym.make(env_id).unwrapped.tasks)
    from passkt.agents.hf import HFPolicy  # a checkpoint backend only: loads torch

    return HFPolicy(model, batch_size=8)


def watchdog(server: ThreadingHTTPServer, max_seconds: float) -> None:
    """Shut the server down when the time is up or the parent process is gone."""
    parent, deadline = os.getppid(), time.monotonic() + max_seconds
    while time.monotonic() < deadline and os.getppid() == parent:
        time.sleep(0.2)
    server.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--name", default="tiny")
    parser.add_argument("--env", default="BridgeQA-v0")
    parser.add_argument("--max-seconds", type=float, default=300.0)
    args = parser.parse_args(argv)
    state = State(load_backend(args.model, args.env), args.name)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(state))
    server.daemon_threads = True
    threading.Thread(target=watchdog, args=(server, args.max_seconds), daemon=True).start()
    sys.stdout.write(f"PORT {server.server_address[1]}\n")
    sys.stdout.flush()
    server.serve_forever(poll_interval=0.1)
    server.server_close()


if __name__ == "__main__":
    main()
