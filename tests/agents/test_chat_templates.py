"""Chat templates: the rollout's token record equals the template's rendering; the system prompts.

For Qwen2.5 (ChatML with a default system prompt), Llama 3 (headers, ``| trim``, BOS) and SmolLM2,
the ids the engine builds turn by turn (prompt, sampled ids, the template's ids for each
observation) must decode to exactly what the chat template renders for the whole conversation.
"""

from __future__ import annotations

import pytest

from passkt.agents.rollout import rollout
from passkt.agents.scripted import OraclePolicy
from passkt.envs import load_tasks
from passkt.envs.protocol import SYSTEM_PROMPTS

QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) "
    "or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def test_every_category_has_a_prompt_that_explains_the_protocol():
    for category in ("comparison", "bridge"):
        assert "<search>" in SYSTEM_PROMPTS[category] and "<answer>" in SYSTEM_PROMPTS[category]
    assert "<answer>" in SYSTEM_PROMPTS["math"] and "<search>" not in SYSTEM_PROMPTS["math"]
    for text in SYSTEM_PROMPTS.values():  # a hidden budget is never mentioned
        assert "tool call" not in text.lower() and "budget" not in text.lower()


def assert_record_matches_template(tokenizer):
    tasks = load_tasks("synthetic", "bridge", "test")[:3]
    result = rollout(
        OraclePolicy(tasks),
        "BridgeQA-v0",
        [t.task_id for t in tasks],
        budgets=(1, 3),
        tokenizer=tokenizer,
    )
    for episode in result.episodes:
        rendered = tokenizer.apply_chat_template(episode.messages, tokenize=False)
        built = tokenizer.decode(episode.token_ids)
        # The record stops right after the last sampled token; the template closes the turn.
        assert rendered.startswith(built), (rendered, built)
        tail = rendered[len(built) :]
        assert episode.messages[-1]["content"] not in tail
        assert len(tail) < 30, tail


@pytest.fixture
def tokenizer(tiny_checkpoint):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_checkpoint)


def test_qwen25_template(tokenizer):
    tokenizer.chat_template = QWEN25_TEMPLATE
    assert_record_matches_template(tokenizer)


def test_llama3_template(tokenizer):
    tokenizer.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIALS})
    tokenizer.bos_token = "<|begin_of_text|>"
    tokenizer.chat_template = LLAMA3_TEMPLATE
    assert_record_matches_template(tokenizer)


@pytest.mark.slow
def test_smollm2_template():
    from transformers import AutoTokenizer

    from passkt.agents.smollm import smollm2_path

    assert_record_matches_template(AutoTokenizer.from_pretrained(smollm2_path()))
