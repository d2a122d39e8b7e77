"""SFT through TRL's SFTTrainer: the same episodes and masks as ``train_sft``, the same loss."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="the TRL route needs the trl extra: pip install 'passkt[trl]'")

from passkt.agents.train.common import collate, sequence_logprobs
from passkt.agents.train.config import SFTConfig
from passkt.agents.train.losses import policy_nll
from passkt.agents.train.sft import expert_examples
from passkt.agents.train.trl_sft import make_trl_sft_trainer, sft_rows, trl_sft_args


def sft_config(model, out, **overrides) -> SFTConfig:
    fields = dict(
        policy=f"hf:{model}",
        env_id="BridgeQA-v0",
        env_kwargs={"source": "people"},
        t_train=2,
        finetune="full",
        batch_size=4,
        micro_batch_size=4,
        max_steps=1,
        output_dir=str(out),
        progress=False,
    )
    fields.update(overrides)
    return SFTConfig(**fields)


def test_trl_sft_loss_of_one_batch_equals_train_sfts(tiny64, people, tmp_path):
    config = sft_config(tiny64, tmp_path / "sft", limit=4)
    trainer = make_trl_sft_trainer(config)
    examples = expert_examples(config, trainer.processing_class)
    rows = sft_rows(examples)
    assert [list(r["input_ids"]) for r in trainer.train_dataset] == [r["input_ids"] for r in rows]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(4)])
    sequences = [e.sequence for e in examples[:4]]
    tokens = collate(sequences, trainer.processing_class.pad_token_id)
    width = tokens.input_ids.size(1)
    assert torch.equal(batch["labels"][:, :width] != -100, tokens.policy_mask)  # the same mask
    assert (batch["labels"][:, width:] == -100).all()
    policy_tokens = sum(s.num_policy_tokens for s in sequences)
    model = trainer.model
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, batch).item()
        logp = sequence_logprobs(model, tokens)
        ours = policy_nll(logp, tokens.policy_mask, "token_mean", float(policy_tokens)).item()
    assert trl_loss == pytest.approx(ours, rel=1e-5)


def test_trl_sft_args_map_the_batch_and_refuse_sequence_means():
    args = trl_sft_args(sft_config("m", "o", batch_size=8, micro_batch_size=2), world_size=2)
    assert args["per_device_train_batch_size"] == 2 and args["gradient_accumulation_steps"] == 2
    with pytest.raises(ValueError, match="token_mean"):
        trl_sft_args(sft_config("m", "o", aggregation="sequence_mean"))
    with pytest.raises(ValueError, match="does not split"):
        trl_sft_args(sft_config("m", "o", batch_size=6, micro_batch_size=4))


def test_train_sft_trl_leaves_a_checkpoint_passkt_loads(tiny64, people, tmp_path):
    from transformers import AutoModelForCausalLM

    from passkt.agents.train.trl_sft import train_sft_trl

    config = sft_config(tiny64, tmp_path / "sft", limit=4, max_steps=2, learning_rate=1e-3)
    result = train_sft_trl(config)
    assert result.steps == 2 and (result.checkpoint / "config.json").is_file()
    AutoModelForCausalLM.from_pretrained(result.checkpoint)
