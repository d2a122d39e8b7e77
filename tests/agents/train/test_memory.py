"""The update's memory options change memory, not the update: micro-batches capped by padded
tokens, activation checkpointing, and the output head only where the loss needs it.

Each option is compared with the trainers' path without it on the same batch (same loss, same
gradients within float tolerance), on small transformers models built here: a 2-layer Llama with
tied embeddings (the testbed's and SmolLM2's layout) and a 2-layer Qwen2 without (Qwen2.5-7B's).
"""

from __future__ import annotations

import logging
import math
import random

import pytest
import torch

from passkt.agents.train.common import (
    TokenSequence,
    collate,
    length_sorted_micro_batches,
    sequence_logprobs,
)
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.grpo import grpo_loss, policy_update
from passkt.agents.train.loop import TrainingRun
from passkt.agents.train.sft import sft_update

VOCAB = 101


def tiny_model(arch: str):
    """A random 2-layer causal LM with a small vocabulary: ``llama`` (tied head) or ``qwen2``."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }[arch]
    config = config_cls(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=arch == "llama",
    )
    torch.manual_seed(0)
    return model_cls(config).train()


def episodes(lengths=(23, 61, 40, 9, 52), seed=0) -> list[TokenSequence]:
    """Multi-turn-shaped rows: a prompt, then turns (trained) and observations (not) of random
    lengths, so each row's trained positions differ from the others'."""
    rng = random.Random(seed)
    out = []
    for n in lengths:
        ids = [rng.randrange(3, VOCAB) for _ in range(n)]
        mask, trained, t = [], False, 0
        while len(mask) < n:
            span = rng.randint(2, 8) if t else rng.randint(4, 10)  # the prompt first
            mask += [trained] * span
            trained, t = not trained, t + 1
        out.append(TokenSequence(tuple(ids), tuple(mask[:n])))
    return out


def loss_and_grads(model, batch, advantages, **route):
    model.zero_grad()
    logp = sequence_logprobs(model, batch, 0.7, **route)  # (B, L)
    config = GRPOConfig(policy="hf:x")
    loss, _, _ = grpo_loss(logp, batch.policy_mask, advantages, config)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), logp.detach(), grads


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_every_logits_route_gives_the_same_loss_and_gradients(arch):
    model = tiny_model(arch)
    batch = collate(episodes(), pad_id=0)
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75])
    loss, logp, grads = loss_and_grads(model, batch, advantages, logits="all")
    assert len(grads) == len(list(model.parameters()))  # every weight gets gradient
    mask = batch.policy_mask
    for route in (
        {"logits": "columns"},
        {"logits": "trained", "chunk_tokens": None},
        {"logits": "trained", "chunk_tokens": 7},  # chunks that split rows
        {"logits": "trained", "chunk_tokens": 1},
    ):
        other_loss, other_logp, other_grads = loss_and_grads(model, batch, advantages, **route)
        assert other_loss == pytest.approx(loss, rel=1e-6, abs=1e-7), route
        torch.testing.assert_close(other_logp[mask], logp[mask], atol=1e-6, rtol=1e-5)
        assert other_grads.keys() == grads.keys()
        for name, grad in grads.items():
            torch.testing.assert_close(other_grads[name], grad, atol=1e-6, rtol=1e-5)


def test_the_trained_route_sends_only_trained_positions_through_the_head():
    model = tiny_model("qwen2")
    batch = collate(episodes(), pad_id=0)
    trained = int(batch.policy_mask.sum())
    rows: list[int] = []
    hook = model.lm_head.register_forward_hook(
        lambda _m, _args, out: rows.append(out.reshape(-1, out.shape[-1]).shape[0])
    )
    try:
        sequence_logprobs(model, batch, logits="trained", chunk_tokens=7).sum().backward()
        forward_then_backward = list(rows)
        rows.clear()
        sequence_logprobs(model, batch, logits="columns")
        columns = list(rows)
        rows.clear()
        sequence_logprobs(model, batch, logits="all")
        everything = list(rows)
    finally:
        hook.remove()
    chunks = [7] * (trained // 7) + ([trained % 7] if trained % 7 else [])
    # the model's own head call sees no position; then each chunk, once forward, once recomputed
    assert forward_then_backward == [0, *chunks, *reversed(chunks)]
    B, L = batch.input_ids.shape
    union = int(batch.policy_mask[:, 1:].any(0).sum())
    assert columns == [B * union] and everything == [B * L]
    assert trained < B * union < B * L  # rows' turns at different positions widen the columns


def test_a_model_that_scales_its_logits_takes_the_columns_route(caplog):
    model = tiny_model("llama")
    model.config.final_logit_softcapping = 30.0  # Llama ignores it; Gemma would not
    batch = collate(episodes(), pad_id=0)
    with caplog.at_level(logging.WARNING):
        trained = sequence_logprobs(model, batch, logits="trained")
        sequence_logprobs(model, batch, logits="trained")
    columns = sequence_logprobs(model, batch, logits="columns")
    torch.testing.assert_close(trained, columns)
    falls_back = [r for r in caplog.records if "falls back to 'columns'" in r.getMessage()]
    assert len(falls_back) == 1 and "final_logit_softcapping" in falls_back[0].getMessage()


def test_token_capped_micro_batches_respect_the_cap_and_keep_every_sequence():
    rng = random.Random(0)
    for _ in range(200):
        lengths = [rng.randint(1, 60) for _ in range(rng.randint(1, 20))]
        sequences = [TokenSequence((1,) * n, (True,) * n) for n in lengths]
        size, cap = rng.randint(1, 8), rng.randint(1, 150)
        chunks = length_sorted_micro_batches(sequences, size, cap)
        flat = [i for chunk in chunks for i in chunk]
        assert sorted(flat) == list(range(len(lengths)))  # each sequence exactly once
        assert [lengths[i] for i in flat] == sorted(lengths)  # shortest together
        for chunk, following in zip(chunks, [*chunks[1:], None], strict=True):
            padded = len(chunk) * max(lengths[i] for i in chunk)
            assert len(chunk) <= size
            assert padded <= cap or len(chunk) == 1  # a longer sequence goes alone
            if following is not None:  # greedy: the next sequence did not fit
                width = lengths[following[0]]
                assert len(chunk) == size or (len(chunk) + 1) * width > cap
    lengths = [9, 2, 30, 3, 28, 8, 31, 1]
    sequences = [TokenSequence((1,) * n, (True,) * n) for n in lengths]
    chunks = length_sorted_micro_batches(sequences, 3, 40)
    assert [[lengths[i] for i in c] for c in chunks] == [[1, 2, 3], [8, 9], [28], [30], [31]]
    assert length_sorted_micro_batches(sequences, 3, None) == length_sorted_micro_batches(
        sequences, 3
    )


# --------------------------------------------------------------------------- through the trainers

OFF = {"loss_logits": "columns", "micro_batch_tokens": None, "gradient_checkpointing": False}
"""The update as it ran before these options: row-count micro-batches, ``logits_to_keep``."""

OPTIONS = [
    pytest.param({"loss_logits": "all"}, id="all-logits"),
    pytest.param({"loss_logits": "trained", "logits_chunk_tokens": 5}, id="trained-logits"),
    pytest.param({"micro_batch_tokens": 100}, id="token-cap"),
    pytest.param({"gradient_checkpointing": True}, id="checkpointing"),
    pytest.param(
        {
            "loss_logits": "trained",
            "logits_chunk_tokens": 5,
            "micro_batch_tokens": 100,
            "gradient_checkpointing": True,
        },
        id="all-on",
    ),
]


def captured_update(tiny64, tmp_path, name, options, *, trainer="grpo", **fields):
    """Run one update of ``trainer`` on ``episodes()``; returns its stats, the gradient it
    stepped with, and the micro-batches' widths (from ``collate``)."""
    from passkt.agents.train import grpo, sft

    common = {
        "policy": f"hf:{tiny64}",
        "env_id": "Math-v0",
        "t_train": 0,
        "micro_batch_size": 3,
        "output_dir": str(tmp_path / name),
        "progress": False,
        **OFF,
        **options,
        **fields,
    }
    if trainer == "grpo":
        config = GRPOConfig(**common, temperature=0.8)
    else:
        config = SFTConfig(**common, finetune=fields.get("finetune", "full"))
    run = TrainingRun.start(config)
    run.plan(["t0", "t1"], per_step=1)
    grads: dict[str, torch.Tensor] = {}

    def capture():
        grads.update(
            {
                n: p.grad.detach().clone()
                for n, p in run.unwrapped.named_parameters()
                if p.grad is not None
            }
        )
        run.optimizer.zero_grad(set_to_none=True)
        return 0.0

    run.optimizer_step = capture
    module = grpo if trainer == "grpo" else sft
    widths: list[tuple[int, int]] = []
    real_collate = module.collate

    def recording_collate(sequences, pad_id, device="cpu"):
        batch = real_collate(sequences, pad_id, device)
        widths.append(tuple(batch.input_ids.shape))
        return batch

    module.collate = recording_collate
    try:
        sequences = episodes(lengths=(23, 61, 40, 9, 52, 30))
        if trainer == "grpo":
            advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.5])
            reference = grpo._reference_model(config, run)  # full fine-tuning with a KL term
            stats = policy_update(run, config, sequences, advantages, reference)
            loss = stats.policy_loss + stats.kl
        else:
            loss = sft_update(run, config, sequences)["loss"]
    finally:
        module.collate = real_collate
        run.close()
    return loss, grads, widths, run


