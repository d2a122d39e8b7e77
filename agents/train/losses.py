"""The pure pieces of GRPO and SFT: advantages, the clipped surrogate, the k3 KL, token NLL.

Shapes: ``B`` sequences (episodes) in a micro-batch, ``L`` token positions, ``V`` the vocabulary,
``G`` samples per task. Per-token tensors are aligned with the *targets*: position ``t`` of a
``(B, L)`` tensor is about predicting token ``t``, and ``mask[b, t]`` is True exactly when that
token is a policy token (sampled by the model). Prompt and observation tokens are never trained.

Token aggregation (``Aggregation``):

- ``token_mean`` (DAPO): every policy token in the batch weighs the same,
  ``sum_b sum_t m_bt * x_bt / sum_b sum_t m_bt``. Long episodes count more.
- ``sequence_mean`` (the original GRPO): average within each sequence, then over sequences,
  ``(1/B) sum_b (sum_t m_bt * x_bt / sum_t m_bt)``. Every episode counts the same.

With gradient accumulation (and several processes) the denominator must be the one of the *whole*
batch, not of each micro-batch, or the gradient would depend on how the batch was split: pass it as
``normalizer`` (the total policy tokens, or the total sequences, of the optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

AdvantageMode = Literal["std", "dr_grpo", "rloo"]
Aggregation = Literal["token_mean", "sequence_mean"]


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of ``values`` where ``mask`` is True (0 where nothing is selected).

    Args:
        values: Any shape.
        mask: Same shape as ``values``, bool or 0/1.
        dim: Reduce over this dimension only; ``None`` reduces over everything.
    """
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} differ")
    weights = mask.to(values.dtype)
    if dim is None:
        return (values * weights).sum() / weights.sum().clamp(min=1.0)
    return (values * weights).sum(dim) / weights.sum(dim).clamp(min=1.0)


