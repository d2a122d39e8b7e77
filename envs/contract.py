"""The env contract: what passkt needs from an env, and what it does when a piece is missing.

The minimum is a registered ``gymnasium.Env`` whose actions and observations are text: ``reset``
returns the first observation (the question), ``step(text)`` returns the next observation, the
reward and whether the episode ended. Everything else is an optional capability; without one the
evaluator and the trainers fall back to something correct and say so once (a logged warning).
``docs/env-contract.md`` is the page for env authors; this module is its code:

============================  ========================================  ============================
capability                    what it buys                              without it
============================  ========================================  ============================
``tasks`` attribute plus      select tasks by id, train/test splits     tasks are reset seeds
``reset(options=task_id)``    that match across runs                    (test 0.., train 10**6..)
``split=`` constructor kwarg  matched train / test task lists           the seeds above
``max_tool_calls=`` kwarg     the env shows its own final notice        a wrapper truncates the
                                                                        turn after the T-th call
``info["tool_calls"]``        the env says what counts as a call        every turn that does not
                                                                        end the episode counts
``fork(max_tool_calls)``      prefix sharing at the cost of a copy      re-make the env, replay the
                                                                        actions, check every obs.
``info["correct"]``           success when the reward is shaped         last reward at its maximum
``protocol`` attribute        system prompt, stop strings, layout       no system prompt, no stops
``info["category"]``          a name for the task family                the env id
============================  ========================================  ============================
"""

from __future__ import annotations

import importlib
import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

import gymnasium as gym

from passkt.envs.errors import PassktError

logger = logging.getLogger(__name__)

__all__ = [
    "SEED_TASKS",
    "TRAIN_SEED_OFFSET",
    "AgentProtocol",
    "EnvContract",
    "EnvContractError",
    "ReplayMismatchError",
    "TaskRef",
    "ToolBudget",
    "announce",
    "import_modules",
    "inspect_env",
    "resolve_env_id",
    "seed_task_ids",
    "task_records",
]

SEED_TASKS = 100
"""Tasks of an env without a task list when no ``limit`` is given (the study's 100 problems)."""
TRAIN_SEED_OFFSET = 10**6
"""Seed-task envs: test tasks are seeds 0, 1, ...; train tasks start here, so they never meet."""

Layout = Literal["chat", "stream"]


class EnvContractError(PassktError, ValueError):
    """An env lacks something passkt needs; the message names it and how to add it."""


class ReplayMismatchError(EnvContractError):
    """Replaying an episode's actions on a fresh env gave other observations."""


