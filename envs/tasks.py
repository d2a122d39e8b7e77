"""Tasks and task sources.

A *task* is one problem an env can pose: a question, its gold answer, and for the retrieval
categories the paragraphs the search tool can reach. A *task source* turns a name (``synthetic``,
``hotpotqa``, ``math500``, ``gsm8k``) and options into a list of tasks for one split. Sources are
registered as data in ``SOURCES`` so a user can add one without editing the envs.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from passkt.envs.errors import UnknownSourceError

Category = Literal["math", "comparison", "bridge"]
"""Study categories: A = ``math`` (no tools), B = ``comparison``, C = ``bridge``."""

AnswerType = Literal["text", "math", "number"]
"""How an answer is scored: HotpotQA exact match, math-verify equivalence, or numeric equality."""

Split = Literal["train", "test"]


@dataclass(frozen=True)
class Paragraph:
    """One searchable document: a Wikipedia-style paragraph with its title."""

    title: str
    text: str


@dataclass(frozen=True)
class Task:
    """One problem. Frozen and hashable-by-id so it can be shared by many env copies."""

    task_id: str
    """Unique within its source and split, stable across runs (used in result files)."""
    category: Category
    question: str
    answer: str
    """The gold answer as text (for math, the final answer, e.g. ``\\frac{1}{2}`` or ``42``)."""
    answer_type: AnswerType = "text"
    aliases: tuple[str, ...] = ()
    """Other answers that count as correct."""
    paragraphs: tuple[Paragraph, ...] = ()
    """The task's own corpus (gold and distractor paragraphs); empty for math."""
    gold_titles: tuple[str, ...] = ()
    """Titles of the gold paragraphs, in the order a sequential solver needs them."""
    gold_queries: tuple[str, ...] = ()
    """The search queries an expert issues, in order (one per tool call)."""
    depth: int = 0
    """Minimum number of tool calls that can solve the task (T*); 0 for math."""
    source: str = ""
    split: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def answers(self) -> tuple[str, ...]:
        """The gold answer followed by its aliases."""
        return (self.answer, *self.aliases)


class TaskSource(Protocol):
    """What a task source provides: a function from options to a list of tasks.

    ``category`` selects the kind of question; ``split`` is ``"train"`` or ``"test"`` and the two
    splits never share a task. Extra keyword arguments are source specific (``path=``, ``hops=``,
    ``seed=`` ...); a source must reject ones it does not know.
    """

    def __call__(self, category: Category, split: Split, **options: Any) -> list[Task]: ...


SOURCES: dict[str, str] = {
    "synthetic": "passkt.envs.sources.synthetic:load_tasks",
    "hotpotqa": "passkt.envs.sources.hotpotqa:load_tasks",
    "math500": "passkt.envs.sources.math_data:load_math500",
    "gsm8k": "passkt.envs.sources.math_data:load_gsm8k",
}
"""Registered task sources: name -> ``"module:function"`` (imported on first use)."""


def register_source(name: str, loader: str | TaskSource) -> None:
    """Add a task source: ``loader`` is a ``TaskSource`` or a ``"module:function"`` string."""
    if isinstance(loader, str):
        SOURCES[name] = loader
    else:
        _LOADED[name] = loader
        SOURCES[name] = f"<object {loader!r}>"
    load_tasks.cache_clear()


_LOADED: dict[str, TaskSource] = {}


def get_source(name: str) -> TaskSource:
    """Resolve a source name to its loader, suggesting close names for typos."""
    if name in _LOADED:
        return _LOADED[name]
    if name not in SOURCES:
        close = difflib.get_close_matches(name, list(SOURCES), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise UnknownSourceError(
            f"Unknown task source {name!r}.{hint} Known sources: {', '.join(sorted(SOURCES))}. "
            "Add your own with passkt.envs.register_source()."
        )
    module_name, _, attr = SOURCES[name].partition(":")

    loader: TaskSource = getattr(importlib.import_module(module_name), attr)
    _LOADED[name] = loader
    return loader


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


@functools.lru_cache(maxsize=32)
def _load_cached(source: str, category: str, split: str, frozen: tuple) -> tuple[Task, ...]:
    return tuple(get_source(source)(category, split, **dict(frozen)))  # type: ignore[arg-type]


def load_tasks(
    source: str, category: Category, split: Split = "test", **options: Any
) -> list[Task]:
    """Load (and cache) the tasks of one source, category and split.

    Many env instances (one per sampled episode) share one cached task list.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    try:
        frozen = tuple(sorted((k, _freeze(v)) for k, v in options.items()))
        hash(frozen)
    except TypeError:  # unhashable option: load without the cache
        return list(get_source(source)(category, split, **options))
    return list(_load_cached(source, category, split, frozen))


load_tasks.cache_clear = _load_cached.cache_clear  # type: ignore[attr-defined]
