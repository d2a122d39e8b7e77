"""BM25 retrievers (passkt.envs.retrieval): tokenization, scores, ties, both backends agree."""

from __future__ import annotations

import json
import math

import pytest
from real_data import DATA

from passkt.envs.retrieval import (
    BM25sRetriever,
    Hit,
    RankBM25Retriever,
    Retriever,
    build_retriever,
    global_corpus,
    tokenize,
)
from passkt.envs.tasks import Paragraph, Task

HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"
BACKENDS = [RankBM25Retriever, BM25sRetriever]

CORPUS = (
    Paragraph("Ed Wood", "Ed Wood was an American filmmaker."),
    Paragraph("Tim Burton", "Tim Burton directed the film Ed Wood in 1994."),
    Paragraph("Woodson", "Woodson is a place in Arkansas named after a trader."),
    Paragraph("Naïve Café", "東京 has a café called Naïve."),
)


def okapi(paragraphs: tuple[Paragraph, ...], query: str, k1: float = 1.5, b: float = 0.75):
    """BM25 Okapi written out from the formula (rank-bm25's variant, epsilon = 0.25)."""
    docs = [tokenize(f"{p.title} {p.text}") for p in paragraphs]
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    vocab = {t for d in docs for t in d}
    idf = {
        t: math.log(n - sum(t in d for d in docs) + 0.5) - math.log(sum(t in d for d in docs) + 0.5)
        for t in vocab
    }
    floor = 0.25 * sum(idf.values()) / len(idf)
    idf = {t: (floor if v < 0 else v) for t, v in idf.items()}
    scores = []
    for d in docs:
        s = 0.0
        for q in tokenize(query):
            tf = d.count(q)
            s += idf.get(q, 0.0) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(d) / avgdl))
        scores.append(s)
    return scores


def test_tokenize_is_lowercase_unicode_words() -> None:
    assert tokenize("Björk's CAFÉ-Noir, 東京 (1994)") == [
        "björk",
        "s",
        "café",
        "noir",
        "東京",
        "1994",
    ]
    assert tokenize("  ...  ") == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_match_the_okapi_formula(backend) -> None:
    retriever = backend(CORPUS)
    assert isinstance(retriever, Retriever)
    for query in ["Ed Wood", "film director 1994", "café 東京", "wood wood arkansas"]:
        expected = okapi(CORPUS, query)
        hits = retriever.search(query, k=len(CORPUS))
        titled = [i for i, p in enumerate(CORPUS) if tokenize(p.title) == tokenize(query)]
        positive = sorted((i for i, s in enumerate(expected) if s > 0), key=lambda i: -expected[i])
        ranked = list(dict.fromkeys([*titled, *positive]))
        assert [h.doc_index for h in hits] == ranked
        for hit in hits:
            assert hit.score == pytest.approx(expected[hit.doc_index], rel=1e-9)
            assert (hit.title, hit.text) == (
                CORPUS[hit.doc_index].title,
                CORPUS[hit.doc_index].text,
            )


