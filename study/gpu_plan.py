"""The study's training routes on GPUs, checked before anything starts, and their estimate.

``passkt study check PROFILE --gpus N`` resolves every training run of a profile (SFT, GRPO and
RFT per category, with the backend and the TRL options of ``[train]``) into trainer configs and
runs ``passkt.agents.train.plan.check_plan`` on each, as ``passkt train ... --check`` does for
one run. ``estimate_markdown`` writes the memory and time table of ``benchmarks/README.md``
("The study's GPU recipe on 8 x 80 GB") from the same configs and the same arithmetic, so the
table and the check cannot drift (``tests/study/test_gpu_plan.py`` compares them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from passkt.agents.train.config import GRPOConfig, SFTConfig, TrainConfig
from passkt.agents.train.model_shape import model_shape
from passkt.agents.train.plan import (
    EpisodeTokens,
    Launch,
    PlanReport,
    check_plan,
    steps_per_run,
)
from passkt.study.profile import METHODS, trainer_fields

TOOLLESS_ENVS = ("Math-v0",)
"""Envs without tools: their training budget is 0 unless a category table says otherwise."""
DECODE_S = 0.015
"""One decode step of a 7B model at small batch on an A100 80 GB (reads 15 GB of bf16 weights
at about 2 TB/s: 10-15 ms)."""
SERVER_SLOWDOWN = 1.75
"""Generation on one server GPU for all processes against one engine per GPU (1.5-2x)."""
TRAIN_FLOPS = 0.4 * 312e12
"""Sustained bf16 FLOP/s of one A100 in training (40 % of its peak)."""
SYNC_S = {"full": 3.0, "lora": 0.5}
"""Weight sync into vLLM per step: a gathered 15 GB model, or a 160 MB adapter."""
EVAL_TOKENS_PER_S = 3000
"""vLLM output tokens/s of one saturated A100 80 GB on a 7B model."""
EVAL_BRANCHES = 4
"""Budget branches after the shared prefix of an evaluation episode (T in 0, 1, 2, 3, 5)."""


@dataclass(frozen=True)
class Route:
    """One documented way to train a method of the study on GPUs."""

    name: str
    method: str
    backend: str
    sharding: str
    train_gpus: int
    fields: Mapping[str, Any] = field(default_factory=dict)
    """Trainer fields laid over the profile's (e.g. the rollout engine)."""
    fits: bool = True
    """False for a route documented as one that does not fit (the check must refuse it)."""


def documented_routes(gpus: int = 8) -> list[Route]:
    """The routes ``benchmarks/README.md`` documents for the paper profile on ``gpus`` GPUs."""
    return [
        Route("GRPO, TRL + ZeRO-3, colocated vLLM", "grpo", "trl", "zero3", gpus,
              {"rollout_engine": "vllm"}),
        Route("GRPO, TRL + ZeRO-3, vLLM server (1 GPU serves, 7 train)", "grpo", "trl",
              "zero3", gpus - 1, {"rollout_engine": "vllm-server", "tasks_per_step": 14}),
        Route("GRPO, TRL + ZeRO-3, the trained model samples", "grpo", "trl", "zero3", gpus),
        Route("GRPO, our trainer, DDP + LoRA r 16, colocated vLLM", "grpo", "passkt", "ddp",
              gpus, {"finetune": "lora", "rollout_engine": "vllm"}),
        Route("GRPO, our trainer, DDP, full fine-tuning, colocated vLLM", "grpo", "passkt",
              "ddp", gpus, {"rollout_engine": "vllm"}, fits=False),
        Route("SFT, LoRA r 16, our trainer, DDP", "sft", "passkt", "ddp", gpus),
        Route("SFT, LoRA r 16, TRL's SFTTrainer, DDP", "sft", "trl", "ddp", gpus),
    ]  # fmt: skip


def category_config(profile: Mapping[str, Any], method: str, cat: str, **over: Any) -> TrainConfig:
    """The trainer config of one category's run, as the pipeline makes it (the base as policy)."""
    fields = trainer_fields(profile, method, cat)
    if profile["env"][cat]["id"] in TOOLLESS_ENVS:
        fields["t_train"] = (
            profile[method if method != "rft" else "sft"].get(cat, {}).get("t_train", 0)
        )
    base = profile["base"].get("model", "testbed-base")
    cls = GRPOConfig if method == "grpo" else SFTConfig
    return cls.from_dict({**fields, **over, "policy": f"hf:{base}"})


