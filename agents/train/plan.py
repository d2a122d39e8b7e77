"""A training run's plan, checked before anything starts: batches, engines and memory per GPU.

Each engine enforces its rules only when it meets them: the TRL adapter splits the step into
micro-batches when the trainer is built, TRL derives its generation batch in its config, vLLM
checks free memory when its engine starts (before the optimizer states exist), and CUDA runs out
of memory at the first optimizer step. ``check_plan`` resolves the run as those engines will see
it (processes, sharding, rollout engine, model shape), without CUDA, and verifies every such
rule in one place, printing the arithmetic. A run that cannot split or fit then fails in seconds
with one line naming the rule and the setting that fixes it.

The memory figures are arithmetic, not measurements: bytes per parameter by precision and
sharding, activations from the model's shape and the episode lengths of ``EpisodeTokens``, vLLM's
reservation and the CUDA / NCCL contexts. ``benchmarks/gpu_check.py`` prints measured peaks
beside them on a GPU; ``estimate`` writes the 8 x 80 GB table of ``benchmarks/README.md`` from
the same functions, so the table and the check cannot drift.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from passkt.agents.train.config import GRPOConfig, SFTConfig, TrainConfig
from passkt.agents.train.model_shape import ModelShape, model_shape
from passkt.agents.train.options import option_checks
from passkt.agents.train.rules import Check, PlanError
from passkt.agents.train.versions import vllm_version_check

Backend = Literal["passkt", "trl"]
Sharding = Literal["ddp", "zero3", "fsdp"]

GB = 1e9
CONTEXT_GB = 1.5
"""CUDA context, cuBLAS workspace and NCCL buffers of one process: 1-2 GB a GPU."""
PROMPT_TOKENS = 160
"""A task's first prompt (system prompt, question), measured by ``benchmarks/train_tokens.py``."""
OBSERVATION_TOKENS = 340
"""One search result in the retrieval envs (``benchmarks/train_tokens.py``: 320-340)."""
TYPICAL_TURN_TOKENS = 150
"""Tokens a 7B policy writes in a typical turn (the largest uncertainty: measure it)."""
TRL_HEAD_TILE = 4096 * 32768
"""TRL's fused output head scores completion positions in tiles of this many logits."""
LOGIT_COPIES = 3
"""Float32 copies of a chunk's logits alive at once in passkt's trained-only head."""


# --------------------------------------------------------------------------- the launch


@dataclass(frozen=True)
class Launch:
    """What the config cannot say: how the run is started."""

    backend: Backend = "passkt"
    world_size: int = 1
    """Training processes (one per GPU); a vLLM server's GPUs are not among them."""
    sharding: Sharding = "ddp"
    """``ddp`` (a full copy per process), DeepSpeed ``zero3`` or ``fsdp`` (FSDP2, full shard)."""
    gpu_memory_gb: float | None = None
    """Memory of each GPU (None: memory is reported, not checked)."""

    @classmethod
    def from_environment(
        cls,
        backend: Backend,
        *,
        world_size: int | None = None,
        sharding: Sharding | None = None,
        gpu_memory_gb: float | None = None,
        probe_gpu: bool = True,
    ) -> Launch:
        """The launch as the launcher set it up, for what the arguments leave open: torchrun's
        and accelerate's ``WORLD_SIZE``, accelerate's ``ACCELERATE_USE_DEEPSPEED`` /
        ``ACCELERATE_USE_FSDP``, and this process's GPU (with ``probe_gpu``; torch, 1 s)."""
        world = world_size or int(os.environ.get("WORLD_SIZE") or 1)
        if sharding is None:
            if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
                sharding = "zero3"
            elif os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
                sharding = "fsdp"
            else:
                sharding = "ddp"
        if gpu_memory_gb is None and probe_gpu:
            gpu_memory_gb = visible_gpu_memory()
        return cls(backend, world, sharding, gpu_memory_gb)

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise PlanError(f"world size must be >= 1, got {self.world_size}")
        if self.gpu_memory_gb is not None and self.gpu_memory_gb <= 0:
            raise PlanError(f"GPU memory must be > 0 GB, got {self.gpu_memory_gb}")


def visible_gpu_memory() -> float | None:
    """GB of this process's GPU (None without CUDA)."""
    import torch  # start-up cost: torch, 1 s (a training run loads it anyway)

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / 1e9


