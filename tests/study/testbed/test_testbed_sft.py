"""SFT of a testbed (Llama) model with LoRA, on expert data in the base's own format."""

from __future__ import annotations

import pytest
import torch

from passkt.agents.train.config import SFTConfig
from passkt.agents.train.report import read_metrics
from passkt.agents.train.sft import train_sft


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _config(policy, out, **fields) -> SFTConfig:
    """Plain-format SFT of worked math on 8 synthetic problems."""
    return SFTConfig(
        policy=policy,
        env_id="Math-v0",
        env_kwargs={"source_options": {"num_tasks": 8}},
        limit=8,
        t_train=0,
        expert_format="plain",
        batch_size=8,
        micro_batch_size=8,
        output_dir=str(out),
        progress=False,
        **fields,
    )


@pytest.mark.slow
def test_lora_sft_of_a_testbed_model_learns_worked_math(nano_checkpoint, tmp_path):
    """LoRA adapts a testbed Llama model (the study's SFT is LoRA). An untrained model's output
    head gives near-uniform logits that adapters cannot sharpen, so the model first gets a short
    full warm-up, as pretraining would give it; then LoRA alone must lower the loss further."""
    from safetensors.torch import load_file

    warm = train_sft(
        _config(f"lean:{nano_checkpoint}", tmp_path / "warm", finetune="full",
                learning_rate=1e-2, max_steps=3)
    )  # fmt: skip
    result = train_sft(
        _config(f"lean:{warm.checkpoint}", tmp_path / "lora", finetune="lora", lora_r=8,
                lora_alpha=16, learning_rate=2e-2, max_steps=20)
    )  # fmt: skip
    losses = [m["loss/nll"] for m in read_metrics(tmp_path / "lora")]
    # From a warmed-up start (loss about 4.7 on these 8 problems) a rank-8 adapter on a 0.2M model
    # moves slowly: demand a steady fall (last five steps below the first five by 0.1 nats and
    # the last step below the first), not the large drop a full fine-tune makes.
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.1 and losses[-1] < losses[0], losses
    # LoRA trains adapters only: the saved adapter is a small fraction of the model.
    adapter = load_file(str(result.checkpoint / "adapter" / "adapter_model.safetensors"))
    model = load_file(str(result.checkpoint / "model.safetensors"))
    assert (
        0 < sum(t.numel() for t in adapter.values()) < 0.5 * sum(t.numel() for t in model.values())
    )
    data = (tmp_path / "lora" / "expert_data.jsonl").read_text()
    assert " = " in data and "I need to look up" not in data
