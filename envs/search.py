"""The env's search tool: which retriever searches which paragraphs.

``corpus=`` and ``retriever=`` of ``ToolUseEnv`` choose it: each task's own paragraphs, one index
over every task's paragraphs, a saved ``Corpus`` folder, or a user's retriever (a backend name, a
factory ``paragraphs -> Retriever``, or a ``Retriever`` object). Indexes are built on first use.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, Literal

from passkt.envs.corpus import Corpus, open_corpus
from passkt.envs.retrieval import BACKENDS, Retriever, build_retriever, global_corpus
from passkt.envs.tasks import Paragraph, Task

logger = logging.getLogger(__name__)

__all__ = [
    "CorpusArg",
    "RetrieverArg",
    "RetrieverFactory",
    "Retrievers",
    "check_search_args",
    "is_retriever_object",
]

RetrieverFactory = Callable[[Sequence[Paragraph]], Retriever]
CorpusArg = Literal["task", "global"] | str | os.PathLike | Corpus
"""``corpus=``: ``"task"``, ``"global"``, a saved corpus folder, or a ``Corpus``."""
RetrieverArg = str | RetrieverFactory | Retriever | None
"""``retriever=``: a backend name, a factory ``paragraphs -> Retriever``, a ``Retriever``, or
``None`` (rank-bm25 for ``"task"`` and ``"global"``, a ``Corpus``'s own bm25s index)."""


def is_retriever_object(retriever: Any) -> bool:
    # A class has a ``search`` attribute too: classes are factories, instances are retrievers.
    return not isinstance(retriever, type) and isinstance(retriever, Retriever)


class Retrievers:
    """Builds retrievers on first use and caches them; shared by an env and its forks."""

    def __init__(
        self,
        backend: RetrieverArg,
        corpus: Literal["task", "global"] | Corpus,
        tasks: Sequence[Task],
    ) -> None:
        self.backend = backend
        self.corpus = corpus
        self.tasks = tasks
        self.per_task: dict[str, Retriever] = {}
        self.shared: Retriever | None = None
        if is_retriever_object(backend):
            self.shared = backend  # type: ignore[assignment]
        elif isinstance(corpus, Corpus) and backend in (None, "bm25s"):
            self.shared = corpus

    def _build(self, paragraphs: Sequence[Paragraph]) -> Retriever:
        backend = "rank_bm25" if self.backend is None else self.backend
        if isinstance(backend, str):
            return build_retriever(backend, paragraphs)
        return backend(paragraphs)  # type: ignore[operator]

    def for_task(self, task: Task) -> Retriever:
        if self.shared is not None:
            return self.shared
        if self.corpus != "task":
            if isinstance(self.corpus, Corpus):
                paragraphs: Sequence[Paragraph] = self.corpus.paragraphs
            else:
                paragraphs = global_corpus(self.tasks)
            logger.debug(
                "building a global %s index over %d paragraphs", self.backend, len(paragraphs)
            )
            self.shared = self._build(paragraphs)
            return self.shared
        retriever = self.per_task.get(task.task_id)
        if retriever is None:
            retriever = self.per_task[task.task_id] = self._build(task.paragraphs)
        return retriever


def check_search_args(name: str, corpus: Any, retriever: Any) -> Literal["task", "global"] | Corpus:
    """Validate ``corpus=`` and ``retriever=``; open a corpus folder (cached per process)."""
    if isinstance(retriever, str) and retriever not in BACKENDS:
        close = difflib.get_close_matches(retriever, list(BACKENDS), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"Unknown retriever {retriever!r}.{hint} Choose one of {sorted(BACKENDS)}, a "
            "callable that builds a Retriever from a list of Paragraphs, or a Retriever object."
        )
    if not (retriever is None or isinstance(retriever, str) or callable(retriever)) and not (
        is_retriever_object(retriever)
    ):
        raise ValueError(
            f"retriever must be a backend name, a callable or a Retriever, got {retriever!r}"
        )
    if is_retriever_object(retriever) and not (isinstance(corpus, str) and corpus == "task"):
        raise ValueError(
            f"{name}: retriever={retriever!r} is a Retriever object, which searches its own "
            f"collection; leave corpus at its default 'task' (got corpus={corpus!r})."
        )
    if isinstance(corpus, Corpus) or corpus in ("task", "global"):
        return corpus
    if isinstance(corpus, str | os.PathLike) and os.path.isdir(corpus):
        return open_corpus(corpus)
    raise ValueError(
        f"corpus must be 'task' (each task's own paragraphs), 'global' (one index over every "
        f"task's paragraphs), the folder of a saved passkt.envs.corpus.Corpus, or a Corpus; "
        f"got {corpus!r}" + (" (no such folder)" if isinstance(corpus, str | os.PathLike) else "")
    )
