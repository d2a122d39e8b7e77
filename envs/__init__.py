"""passkt.envs: Gymnasium tool-use environments for LLM agents.

``import passkt.envs`` registers ``Math-v0``, ``ComparisonQA-v0`` and ``BridgeQA-v0``;
``gym.make("passkt.envs:BridgeQA-v0")`` imports and registers in one step.
"""

from __future__ import annotations

import gymnasium as gym

from passkt.envs.errors import (
    DatasetFormatError,
    MissingDependencyError,
    PassktError,
    UnknownSourceError,
    UnknownTaskError,
)
from passkt.envs.tasks import SOURCES, Paragraph, Task, load_tasks, register_source

ENV_SPECS: dict[str, dict] = {
    "Math-v0": dict(entry_point="passkt.envs.math_env:MathEnv"),
    "ComparisonQA-v0": dict(entry_point="passkt.envs.comparison_qa:ComparisonQAEnv"),
    "BridgeQA-v0": dict(entry_point="passkt.envs.bridge_qa:BridgeQAEnv"),
}
"""The registry as data: env id -> ``gymnasium.register`` arguments."""


def register_envs() -> None:
    """Register every passkt env with Gymnasium (idempotent). Gymnasium 1.x loads no plugin
    entry points, so registration happens on import: ``import passkt.envs``, or an id written
    ``passkt.envs:BridgeQA-v0``, which ``gym.make`` and ``passkt --env`` import first."""
    for env_id, spec in ENV_SPECS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, **spec)


register_envs()

_ENV_CLASSES = {
    "ToolUseEnv": "passkt.envs.base",
    "MathEnv": "passkt.envs.math_env",
    "ComparisonQAEnv": "passkt.envs.comparison_qa",
    "BridgeQAEnv": "passkt.envs.bridge_qa",
}


def __getattr__(name: str) -> object:
    # The env classes load on first use, so that ``import passkt.envs`` stays light.
    if name in _ENV_CLASSES:
        import importlib  # optional: importlib

        return getattr(importlib.import_module(_ENV_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ENV_SPECS",
    "SOURCES",
    "BridgeQAEnv",
    "ComparisonQAEnv",
    "DatasetFormatError",
    "MathEnv",
    "MissingDependencyError",
    "Paragraph",
    "PassktError",
    "Task",
    "ToolUseEnv",
    "UnknownSourceError",
    "UnknownTaskError",
    "load_tasks",
    "register_envs",
    "register_source",
]
