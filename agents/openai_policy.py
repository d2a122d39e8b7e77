"""``OpenAIPolicy``: any OpenAI-compatible chat server (``vllm serve``, SGLang, llama.cpp, ...).

Requests go through the official ``openai`` client, one chat-completion request per conversation
(with ``n`` samples), several at once in a thread pool. Connection errors, timeouts, HTTP 429 and
5xx are retried with exponential backoff; other 4xx answers fail at once with an error that says
what the server objected to (for an unknown model: the models it does serve).

Stop strings: chat APIs cut the stop string out of the reply. It is put back when the server says
which one matched (vLLM and SGLang report ``stop_reason``); when the server does not report it, a
stop string of the form ``</tag>`` is put back if the reply ends with ``<tag>`` left open. A reply
ended by an end-of-sequence token gets nothing appended.

Tool calls (an env in the tool format, ``SamplingParams.tools``): the tools go out as ``tools``,
and the first of a reply's ``tool_calls`` comes back as the text
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (``passkt.envs.tool_calls``), which
the env parses like any turn; the conversation's past calls and the env's replies go out as
``tool_calls`` and ``tool`` messages. No stop strings are sent then: a call ends the reply.

Token ids are not part of the chat API, so completions carry empty ``token_ids`` unless the server
returns them (vLLM does with ``return_tokens_as_token_ids``; ask for it with
``OpenAIPolicy(..., token_ids=True)``). Per-token logprobs are returned when the server gives them.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from passkt.agents.policy import Completion, Conversation, SamplingParams
from passkt.agents.redact import redact
from passkt.agents.vllm_policy import request_seeds
from passkt.envs.errors import MissingDependencyError, PassktError
from passkt.envs.tool_calls import render_tool_call, tool_calls_in, without_tool_calls

logger = logging.getLogger(__name__)

_TOKEN_ID = re.compile(r"^token_id:(\d+)$")
_CLOSING_TAG = re.compile(r"^</([A-Za-z][\w-]*)>$")


class ServerRequestError(PassktError, RuntimeError):
    """A request to an OpenAI-compatible server failed (after any retries)."""

    def __init__(self, message: str, *, url: str, status: int | None = None) -> None:
        self.url, self.status = url, status
        super().__init__(message)


class ServerTimeoutError(ServerRequestError, TimeoutError):
    """The server did not answer within the timeout (after any retries)."""


# --------------------------------------------------------------------------- pure helpers


def _field(obj: Any, name: str) -> tuple[bool, Any]:
    """``(present, value)`` of a response field, for dicts and openai's pydantic models alike
    (fields outside the OpenAI schema, such as vLLM's ``stop_reason``, live in ``model_extra``)."""
    if isinstance(obj, Mapping):
        return name in obj, obj.get(name)
    if name in getattr(type(obj), "model_fields", {}) or hasattr(obj, name):
        return True, getattr(obj, name, None)
    extra = getattr(obj, "model_extra", None) or {}
    return name in extra, extra.get(name)


def infer_stop(text: str, stops: Sequence[str]) -> str | None:
    """The closing-tag stop string that ``text`` leaves open, e.g. ``</answer>`` after
    ``"... <answer>Paris"``; None if no ``</tag>`` stop string has its ``<tag>`` open."""
    best, best_at = None, -1
    for stop in stops:
        match = _CLOSING_TAG.match(stop)
        if not match:
            continue
        opened = max(text.rfind(f"<{match.group(1)}>"), text.rfind(f"<{match.group(1)} "))
        if opened > text.rfind(stop) and opened > best_at:
            best, best_at = stop, opened
    return best


def restore_stop(
    text: str, finish_reason: str | None, stop_reason: tuple[bool, Any], stops: Sequence[str]
) -> str:
    """Put back the stop string that the server cut from ``text``.

    Args:
        text: The reply as the server sent it.
        finish_reason: The choice's ``finish_reason``.
        stop_reason: ``(reported, value)``: whether the server has a ``stop_reason`` field and
            its value (the matched stop string; None or a token id when EOS or a stop token
            ended the reply).
        stops: The stop strings of the request.
    """
    if finish_reason != "stop":
        return text
    reported, value = stop_reason
    stop = (value if isinstance(value, str) else None) if reported else infer_stop(text, stops)
    if stop and not text.endswith(stop):
        return text + stop
    return text


def call_text(message: Any) -> str:
    """The text of a reply with ``tool_calls``: its content (the model's words before the call,
    if any) and its first call as the tool format writes it. Arguments that are not JSON stay as
    they came, for the env to refuse as it refuses a malformed tag."""
    content = _field(message, "content")[1] or ""
    function = _field(_field(message, "tool_calls")[1][0], "function")[1]
    name = _field(function, "name")[1]
    arguments = _field(function, "arguments")[1]
    call = render_tool_call(str(name), arguments if isinstance(arguments, (str, Mapping)) else "")
    return f"{content.strip()}\n{call}" if content.strip() else call


def openai_messages(conversation: Conversation) -> list[dict[str, Any]]:
    """A conversation of the tool format as the OpenAI API takes it.

    An assistant turn whose text holds a call (a JSON object with a name) becomes a message with
    ``tool_calls`` (its other text as content), and the ``tool`` message after it answers that
    call by id. An env reply to a turn without such a call goes as a ``user`` message, since the
    API takes tool replies only to calls.
    """
    out: list[dict[str, Any]] = []
    call_id = None
    for index, message in enumerate(conversation):
        role, text = message["role"], message["content"]
        if role == "tool":
            if call_id is None:
                out.append({"role": "user", "content": text})
            else:
                out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            call_id = None
            continue
        call = _first_call(text) if role == "assistant" else None
        if call is None:
            out.append(dict(message))
            continue
        call_id = f"call_{index}"
        name, arguments = call
        content = without_tool_calls(text)
        out.append(
            {
                "role": "assistant",
                "content": content or None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(arguments)},
                    }
                ],
            }
        )
    return out


