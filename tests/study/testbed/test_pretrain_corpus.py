"""The pretraining corpus: noisy but well-formed episodes on training tasks, plus paragraphs."""

from __future__ import annotations

import numpy as np
import pytest

from passkt.envs.protocol import parse_action
from passkt.envs.sources import synthetic
from passkt.study.testbed.corpus import (
    FACTS_PER_DOCUMENT,
    Corpus,
    CorpusConfig,
    NoisyAgentPolicy,
    arithmetic_documents,
    build_corpus,
    malformed,
    worked_solution,
)


@pytest.fixture(scope="module")
def small_corpus(testbed_tokenizer) -> Corpus:
    config = CorpusConfig(episodes_per_category=40, tasks_per_category=50, paragraph_repeats=1)
    return build_corpus(config, testbed_tokenizer)


def test_worked_solutions_are_right_without_errors_and_wrong_with_them():
    tasks = synthetic.load_tasks("math", "train", num_tasks=50)
    rng = np.random.default_rng(0)
    for task in tasks:
        text = worked_solution(task, rng, error_rate=0.0)
        action = parse_action(text)
        assert action.kind == "answer" and action.content == task.answer
        assert text.count("=") == len(task.metadata["steps"])
    wrong = [parse_action(worked_solution(t, rng, 1.0)).content != t.answer for t in tasks]
    assert sum(wrong) >= 45  # every step is off (a later step may rarely undo it)


def test_malformed_actions_are_invalid_but_end_in_a_stop_string():
    rng = np.random.default_rng(1)
    for action in ("<search>Gafa Radu</search>", "<answer>1898</answer>") * 10:
        broken = malformed(action, rng)
        assert parse_action(broken).kind == "invalid"
        assert broken.endswith(("</search>", "</answer>"))


def test_guided_agent_only_searches_names_it_has_seen():
    tasks = synthetic.load_tasks("bridge", "train", num_tasks=5, hops=3)
    task = tasks[0]
    policy = NoisyAgentPolicy(tasks, guided=1.0, invalid_rate=0.0)
    rng = np.random.default_rng(0)
    conversation = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": task.question},
    ]
    assert policy.act(conversation, rng) == f"<search>{task.gold_queries[0]}</search>"
    # the second hop's name is unknown until the first paragraph is read: a heuristic turn
    conversation += [{"role": "assistant", "content": f"<search>{task.gold_queries[0]}</search>"}]
    conversation += [{"role": "user", "content": "<information>No documents found.</information>"}]
    assert policy.act(conversation, rng) != f"<search>{task.gold_queries[1]}</search>"


def test_corpus_holds_training_episodes_of_every_category(small_corpus, testbed_tokenizer):
    stats = small_corpus.stats
    assert set(stats["categories"]) == {"bridge", "comparison", "math"}
    for category in stats["categories"].values():
        assert category["episodes"] >= 40
        assert 0.0 < category["success_rate"] < 1.0  # noisy: neither hopeless nor expert
    end = testbed_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    ends = small_corpus.tokens[small_corpus.starts[1:] - 1]
    assert (ends == end).all() and (small_corpus.tokens == end).sum() == small_corpus.num_documents
    text = testbed_tokenizer.decode(small_corpus.tokens[: small_corpus.starts[1]].tolist())
    assert text.startswith("<|im_start|>system\nYou answer questions")
    assert "<|im_start|>assistant\n<" in text


def test_assistant_mask_covers_exactly_the_agents_turns(small_corpus, testbed_tokenizer):
    first = slice(small_corpus.starts[0], small_corpus.starts[1])
    ids, mask = small_corpus.tokens[first], small_corpus.assistant[first]
    agent = testbed_tokenizer.decode(ids[mask].tolist())
    assert agent.startswith(("<search>", "<answer>")) and "<|im_start|>" not in agent
    assert "<information>" not in agent and "You answer" not in agent
    paragraphs = slice(small_corpus.starts[-2], small_corpus.starts[-1])
    assert not small_corpus.assistant[paragraphs].any()


def test_no_test_question_and_no_reserved_task_in_the_corpus(small_corpus, testbed_tokenizer):
    text = testbed_tokenizer.decode(small_corpus.tokens.tolist())
    for task in synthetic.load_tasks("comparison", "test", num_tasks=30):
        assert task.question not in text
    for task in synthetic.load_tasks("comparison", "train", num_tasks=30):  # reserved (200)
        assert task.question not in text