@pytest.mark.parametrize("options", OPTIONS)
def test_grpo_update_with_an_option_equals_the_update_without(tiny64, tmp_path, options):
    loss, grads, widths, _ = captured_update(tiny64, tmp_path, "off", {})
    other_loss, other_grads, other_widths, run = captured_update(tiny64, tmp_path, "on", options)
    assert other_loss == pytest.approx(loss, rel=1e-5, abs=1e-7)
    assert other_grads.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(other_grads[name], grad, atol=2e-6, rtol=1e-4)
    if options.get("gradient_checkpointing"):
        model = run.unwrapped
        checkpointing = getattr(model, "is_activation_checkpointing", None)
        if checkpointing is None:  # transformers before 5.25
            checkpointing = model.is_gradient_checkpointing
        assert checkpointing
    cap = options.get("micro_batch_tokens")
    if cap:
        assert all(rows * width <= cap or rows == 1 for rows, width in other_widths)
        assert len(other_widths) > len(widths)  # the cap split the row-count micro-batches
    assert math.isfinite(loss)


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_sft_and_lora_kl_updates_with_every_option_equal_the_update_without(
    tiny64, tmp_path, finetune
):
    on = {
        "loss_logits": "trained",
        "logits_chunk_tokens": 4,
        "micro_batch_tokens": 90,
        "gradient_checkpointing": True,
    }
    loss, grads, _, _ = captured_update(tiny64, tmp_path, "sft-off", {}, trainer="sft")
    other, other_grads, _, _ = captured_update(tiny64, tmp_path, "sft-on", on, trainer="sft")
    assert other == pytest.approx(loss, rel=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(other_grads[name], grad, atol=2e-6, rtol=1e-4)
    # GRPO with a KL term and two iterations: the frozen and the reference log-probabilities go
    # the same route (LoRA: the adapter switched off; full: a frozen copy)
    fields = {"finetune": finetune, "kl_coef": 0.2, "num_iterations": 2, "lora_r": 4}
    loss, grads, _, _ = captured_update(tiny64, tmp_path, "kl-off", {}, **fields)
    other, other_grads, _, _ = captured_update(tiny64, tmp_path, "kl-on", on, **fields)
    assert other == pytest.approx(loss, rel=1e-5)
    assert other_grads.keys() == grads.keys() and grads
    for name, grad in grads.items():
        torch.testing.assert_close(other_grads[name], grad, atol=2e-6, rtol=1e-4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"micro_batch_tokens": 0}, "micro_batch_tokens must be None or >= 1"),
        ({"logits_chunk_tokens": 0}, "logits_chunk_tokens must be None or >= 1"),
        ({"loss_logits": "some"}, "loss_logits must be one of 'trained', 'columns', 'all'"),
    ],
)
def test_config_rejects_bad_memory_options(change, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{"policy": "hf:model", **change})


def test_the_trl_routes_refuse_the_token_cap_in_one_line():
    pytest.importorskip("trl")
    from passkt.agents.train.plan import PlanError
    from passkt.agents.train.trl import trl_args
    from passkt.agents.train.trl_sft import trl_sft_args

    for make, cls in ((trl_args, GRPOConfig), (trl_sft_args, SFTConfig)):
        with pytest.raises(PlanError, match=r"--micro-batch-tokens under --backend trl: TRL's"):
            make(cls(policy="hf:m", micro_batch_tokens=4096, micro_batch_size=4))
    args = trl_args(GRPOConfig(policy="hf:m", micro_batch_size=4))  # no cap: nothing to refuse
    assert args["per_device_train_batch_size"] == 4
