"""GRPO for multi-turn tool-use episodes of any registered env.

The loop, per optimizer step (read ``train_grpo`` top to bottom)::

    tasks    <- the step's tasks (a seeded permutation per epoch; this process's share)
    episodes <- rollout(current policy, tasks, n = G, budget = T_train)       # eval mode, no grad
    A        <- group_advantages(rewards.view(tasks, G))                      # one per episode
    repeat num_iterations times:
        for each micro-batch of episodes (gradients accumulate):
            logp     <- log pi_theta(token | prefix) at every token           # (B, L)
            loss     <- clipped_surrogate(logp, logp_old, A, policy_mask)
                        + kl_coef * aggregate(kl_k3(logp, logp_ref, policy_mask))
            backward(loss)
        clip the gradient norm; optimizer step; schedule step

Only policy tokens (the ids the model sampled) carry loss: the prompt, the chat template and the
env's observations are masked out. ``logp_old`` is the model's own log-probability before the
step's first update, recomputed at training time (with one iteration, ``logp.detach()``, so the
ratio is 1 and the clip is inactive, as in TRL); both use the sampling temperature. With a
``kl_coef`` the reference is the starting policy: LoRA disables the adapter for it, full
fine-tuning keeps a frozen copy.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from passkt.agents.rollout import Episode, rollout
from passkt.agents.train.common import (
    TokenSequence,
    collate,
    env_kwargs_for,
    env_options,
    length_sorted_micro_batches,
    load_model,
    load_task_list,
    mean,
    reduce_sums,
    sequence_logprobs,
    step_seed,
)
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.loop import Timer, TrainingRun, TrainResult
from passkt.agents.train.losses import (
    SurrogateOutput,
    aggregate,
    clipped_surrogate,
    group_advantages,
    kl_k3,
)

logger = logging.getLogger(__name__)


def train_grpo(config: GRPOConfig, *, resume: bool = False) -> TrainResult:
    """Train ``config.policy`` with GRPO on the tasks the config selects.

    Args:
        config: The run's config (see ``GRPOConfig``).
        resume: Continue from the newest checkpoint in ``config.output_dir``.

    Returns:
        Where the run wrote its checkpoints and metrics, and the last step's metrics.
    """
    tasks = load_task_list(config, config.split, task_ids=config.task_ids, limit=config.limit)
    run = TrainingRun.start(config, resume=resume)
    with run:  # releases the writer lock however the run ends
        run.plan([task.task_id for task in tasks], config.tasks_per_step, config.num_iterations)
        reference = _reference_model(config, run)
        for step in run.steps("grpo"):
            timer = Timer()
            task_ids = run.local_items(step)
            with timer("rollout"):
                episodes, generated = sample_groups(run, config, task_ids, step)
            rewards = torch.tensor(
                [e.reward for e in episodes], dtype=torch.float32
            )  # (tasks * G,)
            advantages = env_failure_free_advantages(
                rewards.view(len(task_ids), config.group_size),
                torch.tensor([e.env_error is None for e in episodes]).view(len(task_ids), -1),
                config,
            ).view(-1)  # (tasks * G,)
            sequences = [TokenSequence.from_episode(e, config.max_length) for e in episodes]
            with timer("update"):
                update = policy_update(run, config, sequences, advantages, reference)
            metrics = _step_metrics(run, config, episodes, rewards, generated, update, timer)
            metrics["samples"] = float((step + 1) * config.tasks_per_step * config.group_size)
            run.end_step(step, metrics, postfix=f"reward={metrics['reward/mean']:.3f}")
        return run.finish()


def env_failure_free_advantages(
    rewards: torch.Tensor, valid: torch.Tensor, config: GRPOConfig
) -> torch.Tensor:
    """Group advantages ``(tasks, G)`` over the episodes the env did not fail (``valid``): an
    env failure (``Episode.env_error``) says nothing about the policy, so it gets advantage 0 and
    stays out of its group's mean and spread; a group with fewer than two such episodes has
    nothing to compare and gets 0 throughout. Without env failures this is
    ``group_advantages``."""
    if bool(valid.all()):
        return group_advantages(rewards, config.advantage, config.advantage_eps)
    out = torch.zeros_like(rewards, dtype=torch.float32)
    for row in range(rewards.shape[0]):
        keep = valid[row]
        if int(keep.sum()) >= 2:
            out[row, keep] = group_advantages(
                rewards[row, keep], config.advantage, config.advantage_eps
            )
    return out


def sample_groups(
    run: TrainingRun, config: GRPOConfig, task_ids: Sequence[str], step: int
) -> tuple[list[Episode], int]:
    """``G`` episodes of each task with the current policy; returns them and tokens generated."""
    result = rollout(
        run.policy,
        config.env_id,
        list(task_ids),
        n=config.group_size,
        budgets=(config.t_train,),
        env_kwargs=env_kwargs_for(config, config.split),
        **env_options(config),
        params=config.sampling_params(),
        seed=step_seed(config.seed, step, run.rank),
    )
    return result.episodes, result.stats.generated_tokens


@dataclass(frozen=True)
class UpdateStats:
    """Sums over this process's micro-batches (reduced over processes by the caller)."""

    policy_loss: float
    kl: float
    clipped_tokens: float
    policy_tokens: float
    grad_norm: float


