"""Search fill: a search returns exactly min(top_k, N) documents on real data, not on synthetic."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from real_data import DATA

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.corpus import Corpus
from passkt.envs.protocol import NO_RESULTS
from passkt.envs.retrieval import BM25sRetriever, RankBM25Retriever, rank
from passkt.envs.tasks import Paragraph

HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"
BACKENDS = [RankBM25Retriever, BM25sRetriever, lambda paragraphs: Corpus.build(paragraphs)]
NAMES = ["rank_bm25", "bm25s", "corpus"]

CORPUS = (
    Paragraph("Alpha", "mountains and lakes"),
    Paragraph("Beta", "rivers of the north"),
    Paragraph("Gamma", "deserts"),
    Paragraph("Delta", "rivers"),
    Paragraph("Epsilon", "forests"),
)


def test_rank_fills_with_zero_scores_in_index_order() -> None:
    scores = np.array([0.0, 2.0, 0.0, 2.0, 0.0])
    assert rank(scores, 3) == [1, 3]
    assert rank(scores, 3, fill=True) == [1, 3, 0]
    assert rank(scores, 4, first=[4], fill=True) == [4, 1, 3, 0]
    assert rank(np.zeros(5), 3, fill=True) == [0, 1, 2]
    assert rank(np.array([0.0, 1.0]), 5, fill=True) == [1, 0]  # never more than the corpus
    assert rank(np.zeros(0), 3, fill=True) == []


@pytest.mark.parametrize("backend", BACKENDS, ids=NAMES)
def test_fill_returns_top_k_with_ties_in_corpus_order(backend) -> None:
    retriever = backend(CORPUS)
    assert retriever.search("zeppelin", k=3) == []
    assert [h.doc_index for h in retriever.search("zeppelin", k=3, fill=True)] == [0, 1, 2]
    # "rivers" is in 2 of 5 paragraphs: both scored hits, the shorter first, then zeros in order.
    hits = retriever.search("rivers", k=4, fill=True)
    assert [h.doc_index for h in hits] == [3, 1, 0, 2]
    assert hits[1].score > 0 and hits[2].score == hits[3].score == 0
    assert [h.doc_index for h in retriever.search("Epsilon", k=2, fill=True)] == [4, 0]
    assert len(retriever.search("zeppelin", k=10, fill=True)) == len(CORPUS)
    assert retriever.search("rivers", k=4, fill=True) == hits  # deterministic


@pytest.mark.parametrize("backend", BACKENDS[:2], ids=NAMES[:2])
def test_every_gold_title_and_nonsense_return_top_k_on_hotpotqa(backend) -> None:
    # Without fill 329 of these 974 title searches return fewer than 3 (title_search.py).
    short, searches = 0, 0
    for record in json.loads(HOTPOT.read_text(encoding="utf-8")):
        paragraphs = [Paragraph(t, "".join(s)) for t, s in record["context"]]
        retriever = backend(paragraphs)
        top = min(3, len(paragraphs))  # a few records have fewer than 3 paragraphs
        nonsense = retriever.search("qwxz zzyzx", k=3, fill=True)
        assert [h.doc_index for h in nonsense] == list(range(top))
        for title in dict.fromkeys(t for t, _ in record["supporting_facts"]):
            hits = retriever.search(title, k=3, fill=True)
            assert len(hits) == top and hits[0].title == title, title
            short += len(retriever.search(title, k=3)) < top
            searches += 1
    assert searches == 974 and short == 329


def _hotpot_env(env_id: str, **kwargs):
    path = DATA / "hotpotqa_sample.json"
    return gym.make(env_id, source="hotpotqa", path=str(path), **kwargs).unwrapped


@pytest.mark.parametrize("retriever", [None, "bm25s"])
def test_hotpotqa_env_fills_by_default(retriever) -> None:
    env = _hotpot_env("ComparisonQA-v0", retriever=retriever)
    assert env.search_fill is True
    env.reset(seed=0)
    observation, *_ = env.step("<search>qwxz zzyzx</search>")
    assert observation.count("(Title: ") == 3
    off = _hotpot_env("ComparisonQA-v0", retriever=retriever, search_fill=False)
    off.reset(seed=0)
    observation, *_ = off.step("<search>qwxz zzyzx</search>")
    assert NO_RESULTS in observation and "(Title: " not in observation


@pytest.mark.parametrize("env_id", ["BridgeQA-v0", "ComparisonQA-v0"])
def test_synthetic_env_does_not_fill_by_default(env_id) -> None:
    env = gym.make(env_id).unwrapped
    assert env.search_fill is False
    env.reset(seed=0)
    observation, *_ = env.step("<search>qwxz zzyzx</search>")
    assert NO_RESULTS in observation
    filled = gym.make(env_id, search_fill=True).unwrapped
    filled.reset(seed=0)
    observation, *_ = filled.step("<search>qwxz zzyzx</search>")
    assert observation.count("(Title: ") == 3


def test_fill_is_refused_with_a_retriever_of_your_own() -> None:
    mine = RankBM25Retriever(CORPUS)
    with pytest.raises(ValueError, match="search_fill=True needs a built-in backend"):
        gym.make("BridgeQA-v0", retriever=mine, search_fill=True)
    assert gym.make("BridgeQA-v0", retriever=mine).unwrapped.search_fill is False
    with pytest.raises(ValueError, match="search_fill must be True, False or None"):
        gym.make("BridgeQA-v0", search_fill="yes")
