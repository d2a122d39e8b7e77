"""Check a TRL run against passkt's own GRPO on one fixed batch: same loss, same gradient.

``fixed_batch_agreement`` runs the adapter once through TRL's own batch preparation
(``_generate_and_score_completions``: the rollout, TRL's padding, masks and advantages), then
computes TRL's loss and passkt's ``grpo_loss`` on the very same episodes with the same advantages,
and compares the two values, their gradients, and TRL's log-probabilities at the env mask with the
sampling log-probabilities the rollout recorded. Configured alike (token-mean / ``dapo``, no KL,
one pass without accumulation) they agree to float precision; a disagreement means the masks or
log-probabilities do not reach TRL as they should.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from passkt.agents.train.common import TokenSequence, collate
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.grpo import grpo_loss, logprobs
from passkt.agents.train.losses import group_advantages
from passkt.agents.train.trl import build_dataset


@dataclass(frozen=True)
class Agreement:
    """TRL next to passkt on one batch."""

    trl_loss: float
    passkt_loss: float
    max_grad_diff: float
    """Largest absolute difference of any gradient entry."""
    max_grad: float
    """Largest absolute gradient entry (the scale of ``max_grad_diff``)."""
    max_logprob_diff: float
    """Largest difference between TRL's log-probabilities at the env mask and the rollout's."""
    max_advantage_diff: float
    """Largest difference between TRL's advantages and ``group_advantages`` of the rewards."""
    rewards: tuple[float, ...]


def fixed_batch_agreement(trainer: Any, config: GRPOConfig) -> Agreement:
    """Compare TRL's and passkt's GRPO loss on the first ``tasks_per_step`` tasks x ``group_size``.

    The trainer must come from ``make_trl_trainer(config)``, and the batch must be one
    micro-batch (``micro_batch_size = tasks_per_step x group_size``): one pass, no accumulation.
    """
    if config.tasks_per_step * config.group_size != config.micro_batch_size:
        raise ValueError("use one micro-batch: micro_batch_size = tasks_per_step x group_size")
    trainer.current_gradient_accumulation_steps = 1  # set by TRL's training loop otherwise
    num_tasks = config.tasks_per_step
    rows = list(build_dataset(config))[:num_tasks]
    inputs = [dict(row) for row in rows for _ in range(config.group_size)]  # as TRL repeats them
    out = trainer._generate_and_score_completions(inputs)
    episodes, samples = trainer.rollout_func.last_episodes, trainer.rollout_func.last_samples
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)  # (B,)
    advantages = group_advantages(
        rewards.view(num_tasks, config.group_size), config.advantage, config.advantage_eps
    ).view(-1)  # (B,)

    model = trainer.model
    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)  # (B, P + C)
    attention = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)  # (B, P + C)
    with torch.no_grad():
        trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(
            model, ids, attention, out["completion_ids"].size(1)
        )  # (B, C)
    mask = (out["completion_mask"] * out["tool_mask"]).bool()  # (B, C)
    recorded = torch.tensor(
        [v for s in samples for v, m in zip(s.logprobs, s.env_mask, strict=True) if m]
    )

    model.zero_grad()
    trl_loss = trainer.compute_loss(model, out)
    trl_loss.backward()
    trl_grads = [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    batch = collate(
        [TokenSequence.from_episode(e) for e in episodes], trainer.processing_class.pad_token_id
    )
    logp = logprobs(model, batch, config)  # (B, L)
    passkt_loss, _, _ = grpo_loss(logp, batch.policy_mask, advantages, config)
    passkt_loss.backward()
    ours = [p.grad.detach() for p in model.parameters() if p.grad is not None]
    diffs = [(a - b).abs().max().item() for a, b in zip(ours, trl_grads, strict=True)]
    model.zero_grad()
    return Agreement(
        trl_loss=trl_loss.item(),
        passkt_loss=passkt_loss.item(),
        max_grad_diff=max(diffs),
        max_grad=max(g.abs().max().item() for g in trl_grads),
        max_logprob_diff=(trl_logp[mask] - recorded).abs().max().item(),
        max_advantage_diff=(out["advantages"].float() - advantages).abs().max().item(),
        rewards=tuple(rewards.tolist()),
    )
