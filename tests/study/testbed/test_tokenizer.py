"""The testbed tokenizer: exact round trips, one token per known word, a working chat template."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import ChatTokens, rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.study.testbed.tokenizer import (
    PROTOCOL_TAGS,
    SPECIAL_TOKENS,
    build_tokenizer,
    count_pre_tokens,
    fit_vocabulary,
    to_byte_level,
)

ENVS = (("BridgeQA-v0", (0, 1, 2, 3, 5)), ("ComparisonQA-v0", (0, 1, 2, 3, 5)), ("Math-v0", (0,)))


def _episode_texts() -> list[str]:
    """Every message of heuristic and oracle episodes on test tasks of all three categories."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    texts = []
    for env_id, budgets in ENVS:
        env = gym.make(env_id, max_tool_calls=budgets[-1], split="test")
        tasks = list(env.unwrapped.tasks[:20])
        env.close()
        ids = [t.task_id for t in tasks]
        for policy in (HeuristicPolicy(seed=3), OraclePolicy(tasks)):
            result = rollout(
                policy, env_id, ids, n=2, budgets=budgets, env_kwargs={"split": "test"},
                params=SamplingParams(seed=1),
            )  # fmt: skip
            texts += [m["content"] for e in result.episodes for m in e.messages]
    return texts


@pytest.fixture(scope="module")
def episode_texts() -> list[str]:
    return _episode_texts()


def test_every_episode_text_round_trips_with_known_words_only(testbed_tokenizer, episode_texts):
    assert len(episode_texts) > 500
    tags = re.compile("|".join(map(re.escape, (*PROTOCOL_TAGS, *SPECIAL_TOKENS))))
    split = 0
    for text in episode_texts:
        ids = testbed_tokenizer(text, add_special_tokens=False)["input_ids"]
        assert testbed_tokenizer.decode(ids, clean_up_tokenization_spaces=False) == text
        words = sum(count_pre_tokens([text]).values()) + len(tags.findall(text))
        split += len(ids) - words
    assert split == 0  # no word of the envs' texts falls back to smaller pieces or bytes


def test_words_are_single_tokens_and_names_copy_as_the_same_ids(testbed_tokenizer):
    def tokens(text: str) -> list[str]:
        return testbed_tokenizer.convert_ids_to_tokens(
            testbed_tokenizer(text, add_special_tokens=False)["input_ids"]
        )

    assert tokens("Who is older, Torka Rufa or Roszor Tata?") == [
        "Who", "Ġis", "Ġolder", ",Ġ", "TorkaĠ", "Rufa", "ĠorĠ", "RoszorĠ", "Tata", "?"
    ]  # fmt: skip
    # a name (and a year) is the same tokens after a space and right after a tag
    assert tokens("<search>Torka Rufa</search>")[1:3] == ["TorkaĠ", "Rufa"]
    assert tokens("It was founded in 1898.")[-6:] == ["ĠinĠ", "1", "8", "9", "8", "."]
    assert tokens("<answer>1898</answer>")[1:5] == ["1", "8", "9", "8"]
    for tag in (*PROTOCOL_TAGS, *SPECIAL_TOKENS):
        assert tokens(tag) == [tag]


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_any_unicode_round_trips_through_the_byte_fallback(testbed_tokenizer, text):
    ids = testbed_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert testbed_tokenizer.decode(ids, clean_up_tokenization_spaces=False) == text


def test_chat_template_gives_the_tokens_the_rollout_engine_builds(testbed_tokenizer):
    chat = ChatTokens(testbed_tokenizer)
    messages = [
        {"role": "system", "content": "Answer."},
        {"role": "user", "content": "Who is older, Gafa Radu or Dorda Tabel?"},
    ]
    turn = "<search>Gafa Radu</search>"
    observation = "<information>Doc 1 (Title: Gafa Radu) Gafa Radu (born 1982).</information>"
    built = chat.prompt_ids(messages) + chat.encode(turn) + chat.observation_ids(observation)
    full = [
        *messages,
        {"role": "assistant", "content": turn},
        {"role": "user", "content": observation},
    ]
    assert built == chat.prompt_ids(full)
    text = testbed_tokenizer.decode(built)
    assert text.startswith("<|im_start|>system\nAnswer.<|im_end|>\n")
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")


def test_saved_tokenizer_loads_with_auto_tokenizer(testbed_tokenizer, tmp_path):
    from transformers import AutoTokenizer

    testbed_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "<|im_start|>user\nIn what year did Kelros Tota begin?<|im_end|>\n"
    assert loaded(text)["input_ids"] == testbed_tokenizer(text)["input_ids"]
    assert loaded.eos_token == "<|im_end|>" and loaded.pad_token == "<|endoftext|>"
    assert len(loaded) == len(testbed_tokenizer) < 2000


def test_fit_vocabulary_counts_and_orders_pre_tokens():
    texts = ["a cat saw the dog", "the cat and the dog"]
    counts = count_pre_tokens(texts)
    assert counts[to_byte_level(" the")] == 2 and counts["the"] == 1 and counts["a"] == 1
    words = fit_vocabulary(texts, min_count=2)
    assert words == [to_byte_level(w) for w in (" cat", " dog", " the")]  # ties: code-point order
    small = build_tokenizer(words)
    ids = small("the cat", add_special_tokens=False)["input_ids"]
    assert small.convert_ids_to_tokens(ids) == ["t", "h", "e", to_byte_level(" cat")]
    assert small.decode(ids) == "the cat"  # "the" (no leading space) falls back to bytes


def test_fit_vocabulary_rejects_a_bad_min_count():
    with pytest.raises(ValueError, match="min_count must be >= 1"):
        fit_vocabulary(["x"], min_count=0)