@dataclass(frozen=True)
class EpisodeTokens:
    """Tokens of one training episode: typical (3 turns of 150) and worst (the whole budget,
    every turn at ``max_new_tokens``), capped by ``max_length``."""

    typical: int
    worst: int
    generated_typical: int
    generated_worst: int

    @classmethod
    def of(cls, config: TrainConfig) -> EpisodeTokens:
        searches = config.t_train
        turns_typical = min(3, searches + 1)
        typical_gen = turns_typical * min(TYPICAL_TURN_TOKENS, config.max_new_tokens)
        worst_gen = (searches + 1) * config.max_new_tokens
        typical = PROMPT_TOKENS + (turns_typical - 1) * OBSERVATION_TOKENS + typical_gen
        worst = PROMPT_TOKENS + searches * OBSERVATION_TOKENS + worst_gen
        cap = (PROMPT_TOKENS + config.max_length) if config.max_length else None
        if cap is not None:
            typical, worst = min(typical, cap), min(worst, cap)
        return cls(typical, worst, typical_gen, worst_gen)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Memory:
    """GB per training GPU, term by term."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    activations_typical: float
    head: float
    vllm: float
    contexts: float
    gathered: float = 0.0
    """The whole model in bf16, gathered on every process while the trained model samples under
    ZeRO-3 / FSDP (TRL's ``unwrap_model_for_generation``)."""

    @property
    def total(self) -> float:
        return self.model_states + self.activations + self.head + self.engine + self.contexts

    @property
    def total_typical(self) -> float:
        return (
            self.model_states + self.activations_typical + self.head + self.engine + self.contexts
        )

    @property
    def engine(self) -> float:
        """What sampling holds beside training: vLLM's reservation or the gathered model (the
        update and a ZeRO-3 gather for generation do not overlap, so the larger counts)."""
        return max(self.vllm, self.gathered)

    @property
    def model_states(self) -> float:
        return self.weights + self.gradients + self.optimizer

    def arithmetic(self) -> str:
        return (
            f"weights {self.weights:.1f} + gradients {self.gradients:.1f} + optimizer "
            f"{self.optimizer:.1f} + activations {self.activations:.1f} (typical "
            f"{self.activations_typical:.1f}) + output head {self.head:.1f} + "
            + (
                f"gathered for generation {self.gathered:.1f}"
                if self.gathered
                else f"vLLM {self.vllm:.1f}"
            )
            + f" + CUDA/NCCL contexts {self.contexts:.1f} = {self.total:.1f} GB "
            f"(typical {self.total_typical:.1f})"
        )


@dataclass(frozen=True)
class PlanReport:
    """Every check of one run, in the order the engines meet them."""

    trainer: str
    launch: Launch
    checks: tuple[Check, ...]
    memory: Memory | None

    @property
    def failure(self) -> Check | None:
        return next((c for c in self.checks if not c.ok and not c.warning), None)

    def lines(self) -> list[str]:
        head = (
            f"plan: {self.trainer} on {self.launch.world_size} training process(es), backend "
            f"{self.launch.backend}, {self.launch.sharding}"
        )
        return [head, *(check.line() for check in self.checks)]

    def raise_on_failure(self) -> None:
        failed = self.failure
        if failed is not None:
            raise PlanError(f"{failed.name}: {failed.detail}; fix: {failed.fix}")


# --------------------------------------------------------------------------- batch rules


def _divisors_fix(total_name: str, unit: int, current: int) -> str:
    """The nearest multiple of ``unit`` to ``current``, as a setting."""
    low = max(unit, (current // unit) * unit)
    return f"{total_name} = {low} (a multiple of {unit})"


def batch_checks(config: TrainConfig, launch: Launch) -> list[Check]:
    """The split of one optimizer step over processes and micro-batches, as each backend does
    it: passkt's trainers split items over processes (``TrainingRun.plan``); TRL splits the
    step's rows into ``per_device_train_batch_size`` x processes x accumulation steps, and its
    generation batch (rows generated at once) must hold whole groups of ``num_generations``."""
    world, micro = launch.world_size, config.micro_batch_size
    if isinstance(config, GRPOConfig):
        rows, items, item_name = (
            config.tasks_per_step * config.group_size,
            config.tasks_per_step,
            "tasks_per_step",
        )
    else:
        assert isinstance(config, SFTConfig)
        rows, items, item_name = config.batch_size, config.batch_size, "batch_size"
    if launch.backend == "passkt":
        ok = items % world == 0
        detail = f"{item_name} {items} over {world} process(es): {items / world:g} each"
        fix = "" if ok else _divisors_fix(item_name, world, items)
        return [Check("batch split", ok, detail, fix)]
    per_pass = micro * world
    ok = rows % per_pass == 0
    what = "tasks_per_step x group_size" if isinstance(config, GRPOConfig) else "batch_size"
    detail = (
        f"{what} = {rows} rows over micro-batches of {micro} on {world} process(es) = "
        f"{rows / per_pass:g} accumulation steps"
    )
    fix = ""
    if not ok:
        if isinstance(config, GRPOConfig):
            unit = per_pass // math.gcd(per_pass, config.group_size)
            fix = _divisors_fix("tasks_per_step", unit, config.tasks_per_step)
        else:
            fix = _divisors_fix("batch_size", per_pass, config.batch_size)
        if rows % world == 0:
            fitting = next(m for m in range(micro, 0, -1) if (rows // world) % m == 0)
            fix += f", or micro_batch_size = {fitting}"
    checks = [Check("batch split", ok, detail, fix)]
    if ok and isinstance(config, GRPOConfig):
        generation = micro * world * (rows // per_pass)
        checks.append(
            Check(
                "TRL generation batch",
                generation % config.group_size == 0,
                f"per_device {micro} x {world} processes x {rows // per_pass} steps_per_generation"
                f" = {generation} rows, {generation // config.group_size} whole groups of "
                f"{config.group_size}",
            )
        )
    return checks


def steps_per_run(config: TrainConfig, backend: Backend, num_items: int) -> int:
    """Optimizer steps of a run: passkt wraps the last partial batch of an epoch around
    (``BatchSchedule``); TRL's sampler drops it."""
    if config.max_steps is not None:
        return config.max_steps
    per_step = config.tasks_per_step if isinstance(config, GRPOConfig) else config.batch_size
    per_epoch = num_items // per_step if backend == "trl" else math.ceil(num_items / per_step)
    return config.epochs * per_epoch


# --------------------------------------------------------------------------- engine rules


def engine(config: TrainConfig) -> str:
    return getattr(config, "rollout_engine", "hf")


def engine_checks(config: TrainConfig, launch: Launch) -> list[Check]:
    """The sharding passkt's trainer refuses, and the rollout engine's placement rules."""
    checks = []
    if launch.backend == "passkt" and launch.sharding != "ddp":
        checks.append(
            Check(
                "sharding",
                False,
                f"passkt's own trainer runs in one process or under DDP, not {launch.sharding}",
                "--backend trl (TRL shards the model), or launch with study/accelerate/ddp.yaml",
            )
        )
    kind = engine(config)
    if kind == "hf" and isinstance(config, GRPOConfig) and launch.sharding != "ddp":
        checks.append(
            Check(
                "rollout engine",
                False,
                f"the trained model samples under {launch.sharding}: TRL gathers the whole model "
                "on every GPU for every rollout and decodes with transformers' loop (slow)",
                "--rollout-engine vllm (a colocated engine per GPU)",
                warning=True,
            )
        )
    if kind == "hf" or not isinstance(config, GRPOConfig):
        return checks
    tp = config.vllm_tensor_parallel_size
    if kind == "vllm-server":
        checks.append(
            Check(
                "vLLM server",
                True,
                f"{config.vllm_server_url}, tensor parallel {tp} on GPU(s) of its own; the main "
                "process syncs the weights before each step's rollouts",
            )
        )
    else:
        checks.append(
            Check(
                "vLLM colocated",
                True,
                f"one engine per training process (cuda:LOCAL_RANK), {launch.world_size} in all, "
                f"each reserving {config.vllm_gpu_memory_utilization:g} of its GPU",
            )
        )
    checks.append(vllm_version_check())
    return checks


# --------------------------------------------------------------------------- memory


def _bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def model_state_gb(config: TrainConfig, shape: ModelShape, launch: Launch) -> tuple[float, ...]:
    """``(weights, gradients, optimizer)`` GB per GPU.

    DDP keeps a full copy in the training dtype: weights, gradients and AdamW's two moments in
    that dtype (torch's AdamW keeps its states in the parameters' dtype). ZeRO-3 and FSDP under
    accelerate's bf16 mixed precision keep bf16 weights and gradients plus float32 master weights
    and moments (16 bytes a parameter), divided over the processes. LoRA freezes the base (no
    gradients, no moments) and trains float32 adapters.
    """
    n, b = shape.parameters, _bytes(config.dtype)
    shards = launch.world_size if launch.sharding != "ddp" else 1
    if config.finetune == "lora":
        lora = shape.lora_parameters(config.lora_r)
        return ((n * b + lora * 4) / shards / GB, lora * 4 / shards / GB, lora * 8 / shards / GB)
    if launch.sharding == "ddp":
        return (n * b / GB, n * b / GB, 2 * n * b / GB)
    return (n * 2 / shards / GB, n * 2 / shards / GB, n * 12 / shards / GB)


def micro_batch_tokens(config: TrainConfig, launch: Launch, episode: int) -> int:
    """Padded tokens of the largest micro-batch: ``micro_batch_size`` rows, or passkt's token
    cap (an episode longer than the cap goes alone); TRL's micro-batches are rows only."""
    rows = config.micro_batch_size * episode
    if launch.backend == "passkt" and config.micro_batch_tokens is not None:
        return min(rows, max(config.micro_batch_tokens, episode))
    return rows


def rows_per_process(config: TrainConfig, launch: Launch) -> int:
    """Rows (episodes) one process trains on in a step."""
    if isinstance(config, GRPOConfig):
        return max(config.tasks_per_step * config.group_size // launch.world_size, 1)
    return max(config.batch_size // launch.world_size, 1)  # type: ignore[attr-defined]


def activation_gb(config: TrainConfig, shape: ModelShape, tokens: int) -> float:
    """Activations of one micro-batch: with checkpointing, each block's input plus the one
    block being recomputed; without, every block's activations."""
    b = _bytes(config.dtype)
    per_block = shape.layer_values_per_token() * b
    if config.gradient_checkpointing:
        return tokens * (shape.layers * shape.hidden * b + per_block) / GB
    return tokens * shape.layers * (per_block + shape.hidden * b) / GB


def head_gb(config: TrainConfig, shape: ModelShape, launch: Launch, tokens: int) -> float:
    """The output head in the update: passkt's trained-only chunks, its ``columns`` / ``all``
    logits (bf16 plus the float32 log-softmax copy), or TRL's fused tiles plus, for full
    fine-tuning, its float32 accumulator of the head's weight gradient."""
    if launch.backend == "trl":
        accumulator = shape.vocab * shape.hidden * 4 if config.finetune == "full" else 0
        return (TRL_HEAD_TILE * 2 + accumulator) / GB
    if config.loss_logits == "trained":
        chunk = config.logits_chunk_tokens or tokens
        return min(chunk, tokens) * shape.vocab * 4 * LOGIT_COPIES / GB
    return tokens * shape.vocab * 6 / GB


def memory(config: TrainConfig, shape: ModelShape, launch: Launch) -> Memory:
    """Per training GPU, for the worst and the typical episode of ``EpisodeTokens``."""
    weights, gradients, optimizer = model_state_gb(config, shape, launch)
    episode = EpisodeTokens.of(config)
    worst = micro_batch_tokens(config, launch, episode.worst)
    typical = micro_batch_tokens(config, launch, episode.typical)
    rows = rows_per_process(config, launch)
    if rows < config.micro_batch_size:  # a process's whole share is one smaller micro-batch
        worst, typical = (
            worst * rows // config.micro_batch_size,
            typical * rows // config.micro_batch_size,
        )
    vllm = 0.0
    if engine(config) == "vllm":
        vllm = config.vllm_gpu_memory_utilization * (launch.gpu_memory_gb or 80.0)
    gathered = 0.0
    if isinstance(config, GRPOConfig) and engine(config) == "hf" and launch.sharding != "ddp":
        gathered = shape.parameters * 2 / GB - weights
    return Memory(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        activations=activation_gb(config, shape, worst),
        activations_typical=activation_gb(config, shape, typical),
        head=head_gb(config, shape, launch, worst),
        vllm=vllm,
        contexts=CONTEXT_GB,
        gathered=gathered,
    )


def vllm_cache_check(config: GRPOConfig, shape: ModelShape, launch: Launch) -> Check:
    """vLLM refuses to start when its reservation leaves no KV cache for one sequence of the
    model's length; it holds a whole step only if the cache fits this process's episodes."""
    gpu = launch.gpu_memory_gb or 80.0
    episode = EpisodeTokens.of(config)
    weights = shape.parameters * 2 / GB
    if engine(config) == "vllm-server":
        reserve = 0.9 * gpu * config.vllm_tensor_parallel_size
        episodes = config.tasks_per_step * config.group_size
        where = f"server 0.9 x {gpu:g} GB x {config.vllm_tensor_parallel_size} GPU(s)"
        fix = "a larger --vllm-tensor-parallel-size for the server"
    else:
        reserve = config.vllm_gpu_memory_utilization * gpu
        episodes = math.ceil(config.tasks_per_step * config.group_size / launch.world_size)
        where = f"{config.vllm_gpu_memory_utilization:g} x {gpu:g} GB"
        fix = "a larger --vllm-gpu-memory-utilization"
    cache = reserve - weights
    per_token = shape.kv_bytes_per_token()
    tokens = max(cache, 0) * GB / per_token
    need = episodes * episode.worst
    detail = (
        f"{where} = {reserve:.1f} GB - bf16 weights {weights:.1f} GB = KV cache {cache:.1f} GB"
        f" = {tokens / 1000:.0f}k tokens at {per_token / 1024:.0f} KiB; a step's {episodes} "
        f"episodes need up to {need / 1000:.0f}k"
    )
    if tokens < episode.worst:
        return Check("vLLM KV cache", False, detail + " (not one episode)", fix)
    if tokens < need:
        return Check("vLLM KV cache", False, detail + " (vLLM queues the rest)", warning=True)
    return Check("vLLM KV cache", True, detail)


def memory_checks(config: TrainConfig, shape: ModelShape | None, launch: Launch) -> list[Check]:
    if shape is None:
        return [
            Check(
                "memory per GPU",
                True,
                f"not estimated: the shape of {config.policy} is unknown here (a hub id other "
                "than the documented ones; give a local folder with its config.json)",
                warning=True,
            )
        ]
    checks = []
    if engine(config) != "hf" and isinstance(config, GRPOConfig):
        checks.append(vllm_cache_check(config, shape, launch))
    usage = memory(config, shape, launch)
    gpu = launch.gpu_memory_gb
    detail = f"{shape.parameters / 1e9:.2f} B parameters: {usage.arithmetic()}"
    if gpu is None:
        checks.append(Check("memory per GPU", True, detail + "; GPU memory not given"))
        return checks
    # Typical episodes must fit; the worst (every turn at max_new_tokens) may never come, so a
    # run that fits only typical episodes starts with a warning rather than being refused.
    fits, fits_worst = usage.total_typical <= gpu, usage.total <= gpu
    checks.append(
        Check(
            "memory per GPU",
            fits_worst,
            f"{detail} of {gpu:g} GB" + ("" if fits_worst or not fits else "; the worst may not"),
            "" if fits_worst else memory_fix(config, launch, usage),
            warning=fits and not fits_worst,
        )
    )
    return checks


def memory_fix(config: TrainConfig, launch: Launch, usage: Memory) -> str:
    """The setting that removes the largest term."""
    if usage.model_states >= usage.activations and config.finetune == "full":
        if launch.backend == "passkt" or launch.sharding == "ddp":
            return (
                "finetune = 'lora', or --backend trl under ZeRO-3 "
                "(accelerate launch --config_file study/accelerate/zero3.yaml)"
            )
        return "more processes to shard over, or finetune = 'lora'"
    if not config.gradient_checkpointing:
        return "--gradient-checkpointing"
    if usage.vllm > usage.activations:
        return "a smaller --vllm-gpu-memory-utilization"
    if launch.backend == "passkt":
        return "--micro-batch-tokens 8192 (or a smaller --micro-batch-size)"
    return "a smaller --micro-batch-size (or --max-length)"


# --------------------------------------------------------------------------- the plan


def check_plan(config: TrainConfig, launch: Launch, shape: ModelShape | None = None) -> PlanReport:
    """Every rule of ``config`` run as ``launch`` says, in the order the engines meet them.

    Args:
        config: The trainer config.
        launch: Backend, processes, sharding and GPU memory.
        shape: The model's shape (default: ``model_shape(config.policy)``).
    """
    trainer = "GRPO" if isinstance(config, GRPOConfig) else "SFT"
    checks = [*option_checks(config, launch.backend)]
    checks += engine_checks(config, launch)
    checks += batch_checks(config, launch)
    resolved = shape if shape is not None else model_shape(config.policy)
    checks += memory_checks(config, resolved, launch)
    usage = memory(config, resolved, launch) if resolved is not None else None
    return PlanReport(trainer, launch, tuple(checks), usage)