@dataclass(frozen=True)
class AgentProtocol:
    """How an agent talks to an env: owned by the env (``env.protocol``), read by the rollout.

    An env may give this dataclass or a plain dict with the same keys (so it needs no passkt
    import). ``layout="chat"``: a system prompt (if any), the first observation as a user turn,
    then one user turn per observation. ``layout="stream"``: one user turn, then a single assistant
    turn that the model continues, with each observation appended to it as
    ``observation_template`` renders it (Search-R1's layout).
    """

    name: str = "neutral"
    """A label for manifests and logs."""
    system_prompt: str | None = None
    """The system message; ``None`` sends none (the chat template may add its default)."""
    stop: tuple[str, ...] = ()
    """Generation stops after any of these strings (kept in the action)."""
    layout: Layout = "chat"
    """``chat`` (one user turn per observation) or ``stream`` (one assistant stream)."""
    prompt_template: str = "{observation}"
    """The first user turn, from the reset observation."""
    observation_template: str = "{observation}"
    """``stream`` only: the text appended to the assistant stream for a later observation."""

    def __post_init__(self) -> None:
        if self.layout not in ("chat", "stream"):
            raise EnvContractError(
                f"protocol layout must be 'chat' or 'stream', got {self.layout!r}"
            )
        stop = self.stop
        if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
            raise EnvContractError(
                f"protocol stop must be a list of non-empty strings, got {stop!r}"
            )
        object.__setattr__(self, "stop", tuple(stop))
        for name in ("prompt_template", "observation_template"):
            template = getattr(self, name)
            if not isinstance(template, str) or template.count("{observation}") != 1:
                raise EnvContractError(
                    f"protocol {name} must contain '{{observation}}' exactly once, got {template!r}"
                )
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise EnvContractError("protocol system_prompt must be a string or None")

    @classmethod
    def from_value(cls, value: Any, where: str) -> AgentProtocol:
        """An ``AgentProtocol`` from itself or a dict of its fields (unknown keys are errors)."""
        if isinstance(value, AgentProtocol):
            return value
        if not isinstance(value, Mapping):
            raise EnvContractError(
                f"{where}: protocol must be a passkt AgentProtocol or a dict with the keys "
                f"{[f.name for f in fields(cls)]}, got {type(value).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise EnvContractError(
                f"{where}: protocol has unknown keys {unknown}; known: {sorted(known)}"
            )
        return cls(**value)

    def first_messages(self, observation: str) -> list[dict[str, str]]:
        """The conversation at the first turn."""
        messages = (
            []
            if self.system_prompt is None
            else [{"role": "system", "content": self.system_prompt}]
        )
        # str.replace, not str.format: observations may hold braces.
        messages.append(
            {"role": "user", "content": self.prompt_template.replace("{observation}", observation)}
        )
        return messages

    def stream_text(self, observation: str) -> str:
        """``stream`` layout: the text an observation adds to the assistant stream."""
        return self.observation_template.replace("{observation}", observation)


NEUTRAL = AgentProtocol()
"""The fallback when an env has no ``protocol``: no system prompt, no stop strings, chat layout."""


# ---------------------------------------------------------------------- announcing fallbacks

_ANNOUNCED: set[tuple[str, str]] = set()


def announce(env_id: str, capability: str, message: str) -> None:
    """Log a fallback once per process, env and capability."""
    key = (env_id, capability)
    if key not in _ANNOUNCED:
        _ANNOUNCED.add(key)
        logger.warning("%s: %s", env_id, message)


# ---------------------------------------------------------------------- env ids and plug-ins


def import_modules(names: Sequence[str], flag: str = "--import") -> None:
    """Import user modules that register envs (or define agents); the error names the module."""
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise EnvContractError(
                f"{flag} {name}: cannot import module {name!r} ({e}); make sure it is on "
                "PYTHONPATH (the CLI also looks in the current directory)"
            ) from e


def resolve_env_id(env_id: str) -> None:
    """Import the module of a ``module:Env-v0`` id and check the id is registered."""
    import difflib

    import passkt.envs

    module, sep, name = env_id.rpartition(":")
    if sep:
        import_modules([module], flag=f"--env {env_id}:")
    if name in gym.registry:
        return
    close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise EnvContractError(
        f"Unknown env id {name!r}.{hint} passkt envs: {', '.join(passkt.envs.ENV_SPECS)}; "
        "for your own env pass --env MODULE:ID or --import MODULE (the module that calls "
        "gymnasium.register)."
    )


def _takes(env_id: str, argument: str) -> bool:
    """Whether the env's constructor accepts ``argument`` (or ``**kwargs``)."""
    spec = gym.spec(env_id.rpartition(":")[2])  # gym.spec takes no "module:" prefix
    creator = spec.entry_point
    if isinstance(creator, str):
        from gymnasium.envs.registration import load_env_creator

        creator = load_env_creator(creator)
    try:
        parameters = inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return True
    return argument in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def wrapper_attr(env: gym.Env, name: str) -> Any:
    """An attribute of the env or of any wrapper around it (``None`` when none has it)."""
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


# ---------------------------------------------------------------------- what an env offers


