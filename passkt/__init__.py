"""passkt: Gymnasium tool-use environments for LLM agents, a PASS@(k,T) evaluator, and trainers.

The public API, in the order a user meets it::

    import gymnasium as gym
    import passkt

    env = gym.make("BridgeQA-v0", max_tool_calls=3)        # the envs register on import
    policy = passkt.load_policy("scripted:heuristic")      # or hf:, vllm:, openai:, py:
    run = passkt.evaluate("BridgeQA-v0", policy, n=4, budgets=(0, 1, 2, 3), limit=10,
                          out_dir="runs/heuristic", progress=False)
    manifest, table = passkt.load_run("runs/heuristic")
    print(passkt.surface(table).values)                    # PASS@(k,T), k x T
    print(passkt.reliability_surface(table).values)        # pass^k(T): all k episodes succeed

The subpackages are ``passkt.envs`` (environments), ``passkt.agents`` (policies, the rollout
engine, ``passkt.agents.train``), ``passkt.eval`` (the evaluator, statistics, reports, the CLI) and
``passkt.study`` (the matched-data study pipeline and its testbed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import passkt.envs  # noqa: F401  (registers Math-v0, ComparisonQA-v0, BridgeQA-v0)
from passkt.agents.policy import Completion, Policy, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.specs import load_policy
from passkt.eval.estimator import pass_at_k, pass_hat_k, reliability_surface, surface
from passkt.eval.evaluate import evaluate
from passkt.eval.stats import bootstrap_surface, compare
from passkt.eval.store import load_run

__version__ = "0.1.0"

# The trainers import torch (about 1.2 s here, measured with `python -X importtime`), which
# evaluation with a scripted or server policy never needs, so they load on first use.
_TRAINERS = {
    "train_grpo": "passkt.agents.train.grpo",
    "train_sft": "passkt.agents.train.sft",
    "GRPOConfig": "passkt.agents.train.config",
    "SFTConfig": "passkt.agents.train.config",
}

if TYPE_CHECKING:
    from passkt.agents.train.config import GRPOConfig, SFTConfig
    from passkt.agents.train.grpo import train_grpo
    from passkt.agents.train.sft import train_sft


def __getattr__(name: str) -> Any:
    if name in _TRAINERS:
        import importlib  # optional: importlib

        return getattr(importlib.import_module(_TRAINERS[name]), name)
    raise AttributeError(f"module 'passkt' has no attribute {name!r}")


__all__ = [
    "Completion",
    "GRPOConfig",
    "Policy",
    "SFTConfig",
    "SamplingParams",
    "__version__",
    "bootstrap_surface",
    "compare",
    "evaluate",
    "load_policy",
    "load_run",
    "pass_at_k",
    "pass_hat_k",
    "reliability_surface",
    "rollout",
    "surface",
    "train_grpo",
    "train_sft",
]
