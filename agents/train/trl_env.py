"""Any passkt env in TRL's environment mode: ``GRPOTrainer(environment_factory=...)``.

TRL 1.16's ``GRPOTrainer`` takes a factory of environment objects (read in
``trl/trainer/grpo_trainer.py``): every public method is a tool, whose type hints and Google-style
docstring become the JSON schema the chat template shows; ``reset(**row)`` starts an episode and
returns the text appended to the prompt's last user message; ``get_reward()`` scores the finished
rollout from the environment's own state. TRL runs the tool loop itself: it parses the model's
calls with the chat template's response parser, calls the methods and appends each result as a
``tool`` message, until the model stops calling or ``max_tool_calling_iterations``.

    from trl import GRPOConfig, GRPOTrainer
    from passkt.agents.train.trl_env import environment_factory

    trainer = GRPOTrainer(
        model, args=GRPOConfig(max_steps=100, ...),
        environment_factory=environment_factory("BridgeQA-v0", max_tool_calls=5, split="train"),
    )

The factory works for any registered env through the env contract (``passkt.envs.contract``):

- an env that publishes tools (``env.protocol.tools``) gets one method per tool, with the schema's
  parameters; a call is written as the tool format's action text (``passkt.envs.tool_calls``), so
  the env parses, counts and answers it exactly as in ``passkt eval``. passkt's own envs are made
  with ``protocol="tools"`` unless ``env_kwargs`` names another protocol;
- an env with text actions gets one tool, ``act(action)``, whose argument is the turn's text.

The budget T is the env's own (``max_tool_calls``, or passkt's wrapper for an env without it):
after the T-th call the observation carries the final notice and the next call must answer; a
call after the episode ended does not reach the env. ``get_reward`` is the episode's return (the
sum of the env's rewards; 0 for an episode the model left unanswered).
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import passkt.envs
from passkt.agents.env_runtime import EnvRunner
from passkt.envs.tool_calls import render_tool_call

__all__ = ["EPISODE_OVER", "TRLEnvironment", "environment_factory"]

EPISODE_OVER = "Episode over: call no more tools."
"""The result of a call after the episode ended (the env is not stepped again)."""

_JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


class TRLEnvironment:
    """One rollout's env, as TRL's environment mode drives it; subclasses add the tool methods.

    Attributes:
        observations: The observations of the current episode (reset first).
        reward: The episode's return so far.
        correct: Whether the episode succeeded (the env's ``info["correct"]`` or its maximum
            reward); False until it ends.
        done: Whether the episode ended (answered or cut off at the budget).
    """

    runner: EnvRunner
    budget: int
    seeds: Iterator[int]

    def __init__(self) -> None:
        self.env = self.runner.make(self.budget)
        self.observations: list[str] = []
        self.reward, self.correct, self.done = 0.0, False, True

    def reset(self, **row: Any) -> str:
        """Start an episode: on ``row["task_id"]`` when the dataset row names a task, else on a
        task the env draws with the next seed. Returns the first observation (the question)."""
        task_id = row.get("task_id")
        seed = next(self.seeds)
        if isinstance(task_id, str):
            reset_seed, options = self.runner.reset_args(task_id, seed)
        else:
            reset_seed, options = seed, None
        observation, _ = self.env.reset(seed=reset_seed, options=options)
        self.observations = [str(observation)]
        self.reward, self.correct, self.done = 0.0, False, False
        return str(observation)

    def get_reward(self) -> float:
        """The episode's return, from the env's own scoring."""
        return float(self.reward)

    def _step(self, action: str) -> str:
        """Step the env with one action text; the observation is the tool's result."""
        if self.done:
            return EPISODE_OVER
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.reward += float(reward)
        self.observations.append(str(observation))
        if terminated or truncated:
            self.done = True
            self.correct = self.runner.success(info, float(reward))
        return str(observation)


def environment_factory(
    env_id: str,
    *,
    max_tool_calls: int = 5,
    split: str = "train",
    env_kwargs: Mapping[str, Any] | None = None,
    seed: int = 0,
) -> Callable[[], TRLEnvironment]:
    """A factory for ``GRPOTrainer(environment_factory=...)`` over the env ``env_id``.

    Args:
        env_id: A registered env id (``"BridgeQA-v0"``, ``"mymodule:MyEnv-v0"``).
        max_tool_calls: The budget T of every episode.
        split: The task split the episodes draw from (an env without splits ignores it).
        env_kwargs: Further ``gym.make`` kwargs (not ``max_tool_calls``).
        seed: The first reset seed; every reset of every instance takes the next one, so the
            rollouts of one run see a reproducible stream of tasks.

    Returns:
        A callable that makes one environment per call (TRL pools and resets them).

    Raises:
        ValueError: ``max_tool_calls`` below 0 or given in ``env_kwargs``.
        passkt.envs.contract.EnvContractError: The env cannot be used (unknown id, no text, ...).
    """
    kwargs = dict(env_kwargs or {})
    if "max_tool_calls" in kwargs:
        raise ValueError("give the budget as max_tool_calls=, not in env_kwargs")
    if (
        isinstance(max_tool_calls, bool)
        or not isinstance(max_tool_calls, int)
        or max_tool_calls < 0
    ):
        raise ValueError(f"max_tool_calls must be an int >= 0, got {max_tool_calls!r}")
    if env_id.rpartition(":")[2] in passkt.envs.ENV_SPECS:
        kwargs.setdefault("protocol", "tools")
    runner = EnvRunner(env_id, {**kwargs, "split": split})
    tools = runner.protocol.tools
    methods = {_schema_name(t): _tool_method(t) for t in tools} if tools else {"act": _act_method()}
    attributes = {
        "runner": runner,
        "budget": max_tool_calls,
        "seeds": itertools.count(seed),
        "__doc__": f"{env_id} in TRL's environment mode (T = {max_tool_calls}, split {split}).",
        **methods,
    }
    name = "".join(c for c in env_id.rpartition(":")[2] if c.isalnum()) + "Environment"
    return type(name, (TRLEnvironment,), attributes)


def _schema_name(tool: Mapping[str, Any]) -> str:
    return str(tool["function"]["name"])


def _tool_method(tool: Mapping[str, Any]) -> Callable[..., str]:
    """A method that calls ``tool`` in the env: its signature, type hints and docstring are the
    tool's schema, which is what TRL (through transformers' ``get_json_schema``) reads back."""
    function = tool["function"]
    name = _schema_name(tool)
    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())

    def method(self: TRLEnvironment, **arguments: Any) -> str:
        return self._step(render_tool_call(name, arguments))

    hints = {key: _JSON_TYPES.get(spec.get("type"), str) for key, spec in properties.items()}
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for key in sorted(properties, key=lambda k: k not in required):  # required ones first
        default = inspect.Parameter.empty if key in required else None
        signature.append(
            inspect.Parameter(
                key, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=hints[key]
            )
        )
    method.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**hints, "return": str}
    method.__name__ = method.__qualname__ = name
    args = "\n".join(
        f"    {key}: {properties[key].get('description') or key}" for key in properties
    )
    description = function.get("description") or f"Call the tool {name}."
    method.__doc__ = f"{description}\n\nArgs:\n{args}\n\nReturns:\n    The env's reply."
    if not properties:
        method.__doc__ = f"{description}\n\nReturns:\n    The env's reply."
    return method


def _act_method() -> Callable[..., str]:
    def act(self: TRLEnvironment, action: str) -> str:
        """Take one turn in the env: the action, written as the env's prompt asks.

        Args:
            action: The turn's text (the env parses it as it parses any turn).

        Returns:
            The env's reply.
        """
        return self._step(action)

    return act
