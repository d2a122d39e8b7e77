"""The testbed model family: configs build, save and load as ordinary Hugging Face folders."""

from __future__ import annotations

import json

import pytest
import torch

from passkt.agents.hf import HFPolicy
from passkt.agents.policy import SamplingParams
from passkt.study.testbed.model import (
    MODEL_SIZES,
    ModelSize,
    build_model,
    count_parameters,
    resolve_size,
)

EXPECTED = {"nano": (0.1e6, 0.4e6), "micro": (0.6e6, 1.5e6), "small": (3e6, 8e6)}


@pytest.mark.parametrize("size", sorted(MODEL_SIZES))
def test_sizes_span_a_fraction_of_a_million_to_a_few_million(testbed_tokenizer, size):
    model = build_model(size, testbed_tokenizer)
    low, high = EXPECTED[size]
    assert low < count_parameters(model) < high
    shape = MODEL_SIZES[size]
    assert model.config.hidden_size == shape.hidden_size
    assert model.config.vocab_size == len(testbed_tokenizer)
    assert model.config.tie_word_embeddings


def test_checkpoint_folder_loads_like_any_hf_model(nano_checkpoint, testbed_tokenizer):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = json.loads((nano_checkpoint / "config.json").read_text())
    assert config["model_type"] == "llama" and config["architectures"] == ["LlamaForCausalLM"]
    generation = json.loads((nano_checkpoint / "generation_config.json").read_text())
    assert testbed_tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]
    model = AutoModelForCausalLM.from_pretrained(nano_checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(nano_checkpoint)
    ids = torch.tensor([tokenizer("<|im_start|>user\nWho is older?")["input_ids"]])
    fresh = build_model("nano", testbed_tokenizer, seed=0)  # same seed: the saved weights
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, fresh(ids).logits, atol=1e-6)
    policy = HFPolicy(nano_checkpoint, batch_size=4)
    conversation = [{"role": "user", "content": "Where is Fanima?"}]
    out = policy.generate([conversation], SamplingParams(max_new_tokens=5, seed=0))
    assert len(out[0].token_ids) == len(out[0].logprobs) > 0


def test_same_seed_same_weights_and_global_rng_untouched(testbed_tokenizer):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("nano", testbed_tokenizer, seed=5)
    after = torch.rand(1)
    b = build_model("nano", testbed_tokenizer, seed=5)
    c = build_model("nano", testbed_tokenizer, seed=6)
    assert before == after
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.lm_head.weight, c.lm_head.weight)


def test_bad_sizes_are_rejected_with_a_hint():
    with pytest.raises(ValueError, match="Did you mean 'micro'"):
        resolve_size("mikro")
    with pytest.raises(ValueError, match="divisible by num_heads"):
        ModelSize(hidden_size=60, num_layers=1, num_heads=8, num_kv_heads=2, intermediate_size=8)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        ModelSize(hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=3, intermediate_size=8)
    custom = ModelSize(
        hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=8
    )
    assert resolve_size(custom) is custom
