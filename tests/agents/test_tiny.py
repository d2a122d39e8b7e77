"""The tiny offline checkpoint: a deterministic Qwen2 folder with a byte-level ChatML tokenizer."""

from __future__ import annotations

import json
import unicodedata

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer

from passkt.agents.tiny import CHATML_TEMPLATE, make_tiny_checkpoint


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint):
    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def test_folder_is_a_qwen2_checkpoint_with_generation_config(tiny_checkpoint, tokenizer):
    files = {p.name for p in tiny_checkpoint.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= files
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["vocab_size"] == len(tokenizer) == 512
    generation = json.loads((tiny_checkpoint / "generation_config.json").read_text())
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in generation["eos_token_id"]
    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    assert sum(p.numel() for p in model.parameters()) < 100_000


def test_chat_template_is_chatml(tokenizer):
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n" + (
        "<|im_start|>assistant\n"
    )
    assert tokenizer.chat_template == CHATML_TEMPLATE
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_start|>")) == 3  # one id per special


@settings(max_examples=200, deadline=None)
@given(st.text())
@example("\uf900")  # a CJK compatibility ideograph: NFC maps it to U+8C48
def test_tokenizer_round_trips_any_unicode(tokenizer, text):
    # Loaded as a Qwen2Tokenizer it NFC-normalizes its input, as Qwen2.5's own tokenizer does; the
    # rollout never re-tokenizes generated text, so only observations are normalized.
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids, clean_up_tokenization_spaces=False) == unicodedata.normalize(
        "NFC", text
    )


def test_protocol_tags_are_few_tokens(tokenizer):
    for tag in ("</search>", "</answer>", "<information>"):
        assert len(tokenizer(tag, add_special_tokens=False)["input_ids"]) <= 3


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tiny_checkpoint):
    again = make_tiny_checkpoint(tmp_path / "again", seed=0)
    other = make_tiny_checkpoint(tmp_path / "other", seed=1)
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_checkpoint / name).read_bytes()
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes()


def test_sizes_are_configurable_and_validated(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "wide", vocab_size=300, hidden_size=16, num_layers=1)
    config = json.loads((folder / "config.json").read_text())
    assert (config["vocab_size"], config["hidden_size"], config["num_hidden_layers"]) == (
        300,
        16,
        1,
    )
    with pytest.raises(ValueError, match="vocab_size must be >= 259"):
        make_tiny_checkpoint(tmp_path / "bad", vocab_size=100)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        make_tiny_checkpoint(tmp_path / "bad", hidden_size=30)
