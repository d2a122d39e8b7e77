"""Any registered env as an OpenEnv server: the server side of ``passkt serve ENV_ID``.

OpenEnv (the ``openenv`` extra; read and tested with 0.10.0) is the env-server convention TRL's
docs call native: a FastAPI app that ``openenv.core.env_server.create_app`` builds around a factory
of ``Environment`` objects, driven by OpenEnv's ``EnvClient`` over a WebSocket (``/ws``), one
``Environment`` per connection, plus ``/health``, ``/schema``, ``/metadata`` and a Task API. This
module fills in that convention for any env passkt can run:

- ``TextAction`` (``text``: the model's turn, any string) and ``TextObservation`` (``text``: the
  env's observation; ``reward``; ``done``; ``metadata``: ``terminated``, ``truncated`` and the
  env's ``info``: task id, tool calls, the answer, ``correct`` ...) are the wire types;
- ``PassktEnvironment`` is one session's env. ``reset(seed=, options= | task_id=,
  max_tool_calls=, split=)`` makes the gym env as ``passkt eval`` makes it (``EnvRunner``: the
  budget T is the env's own ``max_tool_calls``, or passkt's budget wrapper) and resets it;
  ``step(TextAction)`` steps it. Its ``state`` carries what a client needs to act as the env
  (the protocol with its tools, whether it has tools, the category, the reward range);
- the Task API (``/{name}/tasks``, ``/{name}/task`` ...) lists each split's task records.

Model text is ordinary input: any string, empty, 1 MB or with NUL bytes, gets the env's
observation. A string JSON cannot carry as UTF-8 (a lone surrogate the env echoes back) is sent
with U+FFFD in its place, and exactly, ASCII-escaped, in ``metadata["exact"]``. An env that raises
ends its episode with an error reply; the session and the server go on.
``passkt.agents.openenv_client`` is the client side: a Gymnasium env that a run drives through
OpenEnv's own client.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import socket
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from passkt.agents.env_runtime import EnvRunner
from passkt.agents.preflight import MAX_BUDGET
from passkt.envs.errors import MissingDependencyError
from passkt.envs.tasks import Task

try:
    from openenv.core.env_server import Action, Environment, Observation, State, create_app
    from openenv.core.env_server.types import EnvironmentMetadata
    from pydantic import Field
except ImportError as error:  # optional: the openenv extra
    raise MissingDependencyError("openenv", "openenv") from error

__all__ = [
    "DEFAULT_MAX_SESSIONS",
    "SPLITS",
    "PassktEnvironment",
    "PassktState",
    "ServedEnv",
    "TextAction",
    "TextObservation",
    "build_app",
    "listen",
    "serve",
]

SPLITS = ("test", "train")
DEFAULT_MAX_SESSIONS = 2048
"""WebSocket sessions (envs) open at once. ``passkt eval`` through the client holds one per live
episode: up to 256 (task, sample) episodes per batch plus their budget branches, and one per T
of each without prefix sharing."""
MAX_MESSAGE_BYTES = 100 * 2**20
"""Largest WebSocket message the server reads: OpenEnv's client's own default limit."""


class TextAction(Action):
    """One turn of the model: its text, parsed by the env as in ``passkt eval``."""

    text: str = Field(description="The model's turn (any string; the env parses it)")


class TextObservation(Observation):
    """The env's reply: ``text``; ``reward`` (``None`` at reset); ``done`` (terminated or
    truncated); ``metadata``: ``terminated``, ``truncated``, ``info`` (the env's info as JSON)
    and, only when a string had to be changed to travel as UTF-8, ``exact``."""

    text: str = Field(default="", description="The observation text")


class PassktState(State):
    """A session's state: its episode, and in ``env`` what a client needs to act as the env."""

    env_id: str = Field(default="", description="The served env id")
    split: str | None = Field(default=None, description="The current episode's split")
    max_tool_calls: int | None = Field(default=None, description="Its budget T")
    task_id: str | None = Field(default=None, description="Its task")
    done: bool = Field(default=True, description="Whether no episode is in progress")
    env: dict[str, Any] = Field(
        default_factory=dict,
        description="The served env: protocol (system prompt, stop strings, tools), has_tools, "
        "reveal_budget, category, reward_range, tasks (passkt | ids | records | null for "
        "seed tasks), task_api, server_id",
    )


# ---------------------------------------------------------------------- JSON on the wire


def plain(value: Any) -> Any:
    """``value`` as JSON data: mappings with str keys, lists, str, numbers, bools, ``None``;
    numpy values become Python's, dataclasses their fields, anything else its ``repr``."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return repr(value)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _readable(value: Any) -> Any:
    """``value`` with every lone surrogate replaced by U+FFFD (what UTF-8 can carry)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_readable(key): _readable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_readable(item) for item in value]
    return value


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def to_observation(
    observation: Any, reward: float | None, terminated: bool, truncated: bool, info: Any
) -> TextObservation:
    """One reset or step result as a ``TextObservation``.

    Raises:
        TypeError: the env returned an observation that is not text.
    """
    if not isinstance(observation, str):
        raise TypeError(
            f"the env returned a {type(observation).__name__} observation; a served env speaks "
            "text (str)"
        )
    info = plain(info) if isinstance(info, Mapping) else {}
    metadata: dict[str, Any] = {"terminated": terminated, "truncated": truncated, "info": info}
    if not _utf8(observation) or not _utf8(json.dumps(info, ensure_ascii=False)):
        metadata["exact"] = json.dumps({"text": observation, "info": info})  # ASCII escapes
        observation, metadata["info"] = _readable(observation), _readable(info)
    return TextObservation(
        text=observation, reward=reward, done=terminated or truncated, metadata=metadata
    )


