"""What GRPO and SFT share: tasks, data order, model set-up, token batches, metrics, evaluation.

Both trainers run unchanged on one CPU process or under ``accelerate launch`` / ``torchrun`` on
many: an ``Accelerator`` owns the devices and the process group, each process takes its share
(``items[rank::world]``) of every step's batch, ``accelerator.prepare`` makes the model all-reduce
its gradients, and only the main process writes metrics and checkpoints.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint

from passkt.agents.hf import HFPolicy
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.train.checkpoint import ADAPTER_DIR, load_adapter
from passkt.agents.train.config import TrainConfig, policy_path
from passkt.agents.train.losses import token_logprobs
from passkt.envs.contract import TaskRef, import_modules, inspect_env, task_records, task_seed
from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)

TIMING_METRICS = ("tokens/s", "time/")
"""Metric names (or prefixes) that measure wall-clock time and so differ between equal runs."""


def is_timing_metric(name: str) -> bool:
    """Whether a metric measures time (excluded when comparing two runs for equality)."""
    return any(name == k or (k.endswith("/") and name.startswith(k)) for k in TIMING_METRICS)


# --------------------------------------------------------------------------- tasks and data order


def env_options(config: TrainConfig) -> dict[str, Any]:
    """The rollout's env-worker settings (``env_workers``, ``env_step_timeout``)."""
    return {"env_workers": config.env_workers, "env_step_timeout": config.env_step_timeout}


def env_kwargs_for(config: TrainConfig, split: str) -> dict[str, Any]:
    """``gym.make`` kwargs of the training (or evaluation) tasks."""
    return {**config.env_kwargs, "split": split}


def load_task_list(
    config: TrainConfig,
    split: str,
    *,
    task_ids: Sequence[str] | None = None,
    limit: int | None = None,
) -> list[Any]:
    """The tasks of ``config.env_id`` on ``split``, restricted to ``task_ids`` then ``limit``.

    Records with a ``task_id``: the env's own (``Task`` for passkt envs), or ``TaskRef`` for an
    env without a task list (seed tasks, see ``passkt.envs.contract``). Imports
    ``config.imports`` first, so a user's env is registered in every process.
    """

    import_modules(config.imports)
    kwargs = dict(config.env_kwargs)
    kwargs.pop("split", None)
    contract = inspect_env(config.env_id, kwargs, split)
    if contract.task_ids is None and task_ids is not None:
        for task_id in task_ids:
            task_seed(task_id)  # names the expected form of a seed task id
        tasks: list[Any] = [TaskRef(task_id) for task_id in task_ids]
    else:
        tasks = task_records(contract, split, limit)
    if task_ids is not None and contract.task_ids is not None:
        by_id = {task.task_id: task for task in tasks}
        missing = [task_id for task_id in task_ids if task_id not in by_id]
        if missing:
            raise ValueError(
                f"task_ids not in {config.env_id} (split {split!r}): {missing[:5]}"
                f"{' ...' if len(missing) > 5 else ''}"
            )
        tasks = [by_id[task_id] for task_id in task_ids]
    if limit is not None:
        tasks = tasks[:limit]
    if not tasks:
        raise ValueError(f"No tasks to train on in {config.env_id} (split {split!r}).")
    return tasks


@dataclass(frozen=True)
class BatchSchedule:
    """Which items (task or example indices) each optimizer step uses: a seeded data order.

    Each epoch is a fresh permutation of the items, repeated cyclically to fill whole steps, so
    every item is seen at least once per epoch and every step has the same batch size. The order
    depends only on ``(seed, epoch)``: a resumed run recomputes it exactly.
    """

    num_items: int
    per_step: int
    seed: int

    @property
    def steps_per_epoch(self) -> int:
        return math.ceil(self.num_items / self.per_step)

    def epoch_order(self, epoch: int) -> list[int]:
        """The item order of one epoch (``steps_per_epoch * per_step`` entries)."""
        permutation = np.random.default_rng([self.seed, epoch]).permutation(self.num_items)
        return [int(i) for i in np.resize(permutation, self.steps_per_epoch * self.per_step)]

    def items(self, step: int) -> list[int]:
        """The global batch of optimizer step ``step`` (0-based)."""
        epoch, index = divmod(step, self.steps_per_epoch)
        order = self.epoch_order(epoch)
        return order[index * self.per_step : (index + 1) * self.per_step]