def test_corpus_saves_and_loads(small_corpus, tmp_path):
    loaded = Corpus.load(small_corpus.save(tmp_path / "c.npz"))
    assert np.array_equal(loaded.tokens, small_corpus.tokens)
    assert np.array_equal(loaded.assistant, small_corpus.assistant)
    assert loaded.stats == small_corpus.stats


def test_arithmetic_facts_are_right_and_shaped_like_worked_steps():
    import re

    documents = arithmetic_documents(100, seed=3)
    assert len(documents) == -(-100 // FACTS_PER_DOCUMENT)
    facts = re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)\.", " ".join(documents))
    assert len(facts) == 100 and {op for _, op, _, _ in facts} == {"+", "-", "*", "/"}
    exact = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__}
    for a, op, b, c in facts:
        assert exact[op](int(a), int(b)) == int(c) >= 0
        assert op != "/" or int(a) % int(b) == 0
    assert arithmetic_documents(100, seed=3) == documents != arithmetic_documents(100, seed=4)
    # the same steps a worked solution writes: every error-free step of a task is such a fact
    task = synthetic.load_tasks("math", "train", num_tasks=1)[0]
    steps = worked_solution(task, np.random.default_rng(0), 0.0)
    assert re.findall(r"\d+ [-+*/] \d+ = \d+\.", steps)


def test_arithmetic_facts_go_into_the_corpus_as_plain_documents(testbed_tokenizer):
    base = dict(episodes_per_category=6, tasks_per_category=10, paragraph_repeats=0)
    plain = build_corpus(CorpusConfig(**base), testbed_tokenizer)
    drilled = build_corpus(CorpusConfig(**base, arithmetic_facts=70), testbed_tokenizer)
    assert drilled.num_documents == plain.num_documents + 3
    assert drilled.stats["arithmetic_documents"] == 3 and plain.stats["arithmetic_documents"] == 0
    last = testbed_tokenizer.decode(drilled.tokens[drilled.starts[-2] : drilled.starts[-1] - 1])
    assert last == arithmetic_documents(70, seed=0)[-1]
    assert not drilled.assistant[drilled.starts[-4] :].any()


def test_corpus_config_is_validated():
    with pytest.raises(ValueError, match="must lie in"):
        CorpusConfig(guided_rates=(0.5, 1.5))
    with pytest.raises(ValueError, match="episodes_per_category must be >= 1"):
        CorpusConfig(episodes_per_category=0)
    with pytest.raises(ValueError, match="budgets must be non-negative"):
        CorpusConfig(budgets=(-1,))
    with pytest.raises(ValueError, match="arithmetic_facts must be >= 0"):
        CorpusConfig(arithmetic_facts=-1)


def test_plain_oracle_writes_the_corpus_format_not_sentences_the_base_never_saw():
    """The SFT expert in the base's own format: math worked step by step exactly as the corpus's
    error-free solutions, retrieval as bare actions (the corpus has no ``<think>`` sentences)."""
    from passkt.agents.rollout import rollout
    from passkt.agents.scripted import OraclePolicy

    rng = np.random.default_rng(0)
    maths = synthetic.load_tasks("math", "train", num_tasks=20)
    plain = OraclePolicy(maths, think=False, worked=True)
    env = {"split": "train", "source_options": {"num_tasks": 20}}
    ids = [t.task_id for t in maths]
    episodes = rollout(plain, "Math-v0", ids, budgets=(0,), env_kwargs=env).episodes
    for task, episode in zip(maths, episodes, strict=True):
        assert episode.turns[0].completion.text == worked_solution(task, rng, error_rate=0.0)
        assert episode.correct
    bridges = synthetic.load_tasks("bridge", "train", num_tasks=10)
    env = {"split": "train", "source_options": {"num_tasks": 10}}
    ids = [t.task_id for t in bridges]
    for worked in (False, True):  # worked solutions change nothing without a computation
        policy = OraclePolicy(bridges, think=False, worked=worked)
        for e in rollout(policy, "BridgeQA-v0", ids, budgets=(5,), env_kwargs=env).episodes:
            assert e.correct and all("<think>" not in t.completion.text for t in e.turns)