def _first_call(text: str) -> tuple[str, Any] | None:
    """``(name, arguments)`` of the first call in ``text`` that is a JSON object with a name."""
    calls = tool_calls_in(text)
    if not calls:
        return None
    try:
        call = json.loads(calls[0])
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    return call["name"], call.get("arguments", {})


def completion_from_choice(choice: Any, stops: Sequence[str]) -> Completion:
    """Convert one chat-completion choice (dict or openai model) into a ``Completion``."""
    message = _field(choice, "message")[1]
    text = _field(message, "content")[1] or ""
    finish_reason = _field(choice, "finish_reason")[1]
    if _field(message, "tool_calls")[1]:
        text = call_text(message)
    else:
        text = restore_stop(text, finish_reason, _field(choice, "stop_reason"), stops)
    entries = _field(_field(choice, "logprobs")[1] or {}, "content")[1] or []
    logprobs = tuple(float(_field(e, "logprob")[1]) for e in entries)
    tokens = [_TOKEN_ID.match(str(_field(e, "token")[1])) for e in entries]
    ids = tuple(int(m.group(1)) for m in tokens) if tokens and all(tokens) else ()
    return Completion(
        text=text,
        token_ids=ids,
        logprobs=logprobs,
        finish_reason="length" if finish_reason == "length" else "stop",
    )


# --------------------------------------------------------------------------- the policy