def total_steps(config: TrainConfig, schedule: BatchSchedule) -> int:
    """Optimizer steps of the whole run."""
    if config.max_steps is not None:
        return config.max_steps
    return config.epochs * schedule.steps_per_epoch


def step_seed(seed: int, step: int, rank: int) -> int:
    """A distinct, reproducible seed for the rollouts of one step on one process."""
    return (seed * 1_000_003 + step * 10_007 + rank * 101 + 17) % (2**31 - 1)


# --------------------------------------------------------------------------- model set-up


def resolve_dtype(name: str) -> torch.dtype:
    """``auto``: bfloat16 on a GPU that supports it, else float32."""
    if name == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def load_model(
    config: TrainConfig, *, resume_from: Path | None = None, trainable: bool = True
) -> tuple[Any, Any]:
    """The model to train (wrapped with LoRA if asked) and its tokenizer, on the CPU.

    Args:
        config: The run's config.
        resume_from: A checkpoint to continue from: its weights (full fine-tuning) or its adapter
            (LoRA, loaded onto the base model) replace the starting ones.
        trainable: False gives a frozen copy of the starting policy (the KL reference).
    """

    dtype = str(resolve_dtype(config.dtype)).removeprefix("torch.")
    source: Any = policy_path(config.policy)
    if trainable and resume_from is not None and config.finetune == "full":
        source = resume_from
    loaded = HFPolicy(source, device="cpu", dtype=dtype)
    model, tokenizer = loaded.model, loaded.tokenizer
    if not trainable:
        model.requires_grad_(False)
        return model.eval(), tokenizer
    if config.finetune == "lora":
        model = _wrap_lora(model, config)
        if resume_from is not None:
            load_adapter(model, resume_from)
    if config.gradient_checkpointing:
        # transformers 5.25 renamed it (the old name goes in v6); older versions have only the old
        enable = getattr(model, "activation_checkpointing_enable", None)
        (enable or model.gradient_checkpointing_enable)()
        if config.finetune == "lora":
            model.enable_input_require_grads()
    return model.train(), tokenizer


def _wrap_lora(model: Any, config: TrainConfig) -> Any:
    from peft import LoraConfig, get_peft_model  # optional: the hf extra (torch, transformers)

    targets = config.lora_target_modules
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules="all-linear" if targets == ("all-linear",) else list(targets),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lora)


def is_lora_checkpoint(folder: Path) -> bool:
    """Whether a checkpoint holds a LoRA adapter."""
    return (folder / ADAPTER_DIR).is_dir()