@dataclass(frozen=True)
class EnvContract:
    """What passkt found out about an env before running it (see the module table)."""

    env_id: str
    tasks: tuple[Any, ...]
    """The env's task records (``passkt.envs.Task`` for passkt envs); empty for seed tasks."""
    task_ids: tuple[str, ...] | None
    """The ids of ``tasks``; ``None`` when tasks are seeds (see :func:`seed_task_ids`)."""
    protocol: AgentProtocol
    takes_budget: bool
    takes_split: bool
    forkable: bool
    reveal_budget: bool
    has_tools: bool
    reward_max: float
    fallbacks: tuple[str, ...] = field(default=())

    def make_kwargs(self, env_kwargs: Mapping[str, Any], split: str) -> dict[str, Any]:
        """``gym.make`` kwargs: ``split`` only for an env that takes it."""
        kwargs = dict(env_kwargs)
        if self.takes_split:
            kwargs["split"] = split
        return kwargs


@dataclass(frozen=True)
class TaskRef:
    """A task known only by its id: a seed task, or an entry of a task list of plain ids."""

    task_id: str


def task_records(contract: EnvContract, split: str, count: int | None = None) -> list[Any]:
    """The env's tasks as records with a ``task_id``: its own, ``TaskRef`` for plain ids, or the
    first ``count`` (default ``SEED_TASKS``) seed tasks of ``split``."""
    if contract.task_ids is None:
        return [TaskRef(i) for i in seed_task_ids(split, SEED_TASKS if count is None else count)]
    return [t if not isinstance(t, str) else TaskRef(t) for t in contract.tasks]


def seed_task_ids(split: str, count: int) -> list[str]:
    """Task ids of an env without a task list: ``seed-N``, disjoint between the splits."""
    offset = TRAIN_SEED_OFFSET if split == "train" else 0
    return [f"seed-{offset + i}" for i in range(count)]


def task_seed(task_id: str) -> int:
    """The reset seed of a seed task id (``seed-17`` -> 17)."""
    prefix, _, number = task_id.partition("-")
    if prefix != "seed" or not number.isdigit():
        raise EnvContractError(
            f"task id {task_id!r}: this env has no task list, so its tasks are reset seeds named "
            "seed-N (e.g. seed-0); give the env a `tasks` list to use your own ids"
        )
    return int(number)


def _task_ids(env_id: str, tasks: Any) -> tuple[Any, ...]:
    if isinstance(tasks, str) or not isinstance(tasks, Sequence):
        raise EnvContractError(
            f"{env_id}: `tasks` must be a list (of ids, or of records with a task_id), "
            f"got {type(tasks).__name__}"
        )
    ids = []
    for i, task in enumerate(tasks):
        task_id = task if isinstance(task, str) else getattr(task, "task_id", None)
        if not isinstance(task_id, str):
            raise EnvContractError(
                f"{env_id}: tasks[{i}] is a {type(task).__name__} without a str `task_id`; a "
                "task list holds ids (str) or records with a task_id attribute"
            )
        ids.append(task_id)
    if len(set(ids)) != len(ids):
        raise EnvContractError(f"{env_id}: `tasks` repeats a task id")
    return tuple(ids)


def inspect_env(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, split: str = "test"
) -> EnvContract:
    """Make the env once and record which capabilities it has (fallbacks are announced).

    Raises:
        EnvContractError: for an unknown id, a constructor that rejects the kwargs, or a
            capability given in a form passkt cannot use (the message says how to fix it).
    """
    resolve_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    takes_budget = _takes(env_id, "max_tool_calls")
    takes_split = _takes(env_id, "split")
    if "split" in kwargs and not takes_split:
        raise EnvContractError(f"{env_id} takes no split= argument; remove it from the env kwargs")
    if takes_split:
        kwargs["split"] = split
    if takes_budget:
        kwargs["max_tool_calls"] = 0  # T = 0 is valid for every env
    try:
        env = gym.make(env_id, **kwargs, disable_env_checker=True)
    except TypeError as e:
        raise EnvContractError(f"gym.make({env_id!r}, **{kwargs}) failed: {e}") from e
    try:
        return _inspect(env, env_id, takes_budget, takes_split, split)
    finally:
        env.close()


