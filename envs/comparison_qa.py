"""ComparisonQA-v0: independent retrieval (the study's category B)."""

from __future__ import annotations

import html
import re
from typing import Any

from passkt.envs.qa import QAEnv, qa_docstring
from passkt.envs.scoring import normalize_answer
from passkt.envs.tasks import Task

__all__ = ["ComparisonQAEnv", "answer_choices"]

_YES_NO = ("yes", "no")
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)\s*$")


def _entity_names(task: Task) -> tuple[str, ...]:
    """The two compared entities as the question names them: the source's ``entities`` when it
    records them (synthetic), else the two gold titles without a ``(disambiguation)``."""
    names = task.metadata.get("entities") or task.gold_titles
    return tuple(_DISAMBIGUATION.sub("", html.unescape(str(name))).strip() for name in names)


def answer_choices(task: Task) -> tuple[str, ...] | None:
    """The task's closed answer set, or ``None`` when the answer is open.

    A yes/no question has ``("yes", "no")``; a "which of the two" question whose gold answer is
    one of the two compared entities (after HotpotQA normalization) has those two names. Any
    other answer (a year, a longer name than the entity's title) is left open: a guess among
    the two entities would not be scored correct, so declaring them would overstate chance.
    A source may declare the set itself in ``task.metadata["choices"]``.
    """
    declared = task.metadata.get("choices")
    if declared:
        return tuple(str(choice) for choice in declared)
    gold = {normalize_answer(answer) for answer in task.answers}
    if gold & set(_YES_NO):
        return _YES_NO
    names = _entity_names(task)
    normalized = [normalize_answer(name) for name in names]
    if len(names) == 2 and len(set(normalized)) == 2 and gold & set(normalized):
        return names
    return None


class ComparisonQAEnv(QAEnv):
    __doc__ = qa_docstring(
        "Answer a comparison question about two entities that can be looked up independently.",
        """\
A question such as "Which film came out first, X or Y?" or "Were A and B born in the same
country?". Both entities are named in the question, so the two lookups do not depend on each
other (minimum depth 2, in either order). The search tool is BM25 over the task's own
paragraphs (gold and distractors); ``corpus=`` and ``retriever=`` select an open-domain
setting instead (one global corpus, a saved million-paragraph index, or live Wikipedia).
The synthetic source (default) builds a fictional world that no pretrained model knows.

Most such questions have a closed answer set: ``info["choices"]`` holds it (``("yes", "no")``
or the two entities' names) whenever the gold answer is one of those, so that reports can
give the chance floor a uniform guesser reaches (``passkt.eval.chance``). Every synthetic
question has one; a HotpotQA question whose answer is a year or an alias has none.""",
        category="comparison",
        hops=False,
    )

    category = "comparison"

    def _info(self, episode: Any) -> dict[str, Any]:
        info = super()._info(episode)
        choices = answer_choices(episode.task)
        if choices is not None:
            info["choices"] = choices
        return info