def policy_update(
    run: TrainingRun,
    config: GRPOConfig,
    sequences: Sequence[TokenSequence],
    advantages: torch.Tensor,
    reference: Any,
) -> UpdateStats:
    """The optimizer step(s) on one batch of episodes; returns loss statistics.

    The loss of every micro-batch is divided by the *global* number of policy tokens (or of
    sequences, for ``sequence_mean``) of the step, times the process count because the gradient
    all-reduce averages: so the accumulated gradient is that of the whole batch's loss however it
    was split over micro-batches and processes.
    """
    device = run.accelerator.device
    pad_id = run.policy.pad_token_id
    counts = {
        "tokens": float(sum(s.num_policy_tokens for s in sequences)),
        "sequences": float(len(sequences)),
    }
    totals = reduce_sums(run.accelerator, counts)
    key = "tokens" if config.aggregation == "token_mean" else "sequences"
    normalizer = totals[key] / run.world
    chunks = length_sorted_micro_batches(
        sequences, config.micro_batch_size, config.micro_batch_tokens
    )
    batches = [collate([sequences[i] for i in chunk], pad_id, device) for chunk in chunks]
    chunk_advantages = [advantages[list(chunk)].to(device) for chunk in chunks]  # each (B,)
    old = None
    if config.num_iterations > 1:
        old = _frozen_logprobs(run.unwrapped, batches, config)
    ref = _reference_logprobs(run, reference, batches, config) if config.kl_coef > 0 else None

    policy_loss = kl_total = clipped = 0.0
    grad_norms = []
    for _ in range(config.num_iterations):
        for j, batch in enumerate(batches):
            last = j == len(batches) - 1
            sync = contextlib.nullcontext() if last else run.accelerator.no_sync(run.model)
            with sync:
                logp = logprobs(run.model, batch, config)  # (B, L)
                loss, surrogate, kl = grpo_loss(
                    logp,
                    batch.policy_mask,
                    chunk_advantages[j],
                    config,
                    normalizer,
                    logp_old=old[j] if old is not None else None,
                    logp_ref=ref[j] if ref is not None else None,
                )
                run.accelerator.backward(loss)
            kl_total += kl.item() if kl is not None else 0.0
            policy_loss += surrogate.loss.item()
            clipped += surrogate.clip_frac.item() * batch.policy_mask.sum().item()
        grad_norms.append(run.optimizer_step())
    iterations = config.num_iterations
    return UpdateStats(
        policy_loss=policy_loss / iterations,
        kl=kl_total / iterations,
        clipped_tokens=clipped / iterations,
        policy_tokens=counts["tokens"],
        grad_norm=mean(grad_norms),
    )


def grpo_loss(
    logp: torch.Tensor,
    policy_mask: torch.Tensor,
    advantages: torch.Tensor,
    config: GRPOConfig,
    normalizer: float | None = None,
    *,
    logp_old: torch.Tensor | None = None,
    logp_ref: torch.Tensor | None = None,
) -> tuple[torch.Tensor, SurrogateOutput, torch.Tensor | None]:
    """The GRPO loss of one micro-batch: clipped surrogate plus ``kl_coef`` times the k3 KL.

    Args:
        logp: ``(B, L)`` log-probabilities of the tokens under the model being trained.
        policy_mask: ``(B, L)`` bool, True at policy tokens: the only ones that carry loss.
        advantages: ``(B,)`` one per episode.
        config: Clip range, KL coefficient, aggregation.
        normalizer: Denominator of the whole step (see ``losses``); default: this batch's own.
        logp_old: ``(B, L)`` under the policy before this step's updates (default:
            ``logp.detach()``, ratio 1).
        logp_ref: ``(B, L)`` under the reference model (needed when ``kl_coef > 0``).

    Returns:
        ``(loss, surrogate, kl)``; ``kl`` is the aggregated k3 term, or None without KL.
    """
    surrogate = clipped_surrogate(
        logp,
        logp.detach() if logp_old is None else logp_old,
        advantages,
        policy_mask,
        config.clip_low,
        config.clip_high,
        config.aggregation,
        normalizer,
    )
    if config.kl_coef == 0:
        return surrogate.loss, surrogate, None
    if logp_ref is None:
        raise ValueError("kl_coef > 0 needs logp_ref, the reference model's log-probabilities")
    kl = aggregate(kl_k3(logp, logp_ref, policy_mask), policy_mask, config.aggregation, normalizer)
    return surrogate.loss + config.kl_coef * kl, surrogate, kl