def make_optimizer(model: Any, config: TrainConfig, steps: int) -> tuple[Any, Any]:
    """AdamW over the trainable parameters, and the learning-rate schedule (per optimizer step)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters (check finetune / LoRA targets).")
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)

    def factor(step: int) -> float:
        if step < config.warmup_steps:
            return (step + 1) / (config.warmup_steps + 1)
        span = max(1, steps - config.warmup_steps)
        progress = min(1.0, (step - config.warmup_steps) / span)
        if config.lr_scheduler == "linear":
            return 1.0 - progress
        if config.lr_scheduler == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def make_accelerator() -> Any:
    """An ``Accelerator`` on the GPUs if there are any, else on the CPU (gloo for several)."""
    from accelerate import Accelerator  # optional: the hf extra (torch, transformers)

    return Accelerator(cpu=not torch.cuda.is_available())


# --------------------------------------------------------------------------- token batches


@dataclass(frozen=True)
class TokenSequence:
    """One training sequence: its ids, which are policy tokens, and their sampling logprobs."""

    token_ids: tuple[int, ...]
    policy_mask: tuple[bool, ...]
    logprobs: tuple[float, ...] = ()

    @classmethod
    def from_episode(cls, episode: Any, max_length: int | None = None) -> TokenSequence:
        """The token record of a rollout ``Episode`` (cut to ``max_length`` tokens)."""
        if not episode.token_ids:
            raise ValueError(
                f"Episode of task {episode.task_id!r} has no token ids: the trainers need a "
                "TokenPolicy (HFPolicy) or rollout(..., tokenizer=...)."
            )
        end = max_length or len(episode.token_ids)
        return cls(
            tuple(episode.token_ids[:end]),
            tuple(episode.policy_mask[:end]),
            tuple(episode.logprobs[:end]),
        )

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.policy_mask)


@dataclass(frozen=True)
class TokenBatch:
    """Right-padded tensors of a micro-batch."""

    input_ids: torch.Tensor
    """``(B, L)``."""
    attention_mask: torch.Tensor
    """``(B, L)``, 1 at real tokens."""
    policy_mask: torch.Tensor
    """``(B, L)`` bool, True at policy tokens (the trained targets)."""


def collate(sequences: Sequence[TokenSequence], pad_id: int, device: Any = "cpu") -> TokenBatch:
    """Right-pad sequences into one batch."""
    width = max(len(s.token_ids) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)  # (B, L)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)  # (B, L)
    mask = torch.zeros((len(sequences), width), dtype=torch.bool)  # (B, L)
    for row, seq in enumerate(sequences):
        if len(seq.policy_mask) != len(seq.token_ids):
            raise ValueError(
                f"sequence {row}: {len(seq.token_ids)} ids but {len(seq.policy_mask)} mask entries"
            )
        n = len(seq.token_ids)
        ids[row, :n] = torch.tensor(seq.token_ids, dtype=torch.long)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(seq.policy_mask, dtype=torch.bool)
    mask[:, 0] = False  # the first token has no prediction
    return TokenBatch(ids.to(device), attention.to(device), mask.to(device))


LOGIT_POSTPROCESSING = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)
"""Config fields of models whose forward changes the logits after the output head (Gemma's
softcap, Cohere's and Granite's scales): ``loss_logits = "trained"`` applies the head itself, so
these models take the ``columns`` route instead (the model's own head and scaling)."""


def sequence_logprobs(
    model: Any,
    batch: TokenBatch,
    temperature: float = 1.0,
    *,
    logits: str = "trained",
    chunk_tokens: int | None = 512,
) -> torch.Tensor:
    """``(B, L)`` log-probability of each token given its prefix, at least at policy tokens.

    Positions that predict no policy token are left at 0 where the route skips them (the losses
    mask them). The three routes give the same values and gradients at policy tokens (tested);
    they differ in how much of the ``(B, L, V)`` logits they make:

    - ``trained``: the model body runs to its last hidden states, and only the positions that
      predict a policy token of their own row go through the output head, ``chunk_tokens`` at a
      time, each chunk's logits recomputed in the backward pass rather than kept
      (``torch.utils.checkpoint``): about ``chunk_tokens x V`` floats at once, however long the
      prompt and observations. Needs a transformers causal LM (``get_output_embeddings``,
      ``logits_to_keep``) without logit scaling (``LOGIT_POSTPROCESSING``); other models take
      ``columns``.
    - ``columns``: every position where *any* row predicts a policy token goes through the head
      (transformers' ``logits_to_keep``): ``(B, K, V)`` logits kept for the backward pass. Rows
      whose turns sit at other positions widen ``K`` for each other.
    - ``all``: the plain forward, ``(B, L, V)`` logits.
    """
    if logits not in ("trained", "columns", "all"):
        raise ValueError(f"logits must be 'trained', 'columns' or 'all', got {logits!r}")
    if logits == "trained":
        parts = _body_and_head(model)
        if parts is not None:
            return _trained_logprobs(model, *parts, batch, temperature, chunk_tokens)
        logits = "columns"
    ids = batch.input_ids  # (B, L)
    predicts = batch.policy_mask[:, 1:].any(0)  # (L-1,): position t predicts token t + 1
    keep = torch.nonzero(predicts).squeeze(-1)  # (K,)
    if logits == "all" or not _accepts_logits_to_keep(model) or keep.numel() == predicts.numel():
        out = model(input_ids=ids, attention_mask=batch.attention_mask, use_cache=False).logits
        return token_logprobs(out, ids, temperature)  # (B, L)
    result = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)  # (B, L)
    if keep.numel() == 0:
        return result
    out = model(
        input_ids=ids, attention_mask=batch.attention_mask, use_cache=False, logits_to_keep=keep
    ).logits  # (B, K, V)
    targets = ids[:, keep + 1]  # (B, K)
    scale = temperature if temperature > 0 else 1.0
    rows = []
    for row_logits, row_targets in zip(out, targets, strict=True):  # one row at a time
        row_logits = row_logits.float() / scale  # (K, V)
        picked = row_logits.gather(-1, row_targets[:, None]).squeeze(-1)  # (K,)
        rows.append(picked - torch.logsumexp(row_logits, dim=-1))
    columns = (keep + 1).expand(len(rows), -1)  # (B, K)
    return result.scatter(1, columns, torch.stack(rows))  # (B, L)


