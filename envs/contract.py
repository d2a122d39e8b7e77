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
``protocol`` attribute        system prompt, stop strings, layout,      no system prompt, no stops,
                              tools (the tool-calling format)           text actions
``info["category"]``          a name for the task family                the env id
============================  ========================================  ============================
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

import passkt.envs
from passkt.envs.errors import EnvContractError, ReplayMismatchError
from passkt.envs.interface import NEUTRAL, AgentInterface
from passkt.envs.wrappers import ToolBudget

logger = logging.getLogger(__name__)

__all__ = [
    "SEED_TASKS",
    "TRAIN_SEED_OFFSET",
    "AgentInterface",
    "EnvContract",
    "EnvContractError",
    "ReplayMismatchError",
    "TaskRef",
    "ToolBudget",
    "announce",
    "chain_forkable",
    "check_replay",
    "constructor_arguments",
    "first_task",
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
        except (Exception, SystemExit) as e:  # a user module may raise anything, even exit
            raise EnvContractError(
                f"{flag} {name}: cannot import module {name!r} ({type(e).__name__}: {e}); "
                "make sure it is on PYTHONPATH (the CLI also looks in the current directory)"
            ) from e


def resolve_env_id(env_id: str) -> None:
    """Import the module of a ``module:Env-v0`` id and check the id is registered."""

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


def constructor_arguments(env_id: str) -> tuple[frozenset[str], bool]:
    """The argument names the env's constructor (its entry point) names, and whether it also
    takes ``**kwargs``. A constructor that cannot be inspected counts as ``**kwargs`` only."""
    spec = gym.spec(env_id.rpartition(":")[2])  # gym.spec takes no "module:" prefix
    creator = spec.entry_point
    if isinstance(creator, str):
        from gymnasium.envs.registration import load_env_creator  # optional: gymnasium

        creator = load_env_creator(creator)
    try:
        parameters = inspect.signature(creator).parameters
    except (TypeError, ValueError):
        return frozenset(), True
    named = frozenset(
        name
        for name, p in parameters.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )
    var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return named, var_keyword


_PASSIVE = (
    gym.RewardWrapper,
    gym.ActionWrapper,
    gym.wrappers.OrderEnforcing,
    gym.wrappers.PassiveEnvChecker,
    gym.wrappers.TimeLimit,
    gym.wrappers.RecordEpisodeStatistics,
)
"""Wrappers that leave observations alone, so a fork below them needs no replay."""


def chain_forkable(env: gym.Env) -> bool:
    """Whether ``passkt.agents.env_runtime.fork_chain`` can fork ``env``: a ``fork`` at the
    bottom and only wrappers that leave observations alone or transform them with
    ``observation()``."""
    while isinstance(env, gym.Wrapper):
        if not isinstance(env, (*_PASSIVE, gym.ObservationWrapper)):
            return False
        env = env.env
    return callable(getattr(env, "fork", None))


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
    protocol: AgentInterface
    takes_budget: bool
    takes_split: bool
    forkable: bool
    reveal_budget: bool
    has_tools: bool
    reward_max: float
    fallbacks: tuple[str, ...] = field(default=())
    replays: bool = True
    """Budget branches re-make the env and replay the actions (no ``fork`` that passkt can copy
    through every wrapper); ``check_replay`` tests such an env before a run."""
    reward_floor: float = 0.0
    """The most a budget cut-off returns (``ToolBudget``): 0, or ``reward_range[0]`` if lower."""

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


PROBE_ACTION = ""
"""The action of the probe step before a run: an empty turn (an invalid action to most envs)."""


def inspect_env(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, split: str = "test"
) -> EnvContract:
    """Make the env and record which capabilities it has (fallbacks are announced).

    The one inspection every command runs before it writes anything (``passkt eval``, ``passkt
    train grpo|sft``, ``train_grpo_trl``): it decides which constructor arguments the env takes
    and checks, on the first task, that it speaks text (a reset and one probe step). Code that
    makes an env itself should make it with ``contract.make_kwargs(env_kwargs, split)`` (plus
    ``max_tool_calls`` only when ``contract.takes_budget``).

    A constructor argument counts as taken when the constructor names it. A constructor that only
    has ``**kwargs`` must prove it: ``max_tool_calls`` when the env, made with T = 0 and T = 1,
    ends the probe episode at T = 0 only and reports ``info["tool_calls"]``; ``split`` when the
    ``test`` and ``train`` envs differ (their ``tasks``, or their first observation). Otherwise
    passkt falls back (the budget wrapper, seed splits) and says so.

    Raises:
        EnvContractError: for an unknown id, a constructor that rejects the kwargs, an env that
            does not speak text, or a capability given in a form passkt cannot use (the message
            names the env, the capability and what the env returned).
    """
    resolve_env_id(env_id)
    kwargs = dict(env_kwargs or {})
    named, var_keyword = constructor_arguments(env_id)
    takes_split = "split" in named or (
        var_keyword and "split" not in kwargs and _proves_split(env_id, kwargs)
    )
    if "split" in kwargs and not takes_split:
        raise EnvContractError(f"{env_id} takes no split= argument; remove it from the env kwargs")
    if takes_split:
        kwargs["split"] = split
    named_budget = "max_tool_calls" in named
    env = _make(env_id, {**kwargs, "max_tool_calls": 0} if named_budget else kwargs)
    try:
        return _inspect(env, env_id, kwargs, named_budget, var_keyword, takes_split, split)
    finally:
        env.close()


def _make(env_id: str, kwargs: Mapping[str, Any]) -> gym.Env:
    try:
        return gym.make(env_id, **kwargs, disable_env_checker=True)
    except TypeError as e:
        raise EnvContractError(f"gym.make({env_id!r}, **{dict(kwargs)}) failed: {e}") from e


def _probe(env_id: str, kwargs: Mapping[str, Any], options: Any) -> tuple[Any, ...] | str:
    """Reset a fresh env (seed 0, ``options``) and step it once with the probe action: the
    reset observation and the step's result, or, when the env refuses (a probe of a capability
    the env may lack, so any error means "not proven"), what it raised."""
    try:
        env = gym.make(env_id, **kwargs, disable_env_checker=True)
    except Exception as error:  # the env, or the library it forwards **kwargs to, refuses them
        return f"the constructor raised {type(error).__name__}: {str(error)[:160]}"
    try:
        observation, _ = env.reset(seed=0, options=options)
        return (observation, *env.step(PROBE_ACTION))
    except Exception as error:
        return f"its reset or probe step raised {type(error).__name__}: {str(error)[:160]}"
    finally:
        env.close()


def _proves_budget(env_id: str, kwargs: Mapping[str, Any], options: Any) -> tuple[bool, str]:
    """Whether a ``**kwargs`` env enforces ``max_tool_calls``: made with T = 0 it ends the probe
    episode at the first call, made with T = 1 it does not and reports one call. The second
    item says why not (for the fallback's announcement)."""
    probes = {}
    for budget in (0, 1):
        probe = _probe(env_id, {**kwargs, "max_tool_calls": budget}, options)
        if isinstance(probe, str):
            return False, f"made with max_tool_calls={budget}, {probe}"
        probes[budget] = probe
    *_, terminated0, truncated0, info0 = probes[0]
    *_, terminated1, truncated1, info1 = probes[1]
    if not isinstance(info0, Mapping) or not isinstance(info1, Mapping):
        return False, "its info is not a dict"
    if not (terminated0 or truncated0) or "tool_calls" not in info0:
        return False, (
            "an env made with max_tool_calls=0 did not end the probe episode at the first call "
            "while reporting info['tool_calls']"
        )
    if terminated1 or truncated1 or info1.get("tool_calls") != 1:
        return False, (
            "an env made with max_tool_calls=1 ended the probe episode at the first call, or "
            "did not report info['tool_calls'] == 1"
        )
    return True, ""


def _proves_split(env_id: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether a ``**kwargs`` env honours ``split``: its test and train envs differ."""
    seen = []
    for split in ("test", "train"):
        try:
            env = gym.make(env_id, **kwargs, split=split, disable_env_checker=True)
        except Exception:  # the env, or the library it forwards **kwargs to, refuses split=
            return False
        try:
            tasks = wrapper_attr(env, "tasks")
            seen.append(list(tasks) if tasks is not None else env.reset(seed=0)[0])
        except Exception:
            return False
        finally:
            env.close()
    return seen[0] != seen[1]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_space(env: gym.Env, env_id: str, name: str) -> None:
    try:
        space = getattr(env, name)
    except AttributeError:
        return  # no space declared: the probe below checks what the env really returns
    if space is None or isinstance(space, gym.spaces.Text):
        return
    try:
        text = isinstance(space.sample(), str)  # passkt's UnicodeText, other text spaces
    except Exception:
        text = False
    if not text:
        raise EnvContractError(
            f"{env_id}: {name} is {_short(space)}; passkt envs speak text: declare "
            f"gymnasium.spaces.Text (or wrap the env so its {name.split('_')[0]}s are str)"
        )


def _check_observation(env_id: str, where: str, observation: Any) -> None:
    if not isinstance(observation, str):
        raise EnvContractError(
            f"{env_id}: {where} returned a {type(observation).__name__} observation "
            f"({_short(observation)}); the env contract needs text observations (str): render "
            "it as text, e.g. with a gymnasium.ObservationWrapper"
        )


def _check_speaks_text(env: gym.Env, env_id: str, seed: int, options: Any) -> None:
    """On the first task: text spaces (if declared), a text reset observation and info dict, and
    one probe step that returns text, a number and two flags."""
    for name in ("observation_space", "action_space"):
        _check_space(env, env_id, name)
    where = f"reset(seed={seed}, options={options})"
    try:
        result = env.reset(seed=seed, options=options)
    except Exception as e:
        raise EnvContractError(f"{env_id}: {where} raised {type(e).__name__}: {e}") from e
    if not isinstance(result, tuple) or len(result) != 2:
        raise EnvContractError(
            f"{env_id}: {where} returned {_short(result)}; it must return (observation, info)"
        )
    _check_observation(env_id, where, result[0])
    where = f"step({PROBE_ACTION!r}) after {where}"
    try:
        result = env.step(PROBE_ACTION)
    except Exception as e:
        raise EnvContractError(
            f"{env_id}: {where} raised {type(e).__name__}: {e}; an env must answer any text "
            "action (an invalid one with an observation that says what it expected)"
        ) from e
    if not isinstance(result, tuple) or len(result) != 5:
        raise EnvContractError(
            f"{env_id}: {where} returned {_short(result)}; it must return (observation, reward, "
            "terminated, truncated, info)"
        )
    observation, reward, terminated, truncated, info = result
    _check_observation(env_id, where, observation)
    if not isinstance(reward, numbers.Real):
        raise EnvContractError(
            f"{env_id}: {where} returned the reward {_short(reward)}; rewards must be numbers"
        )
    if not isinstance(info, Mapping):
        raise EnvContractError(
            f"{env_id}: {where} returned the info {_short(info)}; info must be a dict"
        )
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, (bool, np.bool_)):
            raise EnvContractError(
                f"{env_id}: {where} returned {name} = {_short(flag)}; it must be a bool"
            )


def first_task(contract: EnvContract) -> tuple[int, dict[str, Any] | None]:
    """``reset`` arguments (seed, options) of the first task, as the probes use them."""
    if contract.task_ids is None:
        return 0, None
    return 0, {"task_id": contract.task_ids[0]}


def check_replay(
    contract: EnvContract, env_kwargs: Mapping[str, Any] | None = None, split: str = "test"
) -> None:
    """Before a run whose budget branches are replayed (``contract.replays``): two fresh envs,
    reset on the first task and stepped with the probe action, must show the same observations.

    Raises:
        ReplayMismatchError: naming the env, what each env showed, and the two ways out.
    """
    kwargs = contract.make_kwargs(
        {k: v for k, v in (env_kwargs or {}).items() if k != "split"}, split
    )
    if contract.takes_budget:
        kwargs["max_tool_calls"] = 1  # the probe step is a call, not the end of the episode
    seed, options = first_task(contract)
    shown = []
    for _ in range(2):
        env = _make(contract.env_id, kwargs)
        try:
            observation, _ = env.reset(seed=seed, options=options)
            shown.append((observation, env.step(PROBE_ACTION)[0]))
        finally:
            env.close()
    for turn, (first, second) in enumerate(zip(*shown, strict=True)):
        if first != second:
            raise ReplayMismatchError(
                f"{contract.env_id}: two fresh envs reset with seed {seed} and options {options} "
                f"showed different observations at turn {turn} ({_short(first)} vs "
                f"{_short(second)}): budget branches replay the actions, which needs an env "
                "deterministic given its reset seed and the actions. Give it "
                "fork(max_tool_calls), or run without prefix sharing (--no-share-prefix)."
            )


def _inspect(
    env: gym.Env,
    env_id: str,
    kwargs: Mapping[str, Any],
    named_budget: bool,
    var_keyword: bool,
    takes_split: bool,
    split: str,
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
    options = None if task_ids is None else {"task_id": task_ids[0]}
    raw_protocol = wrapper_attr(env, "protocol")
    if raw_protocol is None:
        protocol = NEUTRAL
        notes.append(
            "no `protocol`: no system prompt and no stop strings (generation runs to the end of "
            "turn); give the env a `protocol` dict to set them"
        )
    else:
        protocol = AgentInterface.from_value(raw_protocol, env_id)
    _check_speaks_text(env, env_id, 0, options)
    takes_budget, why_not = named_budget, ""
    if not named_budget and var_keyword:
        takes_budget, why_not = _proves_budget(env_id, kwargs, options)
    if not takes_budget:
        how = (
            f"the constructor takes **kwargs, but {why_not}, so the argument is not passed"
            if var_keyword
            else "no max_tool_calls= argument"
        )
        notes.append(
            f"{how}: T is enforced by a wrapper (every turn that does not end the episode is a "
            "tool call; the turn after the T-th must end it)"
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
        replays=not (forkable and chain_forkable(env)),
        reward_floor=_reward_floor(env),
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


def _reward_floor(env: gym.Env) -> float:
    """The most a budget cut-off may return: the env's ``reward_range`` lower end if finite
    and below 0, else 0 (see ``ToolBudget``)."""
    reward_range = getattr(env.unwrapped, "reward_range", None)
    if reward_range is not None and math.isfinite(float(reward_range[0])):
        return min(float(reward_range[0]), 0.0)
    return 0.0
