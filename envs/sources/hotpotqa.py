"""HotpotQA task source: the distractor setting, filtered by question type.

Reads the official JSON (``hotpot_dev_distractor_v1.json``: a list of records with ``_id``,
``answer``, ``question``, ``supporting_facts`` as ``[title, sent_id]`` pairs, ``context`` as
``[title, [sentences]]`` pairs, ``type``, ``level``) and the Hugging Face layout (``id``,
``context: {"title": [...], "sentences": [[...]]}``, ``supporting_facts: {"title": [...],
"sent_id": [...]}``), as a JSON list or JSON Lines, a saved dataset folder, or the hub dataset
``hotpotqa/hotpot_qa`` (config ``distractor``) through ``datasets``; see
``passkt.envs.sources.records``.

Each task's search corpus is its own paragraphs (the study's setting); a paragraph's text is
``"".join(sentences)``, keeping the official quirk that later sentences start with a space.

The train/test split is a pure function of the record id (``is_test_id``), so the two splits never
overlap and a record keeps its split when the file grows. The option checks here are shared by the
other real-data sources (``passkt.envs.sources.math_data``).
"""

from __future__ import annotations

import hashlib
import html
import logging
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from passkt.envs.errors import DatasetFormatError
from passkt.envs.scoring import normalize_answer
from passkt.envs.sources.records import read_records, records_from
from passkt.envs.tasks import Paragraph, Task

logger = logging.getLogger(__name__)

__all__ = [
    "HOTPOTQA_TYPES",
    "check_split_options",
    "is_test_id",
    "load_tasks",
    "order_bridge_titles",
    "parse_record",
    "read_records",
    "records_from",
    "require",
]

HOTPOTQA_TYPES = ("comparison", "bridge")
"""The ``type`` values of HotpotQA records, which are also the passkt categories they feed."""

_HINT = (
    "Download hotpot_dev_distractor_v1.json (or hotpot_train_v1.1.json) from "
    "https://hotpotqa.github.io/ and pass path=<file>, or pass path='hotpotqa/hotpot_qa' to load "
    "it from the Hugging Face hub (pip install 'passkt[hub]')."
)

# ---------------------------------------------------------------------------------------------
# Shared helpers for file-based sources
# ---------------------------------------------------------------------------------------------