class OpenAIPolicy:
    """A chat model behind an OpenAI-compatible HTTP API."""

    seeds_each_row = True
    """Honours ``SamplingParams.seeds``: a row's completion does not depend on its batch."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        logprobs: bool = True,
        concurrency: int = 8,
        token_ids: bool = False,
    ) -> None:
        """Connect to a server (nothing is sent until the first ``generate``).

        Args:
            base_url: The API root, e.g. ``"http://localhost:8000/v1"``.
            model: The served model name (``GET /v1/models`` lists them).
            api_key: Bearer token; default ``"EMPTY"``, which local servers accept. Your
                ``OPENAI_API_KEY`` is never read implicitly (it must not leak to other servers).
            api_key_env: Instead of ``api_key``, the name of the environment variable that holds
                it. Use this in ``policy_options``: run manifests record options in plain text,
                so they refuse an ``api_key`` but may hold the variable's name.
            timeout: Seconds to wait for one answer.
            max_retries: Retries after a connection error, timeout, HTTP 429 or 5xx.
            backoff: Seconds before the first retry; doubled for each further one.
            logprobs: Ask for per-token logprobs.
            concurrency: Requests in flight at once.
            token_ids: Ask for token ids as well (vLLM's ``return_tokens_as_token_ids``; other
                servers may reject the field).

        Raises:
            MissingDependencyError: If the ``openai`` package is not installed.
        """
        try:
            import openai  # optional: the openai extra
        except ImportError as e:
            raise MissingDependencyError("openai", "openai") from e
        for name, value, low in (("timeout", timeout, 0), ("backoff", backoff, 0)):
            if value < low:
                raise ValueError(f"{name} must be >= {low}, got {value}")
        if max_retries < 0 or concurrency < 1:
            raise ValueError(
                f"need max_retries >= 0 and concurrency >= 1, got {max_retries}, {concurrency}"
            )
        if api_key_env is not None:
            if api_key is not None:
                raise ValueError("give api_key or api_key_env, not both")
            api_key = os.environ.get(api_key_env)
            if not api_key:
                raise ValueError(
                    redact(
                        f"api_key_env={api_key_env!r}: that environment variable is not set; "
                        f"export {api_key_env}=<your key> first"
                    )
                )
        self.base_url, self.model = base_url, model
        self.timeout, self.max_retries, self.backoff = timeout, max_retries, backoff
        self._retry_warned = False
        self.logprobs, self.concurrency, self.token_ids = logprobs, concurrency, token_ids
        self.spec = f"openai:{base_url}#{model}"  # the spec load_policy parses
        self.shown_url = redact(base_url)
        """``base_url`` as messages and logs show it (credentials in it masked)."""
        self._openai = openai
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "EMPTY", timeout=timeout, max_retries=0
        )

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        """Sample ``params.n`` replies per conversation (conversation-major)."""
        seeds = request_seeds(params.seed, len(conversations), params.seeds)
        jobs = list(zip(conversations, seeds, strict=True))
        if len(jobs) <= 1 or self.concurrency == 1:
            results = [self._complete(c, params, s) for c, s in jobs]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
                results = list(pool.map(lambda job: self._complete(job[0], params, job[1]), jobs))
        return [completion for per_conversation in results for completion in per_conversation]

    def _complete(
        self, conversation: Conversation, params: SamplingParams, seed: int | None
    ) -> list[Completion]:
        """``params.n`` completions of one conversation; asks again if the server gave fewer."""
        completions: list[Completion] = []
        for attempt in range(params.n):  # at worst one choice per request
            request_seed = None if seed is None else seed + attempt * 1_000_003
            response = self._request(
                conversation, params, params.n - len(completions), request_seed
            )
            choices = sorted(response.choices, key=lambda c: c.index)
            completions.extend(completion_from_choice(c, params.stop) for c in choices)
            if len(completions) >= params.n or not choices:
                break
        if len(completions) < params.n:
            raise ServerRequestError(
                f"{self.shown_url} returned {len(completions)} of the {params.n} choices asked for",
                url=self.shown_url,
            )
        return completions[: params.n]

    def _request_kwargs(
        self, conversation: Conversation, params: SamplingParams, n: int, seed: int | None
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": (
                openai_messages(conversation) if params.tools else [dict(m) for m in conversation]
            ),
            "n": n,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_new_tokens,
        }
        if params.tools:
            kwargs["tools"] = [dict(tool) for tool in params.tools]
        elif params.stop:
            kwargs["stop"] = list(params.stop)
        if seed is not None:
            kwargs["seed"] = seed
        if self.logprobs:
            kwargs["logprobs"] = True
        extra = {}
        if params.top_k > 0:
            extra["top_k"] = params.top_k  # not in the OpenAI schema; vLLM and SGLang take it
        if self.token_ids:
            extra["return_tokens_as_token_ids"] = True
        if conversation and conversation[-1]["role"] == "assistant":
            # A stream layout (Search-R1's): the server must continue this assistant message,
            # not open a new turn after it (vLLM's and SGLang's chat servers take these).
            extra["continue_final_message"] = True
            extra["add_generation_prompt"] = False
        if extra:
            kwargs["extra_body"] = extra
        return kwargs

    def _request(
        self, conversation: Conversation, params: SamplingParams, n: int, seed: int | None
    ) -> Any:
        """One chat-completion request, retried on transient failures."""
        openai = self._openai
        kwargs = self._request_kwargs(conversation, params, n, seed)
        failure: Exception | None = None
        for attempt in range(self.max_retries + 1):
            if attempt:
                delay = self.backoff * 2 ** (attempt - 1)
                # once per policy: concurrent requests retrying together would repeat it
                log = logger.debug if self._retry_warned else logger.warning
                self._retry_warned = True
                log("retrying %s in %.2f s after: %s (further retries are logged at debug level)",
                    self.shown_url, delay, failure)  # fmt: skip
                time.sleep(delay)
            try:
                return self.client.chat.completions.create(**kwargs)
            except openai.APIConnectionError as e:  # includes APITimeoutError
                failure = e
            except openai.APIStatusError as e:
                if e.status_code != 429 and e.status_code < 500:
                    raise self._rejected(e) from e
                failure = e
        raise self._gave_up(failure) from failure

    def _gave_up(self, failure: Exception | None) -> ServerRequestError:
        attempts = f"{self.max_retries + 1} attempt{'s' if self.max_retries else ''}"
        if isinstance(failure, self._openai.APITimeoutError):
            return ServerTimeoutError(
                f"no answer from {self.shown_url} within timeout={self.timeout} s ({attempts}); "
                "raise timeout=... or check that the server is not overloaded",
                url=self.shown_url,
            )
        if isinstance(failure, self._openai.APIStatusError):
            return ServerRequestError(
                f"{self.shown_url} kept failing with HTTP {failure.status_code} ({attempts}): "
                f"{_server_message(failure)}",
                url=self.shown_url,
                status=failure.status_code,
            )
        return ServerRequestError(
            f"could not connect to {self.shown_url} ({attempts}): {failure}. "
            "Is the server running, and is base_url right (it usually ends in /v1)?",
            url=self.shown_url,
        )

    def _rejected(self, error: Any) -> ServerRequestError:
        """A clear error for a 4xx answer; for an unknown model, list the served ones."""
        status, message = error.status_code, _server_message(error)
        served = self._served_models() if status in (400, 404, 422) else None
        if served is not None and self.model not in served:
            return ServerRequestError(
                f"model {self.model!r} is not served at {self.shown_url} (HTTP {status}: "
                f"{message}); the server offers: {', '.join(served) or 'no models'}. "
                "Pass one of them as model=...",
                url=self.shown_url,
                status=status,
            )
        return ServerRequestError(
            f"{self.shown_url} rejected the request for model {self.model!r} "
            f"(HTTP {status}): {message}",
            url=self.shown_url,
            status=status,
        )

    def _served_models(self) -> list[str] | None:
        try:
            return sorted(m.id for m in self.client.models.list())
        except self._openai.OpenAIError:
            return None


def _server_message(error: Any) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return str(getattr(error, "message", error))
