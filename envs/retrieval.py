"""Search backends: BM25 over a list of paragraphs, behind a small ``Retriever`` protocol.

Backends, all with one tokenization (``tokenize``: lowercase Unicode words of title and text):

* ``RankBM25Retriever``: ``rank_bm25.BM25Okapi``, the reference (the study's setting: a few
  paragraphs per task).
* ``BM25sRetriever``: a ``bm25s`` sparse index rescored to rank-bm25's exact Okapi variant
  (k1 = 1.5, b = 0.75, negative idfs floored at 0.25 x the mean idf), so both give the same
  scores and rankings up to float rounding; for per-task and ``corpus="global"`` indexes.
* ``passkt.envs.corpus.Corpus``: a large, saved corpus scored natively by ``bm25s`` (its
  precomputed score matrix, no Python re-scoring), built with ``bm25s_matrix`` below.
* ``passkt.envs.wikipedia.WikipediaTool``: live Wikipedia through an on-disk cache.

Where the BM25 variants differ: the term-frequency part is the same everywhere (up to the constant
factor ``k1 + 1``, which rank-bm25 and bm25s' ATIRE variant include and bm25s' Robertson and Lucene
variants leave out); the idf differs. With ``r = (N - df + 0.5) / (df + 0.5)``:

* rank-bm25 ``BM25Okapi``: ``log(r)``; a word in more than half the documents has ``log(r) < 0``
  and gets ``epsilon x mean idf`` instead (``epsilon = 0.25``): a small positive weight, so a
  query of only common words still ranks documents.
* bm25s ``"robertson"``: ``log(max(r, 1))``, floored at 0: such words weigh nothing.
* bm25s ``"lucene"`` (bm25s' default): ``log(1 + r)``, positive for every word, and a different
  function of ``df`` everywhere, so it never ranks exactly as rank-bm25 does.

So rank-bm25 and bm25s' Robertson variant give proportional scores, hence identical rankings up to
ties, for every query none of whose words occurs in more than half the documents
(``tests/envs/test_corpus.py`` checks this); they differ only through the floored words. On a
10-paragraph corpus many words cross that line (the Robertson variant then finds fewer documents),
which is why the per-task setting keeps rank-bm25's variant; on a large corpus only stop words
cross it.

Every backend ranks as a search engine over a handful of pages does (``rank``): a paragraph whose
title is the query (same words, ``title_key``) comes first, then the others with a positive
score, by score, ties by document index (a stable, deterministic tie-break). Why the title rule:
on a 10-paragraph corpus a word in exactly half the paragraphs has Okapi idf ``log(1) = 0``
(rank-bm25 floors only negative idfs), so a search for a gold title such as "Manchester Terrier"
scored 0 everywhere and found nothing, and a title often ranked below paragraphs that repeat it.
Positive scores and their order are rank-bm25's, unchanged, and zero-score paragraphs are still
left out by default: returning them (to always give ``k`` documents) would hand the synthetic
world's agent hops it never searched for, and changes the synthetic envs' observations. With
``fill=True`` (``search(query, k, fill=True)``, every backend here and ``Corpus``) a search on a
non-empty corpus returns exactly ``min(k, N)`` documents, the zero-score ones last in document
order: a search engine over a question's 10 paragraphs always shows ``k`` pages. The envs turn it
on for real data (``search_fill``, on for ``source="hotpotqa"``) and leave it off for the
synthetic world. A user plugs in another backend (dense retrieval, another search API) by
implementing ``Retriever``.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from rank_bm25 import BM25Okapi

from passkt.envs.errors import MissingDependencyError
from passkt.envs.tasks import Paragraph, Task

__all__ = [
    "BACKENDS",
    "FILL_SOURCES",
    "BM25sRetriever",
    "Backend",
    "Hit",
    "RankBM25Retriever",
    "Retriever",
    "bm25s_matrix",
    "build_retriever",
    "global_corpus",
    "rank",
    "resolve_fill",
    "title_key",
    "tokenize",
]

Backend = Literal["rank_bm25", "bm25s"]

_WORD = re.compile(r"\w+")

MAX_QUERY_TOKENS = 256
"""Only a query's first 256 words that occur in the corpus are scored (words that occur nowhere
add nothing to any score, so dropping them changes no result); this bounds the cost of a
degenerate query of thousands of words."""


def tokenize(text: str) -> list[str]:
    """Lowercase Unicode word tokens: ``re.findall(r"\\w+", text.lower())``."""
    return _WORD.findall(text.lower())


def _document_tokens(paragraph: Paragraph) -> list[str]:
    return tokenize(f"{paragraph.title} {paragraph.text}")


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        title: The paragraph's title.
        text: The paragraph's text.
        score: The BM25 score (higher is better).
        doc_index: Position of the paragraph in the retriever's corpus.
    """

    title: str
    text: str
    score: float
    doc_index: int


