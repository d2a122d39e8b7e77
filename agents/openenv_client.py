"""A served env (``passkt serve``) as a Gymnasium env, through OpenEnv's own client.

``PassktEnvClient`` is OpenEnv's ``EnvClient`` (WebSocket, async, ``.sync()`` for synchronous
code) typed for a ``passkt serve`` server: what a TRL rollout function or any OpenEnv user
drives. ``OpenEnvClient-v0`` wraps it as a Gymnasium env, so every passkt command runs on a
served env as on the env in process::

    passkt serve BridgeQA-v0 --port 8000 &
    passkt eval --env passkt.agents.openenv_client:OpenEnvClient-v0 \\
        --env-kwargs base_url=http://127.0.0.1:8000 --policy scripted:oracle

The client env carries over what passkt reads from an env (``passkt.envs.contract``): the served
env's ``protocol`` (system prompt, stop strings, tools), ``tasks`` (passkt ``Task`` records, read
once per process from OpenEnv's Task API), ``has_tools``, ``reveal_budget``, ``category`` and its
reward range, and it takes ``max_tool_calls`` and ``split``, which each reset hands to the server.
So ``passkt eval`` makes the same episodes as in process (``tests/agents/test_openenv.py`` checks
the records); only forks differ: a budget branch replays the actions on another session.

The client envs of a process share one event loop thread and keep closed envs' sessions open for
the next env (``_Shared``). Each reset and step is a WebSocket round trip (about 1 ms on this
project's 2-core machines, against tens of microseconds for a passkt env in process).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import threading
import types
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import gymnasium as gym

from passkt.agents.openenv_server import SPLITS, PassktState, TextAction, TextObservation
from passkt.agents.preflight import MAX_BUDGET
from passkt.envs.contract import AgentInterface
from passkt.envs.errors import EnvServerError, MissingDependencyError
from passkt.envs.spaces import UnicodeText
from passkt.envs.tasks import Paragraph, Task

try:
    import httpx
    from openenv.core import EnvClient
    from openenv.core.client_types import StepResult
except ImportError as error:  # optional: the openenv extra
    raise MissingDependencyError("openenv", "openenv") from error

__all__ = ["ENV_ID", "OpenEnvClientEnv", "PassktEnvClient"]

ENV_ID = "OpenEnvClient-v0"
MAX_IDLE_SESSIONS = 256
"""Open sessions kept per server for the next env (each holds an env on the server)."""
MAX_TEXT = 2**24
"""The longest text the client env's spaces hold (a served observation has no other bound)."""

T = TypeVar("T")


class PassktEnvClient(EnvClient[TextAction, TextObservation, PassktState]):
    """OpenEnv's client for a ``passkt serve`` server.

    Example::

        with PassktEnvClient(base_url="http://127.0.0.1:8000").sync() as client:
            result = client.reset(seed=0, task_id="bridge-test-0000", max_tool_calls=3)
            result = client.step(TextAction(text="<search>Pelza Miza</search>"))
            result.observation.text, result.reward, result.done
            result.observation.metadata["info"]["tool_calls"]
    """

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        fields = payload.get("observation", {})
        metadata = payload.get("metadata") or fields.get("metadata") or {}
        observation = TextObservation(
            text=fields.get("text", ""),
            reward=payload.get("reward"),
            done=payload.get("done", False),
            metadata=metadata,
        )
        return StepResult(observation, payload.get("reward"), observation.done, metadata)

    def _parse_state(self, payload: dict[str, Any]) -> PassktState:
        return PassktState.model_validate(payload)