@pytest.mark.parametrize("backend", BACKENDS)
def test_title_is_indexed(backend) -> None:
    hits = backend(CORPUS).search("Woodson", k=1)
    assert [h.title for h in hits] == ["Woodson"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_title_of_words_in_half_the_documents_is_found(backend) -> None:
    # "ed" and "wood" are each in 2 of the 4 paragraphs: Okapi idf log(1) = 0, so every score
    # is 0; rank-bm25 alone found nothing for the exact title "Ed Wood".
    assert okapi(CORPUS, "Ed Wood") == [0.0] * 4
    hits = backend(CORPUS).search("Ed Wood", k=3)
    assert [(h.title, h.score) for h in hits] == [("Ed Wood", 0.0)]  # zero scores stay out
    assert backend(CORPUS).search("wood ed", k=3) == []  # not the title: nothing scores


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_title_query_returns_that_paragraph_first(backend) -> None:
    corpus = (
        Paragraph("Lake Biwa", "Lake Biwa Lake Biwa Lake Biwa, the lake of lakes, Biwa."),
        Paragraph("Biwa", "A lute."),
        Paragraph("Lake Biwa Canal", "A canal from Lake Biwa to Kyoto."),
        Paragraph("Kyoto", "A city."),
    )
    retriever = backend(corpus)
    by_score = sorted(range(4), key=lambda i: -okapi(corpus, "Biwa")[i])
    assert by_score[0] != 1  # BM25 alone ranks the lute below the paragraphs repeating "Biwa"
    assert [h.title for h in retriever.search("Biwa", k=2)] == ["Biwa", corpus[by_score[0]].title]
    assert retriever.search("lake biwa canal", k=1)[0].title == "Lake Biwa Canal"  # case, words
    assert retriever.search("Biwa lute", k=1)[0].title == "Biwa"  # by score: no title is the query


@pytest.mark.parametrize("backend", BACKENDS)
def test_ties_break_by_document_index(backend) -> None:
    same = Paragraph("Twin", "identical text about rivers")
    corpus = (Paragraph("Other", "mountains"), same, Paragraph("Other 2", "lakes"), same, same)
    hits = backend(corpus).search("rivers", k=2)
    assert [h.doc_index for h in hits] == [1, 3]
    assert hits[0].score == hits[1].score > 0
    assert backend(corpus).search("rivers", k=2) == hits


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_or_unknown_query_finds_nothing(backend) -> None:
    retriever = backend(CORPUS)
    assert retriever.search("", k=3) == []
    assert retriever.search("?!", k=3) == []
    assert retriever.search("zeppelin", k=3) == []
    assert backend(()).search("Ed Wood", k=3) == []
    with pytest.raises(ValueError, match="k must be >= 1"):
        retriever.search("Ed Wood", k=0)


def test_top_k_selection_on_a_large_corpus_keeps_ties_in_order() -> None:
    corpus = tuple(Paragraph(f"P{i}", "alpha" if i % 7 else "alpha alpha beta") for i in range(500))
    for backend in BACKENDS:
        hits = backend(corpus).search("alpha beta", k=5)
        assert [h.doc_index for h in hits] == [0, 7, 14, 21, 28]


def test_build_retriever_rejects_unknown_backend() -> None:
    assert isinstance(build_retriever("bm25s", CORPUS), BM25sRetriever)
    with pytest.raises(
        ValueError, match="Unknown retriever 'bm25'; choose one of bm25s, rank_bm25"
    ):
        build_retriever("bm25", CORPUS)


def test_global_corpus_deduplicates_by_title_and_text() -> None:
    shared = Paragraph("Shared", "same paragraph")
    tasks = [
        Task("a", "bridge", "q", "x", paragraphs=(shared, Paragraph("A", "only a"))),
        Task(
            "b",
            "bridge",
            "q",
            "x",
            paragraphs=(Paragraph("Shared", "same paragraph"), Paragraph("Shared", "other text")),
        ),
    ]
    corpus = global_corpus(tasks)
    assert corpus == (shared, Paragraph("A", "only a"), Paragraph("Shared", "other text"))


def _hotpot_corpora(limit: int) -> list[tuple[tuple[Paragraph, ...], list[str]]]:
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:limit]
    out = []
    for record in records:
        paragraphs = tuple(Paragraph(t, "".join(s)) for t, s in record["context"])
        queries = [record["question"], *(title for title, _ in record["supporting_facts"])]
        out.append((paragraphs, queries))
    return out


def _same_ranking(expected: list[Hit], got: list[Hit]) -> bool:
    """Same documents in the same order, except that near-ties (1e-9) may swap."""
    if [h.score for h in got] != pytest.approx([h.score for h in expected], rel=1e-9):
        return False
    for a, b in zip(expected, got, strict=True):
        if a.doc_index != b.doc_index:
            partner = next((h for h in expected if h.doc_index == b.doc_index), None)
            if partner is None or partner.score != pytest.approx(a.score, rel=1e-9):
                return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_gold_title_of_the_subset_finds_its_paragraph_first(backend) -> None:
    # Before the title rule: 854 of 974 (18 searches found nothing); benchmarks/title_search.py.
    searches, first = 0, 0
    for paragraphs, queries in _hotpot_corpora(10_000):
        retriever = backend(paragraphs)
        for title in dict.fromkeys(queries[1:]):
            hits = retriever.search(title, k=3)
            searches += 1
            first += hits[0].title == title
    assert (first, searches) == (974, 974)


def test_backends_agree_on_real_per_task_corpora() -> None:
    for paragraphs, queries in _hotpot_corpora(150):
        reference, fast = RankBM25Retriever(paragraphs), BM25sRetriever(paragraphs)
        for query in queries:
            expected, got = reference.search(query, k=10), fast.search(query, k=10)
            assert _same_ranking(expected, got), query


def test_backends_agree_on_a_global_corpus() -> None:
    corpora = _hotpot_corpora(487)
    tasks = [Task(str(i), "bridge", "q", "a", paragraphs=p) for i, (p, _) in enumerate(corpora)]
    corpus = global_corpus(tasks)
    assert len(corpus) > 4000
    reference, fast = RankBM25Retriever(corpus), BM25sRetriever(corpus)
    for _, queries in corpora[:10]:
        expected, got = reference.search(queries[0], k=20), fast.search(queries[0], k=20)
        assert _same_ranking(expected[:5], got[:5])
        assert all(isinstance(h, Hit) for h in got)


_SCRIPT = """
from passkt.envs.retrieval import BM25sRetriever, RankBM25Retriever
from passkt.envs.tasks import Paragraph
words = "the a film of in was born director city river manchester united wood".split()
corpus = [Paragraph(f"P{i}", " ".join(words[(i * j) % len(words)] for j in range(3, 40)))
          for i in range(60)]
for backend in (BM25sRetriever, RankBM25Retriever):
    hits = backend(corpus).search("the film director born in manchester city", k=60)
    print([(h.doc_index, h.score.hex()) for h in hits])
"""


def test_rankings_do_not_depend_on_python_hash_seed() -> None:
    import os
    import subprocess
    import sys

    outputs = {
        subprocess.run(
            [sys.executable, "-c", _SCRIPT],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert "0x" in outputs.pop()