def _causal_lm(model: Any) -> Any:
    """The causal LM under any DDP / peft wrappers."""
    inner = getattr(model, "module", model)  # DistributedDataParallel
    if hasattr(inner, "get_base_model"):  # peft
        inner = inner.get_base_model()
    return inner


def _accepts_logits_to_keep(model: Any) -> bool:
    """Whether the causal LM under any DDP / peft wrappers takes ``logits_to_keep``."""
    return "logits_to_keep" in inspect.signature(_causal_lm(model).forward).parameters


_FELL_BACK: set[str] = set()


def _body_and_head(model: Any) -> tuple[Any, Any] | None:
    """The body (its output's ``last_hidden_state`` is what the head reads) and the output head
    of a transformers causal LM, or None (logged once per model class) when the ``trained`` route
    cannot reproduce the model's own logits."""
    inner = _causal_lm(model)
    name = type(inner).__name__
    reason = None
    head = body = None
    if not _accepts_logits_to_keep(model):
        reason = "its forward takes no logits_to_keep"
    else:
        get_head = getattr(inner, "get_output_embeddings", None)
        head = get_head() if get_head is not None else None
        get_body = getattr(inner, "get_decoder", None)
        body = get_body() if get_body is not None else None
        config = getattr(inner, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        scaled = [f for f in LOGIT_POSTPROCESSING if getattr(text, f, None) not in (None, 1.0)]
        if head is None or body is None or body is inner:
            reason = "no output head / body to call apart"
        elif scaled:
            reason = f"its config scales the logits ({', '.join(scaled)})"
    if reason is None:
        return body, head
    if name not in _FELL_BACK:
        _FELL_BACK.add(name)
        logger.warning("%s: loss_logits='trained' falls back to 'columns': %s", name, reason)
    return None


def _trained_logprobs(
    model: Any,
    body: Any,
    head: Any,
    batch: TokenBatch,
    temperature: float,
    chunk_tokens: int | None,
) -> torch.Tensor:
    """``sequence_logprobs`` of the ``trained`` route (see there)."""
    ids = batch.input_ids  # (B, L)
    out = torch.zeros(ids.shape, dtype=torch.float32, device=ids.device)  # (B, L)
    rows, cols = torch.nonzero(batch.policy_mask[:, 1:], as_tuple=True)  # (N,), (N,)
    if rows.numel() == 0:
        return out
    captured: list[Any] = []
    handle = body.register_forward_hook(lambda _module, _args, output: captured.append(output))
    try:
        # Through the outer model (DDP's forward hooks, peft), with the head on no position.
        model(
            input_ids=ids,
            attention_mask=batch.attention_mask,
            use_cache=False,
            logits_to_keep=torch.zeros(0, dtype=torch.long, device=ids.device),
        )
    finally:
        handle.remove()
    output = captured[-1]
    hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
    hidden = hidden[rows, cols]  # (N, H): the positions that predict a policy token
    targets = ids[rows, cols + 1]  # (N,)
    scale = temperature if temperature > 0 else 1.0
    size = chunk_tokens or rows.numel()
    recompute = chunk_tokens is not None and torch.is_grad_enabled()
    pieces = []
    for start in range(0, rows.numel(), size):
        args = (head, hidden[start : start + size], targets[start : start + size], scale)
        if recompute:  # keep only the chunk's hidden states; its logits come back in backward
            pieces.append(checkpoint(_head_logprobs, *args, use_reentrant=False))
        else:
            pieces.append(_head_logprobs(*args))
    return out.index_put((rows, cols + 1), torch.cat(pieces))  # (B, L)


def _head_logprobs(
    head: Any, hidden: torch.Tensor, targets: torch.Tensor, scale: float
) -> torch.Tensor:
    """``(N,)`` log-softmax of ``head(hidden) / scale`` (float32) at ``targets``."""
    logits = head(hidden).float()  # (N, V)
    if scale != 1.0:
        logits = logits / scale  # (N, V): one more (N, V) copy only when it is needed
    picked = logits.gather(-1, targets[:, None]).squeeze(-1)  # (N,)
    return picked - torch.logsumexp(logits, dim=-1)


def length_sorted_micro_batches(
    sequences: Sequence[TokenSequence], size: int, max_tokens: int | None = None
) -> list[list[int]]:
    """Indices of ``sequences`` in chunks of at most ``size``, shortest sequences together.

    ``collate`` pads a chunk to its longest sequence; multi-turn episodes differ in length by
    whole turns, so consecutive chunks of a GRPO batch were about a third padding. The losses
    divide by the step's global token (or sequence) count, so the accumulated gradient does not
    depend on how the batch is split: sorting changes only the padding (and summation order).

    ``max_tokens`` also caps a chunk's padded tokens (its rows x its longest row): a chunk takes
    the next sequence only while that stays within the cap, and a sequence longer than the cap
    forms a chunk of its own.
    """
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i].token_ids))
    chunks: list[list[int]] = []
    current: list[int] = []
    for i in order:
        width = len(sequences[i].token_ids)  # the chunk's longest row if i joins (sorted order)
        full = len(current) == size
        over = max_tokens is not None and (len(current) + 1) * width > max_tokens
        if current and (full or over):
            chunks.append(current)
            current = []
        current.append(i)
    if current:
        chunks.append(current)
    return chunks