class _Shared:
    """What the client envs of one process share:

    - one event loop, in a daemon thread, that runs every client (a rollout holds hundreds of
      envs at once; OpenEnv's ``.sync()`` would start a thread for each);
    - the open sessions of each server, kept by ``close`` for the next env: a WebSocket
      handshake and a new server session cost about 4 ms, as much as four steps;
    - each server's description and task lists, read once.

    A forked process (an env worker) starts its own (``shared()``).
    """

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="passkt-openenv", daemon=True).start()
        self.idle: dict[tuple[str, float], list[PassktEnvClient]] = {}
        self.described: dict[str, dict[str, Any]] = {}
        self.tasks: dict[tuple[str, str], tuple[Any, ...]] = {}

    def run(self, call: Callable[[], Awaitable[T]]) -> T:
        """Await ``call()`` on the loop and return its result (or raise its error)."""

        async def awaited() -> T:
            return await call()

        return asyncio.run_coroutine_threadsafe(awaited(), self.loop).result()

    def take(self, url: str, timeout: float) -> PassktEnvClient:
        """An open session of the server at ``url``, or a new client (it connects on use)."""
        with self.lock:
            idle = self.idle.get((url, timeout))
            if idle:
                return idle.pop()
        return PassktEnvClient(
            base_url=url, connect_timeout_s=min(10.0, timeout), message_timeout_s=timeout
        )

    def give_back(self, url: str, timeout: float, client: PassktEnvClient) -> None:
        """Keep ``client``'s session for the next env, or close it when enough are kept."""
        with self.lock:
            idle = self.idle.setdefault((url, timeout), [])
            if len(idle) < MAX_IDLE_SESSIONS:
                idle.append(client)
                return
        self.discard(client)

    def discard(self, client: PassktEnvClient) -> None:
        with contextlib.suppress(Exception):  # the server is gone: nothing is left to close
            self.run(client.close)

    def forget(self, url: str) -> None:
        """Drop what is known of the server at ``url`` (after an error: it may have changed)."""
        with self.lock:
            self.described.pop(url, None)
            stale = [key for key in self.tasks if key[0] == url]
            for key in stale:
                del self.tasks[key]


