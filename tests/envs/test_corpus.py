"""The global corpus (passkt.envs.corpus): bm25s' matrix, agreement with rank-bm25, disk, envs."""

from __future__ import annotations

import json
import pickle
import random

import gymnasium as gym
import numpy as np
import pytest
import scipy.sparse as sp
from real_data import DATA

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.corpus import Corpus, CorpusIndexError, corpus_fingerprint, open_corpus
from passkt.envs.retrieval import Hit, RankBM25Retriever, Retriever, bm25s_matrix, tokenize
from passkt.envs.sources.synthetic_world import build_world
from passkt.envs.tasks import Paragraph, Task

HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"
K1 = 1.5


def random_corpus(n_docs: int = 400, vocab: int = 300, seed: int = 0) -> list[Paragraph]:
    """Documents of 5 to 30 words from a Zipf-like vocabulary, no word in half the documents."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(vocab)]
    weights = [1 / (i + 20) for i in range(vocab)]
    return [
        Paragraph(f"T{i}", " ".join(rng.choices(words, weights, k=rng.randint(5, 30))))
        for i in range(n_docs)
    ]


def same_up_to_ties(expected: list[Hit], got: list[Hit], scale: float, rel: float) -> bool:
    """Same scores (``expected = scale * got``) and the same documents, except that documents
    whose scores tie (within ``rel``) may swap."""
    if [h.score for h in expected] != pytest.approx([scale * h.score for h in got], rel=rel):
        return False
    score = {h.doc_index: h.score for h in expected}
    return all(
        a.doc_index == b.doc_index or score.get(b.doc_index, -1) == pytest.approx(a.score, rel=rel)
        for a, b in zip(expected, got, strict=True)
    )


@pytest.mark.parametrize("method", ["robertson", "lucene"])
def test_matrix_equals_bm25s_index(method: str) -> None:
    import bm25s

    paragraphs = build_world(0).paragraphs
    vocab, scores = bm25s_matrix(paragraphs, method=method, dtype="float64")
    reference = bm25s.BM25(method=method, dtype="float64")
    tokens = [tokenize(f"{p.title} {p.text}") for p in paragraphs]
    reference.index(tokens, show_progress=False, create_empty_token=False)
    assert set(vocab) == set(reference.vocab_dict)

    def matrix(s: dict, n_terms: int) -> sp.csc_matrix:
        return sp.csc_matrix((s["data"], s["indices"], s["indptr"]), (len(paragraphs), n_terms))

    ours, theirs = matrix(scores, len(vocab)), matrix(reference.scores, len(vocab))
    theirs = theirs[:, [reference.vocab_dict[t] for t in vocab]]  # reorder to our columns
    assert ours.nnz == theirs.nnz > 30_000
    assert abs(ours - theirs).max() < 1e-12
    assert all(np.all(np.diff(scores["indices"][a:b]) > 0) for a, b in
               zip(scores["indptr"][:-1], scores["indptr"][1:], strict=True))  # fmt: skip


def test_rankings_agree_with_rank_bm25_where_no_idf_is_negative() -> None:
    paragraphs = random_corpus()
    reference, corpus = RankBM25Retriever(paragraphs), Corpus.build(paragraphs)
    df = np.diff(corpus._indptr)
    assert 2 * df.max() < len(paragraphs) and df.max() > 50  # common words, none in half
    rng = random.Random(1)
    for _ in range(100):
        query = " ".join(f"w{rng.randrange(300)}" for _ in range(rng.randint(1, 6)))
        expected, got = reference.search(query, k=10), corpus.search(query, k=10)
        assert len(got) == len(expected) > 0
        assert same_up_to_ties(expected, got, scale=K1 + 1, rel=1e-5), query


def test_the_variants_differ_only_on_words_in_over_half_the_documents() -> None:
    paragraphs = [
        Paragraph("A", "the river flows"),
        Paragraph("B", "the the mountain"),
        Paragraph("C", "the lake and the river and the sea"),
        Paragraph("D", "a desert"),
        Paragraph("E", "the forest"),
        Paragraph("F", "a valley"),
    ]
    reference, corpus = RankBM25Retriever(paragraphs), Corpus.build(paragraphs, dtype="float64")
    # "the" is in 4 of 6 documents: rank-bm25 floors its negative idf at 0.25 x the mean idf,
    # bm25s' Robertson variant at 0, so only rank-bm25 finds documents by it.
    assert {h.doc_index for h in reference.search("the", k=6)} == {0, 1, 2, 4}
    assert corpus.search("the", k=6) == []
    # Without "the" the two agree exactly (up to the constant k1 + 1).
    expected, got = reference.search("river", k=4), corpus.search("the river", k=4)
    assert [h.doc_index for h in got] == [h.doc_index for h in expected] == [0, 2]
    assert [h.score * (K1 + 1) for h in got] == pytest.approx([h.score for h in expected])


def test_agrees_with_rank_bm25_on_hotpotqa_without_common_words() -> None:
    corpus = Corpus.from_hotpotqa(HOTPOT)
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    pairs = [(title, "".join(s)) for r in records for title, s in r["context"]]
    assert len(corpus) == len(set(pairs)) > 4000  # identical paragraphs of several records
    assert corpus.manifest.duplicates_dropped == len(pairs) - len(set(pairs)) > 0
    reference = RankBM25Retriever(corpus.paragraphs)
    n, df = len(corpus), np.diff(corpus._indptr)
    for record in records[:40]:
        # Drop the words where the variants differ (in more than half the paragraphs).
        words = [
            w
            for w in tokenize(record["question"])
            if w not in corpus._vocab or 2 * df[corpus._vocab[w]] < n  # unknown: ignored by both
        ]
        query = " ".join(words)
        expected, got = reference.search(query, k=10), corpus.search(query, k=10)
        assert same_up_to_ties(expected, got, scale=K1 + 1, rel=1e-5), query


def test_duplicates_are_dropped_and_shared_titles_kept() -> None:
    paragraphs = [
        Paragraph("Mercury", "Mercury is a planet."),
        Paragraph("Venus", "Venus is a planet."),
        Paragraph("Mercury", "Mercury is a chemical element."),
        Paragraph("Mercury", "Mercury is a planet."),  # exact duplicate of the first
        *(Paragraph(f"Filler {i}", "Nothing to see here.") for i in range(4)),
    ]
    corpus = Corpus.build(paragraphs)
    kept = [*paragraphs[:3], *paragraphs[4:]]
    assert list(corpus.paragraphs) == kept
    assert corpus.manifest.duplicates_dropped == 1
    assert corpus.manifest.fingerprint == corpus_fingerprint(kept)
    assert corpus.indices_of("Mercury") == (0, 2) and corpus.indices_of("Mars") == ()
    hits = corpus.search("mercury", k=5)
    assert [(h.title, h.doc_index) for h in hits] == [("Mercury", 0), ("Mercury", 2)]


def test_save_and_load_memory_mapped(tmp_path) -> None:
    corpus = Corpus.from_world(0, scale=2)
    folder = corpus.save(tmp_path / "world")
    assert {p.name for p in folder.iterdir()} >= {"manifest.json", "bm25s", "offsets.npy"}
    loaded = Corpus.load(folder)
    assert isinstance(loaded, Retriever) and loaded.manifest == corpus.manifest
    assert isinstance(loaded._index.scores["data"], np.memmap)
    assert loaded.paragraphs[-1] == corpus.paragraphs[-1] and len(loaded) == len(corpus) > 2000
    for paragraph in corpus.paragraphs[::97]:
        query = f"{paragraph.title} film"
        assert loaded.search(query, k=5) == corpus.search(query, k=5) != []
        # a title search finds its paragraph first, read from the mapped titles
        hits = loaded.search(paragraph.title.upper(), k=3)
        assert hits[0].title == paragraph.title and hits == corpus.search(paragraph.title, k=3)
    assert pickle.loads(pickle.dumps(loaded)) is open_corpus(folder)  # travels as its path
    with pytest.raises(FileExistsError, match="already holds a corpus; pass overwrite=True"):
        corpus.save(folder)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="is not a corpus folder"):
        corpus.save(tmp_path / "other")


def test_empty_corpus(tmp_path) -> None:
    corpus = Corpus.build([])
    assert len(corpus) == 0 and corpus.search("anything", k=3) == []
    assert len(Corpus.load(corpus.save(tmp_path / "empty"))) == 0


def test_bad_folders_are_refused_with_a_reason(tmp_path) -> None:
    with pytest.raises(CorpusIndexError, match=r"does not exist .*Corpus\.build"):
        Corpus.load(tmp_path / "missing")
    folder = Corpus.build(random_corpus(50)).save(tmp_path / "c")
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": 0}))
    with pytest.raises(CorpusIndexError, match=r"format 0 .*Rebuild it"):
        Corpus.load(folder)
    (folder / "manifest.json").write_text(json.dumps({**manifest, "num_docs": 49}))
    with pytest.raises(CorpusIndexError, match=r"50 documents .* says 49"):
        Corpus.load(folder)
    with pytest.raises(ValueError, match="method must be 'robertson' or 'lucene'"):
        Corpus.build([], method="okapi")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be >= 1"):
        Corpus.build(random_corpus(5)).search("w1", k=0)


def test_load_or_build_reuses_rebuilds_or_refuses(tmp_path) -> None:
    first, second = random_corpus(60, seed=1), random_corpus(60, seed=2)
    folder = tmp_path / "c"
    built = Corpus.load_or_build(folder, first)
    stamp = (folder / "manifest.json").stat().st_mtime_ns
    reused = Corpus.load_or_build(folder, lambda: first)
    assert reused.manifest == built.manifest and reused.path == folder
    assert (folder / "manifest.json").stat().st_mtime_ns == stamp  # not rebuilt
    with pytest.raises(CorpusIndexError, match=r"is stale .*fingerprint.*rebuild=True"):
        Corpus.load_or_build(folder, second, rebuild=False)
    with pytest.raises(CorpusIndexError, match="method: saved 'robertson', asked 'lucene'"):
        Corpus.load_or_build(folder, first, rebuild=False, method="lucene")
    rebuilt = Corpus.load_or_build(folder, second)
    assert rebuilt.manifest.fingerprint == corpus_fingerprint(second)
    assert Corpus.load(folder).manifest.fingerprint == corpus_fingerprint(second)


# --- the envs' corpus= and retriever= -----------------------------------------------------------


def bridge_tasks() -> list[Task]:
    world = build_world(0)
    tasks = []
    for i, entity in enumerate(world.entities[-3:]):  # films
        director = world.entities[entity.link("director")]
        tasks.append(Task(f"film-{i}", "bridge", f"Who directed {entity.name}?", director.name,
                          paragraphs=(entity.paragraph,), depth=1))  # fmt: skip
    return tasks


def test_env_searches_a_saved_corpus(tmp_path) -> None:
    tasks = bridge_tasks()
    folder = Corpus.from_world(0).save(tmp_path / "world")
    director = tasks[0].answer
    for corpus in (str(folder), folder, Corpus.load(folder)):
        env = gym.make("BridgeQA-v0", tasks=tasks, corpus=corpus, top_k=1)
        env.reset(options={"task_id": "film-0"})
        obs, *_ = env.step(f"<search>{director}</search>")
        assert obs.startswith(f"<information>Doc 1 (Title: {director}) ")  # not a task paragraph
    shared = gym.make("BridgeQA-v0", tasks=tasks, corpus=str(folder))
    assert shared.unwrapped._retrievers.for_task(tasks[0]) is open_corpus(folder)

    seen = []

    def factory(paragraphs):
        seen.append(len(paragraphs))
        return RankBM25Retriever(paragraphs)

    for retriever in ("rank_bm25", factory):
        env = gym.make("BridgeQA-v0", tasks=tasks, corpus=folder, retriever=retriever, top_k=1)
        env.reset(options={"task_id": "film-0"})
        obs, *_ = env.step(f"<search>{director}</search>")
        assert obs.startswith(f"<information>Doc 1 (Title: {director}) ")
    assert seen == [len(open_corpus(folder))]


def test_env_rejects_a_missing_corpus_folder(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"corpus must be 'task' .*no such folder"):
        gym.make("BridgeQA-v0", tasks=bridge_tasks(), corpus=str(tmp_path / "nowhere"))
    with pytest.raises(CorpusIndexError, match="is not a corpus folder"):
        gym.make("BridgeQA-v0", tasks=bridge_tasks(), corpus=str(tmp_path))


def test_env_with_a_corpus_passes_the_env_checker(tmp_path) -> None:
    from gymnasium.utils.env_checker import check_env

    folder = Corpus.from_world(0).save(tmp_path / "world")
    env = gym.make("ComparisonQA-v0", corpus=folder, source_options={"num_tasks": 5})
    check_env(env.unwrapped, skip_render_check=True)


def test_truncated_or_corrupt_text_files_are_refused_at_load(tmp_path) -> None:
    paragraphs = [Paragraph("Zanev", "Zanev is a river."), Paragraph("Été", "A summer, in French.")]
    folder = Corpus.build(paragraphs).save(tmp_path / "c")
    texts = (folder / "texts.bin").read_bytes()
    (folder / "texts.bin").write_bytes(texts[:-5])  # a copy cut short
    with pytest.raises(CorpusIndexError, match=r"texts\.bin has \d+ bytes but offsets\.npy .*37"):
        Corpus.load(folder)
    (folder / "texts.bin").write_bytes(texts)
    titles = (folder / "titles.bin").read_bytes()
    (folder / "titles.bin").write_bytes(titles.replace("É".encode(), b"\xff\xfe"))
    with pytest.raises(CorpusIndexError, match=r"titles\.bin: invalid UTF-8 at byte 5"):
        Corpus.load(folder)