def group_advantages(
    rewards: torch.Tensor, mode: AdvantageMode = "std", eps: float = 1e-4
) -> torch.Tensor:
    """Advantages of the samples of each group (the G episodes of one task).

    Args:
        rewards: ``(G,)`` for one group or ``(B, G)`` for B groups.
        mode: ``std``: ``(r - mean) / (std + eps)`` with the unbiased std (GRPO);
            ``dr_grpo``: ``r - mean`` (Dr. GRPO: no std division, which biases towards easy and
            hard groups); ``rloo``: ``r - mean of the other G - 1 samples`` (leave-one-out),
            which equals ``G / (G - 1) * (r - mean)``.
        eps: Added to the std so that a group with equal rewards gets zero advantages.

    Returns:
        Same shape as ``rewards``.
    """
    if rewards.dim() not in (1, 2):
        raise ValueError(f"rewards must be (G,) or (B, G), got shape {tuple(rewards.shape)}")
    group_size = rewards.shape[-1]
    if group_size < 2:
        raise ValueError(f"a group needs at least 2 samples to compare, got G = {group_size}")
    rewards = rewards.to(torch.float32)
    mean = rewards.mean(dim=-1, keepdim=True)  # (B, 1) or (1,)
    if mode == "std":
        std = rewards.std(dim=-1, keepdim=True)  # unbiased, as in TRL
        return (rewards - mean) / (std + eps)
    if mode == "dr_grpo":
        return rewards - mean
    if mode == "rloo":
        others = (rewards.sum(dim=-1, keepdim=True) - rewards) / (group_size - 1)
        return rewards - others
    raise ValueError(f"Unknown advantage mode {mode!r}; expected 'std', 'dr_grpo' or 'rloo'.")


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    mode: Aggregation = "token_mean",
    normalizer: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a ``(B, L)`` per-token quantity to a scalar over policy tokens (see module doc).

    Args:
        per_token: ``(B, L)``.
        mask: ``(B, L)`` bool, True at policy tokens.
        mode: ``token_mean`` or ``sequence_mean``.
        normalizer: The denominator of the whole optimizer step (total policy tokens for
            ``token_mean``, total sequences for ``sequence_mean``); default: this batch's own.
    """
    if per_token.shape != mask.shape or per_token.dim() != 2:
        raise ValueError(
            f"per_token {tuple(per_token.shape)} and mask {tuple(mask.shape)} must both be (B, L)"
        )
    weights = mask.to(per_token.dtype)  # (B, L)
    if mode == "token_mean":
        total = (per_token * weights).sum()
        denom = weights.sum() if normalizer is None else normalizer
    elif mode == "sequence_mean":
        per_sequence = (per_token * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)  # (B,)
        total = per_sequence.sum()
        denom = float(per_token.shape[0]) if normalizer is None else normalizer
    else:
        raise ValueError(f"Unknown aggregation {mode!r}; expected 'token_mean' or 'sequence_mean'.")
    if isinstance(denom, torch.Tensor):
        return total / denom.clamp(min=1.0)
    return total / max(float(denom), 1.0)


@dataclass(frozen=True)
class SurrogateOutput:
    """The clipped surrogate of one batch."""

    loss: torch.Tensor
    """Scalar to minimise: minus the aggregated clipped objective."""
    per_token: torch.Tensor
    """``(B, L)`` per-token loss ``-min(ratio * A, clip(ratio) * A)``, 0 off the mask."""
    clip_frac: torch.Tensor
    """Scalar: fraction of policy tokens whose gradient the clip removed."""
    ratio: torch.Tensor
    """``(B, L)`` importance ratio ``exp(logp_new - logp_old)`` (1 off the mask)."""


def clipped_surrogate(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    aggregation: Aggregation = "token_mean",
    normalizer: float | torch.Tensor | None = None,
) -> SurrogateOutput:
    """PPO's clipped objective at the token level, over policy tokens only.

    Per token: ``ratio = exp(logp_new - logp_old)`` and
    ``objective = min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)``; the loss is
    ``-aggregate(objective)``. Every token of a sequence shares the sequence's advantage.
    Asymmetric bounds (``clip_high > clip_low``) are DAPO's clip-higher.

    Args:
        logp_new: ``(B, L)`` log-probabilities of the targets under the model being trained.
        logp_old: ``(B, L)`` the same under the policy that sampled them (no gradient).
        advantages: ``(B,)`` one advantage per sequence, or ``(B, L)``.
        mask: ``(B, L)`` bool, True at policy tokens.
        clip_low: Lower clip range epsilon (ratio >= 1 - clip_low).
        clip_high: Upper clip range epsilon (ratio <= 1 + clip_high).
        aggregation: How tokens are averaged (module doc).
        normalizer: Denominator of the whole optimizer step (module doc).
    """
    if logp_new.shape != logp_old.shape or logp_new.shape != mask.shape:
        raise ValueError(
            f"logp_new {tuple(logp_new.shape)}, logp_old {tuple(logp_old.shape)} and mask "
            f"{tuple(mask.shape)} must have the same (B, L) shape"
        )
    if not (0 <= clip_low < 1 and clip_high >= 0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if advantages.dim() == 1:
        advantages = advantages[:, None]  # (B, 1) broadcasts over L
    mask = mask.bool()
    log_ratio = torch.where(mask, logp_new - logp_old.detach(), torch.zeros_like(logp_new))
    ratio = torch.exp(log_ratio)  # (B, L)
    unclipped = ratio * advantages  # (B, L)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * advantages  # (B, L)
    per_token = -torch.minimum(unclipped, clipped) * mask  # (B, L)
    loss = aggregate(per_token, mask, aggregation, normalizer)
    with torch.no_grad():
        low = (ratio < 1.0 - clip_low) & (advantages < 0)
        high = (ratio > 1.0 + clip_high) & (advantages > 0)
        clip_frac = masked_mean((low | high).to(logp_new.dtype), mask)
    return SurrogateOutput(loss=loss, per_token=per_token, clip_frac=clip_frac, ratio=ratio)


def kl_k3(logp: torch.Tensor, logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(policy || reference): ``exp(d) - d - 1`` with ``d = ref - logp``.

    Unbiased for samples from the policy and never negative (Schulman's "k3"). Aggregate it with
    ``aggregate`` like the surrogate.

    Args:
        logp: ``(B, L)`` log-probabilities under the model being trained.
        logp_ref: ``(B, L)`` the same under the frozen reference model.
        mask: ``(B, L)`` bool, True at policy tokens.

    Returns:
        ``(B, L)``, 0 off the mask.
    """
    if logp.shape != logp_ref.shape or logp.shape != mask.shape:
        raise ValueError(
            f"logp {tuple(logp.shape)}, logp_ref {tuple(logp_ref.shape)} and mask "
            f"{tuple(mask.shape)} must have the same (B, L) shape"
        )
    mask = mask.bool()
    delta = torch.where(mask, logp_ref.detach() - logp, torch.zeros_like(logp))  # (B, L)
    return (torch.exp(delta) - delta - 1.0) * mask


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of each token given the ones before it, from next-token logits.

    Args:
        logits: ``(B, L, V)`` the model's outputs for ``input_ids``.
        input_ids: ``(B, L)``.
        temperature: Logits are divided by it (the sampling distribution); 0 is treated as 1.

    Returns:
        ``(B, L)``: entry ``t`` is ``log p(input_ids[t] | input_ids[:t])``; entry 0 is 0 (the
        first token has no prediction).
    """
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}"
        )
    scale = temperature if temperature > 0 else 1.0
    targets = input_ids[:, 1:]  # (B, L-1)
    rows = []
    for row_logits, row_targets in zip(logits[:, :-1], targets, strict=True):  # one row at a time
        row_logits = row_logits.float() / scale  # (L-1, V): saves a full (B, L, V) float copy
        picked = row_logits.gather(-1, row_targets[:, None]).squeeze(-1)  # (L-1,)
        rows.append(picked - torch.logsumexp(row_logits, dim=-1))
    out = torch.stack(rows)  # (B, L-1)
    return torch.cat([out.new_zeros(out.shape[0], 1), out], dim=1)  # (B, L)


def policy_nll(
    logp: torch.Tensor,
    mask: torch.Tensor,
    aggregation: Aggregation = "token_mean",
    normalizer: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Negative log-likelihood of the policy tokens (the SFT loss).

    Args:
        logp: ``(B, L)`` from ``token_logprobs``.
        mask: ``(B, L)`` bool, True at policy tokens.
        aggregation: How tokens are averaged (module doc).
        normalizer: Denominator of the whole optimizer step (module doc).
    """
    return aggregate(-logp * mask, mask, aggregation, normalizer)
