"""Hand-checked numbers for the pure pieces of GRPO and SFT (passkt.agents.train.losses)."""

from __future__ import annotations

import math

import pytest
import torch

from passkt.agents.train.losses import (
    aggregate,
    clipped_surrogate,
    group_advantages,
    kl_k3,
    masked_mean,
    policy_nll,
    token_logprobs,
)


def close(actual: torch.Tensor, expected: list | float, tol: float = 1e-5) -> None:
    torch.testing.assert_close(
        actual, torch.tensor(expected, dtype=actual.dtype), atol=tol, rtol=tol
    )


# --------------------------------------------------------------------------- masked_mean


def test_masked_mean_ignores_masked_values_and_handles_empty_rows():
    values = torch.tensor([[1.0, 2.0, 100.0], [4.0, 6.0, 8.0]])
    mask = torch.tensor([[True, True, False], [False, False, False]])
    close(masked_mean(values, mask), 1.5)  # (1 + 2) / 2
    close(masked_mean(values, mask, dim=1), [1.5, 0.0])  # empty row -> 0, not NaN
    with pytest.raises(ValueError, match=r"values .* and mask .* differ"):
        masked_mean(values, mask[:, :2])


# --------------------------------------------------------------------------- group_advantages


def test_std_advantages_by_hand():
    # mean 0.5; unbiased std = sqrt((4 * 0.25) / 3) = 0.57735; (1 - 0.5) / 0.57735 = 0.86603
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), "std", eps=0.0)
    close(adv, [0.866025, -0.866025, -0.866025, 0.866025])


def test_dr_grpo_advantages_are_centred_only():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), "dr_grpo")
    close(adv, [0.75, -0.25, -0.25, -0.25])


def test_rloo_advantages_subtract_the_mean_of_the_others():
    # sample 0: 1 - mean(0, 0, 0) = 1; the others: 0 - mean(1, 0, 0) = -1/3
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), "rloo")
    close(adv, [1.0, -1 / 3, -1 / 3, -1 / 3])
    # identity: rloo = G / (G - 1) * (r - mean)
    rewards = torch.tensor([0.3, 0.9, 0.1, 0.5, 0.2])
    close(group_advantages(rewards, "rloo"), (5 / 4 * (rewards - rewards.mean())).tolist())


def test_batched_groups_are_independent_and_equal_rewards_give_zero():
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 3.0]])
    adv = group_advantages(rewards, "std", eps=1e-4)
    close(adv[0], [0.0, 0.0, 0.0])  # a group where all agree teaches nothing
    # row 1: mean 1, unbiased std sqrt((1 + 1 + 4) / 2) = sqrt(3)
    s = math.sqrt(3) + 1e-4
    close(adv[1], [-1 / s, -1 / s, 2 / s])


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="at least 2 samples"):
        group_advantages(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="Unknown advantage mode 'ppo'"):
        group_advantages(torch.tensor([1.0, 0.0]), "ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rewards must be \(G,\) or \(B, G\)"):
        group_advantages(torch.zeros(2, 2, 2))


# --------------------------------------------------------------------------- aggregate


def test_token_mean_and_sequence_mean_differ_as_documented():
    # sequence 0: one token worth 2; sequence 1: three tokens worth 0
    values = torch.tensor([[2.0, 9.0, 9.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, False, False], [True, True, True]])
    close(aggregate(values, mask, "token_mean"), 0.5)  # (2 + 0 + 0 + 0) / 4 tokens
    close(aggregate(values, mask, "sequence_mean"), 1.0)  # (2 / 1 + 0 / 3) / 2 sequences
    # an external normalizer replaces the batch's own denominator (gradient accumulation)
    close(aggregate(values, mask, "token_mean", normalizer=8.0), 0.25)
    close(aggregate(values, mask, "sequence_mean", normalizer=4.0), 0.5)
    with pytest.raises(ValueError, match="Unknown aggregation 'sum'"):
        aggregate(values, mask, "sum")  # type: ignore[arg-type]


def test_token_mean_over_micro_batches_equals_the_whole_batch():
    torch.manual_seed(0)
    values = torch.randn(6, 5)
    mask = torch.rand(6, 5) > 0.4
    whole = aggregate(values, mask, "token_mean")
    total = mask.sum()
    split = aggregate(values[:2], mask[:2], "token_mean", total) + aggregate(
        values[2:], mask[2:], "token_mean", total
    )
    close(split, whole.item())


# --------------------------------------------------------------------------- clipped_surrogate