def shard(items: Sequence[Any], rank: int, world: int) -> list[Any]:
    """This process's share of a global batch (strided, so shards differ by at most one)."""
    return list(items[rank::world])


# --------------------------------------------------------------------------- metrics


def reduce_sums(accelerator: Any, sums: Mapping[str, float]) -> dict[str, float]:
    """Sum each value over all processes (identity on one process)."""
    if accelerator.num_processes == 1:
        return dict(sums)
    keys = sorted(sums)
    values = torch.tensor(
        [float(sums[k]) for k in keys], dtype=torch.float64, device=accelerator.device
    )
    values = accelerator.reduce(values, reduction="sum")
    return dict(zip(keys, values.tolist(), strict=True))


# --------------------------------------------------------------------------- evaluation


def evaluate(
    policy: Any,
    config: TrainConfig,
    tasks: Sequence[Task],
    accelerator: Any,
    *,
    seed: int = 0,
) -> dict[str, float]:
    """Greedy pass@1 at budget ``t_train`` on ``tasks`` (sharded over processes)."""

    local = shard([t.task_id for t in tasks], accelerator.process_index, accelerator.num_processes)
    sums = {"correct": 0.0, "episodes": 0.0, "tool_calls": 0.0}
    if local:
        params = SamplingParams(temperature=0.0, max_new_tokens=_max_new_tokens(config))
        result = rollout(
            policy,
            config.env_id,
            local,
            n=1,
            budgets=(config.t_train,),
            env_kwargs=env_kwargs_for(config, config.eval_split),
            **env_options(config),
            params=params,
            seed=seed,
        )
        sums["correct"] = float(sum(e.correct for e in result.episodes))
        sums["episodes"] = float(len(result.episodes))
        sums["tool_calls"] = float(sum(e.tool_calls for e in result.episodes))
    totals = reduce_sums(accelerator, sums)
    episodes = max(totals["episodes"], 1.0)
    return {
        "eval/reward": totals["correct"] / episodes,
        "eval/tool_calls": totals["tool_calls"] / episodes,
    }


def _max_new_tokens(config: TrainConfig) -> int:
    return int(getattr(config, "max_new_tokens", 256))


def mean(values: Iterable[float]) -> float:
    """Mean of a possibly empty iterable (0.0 when empty)."""
    values = list(values)
    return float(sum(values) / len(values)) if values else 0.0