_SHARED: _Shared | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> _Shared:
    """This process's ``_Shared`` (made on first use, and again in a forked process)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None or _SHARED.pid != os.getpid():
            _SHARED = _Shared()
        return _SHARED


class OpenEnvClientEnv(gym.Env[str, str]):
    """A ``passkt serve`` server's env, stepped through OpenEnv's client (one WebSocket session
    per env).

    ## Description
    The served env, as it is in process: the same observations, rewards, flags and ``info``.

    ## Action Space
    ``UnicodeText``: any string (the served env parses it).

    ## Observation Space
    ``UnicodeText``: the served env's observation text.

    ## Starting State
    ``reset(seed=, options=)`` resets the served env with them (``options={"task_id": ...}``
    picks a task), made with this env's ``max_tool_calls`` and ``split``.

    ## Rewards
    The served env's.

    ## Episode End
    The served env's ``terminated`` and ``truncated``.

    ## Information
    The served env's ``info`` as JSON carries it (tuples become lists).

    ## Arguments
    - ``base_url``: the server, ``http(s)://host:port`` (``ws(s)://`` works too).
    - ``max_tool_calls``: the budget T of every episode (``None``: the server's default).
    - ``split``: ``test`` or ``train``.
    - ``timeout``: seconds to wait for any one reply before the step fails.

    ## Version History
    - v0: the first version.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012  (Gymnasium's class attribute)

    def __init__(
        self,
        base_url: str,
        max_tool_calls: int | None = None,
        split: str = "test",
        timeout: float = 60.0,
    ) -> None:
        self.base_url = _check_url(base_url)
        if max_tool_calls is not None and (
            isinstance(max_tool_calls, bool)
            or not isinstance(max_tool_calls, int)
            or not 0 <= max_tool_calls <= MAX_BUDGET
        ):
            raise ValueError(f"max_tool_calls must be an int in [0, {MAX_BUDGET}] or None")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        self.max_tool_calls = max_tool_calls
        self.split = split
        self.timeout = float(timeout)
        self._shared = shared()
        self._client: PassktEnvClient | None = self._shared.take(self.base_url, self.timeout)
        self._failed = False
        served = self._shared.described.get(self.base_url)
        if served is None:
            try:
                served = self._call(lambda client: client.state()).env
            except Exception:
                self.close()
                raise
            self._shared.described[self.base_url] = served
        self.served = served
        """The served env's description (``PassktState.env``)."""
        self.protocol = AgentInterface.from_value(served["protocol"], f"{self.base_url} protocol")
        self.has_tools = bool(served["has_tools"])
        self.reveal_budget = bool(served["reveal_budget"])
        # passkt names the tasks of an env without a category by its id: the served env's, here
        self.category = served["category"] or str(served["env_id"]).rpartition(":")[2]
        self.reward_range = tuple(float(r) for r in served["reward_range"])
        self.action_space = UnicodeText(MAX_TEXT)
        self.observation_space = UnicodeText(MAX_TEXT)

    @property
    def tasks(self) -> tuple[Any, ...] | None:
        """The served task records of this env's split (``None``: its tasks are reset seeds)."""
        kind = self.served["tasks"]
        if kind is None:
            return None
        key, known = (self.base_url, self.split), self._shared.tasks
        if key not in known:
            known[key] = tuple(_rebuild(r, kind) for r in self._fetch_tasks())
        return known[key]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        arguments = {
            "seed": None if seed is None else int(seed),
            "options": options,
            "max_tool_calls": self.max_tool_calls,
            "split": self.split,
        }
        text, _, _, _, info = _unpack(self._call(lambda client: client.reset(**arguments)))
        return text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if not isinstance(action, str):
            raise TypeError(f"an action is text (str), got {type(action).__name__}")
        return _unpack(self._call(lambda client: client.step(TextAction(text=action))))

    def close(self) -> None:
        """Hand the session to the next env of this server (closed instead after an error)."""
        client, self._client = self._client, None
        if client is None:
            return
        if self._failed:
            self._shared.discard(client)
        else:
            self._shared.give_back(self.base_url, self.timeout, client)

    def _call(self, request: Callable[[PassktEnvClient], Any]) -> Any:
        """Run one request of the client on the shared loop; its failure as ``EnvServerError``."""
        client = self._client
        if client is None:
            raise EnvServerError(f"{self.base_url}: the env is closed")
        try:
            return self._shared.run(lambda: request(client))
        except Exception as error:
            ours = isinstance(error, (RuntimeError, ConnectionError, OSError, TimeoutError))
            if not ours and not type(error).__module__.startswith("websockets"):
                raise  # not the server's or the connection's (a bug here)
            self._failed = True  # the session may be broken, and the server may have changed
            self._shared.forget(self.base_url)
            raise EnvServerError(f"{self.base_url}: {type(error).__name__}: {error}") from error

    def _fetch_tasks(self) -> list[dict[str, Any]]:
        url = f"{_http_url(self.base_url)}{self.served['task_api']}"
        try:
            reply = httpx.post(
                url, json={"split": self.split}, timeout=60.0, trust_env=not _loopback(url)
            )
            reply.raise_for_status()
            return list(reply.json()["tasks"])
        except (httpx.HTTPError, ValueError, KeyError) as error:
            raise EnvServerError(f"{url}: cannot read the task list ({error})") from error


def _unpack(result: StepResult[TextObservation]) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """A reset or step reply as Gymnasium's ``(observation, reward, terminated, truncated,
    info)``, with the exact strings when the server had to escape some."""
    metadata: Mapping[str, Any] = result.observation.metadata or {}
    text, info = result.observation.text, metadata.get("info") or {}
    if "exact" in metadata:
        exact = json.loads(metadata["exact"])
        text, info = exact["text"], exact["info"]
    reward = 0.0 if result.reward is None else result.reward
    terminated = bool(metadata.get("terminated", result.done))
    return text, reward, terminated, bool(metadata.get("truncated", False)), dict(info)


def _rebuild(record: Mapping[str, Any], kind: str) -> Any:
    """A task record from the Task API as the env holds it: a passkt ``Task``, an id, or a
    record with the served record's attributes."""
    if kind == "ids":
        return str(record["task_id"])
    if kind == "records":
        return types.SimpleNamespace(**record)
    fields = dict(record)
    fields["paragraphs"] = tuple(Paragraph(**p) for p in fields.get("paragraphs", ()))
    for name in ("aliases", "gold_titles", "gold_queries"):
        fields[name] = tuple(fields.get(name, ()))
    return Task(**fields)


def _check_url(base_url: Any) -> str:
    parts = urllib.parse.urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https", "ws", "wss") or not parts.netloc:
        raise ValueError(
            f"base_url must be the server's URL, e.g. http://127.0.0.1:8000, got {base_url!r}"
        )
    return base_url.rstrip("/")


def _http_url(base_url: str) -> str:
    """``base_url`` with ``ws(s)://`` as ``http(s)://`` (the Task API is HTTP)."""
    scheme, rest = base_url.split("://", 1)
    return f"{_HTTP_SCHEMES.get(scheme, scheme)}://{rest}"


_HTTP_SCHEMES = {"ws": "http", "wss": "https"}


def _loopback(url: str) -> bool:
    """Whether ``url`` names this machine (no proxy then, as OpenEnv's client does)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="passkt.agents.openenv_client:OpenEnvClientEnv")