def _inspect(
    env: gym.Env, env_id: str, takes_budget: bool, takes_split: bool, split: str
) -> EnvContract:
    notes: list[str] = []
    raw_tasks = wrapper_attr(env, "tasks")
    if raw_tasks is None:
        tasks: tuple[Any, ...] = ()
        task_ids = None
        notes.append(
            "no `tasks` list: tasks are reset seeds (test seed-0, seed-1, ...; train from "
            f"seed-{TRAIN_SEED_OFFSET}); add `tasks` and reset(options={{'task_id': ...}}) to "
            "name them"
        )
    else:
        tasks = tuple(raw_tasks)
        task_ids = _task_ids(env_id, tasks)
        if not task_ids:
            raise EnvContractError(f"{env_id}: the `tasks` list is empty (split {split!r})")
        if not takes_split:
            notes.append("no split= argument: train and test use the same task list")
    raw_protocol = wrapper_attr(env, "protocol")
    if raw_protocol is None:
        protocol = NEUTRAL
        notes.append(
            "no `protocol`: no system prompt and no stop strings (generation runs to the end of "
            "turn); give the env a `protocol` dict to set them"
        )
    else:
        protocol = AgentProtocol.from_value(raw_protocol, env_id)
    if not takes_budget:
        notes.append(
            "no max_tool_calls= argument: T is enforced by a wrapper (every turn that does not end "
            "the episode is a tool call; the turn after the T-th must end it)"
        )
    forkable = takes_budget and callable(getattr(env.unwrapped, "fork", None))
    if not forkable:
        notes.append(
            "no fork(max_tool_calls): budget branches re-make the env and replay the actions "
            "(each replayed observation is checked against the original)"
        )
    reward_max = _reward_max(env)
    for note in notes:
        announce(env_id, note.split(":")[0], note)
    return EnvContract(
        env_id=env_id,
        tasks=tasks,
        task_ids=task_ids,
        protocol=protocol,
        takes_budget=takes_budget,
        takes_split=takes_split,
        forkable=forkable,
        reveal_budget=bool(getattr(env.unwrapped, "reveal_budget", False)),
        has_tools=bool(getattr(env.unwrapped, "has_tools", True)),
        reward_max=reward_max,
        fallbacks=tuple(notes),
    )


def _reward_max(env: gym.Env) -> float:
    """The reward of a success when ``info`` has no ``correct``: the spec's reward threshold, an
    env's own ``reward_range`` upper end, or 1.0."""
    threshold = env.spec.reward_threshold if env.spec is not None else None
    if threshold is not None:
        return float(threshold)
    reward_range = getattr(env.unwrapped, "reward_range", None)
    if reward_range is not None and math.isfinite(float(reward_range[1])):
        return float(reward_range[1])
    return 1.0


# ---------------------------------------------------------------------- the budget, generically


class ToolBudget(gym.Wrapper):
    """T for an env that does not take ``max_tool_calls``: every turn that does not end the
    episode is a tool call (unless the env reports ``info["tool_calls"]``); the turn after the
    T-th call must end the episode, else it is truncated with reward 0."""

    def __init__(self, env: gym.Env, max_tool_calls: int) -> None:
        super().__init__(env)
        self.max_tool_calls = max_tool_calls
        self._calls = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._calls = 0
        observation, info = self.env.reset(**kwargs)
        return observation, {"tool_calls": 0, **info}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        over = self._calls >= self.max_tool_calls
        observation, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            self._calls = int(info.get("tool_calls", self._calls + 1))
            if over:
                return observation, 0.0, False, True, {**info, "tool_calls": self._calls}
        return observation, reward, terminated, truncated, {"tool_calls": self._calls, **info}