def profile_routes(profile: Mapping[str, Any], gpus: int, sharding: str | None = None) -> list:
    """The routes a profile's ``study run`` takes on ``gpus`` GPUs: GRPO with ``train.backend``
    (TRL's vLLM options of ``[train.trl]`` as the rollout engine), SFT and RFT with passkt's."""
    routes = []
    trl = profile["train"]["trl"]
    for method in (m for m in METHODS if m in profile["methods"]):
        backend = profile["train"]["backend"] if method == "grpo" else "passkt"
        over: dict[str, Any] = {}
        train_gpus = gpus
        if method == "grpo" and backend == "trl" and trl.get("use_vllm"):
            server = trl.get("vllm_mode", "colocate") == "server"
            over["rollout_engine"] = "vllm-server" if server else "vllm"
            if "vllm_gpu_memory_utilization" in trl and not server:
                over["vllm_gpu_memory_utilization"] = trl["vllm_gpu_memory_utilization"]
            if server:
                over["vllm_tensor_parallel_size"] = trl.get("vllm_tensor_parallel_size", 1)
                train_gpus = gpus - over["vllm_tensor_parallel_size"]
        full = profile[method if method != "rft" else "sft"].get("finetune", "full") == "full"
        shard = sharding or ("zero3" if backend == "trl" and full and gpus > 1 else "ddp")
        routes.append(Route(f"{method}, {backend}, {shard}", method, backend, shard, train_gpus,
                            over))  # fmt: skip
    return routes


def check_route(
    profile: Mapping[str, Any], route: Route, gpu_memory: float | None
) -> list[tuple[str, PlanReport]]:
    """``(category, report)`` of each category's run of ``route``."""
    if route.train_gpus < 1:
        raise ValueError(f"{route.name}: no GPU left to train on; give more --gpus")
    launch = Launch(route.backend, route.train_gpus, route.sharding, gpu_memory)  # type: ignore[arg-type]
    return [
        (cat, check_plan(category_config(profile, route.method, cat, **route.fields), launch))
        for cat in profile["categories"]
    ]


# --------------------------------------------------------------------------- the estimate


def step_seconds(config: TrainConfig, route: Route, worst: bool) -> float:
    """Generation (GRPO), the update and the weight sync of one optimizer step."""
    shape = model_shape(config.policy)
    assert shape is not None, f"no shape for {config.policy}"
    episode = EpisodeTokens.of(config)
    tokens = episode.worst if worst else episode.typical
    if isinstance(config, GRPOConfig):
        rows = config.tasks_per_step * config.group_size
        generated = episode.generated_worst if worst else episode.generated_typical
        generate = generated * DECODE_S
        if config.rollout_engine == "vllm-server":
            generate *= SERVER_SLOWDOWN
        passes = 8 + (2 if route.backend == "trl" and config.rollout_engine != "hf" else 0)
        sync = SYNC_S[config.finetune] if config.rollout_engine != "hf" else 0.0
    else:
        rows, generate, passes, sync = config.batch_size, 0.0, 8, 0.0
    update = rows * tokens * passes * shape.parameters / (TRAIN_FLOPS * route.train_gpus)
    return generate + update + sync


def run_hours(profile: Mapping[str, Any], route: Route, worst: bool) -> float:
    """Hours of every run of ``route`` (categories x seeds)."""
    total = 0.0
    for cat in profile["categories"]:
        config = category_config(profile, route.method, cat, **route.fields)
        steps = steps_per_run(config, route.backend, profile["limit_train"])  # type: ignore[arg-type]
        total += steps * step_seconds(config, route, worst) * len(profile["seeds"])
    return total / 3600


def evaluations(profile: Mapping[str, Any]) -> int:
    """Evaluations of a study: per category the base ``base_repeats`` times and every trained
    method once per seed."""
    per_category = profile["eval"]["base_repeats"] + len(profile["seeds"]) * len(profile["methods"])
    return len(profile["categories"]) * per_category


