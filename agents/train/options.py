"""Which options each trainer backend honours: an option it would ignore is an error.

passkt's own trainer and TRL's trainers read most ``TrainConfig`` fields alike; a few exist on
one side only (passkt's token-capped micro-batches and output-head modes, TRL's vLLM server).
Set away from its default on a backend that cannot honour it, such an option would be a silent
no-op; ``refused_options`` names it instead, and the plan check and both trainers refuse it.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from passkt.agents.train.config import GRPOConfig, SFTConfig, TrainConfig
from passkt.agents.train.rules import Check, PlanError

Backend = Literal["passkt", "trl"]


TRL_REFUSES: dict[str, str] = {
    "micro_batch_tokens": "TRL's micro-batches are micro_batch_size rows whatever their length",
    "loss_logits": "TRL runs its own fused output head",
    "logits_chunk_tokens": "TRL runs its own fused output head, in its own tiles",
    "eval_every": "the TRL route does not evaluate during training; run passkt eval on OUT/final",
    "eval_split": "the TRL route does not evaluate during training; run passkt eval on OUT/final",
    "eval_limit": "the TRL route does not evaluate during training; run passkt eval on OUT/final",
}
"""passkt fields whose non-default values TRL's trainers cannot honour, and why."""

PASSKT_REFUSES: dict[str, str] = {
    "vllm_server_url": "passkt's own trainer samples with a colocated engine only",
    "vllm_tensor_parallel_size": "passkt's own trainer runs one engine per process, unsharded",
}
"""Fields only the TRL backend honours."""


def refused_options(config: TrainConfig, backend: Backend) -> list[tuple[str, str]]:
    """``(field, why)`` of every option set away from its default that ``backend``, or the
    chosen rollout engine, would not honour: an error, never a silent no-op."""
    defaults = type(config)(policy=config.policy)
    changed = {
        f.name
        for f in dataclasses.fields(config)
        if getattr(config, f.name) != getattr(defaults, f.name)
    }
    refused = dict(TRL_REFUSES if backend == "trl" else PASSKT_REFUSES)
    if backend == "trl" and isinstance(config, SFTConfig):
        refused["aggregation"] = "TRL's SFTTrainer averages over tokens"
    if backend == "trl" and isinstance(config, GRPOConfig):
        refused["advantage_eps"] = "TRL's advantage epsilon is fixed at 1e-4"
    kind = getattr(config, "rollout_engine", "hf")
    if backend == "passkt" and kind == "vllm-server":
        return [("rollout_engine", "rollout_engine = 'vllm-server' needs --backend trl")]
    if isinstance(config, GRPOConfig):
        if kind != "vllm":
            refused.setdefault(
                "vllm_gpu_memory_utilization",
                f"it sizes a colocated engine; rollout_engine = {kind!r}",
            )
        if kind != "vllm-server":
            refused.setdefault("vllm_server_url", f"it names a server; rollout_engine = {kind!r}")
            refused.setdefault(
                "vllm_tensor_parallel_size",
                f"it shards a server's engine; rollout_engine = {kind!r}",
            )
    if isinstance(config, GRPOConfig) and backend == "trl" and config.advantage == "rloo":
        return [("advantage", "'rloo' has no TRL equivalent; use 'std' or 'dr_grpo'")]
    return [(name, refused[name]) for name in sorted(changed) if name in refused]


def option_checks(config: TrainConfig, backend: Backend) -> list[Check]:
    """The first refused option as a failed plan ``Check`` (none when all are honoured)."""
    refused = refused_options(config, backend)
    if not refused:
        return []
    name, why = refused[0]
    flag = "--" + name.replace("_", "-")
    return [
        Check(
            "option not honoured",
            False,
            f"{flag} under --backend {backend}: {why}",
            f"leave {flag} at its default, or choose the backend that honours it",
        )
    ]


def refuse_options(config: TrainConfig, backend: Backend) -> None:
    """Raise ``PlanError`` naming the first option ``backend`` would not honour."""
    for check in option_checks(config, backend):
        raise PlanError(f"{check.name}: {check.detail}; fix: {check.fix}")