# ---------------------------------------------------------------------- the served env


def _budget(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BUDGET:
        raise ValueError(f"{where} must be an int in [0, {MAX_BUDGET}] or null, got {value!r}")
    return value


def _split(value: Any, where: str) -> str:
    if value not in SPLITS:
        raise ValueError(f"{where} must be one of {', '.join(SPLITS)}, got {value!r}")
    return str(value)


def task_record(task: Any) -> dict[str, Any]:
    """One task as the Task API lists it: a passkt ``Task`` with all its fields, an id as
    ``{"task_id": id}``, another record as its ``task_id`` and public attributes."""
    if isinstance(task, str):
        return {"task_id": task}
    if dataclasses.is_dataclass(task):
        return plain(task)
    fields = {k: v for k, v in getattr(task, "__dict__", {}).items() if not k.startswith("_")}
    return {**plain(fields), "task_id": str(task.task_id)}


def _task_kind(tasks: tuple[Any, ...], task_ids: Any) -> str | None:
    """How the client rebuilds the records: ``passkt`` (``Task``), ``ids``, ``records``; ``None``
    when the env has no task list (its tasks are reset seeds)."""
    if task_ids is None:
        return None
    if all(isinstance(task, Task) for task in tasks):
        return "passkt"
    return "ids" if all(isinstance(task, str) for task in tasks) else "records"


class ServedEnv:
    """The env one server serves, shared by its sessions: the env id and kwargs, the inspection
    of each split (made once; the first split's at construction, so that an unknown id or bad
    kwargs fail before the server starts), and each split's task records.

    Args:
        env_id: A registered env id (``"BridgeQA-v0"``, ``"my_envs:Board-v0"``).
        env_kwargs: ``gym.make`` kwargs. ``max_tool_calls`` and ``split`` here are the defaults
            of a reset that gives none (else the env's own budget, and the test split).

    Raises:
        passkt.envs.contract.EnvContractError: The env cannot be served (unknown id, kwargs the
            constructor rejects, no text, ...).
        ValueError: A default budget or split out of range.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
        kwargs = dict(env_kwargs or {})
        self.env_id = env_id
        self.default_budget = _budget(kwargs.pop("max_tool_calls", None), "max_tool_calls")
        self.default_split = _split(kwargs.pop("split", "test"), "split")
        self.kwargs = kwargs
        self.name = re.sub(r"[^A-Za-z0-9._-]+", "-", env_id.rpartition(":")[2])
        """The env's name in the Task API's paths."""
        self.server_id = uuid.uuid4().hex
        self._runners: dict[str, EnvRunner] = {}
        self._records: dict[str, list[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self.description = self._describe(self.runner(self.default_split))

    def runner(self, split: str) -> EnvRunner:
        """The ``EnvRunner`` of ``split`` (its inspection runs on first use)."""
        with self._lock:
            if split not in self._runners:
                self._runners[split] = EnvRunner(self.env_id, {**self.kwargs, "split": split})
            return self._runners[split]

    def make(self, split: str, budget: int | None) -> gym.Env:
        """A fresh env of ``split`` with budget T = ``budget`` (``None``: the env's own)."""
        runner = self.runner(split)
        if budget is not None:
            return runner.make(budget)
        return gym.make(self.env_id, **runner.kwargs, disable_env_checker=True)

    def task_records(self, split: str) -> list[dict[str, Any]]:
        """The task records of ``split`` (``task_record``), made once.

        Raises:
            NotImplementedError: The env has no task list (its tasks are reset seeds).
        """
        split = _split(split, "split")
        contract = self.runner(split).contract
        if contract.task_ids is None:
            raise NotImplementedError(f"{self.env_id} has no task list: its tasks are seeds")
        with self._lock:
            if split not in self._records:
                self._records[split] = [task_record(task) for task in contract.tasks]
            return self._records[split]

    def _describe(self, runner: EnvRunner) -> dict[str, Any]:
        env = self.make(self.default_split, self.default_budget)  # the default budget must work
        try:
            category = getattr(env.unwrapped, "category", None)
        finally:
            env.close()
        contract = runner.contract
        return {
            "env_id": self.env_id,
            "server_id": self.server_id,
            "protocol": plain(contract.protocol),
            "has_tools": contract.has_tools,
            "reveal_budget": contract.reveal_budget,
            "category": None if category is None else str(category),
            "reward_range": [contract.reward_floor, contract.reward_max],
            "tasks": _task_kind(contract.tasks, contract.task_ids),
            "task_api": f"/{self.name}/tasks",
            "default_max_tool_calls": self.default_budget,
        }


class PassktEnvironment(Environment[TextAction, TextObservation, PassktState]):
    """One session's env: OpenEnv's server makes one per WebSocket connection (and a short-lived
    one per stateless HTTP request). Cheap to make: the gym env is made at the first reset.

    Args:
        served: The env the server serves (shared by every session).
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session makes and steps its own gym env

    def __init__(self, served: ServedEnv) -> None:
        super().__init__()
        self.served = served
        self._env: gym.Env | None = None
        self._made: tuple[str, int | None] | None = None
        self._state = PassktState(env_id=served.env_id, env=served.description)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        options: dict[str, Any] | None = None,
        task_id: str | None = None,
        max_tool_calls: int | None = None,
        split: str | None = None,
        **unknown: Any,
    ) -> TextObservation:
        """Start an episode.

        Args:
            seed: The reset seed (an int >= 0).
            episode_id: A name for the episode (default: a new UUID).
            options: The env's reset options, e.g. ``{"task_id": "bridge-test-0003"}``.
            task_id: Shorthand for ``options={"task_id": task_id}``.
            max_tool_calls: The budget T (default: the server's, else the env's own).
            split: ``test`` or ``train`` (default: the server's, else ``test``).

        Raises:
            ValueError: An argument of the wrong type, or one reset does not take (named).
        """
        if unknown:
            raise ValueError(
                f"reset got unknown arguments {sorted(unknown)}; it takes seed, episode_id, "
                "options, task_id, max_tool_calls, split"
            )
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be an int >= 0 or null, got {seed!r}")
        options = self._options(options, task_id)
        split = self.served.default_split if split is None else _split(split, "split")
        budget = _budget(max_tool_calls, "max_tool_calls")
        budget = self.served.default_budget if budget is None else budget
        env = self._env_for(split, budget)
        self._state = PassktState(
            episode_id=episode_id or uuid.uuid4().hex,
            env_id=self.served.env_id,
            split=split,
            max_tool_calls=budget,
            env=self.served.description,
        )
        observation, info = env.reset(seed=seed, options=options)
        chosen = info.get("task_id") if isinstance(info, Mapping) else None
        chosen = chosen if chosen is not None else (options or {}).get("task_id")
        self._state.task_id = None if chosen is None else str(chosen)
        self._state.done = False
        return to_observation(observation, None, False, False, info)

    def step(self, action: TextAction, timeout_s: float | None = None) -> TextObservation:
        """Step the env with the action's text (``timeout_s`` is not enforced: a step runs to
        its end, and OpenEnv's client gives up on its own after its message timeout).

        Raises:
            RuntimeError: No episode in progress (reset first; an episode ends when done).
        """
        if self._env is None or self._state.done:
            raise RuntimeError("no episode in progress: reset first (an episode ends when done)")
        self._state.done = True  # an env that raises ends its episode, as in passkt eval
        observation, reward, terminated, truncated, info = self._env.step(action.text)
        self._state.step_count += 1
        self._state.done = bool(terminated or truncated)
        return to_observation(observation, float(reward), bool(terminated), bool(truncated), info)

    @property
    def state(self) -> PassktState:
        return self._state

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def get_metadata(self) -> EnvironmentMetadata:
        spec = gym.spec(self.served.env_id.rpartition(":")[2])
        entry = spec.entry_point if isinstance(spec.entry_point, str) else repr(spec.entry_point)
        return EnvironmentMetadata(
            name=self.served.env_id,
            description=f"{self.served.env_id} ({entry}), served by passkt: text actions, the "
            "budget T as max_tool_calls of reset; the agent protocol in the state's env field",
        )

    # --- OpenEnv's Task API (its HTTP routes make a fresh session object per request)

    def list_splits(self) -> list[str]:
        return list(SPLITS)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        return self.served.task_records(split)

    def num_tasks(self, split: str) -> int:
        return len(self.served.task_records(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        records = self.served.task_records(split)
        if not 0 <= index < len(records):
            raise IndexError(index)
        return records[index]

    def get_task_range(
        self, split: str, start: int | None = None, stop: int | None = None
    ) -> list[dict[str, Any]]:
        return self.served.task_records(split)[start:stop]

    # --- helpers

    @staticmethod
    def _options(options: Any, task_id: Any) -> dict[str, Any] | None:
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be an object or null, got {options!r:.80}")
        if task_id is None:
            return options
        if not isinstance(task_id, str):
            raise ValueError(f"task_id must be a string, got {task_id!r:.80}")
        if options is not None and options.get("task_id", task_id) != task_id:
            raise ValueError("task_id and options['task_id'] differ; give the task once")
        return {**(options or {}), "task_id": task_id}

    def _env_for(self, split: str, budget: int | None) -> gym.Env:
        """The session's gym env for (split, budget): kept across resets while they stay the
        same, made afresh when they change."""
        if self._env is None or self._made != (split, budget):
            self.close()
            self._env = self.served.make(split, budget)
            self._made = (split, budget)
        return self._env


# ---------------------------------------------------------------------- the server


def build_app(served: ServedEnv, max_sessions: int = DEFAULT_MAX_SESSIONS) -> Any:
    """OpenEnv's FastAPI app for ``served`` (``create_app``: ``ENABLE_WEB_INTERFACE=true`` adds
    OpenEnv's web interface at ``/web``), at most ``max_sessions`` WebSocket sessions at once."""
    return create_app(
        functools.partial(PassktEnvironment, served),
        TextAction,
        TextObservation,
        env_name=served.name,
        max_concurrent_envs=max_sessions,
        state_cls=PassktState,
    )


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (0: a free port) and listening, made before the server
    starts so that a port in use is a one-line error, not a server log.

    Raises:
        ValueError: The address cannot be used (names the host, the port and why).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as error:
        raise ValueError(
            f"--host {host}: not an address this machine can listen on ({error})"
        ) from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise ValueError(
            f"--port {port}: cannot listen on {host}:{port} ({error.strerror or error})"
        ) from None
    return sock


def serve(app: Any, sock: socket.socket) -> None:
    """Run ``app`` on the listening ``sock`` until SIGINT or SIGTERM (uvicorn; its log lines go
    through ``logging``, so ``passkt -v serve`` shows them)."""
    import uvicorn  # optional: the openenv extra (a dependency of openenv)

    config = uvicorn.Config(
        app, log_config=None, ws_max_size=MAX_MESSAGE_BYTES, timeout_graceful_shutdown=5
    )
    uvicorn.Server(config).run(sockets=[sock])
