"""The envs of one rollout, run by their contract (``passkt.envs.contract``).

``EnvRunner`` makes every env of a rollout with ``gym.make`` (wrappers included: the env is
stepped exactly as ``gym.make`` returns it), resets it on a task, forks budget branches, and reads
success, tool calls and category from each step, falling back as the contract says when the env
lacks a capability:

- fork: ``fork_chain`` (the env's own ``fork`` under wrappers that are copied around it) when every
  wrapper is one it knows; otherwise a replay fork: make a fresh env with the branch's budget,
  reset it as the original was reset, replay the actions, and check that every observation but the
  last (which carries the final notice) equals the original's. The replay costs env steps, never
  policy tokens.
- budget: an env without ``max_tool_calls`` gets a ``ToolBudget`` wrapper.
- success: ``info["correct"]`` if the env reports it, else the last reward at its maximum.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from passkt.envs.contract import (
    EnvContract,
    EnvContractError,
    ReplayMismatchError,
    ToolBudget,
    announce,
    chain_forkable,
    inspect_env,
    task_seed,
)

logger = logging.getLogger(__name__)

__all__ = ["EnvRunner", "History", "chain_forkable", "check_replayed", "fork_chain"]


def fork_chain(env: gym.Env, max_tool_calls: int) -> tuple[gym.Env, Any]:
    """Fork the episode in progress with budget ``max_tool_calls``, wrappers included.

    The unwrapped env forks itself; each wrapper is copied (shallowly: its counters are copied,
    the big things it points to, like the env spec, are shared) around the fork, and observation
    wrappers transform the fork's observation as they would have in ``step``.
    """
    chain = []
    while isinstance(env, gym.Wrapper):
        chain.append(env)
        env = env.env
    clone, observation = env.fork(max_tool_calls)
    for wrapper in reversed(chain):
        copied = copy.copy(wrapper)
        copied.env = clone
        if isinstance(copied, gym.ObservationWrapper):
            observation = copied.observation(observation)
        clone = copied
    return clone, observation


def check_replayed(env_id: str, expected: Sequence[Any], replayed: Sequence[Any]) -> None:
    """Raise unless a replay showed the original observations (all but the last, which may carry
    the fork's final notice)."""
    hint = (
        "the env is not deterministic given its reset seed and the actions. Give it a "
        "fork(max_tool_calls) method, or run without prefix sharing (--no-share-prefix)."
    )
    if len(expected) != len(replayed):
        raise ReplayMismatchError(
            f"{env_id}: replaying an episode for a budget branch ended after {len(replayed) - 1} "
            f"of {len(expected) - 1} actions: {hint}"
        )
    for i, (want, got) in enumerate(zip(expected[:-1], replayed[:-1], strict=True)):
        if want != got:
            raise ReplayMismatchError(
                f"{env_id}: replaying an episode for a budget branch gave another observation at "
                f"turn {i} ({str(got)[:80]!r} instead of {str(want)[:80]!r}): {hint}"
            )


@dataclass
class History:
    """How an episode was reached: enough to replay it on a fresh env."""

    reset_seed: int
    options: dict[str, Any] | None
    actions: list[str] = field(default_factory=list)
    observations: list[Any] = field(default_factory=list)
    """The reset observation, then one per step (as the wrapped env returned them)."""

    def copy(self) -> History:
        return History(self.reset_seed, self.options, list(self.actions), list(self.observations))


class EnvRunner:
    """Makes, resets and forks the envs of one rollout; reads their steps."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any],
        contract: EnvContract | None = None,
    ) -> None:
        kwargs = dict(env_kwargs)
        split = str(kwargs.pop("split", "test"))
        self.env_id = env_id
        self.contract = contract or inspect_env(env_id, kwargs, split)
        self.kwargs = self.contract.make_kwargs(kwargs, split)
        self._native: bool | None = None

    @property
    def protocol(self) -> Any:
        return self.contract.protocol

    def make(self, budget: int) -> gym.Env:
        """A fresh env with budget ``budget`` (T)."""
        if self.contract.takes_budget:
            return gym.make(
                self.env_id, **self.kwargs, max_tool_calls=budget, disable_env_checker=True
            )
        env = gym.make(self.env_id, **self.kwargs, disable_env_checker=True)
        return ToolBudget(env, budget, self.contract.reward_floor)

    def reset_args(self, task_id: str, seed: int) -> tuple[int, dict[str, Any] | None]:
        """``reset`` arguments of a task: its id as an option, or (seed tasks) its seed."""
        if self.contract.task_ids is None:
            return task_seed(task_id), None
        return seed, {"task_id": task_id}

    def native_fork(self, env: gym.Env) -> bool:
        """Whether ``env`` (as made by this runner) forks itself; announces the replay once."""
        if self._native is None:
            self._native = self.contract.forkable and chain_forkable(env)
            if self.contract.forkable and not self._native:
                announce(
                    self.env_id,
                    "wrapper",
                    "a wrapper around the env is not one passkt can copy around a fork; budget "
                    "branches replay the actions on a fresh env instead",
                )
        return self._native

    def start(
        self, base: gym.Env, budget: int, task_id: str, seed: int
    ) -> tuple[gym.Env, Any, dict[str, Any], History]:
        """An env on ``task_id`` with budget ``budget``: reset ``base`` and fork it, or reset a
        fresh env. Returns the env, its first observation, the reset info and the history."""
        reset_seed, options = self.reset_args(task_id, seed)
        if self.native_fork(base):
            _, info = base.reset(seed=reset_seed, options=options)
            env, observation = fork_chain(base, budget)
        else:
            env = self.make(budget)
            observation, info = env.reset(seed=reset_seed, options=options)
        return env, observation, info, History(reset_seed, options, [], [observation])

    def fork(self, env: gym.Env, history: History, budget: int) -> tuple[gym.Env, Any]:
        """A copy of the episode in ``env`` with budget ``budget`` and the observation it shows."""
        if self.native_fork(env):
            return fork_chain(env, budget)
        clone = self.make(budget)
        observation, _ = clone.reset(seed=history.reset_seed, options=history.options)
        replayed = [observation]
        for action in history.actions:
            observation, _, terminated, truncated, _ = clone.step(action)
            replayed.append(observation)
            if terminated or truncated:
                break
        check_replayed(self.env_id, history.observations, replayed)
        return clone, observation

    def category(self, info: Mapping[str, Any], attribute: Any = None) -> str:
        """``info["category"]``, the env's ``category`` attribute (``attribute``), or the env id."""
        category = info.get("category") or attribute
        if category is None:
            announce(self.env_id, "category", "no info['category']: the env id names its tasks")
            return self.env_id.rpartition(":")[2]
        return str(category)

    def success(self, info: Mapping[str, Any], reward: float) -> bool:
        """``info["correct"]``, else whether the last reward reached the maximum."""
        if "correct" in info:
            return bool(info["correct"])
        announce(
            self.env_id,
            "correct",
            f"no info['correct']: an episode succeeds when its last reward reaches "
            f"{self.contract.reward_max:g} (set spec.reward_threshold, or report info['correct'])",
        )
        return float(reward) >= self.contract.reward_max

    def over_budget(self, calls: int, budget: int) -> None:
        """Raise: an episode went on after more calls than its budget allows."""
        raise EnvContractError(
            f"{self.env_id}: an episode went on after {calls} tool calls at T = {budget}: the env "
            "was made with max_tool_calls but does not end the episode at the budget (end it, "
            "or drop the max_tool_calls argument so passkt enforces T with its wrapper)"
        )

    def tool_calls(self, info: Mapping[str, Any], before: int, done: bool) -> int:
        """``info["tool_calls"]``, else one more for every turn that does not end the episode."""
        if "tool_calls" in info:
            return int(info["tool_calls"])
        announce(
            self.env_id,
            "tool_calls",
            "no info['tool_calls']: every turn that does not end the episode counts as a call",
        )
        return before if done else before + 1