def logprobs(model: Any, batch: Any, config: GRPOConfig) -> torch.Tensor:
    """``(B, L)`` log-probabilities of a micro-batch at the sampling temperature, the output head
    run where ``config.loss_logits`` says (``sequence_logprobs``)."""
    return sequence_logprobs(
        model,
        batch,
        config.temperature,
        logits=config.loss_logits,
        chunk_tokens=config.logits_chunk_tokens,
    )


@torch.no_grad()
def _frozen_logprobs(model: Any, batches: Sequence[Any], config: GRPOConfig) -> list[torch.Tensor]:
    return [logprobs(model, batch, config) for batch in batches]


def _reference_logprobs(
    run: TrainingRun, reference: Any, batches: Sequence[Any], config: GRPOConfig
) -> list[torch.Tensor]:
    if reference is not None:
        return _frozen_logprobs(reference, batches, config)
    with run.unwrapped.disable_adapter():  # LoRA: the base model is the reference
        return _frozen_logprobs(run.unwrapped, batches, config)


def _reference_model(config: GRPOConfig, run: TrainingRun) -> Any:
    """A frozen copy of the starting policy when the KL term needs one (full fine-tuning)."""
    if config.kl_coef == 0 or config.finetune == "lora":
        return None
    model, _ = load_model(config, trainable=False)
    return model.to(run.accelerator.device)


def _step_metrics(
    run: TrainingRun,
    config: GRPOConfig,
    episodes: Sequence[Episode],
    rewards: torch.Tensor,
    generated: int,
    update: UpdateStats,
    timer: Timer,
) -> dict[str, float]:
    """The step's metrics, reduced over processes."""
    groups = rewards.view(-1, config.group_size)  # (tasks, G)
    sums = {
        "episodes": float(len(episodes)),
        "groups": float(groups.shape[0]),
        "reward": float(rewards.sum()),
        "reward_sq": float((rewards**2).sum()),
        "all_equal": float((groups.max(-1).values == groups.min(-1).values).sum()),
        "tool_calls": float(sum(e.tool_calls for e in episodes)),
        "turns": float(sum(len(e.turns) for e in episodes)),
        "truncated": float(sum(e.truncated for e in episodes)),
        "env_failures": float(sum(e.env_error is not None for e in episodes)),
        "generated": float(generated),
        "policy_tokens": update.policy_tokens,
        "clipped": update.clipped_tokens,
        "policy_loss": update.policy_loss,
        "kl": update.kl,
    }
    totals = reduce_sums(run.accelerator, sums)
    n = max(totals["episodes"], 1.0)
    reward_mean = totals["reward"] / n
    metrics = {
        "reward/mean": reward_mean,
        "reward/std": max(totals["reward_sq"] / n - reward_mean**2, 0.0) ** 0.5,
        "groups/all_equal": totals["all_equal"] / max(totals["groups"], 1.0),
        "episode/tool_calls": totals["tool_calls"] / n,
        "episode/turns": totals["turns"] / n,
        "episode/truncated": totals["truncated"] / n,
        "episode/env_failures": totals["env_failures"],
        "episode/policy_tokens": totals["policy_tokens"] / n,
        "loss/policy": totals["policy_loss"] / run.world,
        "clip_frac": totals["clipped"] / max(totals["policy_tokens"], 1.0),
        "grad_norm": update.grad_norm,
        "tokens/generated": totals["generated"],
        "tokens/s": totals["generated"] / max(timer.seconds.get("rollout", 0.0), 1e-9),
        "time/rollout_s": timer.seconds.get("rollout", 0.0),
        "time/update_s": timer.seconds.get("update", 0.0),
    }
    if config.kl_coef > 0:
        metrics["kl"] = totals["kl"] / run.world
    return metrics