def eval_hours(profile: Mapping[str, Any], gpus: int, worst: bool) -> float:
    """Hours of every evaluation: each episode's shared prefix and its budget branches."""
    turn = profile["eval"]["max_new_tokens"] if worst else 150
    turns = 6 if worst else 3
    episodes = profile["limit_eval"] * profile["eval"]["n"]
    tokens = episodes * (turns * turn + EVAL_BRANCHES * turn)
    return evaluations(profile) * tokens / (gpus * EVAL_TOKENS_PER_S) / 3600


def _memory_cell(reports: list[tuple[str, PlanReport]]) -> str:
    worst = max(reports, key=lambda item: item[1].memory.total if item[1].memory else 0)[1]
    usage = worst.memory
    if usage is None:
        return "unknown shape"
    return (
        f"{usage.total_typical:.0f}-{usage.total:.0f} GB (states {usage.model_states:.1f}, "
        f"activations {usage.activations_typical:.1f}-{usage.activations:.1f}, head "
        f"{usage.head:.1f}, {'gathered model' if usage.gathered else 'vLLM'} {usage.engine:.0f}, "
        f"contexts {usage.contexts:.1f})"
    )


def _check_cell(reports: list[tuple[str, PlanReport]]) -> str:
    for cat, report in reports:
        failed = report.failure
        if failed is not None:
            return f"fails ({cat}): {failed.name}; fix: {failed.fix}"
    return "passes"


def estimate_markdown(profile: Mapping[str, Any], gpus: int = 8, gpu_memory: float = 80) -> str:
    """The table of ``benchmarks/README.md``: every documented route, its check, memory per GPU
    and time (typical-worst), then the evaluations and the total."""
    lines = [
        "| route | GPUs (train + serve) | plan check | memory per GPU (typical-worst) | "
        "step, category C (typical-worst) | all runs (typical-worst) |",
        "|---|---|---|---|---|---|",
    ]
    grpo_hours, sft_hours = [0.0, 0.0], [0.0, 0.0]
    for route in documented_routes(gpus):
        reports = check_route(profile, route, gpu_memory)
        served = gpus - route.train_gpus
        where = f"{route.train_gpus}{f' + {served}' if served else ''}, {route.sharding}"
        if not route.fits:
            lines.append(f"| {route.name} | {where} | {_check_cell(reports)} | - | - | - |")
            continue
        config = category_config(profile, route.method, profile["categories"][-1], **route.fields)
        if getattr(config, "rollout_engine", "") == "hf":  # transformers' loop: not estimated
            lines.append(f"| {route.name} | {where} | {_check_cell(reports)} | "
                         f"{_memory_cell(reports)} | not estimated | not estimated |")  # fmt: skip
            continue
        step = [step_seconds(config, route, worst) for worst in (False, True)]
        hours = [run_hours(profile, route, worst) for worst in (False, True)]
        lines.append(
            f"| {route.name} | {where} | {_check_cell(reports)} | {_memory_cell(reports)} | "
            f"{step[0]:.0f}-{step[1]:.0f} s | {hours[0]:.1f}-{hours[1]:.1f} h |"
        )
        if route.name.startswith("GRPO, TRL + ZeRO-3, colocated"):
            grpo_hours = hours
        if route.name.startswith("SFT") and route.backend == "passkt":
            sft_hours = hours
    evals = [eval_hours(profile, gpus, worst) for worst in (False, True)]
    lines.append(
        f"| evaluation, vLLM, one engine per GPU ({evaluations(profile)} evaluations) | "
        f"{gpus} | - | bf16 weights + KV cache at `gpu_memory_utilization` "
        f"{profile['eval']['options'].get('gpu_memory_utilization', 0.9)} | - | "
        f"{evals[0]:.1f}-{evals[1]:.1f} h |"
    )
    total = [grpo_hours[i] + sft_hours[i] + evals[i] for i in (0, 1)]
    lines += [
        "",
        f"Total with TRL + ZeRO-3 and colocated vLLM for GRPO and our trainer for SFT: about "
        f"{math.floor(total[0] * 2 + 0.5) / 2:g} h typical, {math.floor(total[1] + 0.5):g} h worst "
        f"on {gpus} x A100 {gpu_memory:g} GB, roughly half on H100s.",
    ]
    return "\n".join(lines)