@runtime_checkable
class Retriever(Protocol):
    """What a search backend provides.

    ``search`` returns at most ``k`` hits, best first, deterministically (same query, same hits).
    """

    def search(self, query: str, k: int) -> list[Hit]:
        """The top ``k`` documents for ``query``."""
        ...


def title_key(text: str) -> str:
    """A title or query as its words (``tokenize``), so "Ed Wood (film)" == "ed wood film"."""
    return " ".join(tokenize(text))


def _top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest positive scores; ties broken by the lower index."""
    positive = np.flatnonzero(scores > 0)
    if len(positive) > 4 * k:
        kth = np.partition(scores[positive], len(positive) - k)[len(positive) - k]
        positive = positive[scores[positive] >= kth]
    order = np.argsort(-scores[positive], kind="stable")
    return positive[order[:k]]


def rank(scores: np.ndarray, k: int, first: Sequence[int] = (), fill: bool = False) -> list[int]:
    """The documents a search returns: ``first``, then by positive score, then (``fill``) zeros.

    Args:
        scores: One score per document (``>= 0``); may be empty.
        k: The most to return.
        first: Documents that go first whatever their score (the exact title matches), in order.
        fill: Return exactly ``min(k, len(scores))`` documents: when fewer than ``k`` have a
            positive score, the zero-score ones follow in document order (the same tie-break as
            every other tie), as a search engine over a handful of pages always shows ``k``.

    Returns:
        Document indices: ``first``, then positive scores best first (ties by lower index), then
        with ``fill`` the other documents by lower index.
    """
    chosen = list(dict.fromkeys(int(i) for i in first))[:k]
    taken = set(chosen)
    chosen += [i for i in map(int, _top_k(scores, k + len(taken))) if i not in taken]
    chosen = chosen[:k]
    if fill and len(chosen) < k:
        # Fewer than k hits means every positive score is already in: the rest score 0.
        taken = set(chosen)
        rest = (i for i in range(len(scores)) if i not in taken)
        chosen += [i for _, i in zip(range(k - len(chosen)), rest, strict=False)]
    return chosen


class _BM25Base:
    """Shared corpus handling and ranking; subclasses provide ``_scores``."""

    def __init__(self, paragraphs: Sequence[Paragraph], k1: float = 1.5, b: float = 0.75) -> None:
        self.paragraphs: tuple[Paragraph, ...] = tuple(paragraphs)
        self.k1 = k1
        self.b = b
        self._titles: dict[str, list[int]] = {}
        for i, paragraph in enumerate(self.paragraphs):
            self._titles.setdefault(title_key(paragraph.title), []).append(i)

    def _scores(self, query_tokens: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _vocabulary(self) -> Container[str]:
        raise NotImplementedError

    def search(self, query: str, k: int, *, fill: bool = False) -> list[Hit]:
        """The top ``k`` paragraphs for ``query``, ranked by ``rank``.

        Args:
            query: Free text; tokenized like the documents.
            k: The most hits to return (``k >= 1``).
            fill: Always return ``min(k, len(self))`` hits, the zero-score paragraphs last in
                corpus order (the envs' ``search_fill``; on for HotpotQA, off for the synthetic
                world, whose minimum depth needs a search to show only what it names).

        Returns:
            At most ``k`` hits: a paragraph titled ``query`` first, then the positive BM25
            scores (ties in corpus order); without ``fill``, nothing for a query that matches
            no title or score.
        """
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if not self.paragraphs:
            return []
        vocabulary = self._vocabulary()
        tokens = [t for t in tokenize(query) if t in vocabulary][:MAX_QUERY_TOKENS]
        scores = self._scores(tokens) if tokens else np.zeros(len(self.paragraphs))
        first = self._titles.get(title_key(query), ())
        return [
            Hit(
                title=self.paragraphs[i].title,
                text=self.paragraphs[i].text,
                score=float(scores[i]),
                doc_index=i,
            )
            for i in rank(scores, k, first, fill)
        ]

    def __len__(self) -> int:
        return len(self.paragraphs)


class RankBM25Retriever(_BM25Base):
    """BM25 (Okapi) with ``rank_bm25``: the reference backend.

    Args:
        paragraphs: The corpus.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.
    """

    def __init__(self, paragraphs: Sequence[Paragraph], k1: float = 1.5, b: float = 0.75) -> None:
        super().__init__(paragraphs, k1, b)

        corpus = [_document_tokens(p) for p in self.paragraphs]
        # BM25Okapi divides by the corpus size and the mean length: guard the degenerate corpora.
        if corpus and any(corpus):
            self._bm25 = BM25Okapi(corpus, k1=k1, b=b)
        else:
            self._bm25 = None

    def _vocabulary(self) -> Container[str]:
        return {} if self._bm25 is None else self._bm25.idf

    def _scores(self, query_tokens: list[str]) -> np.ndarray:
        if self._bm25 is None:
            return np.zeros(len(self.paragraphs))
        return np.asarray(self._bm25.get_scores(query_tokens), dtype=np.float64)


class BM25sRetriever(_BM25Base):
    """BM25 (Okapi, as rank-bm25 computes it) over a ``bm25s`` sparse index: fast on large corpora.

    ``bm25s`` builds the term-by-document matrix (Lucene variant, whose idf is always positive, so
    every posting is kept). At query time each query term's column is rescaled from bm25s' weight
    to rank-bm25's Okapi weight (Robertson idf, with negative idfs floored at 0.25 x the mean idf,
    times ``k1 + 1``), so scores and rankings equal ``RankBM25Retriever``'s up to float rounding.
    The cost per query is the length of the query terms' posting lists, not the corpus size.

    Args:
        paragraphs: The corpus.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalization.
        epsilon: rank-bm25's idf floor, as a fraction of the mean idf.
    """

    def __init__(
        self,
        paragraphs: Sequence[Paragraph],
        k1: float = 1.5,
        b: float = 0.75,
        epsilon: float = 0.25,
    ) -> None:
        super().__init__(paragraphs, k1, b)
        try:
            import bm25s  # start-up cost: bm25s, 0.2 s, for its backend only
        except ImportError as e:  # pragma: no cover - bm25s is a core dependency
            raise MissingDependencyError("bm25s", "all") from e
        corpus = [_document_tokens(p) for p in self.paragraphs]
        self._vocab: dict[str, int] = {}
        if not (corpus and any(corpus)):
            return
        index = bm25s.BM25(k1=k1, b=b, method="lucene", dtype="float64")
        index.index(corpus, show_progress=False, create_empty_token=False)
        self._vocab = index.vocab_dict
        self._data = index.scores["data"]
        self._indices = index.scores["indices"]
        self._indptr = index.scores["indptr"]
        self._weight = self._okapi_weights(corpus, index.vocab_dict, k1, epsilon)

    def _okapi_weights(
        self, corpus: list[list[str]], vocab: dict[str, int], k1: float, epsilon: float
    ) -> np.ndarray:
        """Per column: rank-bm25's Okapi idf x (k1 + 1) / bm25s' Lucene idf.

        The idfs are computed as rank-bm25 does (``math.log``, mean summed in order of first
        occurrence), not in bm25s' vocabulary order, which follows Python's string hashing and
        would make near-tied scores differ from one process to the next.
        """
        n_docs = len(corpus)
        doc_freq = np.diff(self._indptr)  # (V,) postings per column = documents with the term
        okapi_idf = np.zeros(len(doc_freq))
        total = 0.0
        for token in dict.fromkeys(t for doc in corpus for t in doc):
            column = vocab[token]
            df = int(doc_freq[column])
            okapi_idf[column] = math.log(n_docs - df + 0.5) - math.log(df + 0.5)
            total += okapi_idf[column]
        okapi_idf[okapi_idf < 0] = epsilon * total / len(doc_freq)
        lucene_idf = np.log1p((n_docs - doc_freq + 0.5) / (doc_freq + 0.5))
        return okapi_idf * (k1 + 1) / lucene_idf

    def _vocabulary(self) -> Container[str]:
        return self._vocab

    def _scores(self, query_tokens: list[str]) -> np.ndarray:
        scores = np.zeros(len(self.paragraphs))
        for token in query_tokens:
            column = self._vocab.get(token)
            if column is None:
                continue
            start, end = self._indptr[column], self._indptr[column + 1]
            scores[self._indices[start:end]] += self._weight[column] * self._data[start:end]
        return scores


def _token_ids(paragraphs: Sequence[Paragraph]) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    """Vocabulary (first occurrence order), flat token ids and document lengths."""
    vocab: dict[str, int] = {}
    ids, lengths = array("i"), array("i")
    for paragraph in paragraphs:
        tokens = tokenize(f"{paragraph.title} {paragraph.text}")
        ids.extend([vocab.setdefault(token, len(vocab)) for token in tokens])
        lengths.append(len(tokens))
    return vocab, np.frombuffer(ids, dtype=np.int32), np.frombuffer(lengths, dtype=np.int32)


_CHUNK_DOCS = 1 << 16
"""Documents per block when counting term frequencies (bounds the build's peak memory)."""
_CHUNK_POSTINGS = 1 << 22
"""Postings per block when computing scores."""


def _postings(ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(term, doc, tf)`` of every distinct term of every document, sorted by term, then doc."""
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    terms, docs, tfs = [], [], []
    for lo in range(0, len(lengths), _CHUNK_DOCS):
        hi = min(lo + _CHUNK_DOCS, len(lengths))
        width = hi - lo
        local = np.repeat(np.arange(width, dtype=np.int64), lengths[lo:hi])
        keys, counts = np.unique(
            ids[starts[lo] : starts[hi]].astype(np.int64) * width + local, return_counts=True
        )
        terms.append((keys // width).astype(np.int32))
        docs.append((keys % width + lo).astype(np.int32))
        tfs.append(counts.astype(np.int32))
    term = np.concatenate(terms) if terms else np.zeros(0, np.int32)
    order = np.argsort(term, kind="stable")  # blocks are in doc order: docs stay ascending
    doc = np.concatenate(docs)[order] if docs else np.zeros(0, np.int32)
    tf = np.concatenate(tfs)[order] if tfs else np.zeros(0, np.int32)
    return term[order], doc, tf


def _idf(df: np.ndarray, n_docs: int, method: str) -> np.ndarray:
    ratio = (n_docs - df + 0.5) / (df + 0.5)
    if method == "robertson":  # bm25s: log(max(1, ratio)), never negative
        return np.log(np.maximum(ratio, 1.0))
    return np.log1p(ratio)  # lucene


def bm25s_matrix(
    paragraphs: Sequence[Paragraph],
    *,
    k1: float = 1.5,
    b: float = 0.75,
    method: Literal["robertson", "lucene"] = "robertson",
    dtype: str = "float32",
) -> tuple[dict[str, int], dict[str, Any]]:
    """The score matrix ``bm25s.BM25(method=...).index`` builds, computed with numpy from token ids.

    Entry (doc, term) is ``idf(term) * tf / (tf + k1 * (1 - b + b * len(doc) / avgdl))``, with
    bm25s' idf for ``method``. bm25s' own ``index`` needs every document as a list of token
    strings at once; this needs 4 bytes per token and a few bytes per posting.

    Returns:
        The vocabulary (token -> column, in order of first occurrence) and bm25s' ``scores``
        dict: CSC ``data``, ``indices`` (doc ids, ascending within a column), ``indptr``, and
        ``num_docs``.
    """
    vocab, ids, lengths = _token_ids(paragraphs)
    term, doc, tf = _postings(ids, lengths)
    del ids
    df = np.bincount(term, minlength=len(vocab))
    indptr = np.zeros(len(vocab) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    idf = _idf(df, len(lengths), method)
    norm = k1 * (1 - b + b * lengths / lengths.mean()) if len(lengths) else lengths
    data = np.empty(len(term), dtype=dtype)
    for lo in range(0, len(term), _CHUNK_POSTINGS):
        sl = slice(lo, lo + _CHUNK_POSTINGS)
        freq = tf[sl].astype(np.float64)
        data[sl] = idf[term[sl]] * freq / (freq + norm[doc[sl]])
    scores = {"data": data, "indices": doc, "indptr": indptr, "num_docs": len(lengths)}
    return vocab, scores


BACKENDS: dict[str, type[_BM25Base]] = {
    "rank_bm25": RankBM25Retriever,
    "bm25s": BM25sRetriever,
}
"""Retriever backends by name (the envs' ``retriever=`` argument)."""


def build_retriever(backend: str, paragraphs: Sequence[Paragraph]) -> Retriever:
    """Build a retriever of the named backend over ``paragraphs``.

    Raises:
        ValueError: ``backend`` is not a key of ``BACKENDS``.
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"Unknown retriever {backend!r}; choose one of {', '.join(sorted(BACKENDS))}"
        )
    return BACKENDS[backend](paragraphs)


FILL_SOURCES = frozenset({"hotpotqa"})
"""Task sources whose searches return ``top_k`` documents by default (``search_fill=None``)."""


def resolve_fill(name: str, search_fill: Any, source: str, tasks: Any, retriever: Any) -> bool:
    """``search_fill``: on by default for real data, off for the synthetic world.

    Real data (HotpotQA) is the study's setting: a search engine over a question's 10 paragraphs
    always shows ``top_k`` pages, the zero-score ones last. The synthetic world's minimum depth
    T* assumes a search shows only what it names; filling would reveal hops unasked. Your own
    ``tasks=`` and your own retriever keep the default off (a retriever of yours decides how many
    documents it returns, so ``search_fill=True`` is refused with one).
    """
    if search_fill is not None and not isinstance(search_fill, bool):
        raise ValueError(f"search_fill must be True, False or None, got {search_fill!r}")
    builtin = retriever is None or isinstance(retriever, str)
    if search_fill is None:
        return builtin and tasks is None and source in FILL_SOURCES
    if search_fill and not builtin:
        raise ValueError(
            f"{name}: search_fill=True needs a built-in backend (retriever=None, 'rank_bm25' or "
            f"'bm25s'); your retriever {retriever!r} decides how many documents it returns."
        )
    return search_fill


def global_corpus(tasks: Iterable[Task]) -> tuple[Paragraph, ...]:
    """The union of the tasks' paragraphs, deduplicated by ``(title, text)``, first seen first."""
    seen: dict[tuple[str, str], Paragraph] = {}
    for task in tasks:
        for paragraph in task.paragraphs:
            seen.setdefault((paragraph.title, paragraph.text), paragraph)
    return tuple(seen.values())