def is_test_id(record_id: str, test_fraction: float) -> bool:
    """Whether a record belongs to the test split: ``sha256(id)`` read as a number in [0, 1).

    Args:
        record_id: The record's stable id.
        test_fraction: Share of records that go to the test split, in [0, 1].

    Returns:
        True for the test split, False for train.
    """
    digest = hashlib.sha256(record_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < test_fraction


def check_split_options(split: str, test_fraction: float, limit: int | None) -> None:
    """Validate the options every file-based source shares; raise ``ValueError`` if wrong."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if isinstance(test_fraction, bool) or not isinstance(test_fraction, int | float):
        raise ValueError(f"test_fraction must be a number in [0, 1], got {test_fraction!r}")
    if not 0.0 <= test_fraction <= 1.0:
        raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")


def require(
    record: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: tuple[str, str],
    *,
    name: str | None = None,
) -> Any:
    """``record[key]``, checked to be of ``kind``.

    Args:
        record: The record (or a nested mapping of it).
        key: The key to read.
        kind: Allowed type(s); ``bool`` never passes for ``int``.
        where: ``(origin, record label)`` for the error message.
        name: How to call the key in the message (e.g. ``"context.title"``); default ``key``.

    Raises:
        DatasetFormatError: If the key is missing or its value has the wrong type.
    """
    name = key if name is None else name
    if key not in record:
        raise DatasetFormatError(*where, name, "missing key")
    value = record[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise DatasetFormatError(*where, name, f"expected {names}, got {type(value).__name__}")
    return value


# ---------------------------------------------------------------------------------------------
# Gold order for bridge questions
# ---------------------------------------------------------------------------------------------

_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def _name(title: str) -> str:
    """A title as a name: HTML unescaped, lowercase, without a trailing ``(disambiguation)``."""
    return _DISAMBIGUATION.sub("", html.unescape(title)).strip().lower()


def _mentions(text: str, title: str) -> bool:
    """Whether ``text`` names ``title`` (minus a trailing ``(disambiguation)``) as whole words."""
    name = _name(title)
    if not name:
        return False
    pattern = r"(?<!\w)" + re.escape(name) + r"(?!\w)"
    return re.search(pattern, html.unescape(text).lower()) is not None


def _answer_name(answer: str) -> str:
    """The answer as a name to look for: without surrounding quotes, spaces and end punctuation."""
    return html.unescape(answer).strip().strip("\"'“”‘’.,;:!? ").strip()


def order_bridge_titles(
    question: str, titles: Sequence[str], texts: Mapping[str, str], answer: str | None = None
) -> tuple[tuple[str, ...], str]:
    """Order the two gold titles of a bridge question as a sequential solver needs them.

    The chain ends at the answer: the paragraph that holds it is the last hop, unless the
    question names that paragraph (then the solver may start there). Otherwise the first hop is
    the paragraph that names the bridge entity, i.e. the other gold title. The rule, first
    decisive step wins:

    1. ``answer_title``: the answer is one of the two titles -> it goes last (so the expert
       never searches the answer itself before the last hop).
    2. ``answer``: exactly one paragraph contains the answer, and the question does not name
       that paragraph -> it goes last.
    3. ``mention``: exactly one of the two paragraphs names the other's title -> it goes first.
    4. ``question``: exactly one title is named in the question -> it goes first.
    5. ``supporting_facts``: otherwise keep the order of the supporting facts.

    Names are matched case-insensitively as whole words, without a trailing ``(...)``
    disambiguation, after unescaping HTML entities. Other than two titles: kept as given.
    Without ``answer`` steps 1-2 are skipped (the rule before they were added).

    Args:
        question: The question text.
        titles: The distinct supporting-fact titles, in supporting-fact order.
        texts: Paragraph text by title.
        answer: The gold answer.

    Returns:
        The ordered titles and the name of the step that decided.
    """
    if len(titles) != 2:
        return tuple(titles), "supporting_facts"
    first, second = titles
    answer = _answer_name(answer or "")
    if answer:
        is_answer = [_name(title) == answer.lower() for title in titles]
        if is_answer[0] != is_answer[1]:
            return ((second, first) if is_answer[0] else (first, second)), "answer_title"
        holds = [_mentions(texts[t], answer) and not _mentions(question, t) for t in titles]
        held = [_mentions(texts[t], answer) for t in titles]
        if held[0] != held[1] and holds[0] != holds[1]:
            return ((second, first) if holds[0] else (first, second)), "answer"
    first_names = _mentions(texts[first], second)
    second_names = _mentions(texts[second], first)
    if first_names != second_names:
        return ((first, second) if first_names else (second, first)), "mention"
    in_question = _mentions(question, first), _mentions(question, second)
    if in_question[0] != in_question[1]:
        return ((first, second) if in_question[0] else (second, first)), "question"
    return (first, second), "supporting_facts"


# ---------------------------------------------------------------------------------------------
# Records -> tasks
# ---------------------------------------------------------------------------------------------


def _context(record: Mapping[str, Any], where: tuple) -> list[tuple[str, list[str]]]:
    """The ``(title, sentences)`` pairs of either layout, checked."""
    context = require(record, "context", (list, dict), where)
    if isinstance(context, dict):  # Hugging Face layout
        titles = require(context, "title", list, where, name="context.title")
        sentences = require(context, "sentences", list, where, name="context.sentences")
        if len(titles) != len(sentences):
            raise DatasetFormatError(
                *where, "context", f"{len(titles)} titles but {len(sentences)} sentence lists"
            )
        pairs: list[Any] = list(zip(titles, sentences, strict=True))
    else:
        pairs = context
    checked = []
    for position, pair in enumerate(pairs):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise DatasetFormatError(
                *where, "context", f"paragraph {position} is not a [title, sentences] pair"
            )
        title, sentences = pair
        if not isinstance(title, str):
            raise DatasetFormatError(
                *where, "context", f"paragraph {position}: title is {type(title).__name__}"
            )
        if not isinstance(sentences, list):
            raise DatasetFormatError(
                *where,
                "context",
                f"paragraph {position} ({title!r}): sentences must be a list of strings, "
                f"got {type(sentences).__name__}",
            )
        if not all(isinstance(sentence, str) for sentence in sentences):
            raise DatasetFormatError(
                *where, "context", f"paragraph {position} ({title!r}): a sentence is not a string"
            )
        checked.append((title, sentences))
    return checked


def _supporting_facts(
    record: Mapping[str, Any], where: tuple, paragraphs: Mapping[str, list[str]]
) -> list[tuple[str, int]]:
    """The ``(title, sent_id)`` pairs of either layout, checked against the context."""
    facts = require(record, "supporting_facts", (list, dict), where)
    if isinstance(facts, dict):  # Hugging Face layout
        titles = require(facts, "title", list, where, name="supporting_facts.title")
        sent_ids = require(facts, "sent_id", list, where, name="supporting_facts.sent_id")
        if len(titles) != len(sent_ids):
            raise DatasetFormatError(
                *where, "supporting_facts", f"{len(titles)} titles but {len(sent_ids)} sent_ids"
            )
        facts = list(zip(titles, sent_ids, strict=True))
    if not facts:
        raise DatasetFormatError(*where, "supporting_facts", "empty: a task needs gold paragraphs")
    checked = []
    for position, fact in enumerate(facts):
        ok = isinstance(fact, list | tuple) and len(fact) == 2
        if not ok or not isinstance(fact[0], str) or type(fact[1]) is not int:
            raise DatasetFormatError(
                *where, "supporting_facts", f"fact {position} is not a [title, sent_id] pair"
            )
        if fact[0] not in paragraphs:
            raise DatasetFormatError(
                *where,
                "supporting_facts",
                f"fact {position}: title {fact[0]!r} is not a paragraph title in 'context'",
            )
        # An out-of-range sent_id occurs in the official training data; it is kept, not fatal.
        checked.append((fact[0], fact[1]))
    return checked


def parse_record(record: Any, label: str, origin: str, split: str) -> Task:
    """Turn one HotpotQA record (official or Hugging Face layout) into a ``Task``.

    Raises:
        DatasetFormatError: Naming ``origin``, the record (``label`` and its id) and the key.
    """
    where: tuple = (origin, label)
    if not isinstance(record, dict):
        raise DatasetFormatError(
            *where, "(record)", f"expected a JSON object, got {type(record).__name__}"
        )
    id_key = "id" if "_id" not in record and "id" in record else "_id"
    record_id = str(require(record, id_key, (str, int), where))
    where = (origin, f"{label} (_id {record_id!r})")
    question = require(record, "question", str, where)
    answer = require(record, "answer", str, where)
    if not normalize_answer(answer):
        raise DatasetFormatError(
            *where,
            "answer",
            f"{answer!r} is empty after HotpotQA normalization, so an empty "
            "answer would score 1.0; fix the record or remove it",
        )
    question_type = require(record, "type", str, where)
    if question_type not in HOTPOTQA_TYPES:
        raise DatasetFormatError(
            *where, "type", f"{question_type!r} is not one of {', '.join(HOTPOTQA_TYPES)}"
        )
    context = _context(record, where)
    texts: dict[str, str] = {}
    for title, sentences in context:
        texts.setdefault(title, "".join(sentences))
    facts = _supporting_facts(record, where, dict(context))
    titles = tuple(dict.fromkeys(title for title, _ in facts))
    if question_type == "bridge":
        gold_titles, rule = order_bridge_titles(question, titles, texts, answer)
    else:
        gold_titles, rule = titles, "supporting_facts"
    return Task(
        task_id=record_id,
        category=question_type,  # type: ignore[arg-type]
        question=question,
        answer=answer,
        answer_type="text",
        paragraphs=tuple(Paragraph(title, "".join(sentences)) for title, sentences in context),
        gold_titles=gold_titles,
        gold_queries=gold_titles,
        depth=len(gold_titles),
        source="hotpotqa",
        split=split,
        metadata={
            "type": question_type,
            "level": record.get("level"),
            "supporting_facts": tuple(facts),
            "gold_order_rule": rule,
        },
    )


def load_tasks(
    category: str,
    split: str,
    *,
    path: str | os.PathLike[str] | None = None,
    dataset: str | None = None,
    hf_config: str | None = "distractor",
    hf_split: str = "validation",
    test_fraction: float = 1 / 3,
    limit: int | None = None,
) -> list[Task]:
    """Load HotpotQA questions of one type as tasks of one split.

    Args:
        category: ``"comparison"`` or ``"bridge"`` (the records' ``type``).
        split: ``"train"`` or ``"test"``; a record is in test iff ``is_test_id(id, test_fraction)``.
        path: A local file in the official or the Hugging Face layout (JSON list or JSON Lines),
            a saved dataset folder, or a hub name such as ``"hotpotqa/hotpot_qa"`` (needs
            ``pip install 'passkt[hub]'``, and network unless ``datasets`` has it cached).
        dataset: A hub name, instead of ``path``.
        hf_config: Hub configuration (``"distractor"``, the study's setting).
        hf_split: Hub split to read (the study uses the dev set, ``"validation"``).
        test_fraction: Share of records in the test split.
        limit: Keep at most this many tasks (the first ones in file order).

    Returns:
        The tasks, in file order.

    Raises:
        ValueError: For an unknown category or split, bad options, or no/both of path and dataset.
        FileNotFoundError: If ``path`` does not exist; ``DatasetUnavailableError`` (a subclass)
            if a hub dataset cannot be loaded, saying how to get it offline.
        DatasetFormatError: If a record is malformed (names the file, record and key).
    """
    if category not in HOTPOTQA_TYPES:
        hint = " Use source='math500' or 'gsm8k' for math." if category == "math" else ""
        raise ValueError(
            f"HotpotQA has categories {', '.join(HOTPOTQA_TYPES)}; got {category!r}.{hint}"
        )
    check_split_options(split, test_fraction, limit)
    origin, records = records_from(
        path, dataset, hf_config=hf_config, hf_split=hf_split, hint=_HINT
    )
    tasks: list[Task] = []
    seen: dict[str, str] = {}
    for label, record in records:
        task = parse_record(record, label, origin, split)
        if task.task_id in seen:
            raise DatasetFormatError(
                origin,
                label,
                "_id",
                f"duplicate id {task.task_id!r} (also record {seen[task.task_id]})",
            )
        seen[task.task_id] = label
        if task.category != category or is_test_id(task.task_id, test_fraction) != (
            split == "test"
        ):
            continue
        if limit is not None and len(tasks) >= limit:
            break
        tasks.append(task)
    logger.debug("Loaded %d %s %s tasks from %s", len(tasks), category, split, origin)
    return tasks