def _surrogate_case():
    # Four policy tokens, one per (ratio, advantage) case; the last column is a prompt token.
    ratios = torch.tensor([[1.5, 1.5, 9.0], [0.5, 0.5, 9.0]])
    logp_old = torch.full_like(ratios, -1.0)
    logp_new = (logp_old + ratios.log()).requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0, 1.0], [-1.0, 1.0, 1.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    return logp_new, logp_old, advantages, mask


def test_clipped_surrogate_by_hand():
    logp_new, logp_old, advantages, mask = _surrogate_case()
    out = clipped_surrogate(logp_new, logp_old, advantages, mask, clip_low=0.2, clip_high=0.2)
    # ratio 1.5, A=+1: min(1.5, 1.2) = 1.2 (clipped) -> loss -1.2
    # ratio 1.5, A=-1: min(-1.5, -1.2) = -1.5          -> loss 1.5
    # ratio 0.5, A=-1: min(-0.5, -0.8) = -0.8 (clipped) -> loss 0.8
    # ratio 0.5, A=+1: min(0.5, 0.8) = 0.5             -> loss -0.5
    close(out.per_token, [[-1.2, 1.5, 0.0], [0.8, -0.5, 0.0]])
    close(out.loss, (-1.2 + 1.5 + 0.8 - 0.5) / 4)
    close(out.clip_frac, 0.5)  # two of four policy tokens were clipped
    out.loss.backward()
    # The clipped tokens and the prompt token get no gradient; d(-ratio * A)/dlogp = -ratio * A.
    close(logp_new.grad, [[0.0, 1.5 / 4, 0.0], [0.0, -0.5 / 4, 0.0]])


def test_clip_higher_is_asymmetric():
    logp_new, logp_old, advantages, mask = _surrogate_case()
    out = clipped_surrogate(logp_new, logp_old, advantages, mask, clip_low=0.2, clip_high=0.6)
    # ratio 1.5 with A=+1 is now inside 1 + 0.6: loss -1.5, not clipped
    close(out.per_token[0, 0], -1.5)
    close(out.clip_frac, 0.25)


def test_ratio_one_gives_minus_the_mean_advantage_and_the_policy_gradient():
    logp = torch.tensor([[-0.5, -2.0, -1.0]], requires_grad=True)
    mask = torch.tensor([[False, True, True]])
    out = clipped_surrogate(logp, logp.detach(), torch.tensor([2.0]), mask)
    close(out.loss, -2.0)
    out.loss.backward()
    close(logp.grad, [[0.0, -1.0, -1.0]])  # -A / tokens at each policy token


def test_surrogate_shape_errors():
    logp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="same \\(B, L\\) shape"):
        clipped_surrogate(logp, torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3, dtype=bool))
    with pytest.raises(ValueError, match="clip_low < 1"):
        clipped_surrogate(logp, logp, torch.zeros(2), torch.ones(2, 3, dtype=bool), clip_low=1.0)


# --------------------------------------------------------------------------- kl_k3


def test_kl_k3_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    logp_ref = torch.log(torch.tensor([[0.25, 0.5, 0.1]]))
    mask = torch.tensor([[True, True, False]])
    # d = log(0.25 / 0.5) = -ln 2: e^d - d - 1 = 0.5 + 0.693147 - 1 = 0.193147; equal -> 0
    close(kl_k3(logp, logp_ref, mask), [[0.193147, 0.0, 0.0]])


def test_kl_k3_is_non_negative_and_its_mean_estimates_kl():
    torch.manual_seed(0)
    p = torch.tensor([0.7, 0.2, 0.1])
    q = torch.tensor([0.4, 0.4, 0.2])
    samples = torch.multinomial(p, 200_000, replacement=True)[None, :]  # (1, N) drawn from p
    k3 = kl_k3(p.log()[samples], q.log()[samples], torch.ones_like(samples, dtype=torch.bool))
    assert (k3 >= 0).all()
    exact = float((p * (p / q).log()).sum())  # KL(p || q) = 0.18397
    assert abs(k3.mean().item() - exact) < 0.005


# --------------------------------------------------------------------------- token_logprobs, nll


def test_token_logprobs_align_with_targets():
    # vocabulary of 2: logits [0, ln 3] give p = [0.25, 0.75] at every position
    logits = torch.tensor([[[0.0, math.log(3.0)]] * 3])  # (1, 3, 2)
    ids = torch.tensor([[1, 0, 1]])
    out = token_logprobs(logits, ids)
    close(out, [[0.0, math.log(0.25), math.log(0.75)]])
    # temperature 2 halves the logits: p = softmax([0, ln 3 / 2]) = [1 / (1 + sqrt 3), ...]
    hot = token_logprobs(logits, ids, temperature=2.0)
    close(hot[0, 1], math.log(1 / (1 + math.sqrt(3))))


def test_gradient_flows_only_from_policy_token_targets():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, requires_grad=True)  # (B, L, V)
    ids = torch.randint(0, 7, (2, 5))
    mask = torch.tensor([[False, False, True, True, False], [False, True, False, False, True]])
    loss = policy_nll(token_logprobs(logits, ids), mask)
    loss.backward()
    # Position t's logits predict token t + 1: only rows whose *next* token is a policy token
    # receive gradient. Prompt / observation targets contribute nothing.
    predicts_policy = torch.zeros(2, 5, dtype=torch.bool)
    predicts_policy[:, :-1] = mask[:, 1:]
    row_grad = logits.grad.abs().sum(-1)  # (B, L)
    assert (row_grad[~predicts_policy] == 0).all()
    assert (row_grad[predicts_policy] > 0).all()
    # Changing an observation-token target leaves the loss unchanged.
    changed = ids.clone()
    changed[0, 4] = (changed[0, 4] + 1) % 7  # position 4 of row 0 is an observation token
    again = policy_nll(token_logprobs(logits, changed), mask)
    close(again.detach(), loss.item())


def test_policy_nll_by_hand():
    logp = torch.log(torch.tensor([[1.0, 0.5, 0.25], [1.0, 0.5, 0.9]]))
    mask = torch.tensor([[False, True, True], [False, True, False]])
    # token mean of -log p over (0.5, 0.25, 0.5) = (ln 2 + ln 4 + ln 2) / 3 = 4 ln 2 / 3
    close(policy_nll(logp, mask), 4 * math.log(2) / 3)
