"""What a problem asks, for keeping evaluation problems apart from the ones a policy trained on.

Disjoint questions are not enough: a synthetic world has a few thousand entities, and two
different questions can ask the very same fact ("In what year did the nation of Torsake gain
independence?" and "... the nation of Lemora ..." both end at Ninaga's year when both cities lie
in Ninaga). A policy fine-tuned on one then answers the other from memory, and its evaluation
measures recall, not a wider boundary. A task's **asked fact** is the fact its answer states:

- bridge (BridgeQA): ``(last entity of the chain, final attribute, answer)``;
- comparison (ComparisonQA): the compared ``(entity, attribute, value)`` pairs and the answer;
- math: the arithmetic itself (start and steps) and its answer;
- anything else: the normalised question and answer.

:func:`overlap` measures, at four levels, how much of one task set another shares:
``question`` (an entity named in the question is named in one of the other set's questions),
``chain`` (any entity of the answer's chain is in one of the other set's chains), ``fact``
(the asked fact is asked there too) and ``answer`` (the same answer string).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["LEVELS", "asked_facts", "chain_entities", "overlap", "question_entities"]

LEVELS = ("question", "chain", "fact", "answer")


def chain_entities(task: Any) -> frozenset[str]:
    """The entities the answer's chain passes through (gold titles; math: the person)."""
    names = set(getattr(task, "gold_titles", ()) or ())
    metadata = getattr(task, "metadata", {}) or {}
    if metadata.get("name"):
        names.add(str(metadata["name"]))
    return frozenset(names)


def question_entities(task: Any) -> frozenset[str]:
    """The chain's entities that the question names."""
    question = str(getattr(task, "question", ""))
    return frozenset(e for e in chain_entities(task) if e in question)


def asked_facts(task: Any) -> frozenset[tuple[Any, ...]]:
    """The facts the task's answer states (see the module docstring)."""
    metadata = getattr(task, "metadata", {}) or {}
    answer = str(getattr(task, "answer", "")).strip().lower()
    if metadata.get("chain") and metadata.get("final"):
        return frozenset({(str(metadata["chain"][-1]), str(metadata["final"]), answer)})
    if metadata.get("entities") and metadata.get("attribute"):
        values = metadata.get("values") or (None,) * len(metadata["entities"])
        pairs = tuple(
            sorted((str(e), str(metadata["attribute"]), str(v)) for e, v in zip(
                metadata["entities"], values, strict=False
            ))
        )  # fmt: skip
        return frozenset({(*pairs, answer)})
    if "steps" in metadata and "start" in metadata:
        steps = tuple(tuple(step) for step in metadata["steps"])
        return frozenset({("math", metadata["start"], steps, answer)})
    question = " ".join(str(getattr(task, "question", "")).lower().split())
    return frozenset({("question", question, answer)})


def overlap(tasks: Sequence[Any], others: Iterable[Any]) -> dict[str, float]:
    """The share of ``tasks`` that ``others`` overlap at each level of :data:`LEVELS`."""
    others = list(others)
    named = set().union(*(question_entities(t) for t in others)) if others else set()
    chains = set().union(*(chain_entities(t) for t in others)) if others else set()
    facts = set().union(*(asked_facts(t) for t in others)) if others else set()
    answers = {str(getattr(t, "answer", "")).strip().lower() for t in others}
    if not tasks:
        return dict.fromkeys(LEVELS, 0.0)
    counts = {
        "question": sum(bool(question_entities(t) & named) for t in tasks),
        "chain": sum(bool(chain_entities(t) & chains) for t in tasks),
        "fact": sum(bool(asked_facts(t) & facts) for t in tasks),
        "answer": sum(str(getattr(t, "answer", "")).strip().lower() in answers for t in tasks),
    }
    return {level: counts[level] / len(tasks) for level in LEVELS}
