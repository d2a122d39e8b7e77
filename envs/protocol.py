"""The passkt protocol: Search-R1's tags, the system prompts, and the text of every observation.

An assistant turn is free text, optionally with ``<think>...</think>`` reasoning, ending in one
action: ``<search>query</search>`` or ``<answer>text</answer>``. The first complete action outside
a think block counts; text after its closing tag is ignored, because a tokenizer may merge the stop
string with the characters after it. Anything else is an invalid action.

This module owns every string the envs show to a model, so a prompt can quote them and a test can
compare them exactly. Changing any of them changes the env version (``-vN``). The envs hand the
system prompt and stop strings to agents as data (``env.protocol``, an ``AgentInterface``): the
system prompts never mention the budget, since with a hidden budget the only word about it is the
final notice, which is what makes an episode with budget T a prefix of one with a larger budget.
Search-R1's exact rendering is ``passkt.envs.search_r1``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from passkt.envs.contract import AgentInterface
from passkt.envs.retrieval import Hit

__all__ = [
    "ACTION_TAGS",
    "ANSWER_RECEIVED",
    "FINAL_NOTICE",
    "NO_RESULTS",
    "STOP",
    "SYSTEM_PROMPTS",
    "TRUNCATED_MESSAGE",
    "Action",
    "ActionKind",
    "budget_line",
    "invalid_action_message",
    "no_tools_message",
    "parse_action",
    "passkt_protocol",
    "render_information",
]

ActionKind = Literal["search", "answer", "invalid"]

ACTION_TAGS: tuple[str, ...] = ("search", "answer")

FINAL_NOTICE = "You have no tool calls left. Answer now with <answer>your answer</answer>."
"""Ends the observation after the T-th tool call (or the reset observation when T = 0)."""

NO_RESULTS = "<information>No documents found.</information>"
"""The observation of a search whose query matches no document (or is empty)."""

ANSWER_RECEIVED = "Episode over: your answer was recorded."
"""The last observation of an episode that ended with an answer."""

TRUNCATED_MESSAGE = (
    "Episode over: no tool calls were left and the turn did not end in <answer>...</answer>."
)
"""The last observation of an episode truncated for not answering after the final notice."""

STOP: tuple[str, ...] = ("</search>", "</answer>")
"""Generation stops after an action's closing tag."""

_TOOLS = (
    "You can search a document collection. To search, end your turn with "
    "<search>your query</search>; the results come back inside <information>...</information>. "
    "You may think first inside <think>...</think>. When you know the answer, end your turn with "
    "<answer>the answer</answer>. Each turn must end with exactly one <search> or one <answer>."
)

SYSTEM_PROMPTS: dict[str, str] = {
    "math": (
        "You are a careful problem solver. Reason step by step, then give only the final answer "
        "inside <answer>...</answer>, for example <answer>42</answer>. There are no tools."
    ),
    "comparison": (
        "You answer questions that compare two entities. "
        + _TOOLS
        + " Look up each entity, then compare. Answer with a short phrase: a name, or yes / no."
    ),
    "bridge": (
        "You answer questions that need several facts found one after another: a fact you find "
        "names the next thing to look up. "
        + _TOOLS
        + " Answer with a short phrase, for example a name, a place or a year."
    ),
}
"""The system prompt of each category (the passkt protocol)."""


def passkt_protocol(category: str) -> AgentInterface:
    """The protocol a passkt env hands its agents: its category's system prompt, chat layout,
    generation stopped after an action's closing tag."""
    return AgentInterface(name="passkt", system_prompt=SYSTEM_PROMPTS[category], stop=STOP)


_EXPECTED = (
    "End your turn with exactly one action: <search>your query</search> to search, "
    "or <answer>your answer</answer> to give the final answer."
)

_OPEN_TAG = re.compile(r"<(think|search|answer)>")
_NESTED_TAG = re.compile(r"</?(search|answer)>")


@dataclass(frozen=True)
class Action:
    """One parsed assistant turn.

    Attributes:
        kind: ``"search"``, ``"answer"`` or ``"invalid"``.
        content: The query or the answer, stripped of surrounding whitespace (``""`` if invalid).
        error: Why the turn is invalid (``None`` for a valid action).
    """

    kind: ActionKind
    content: str = ""
    error: str | None = None


def _invalid(error: str) -> Action:
    return Action(kind="invalid", content="", error=error)


def parse_action(text: str) -> Action:
    """Parse one assistant turn into an ``Action``.

    Rules: ``<think>`` blocks are skipped (an unclosed one is invalid); the first ``<search>`` or
    ``<answer>`` opening tag outside them must be closed by the same tag, with no other action tag
    inside; text after the closing tag is ignored. Tags are case-sensitive.

    Args:
        text: The assistant's turn.

    Returns:
        The parsed action; ``kind == "invalid"`` with ``error`` set when the turn has no valid
        action.
    """
    if not isinstance(text, str):
        return _invalid(f"the action must be text (a str), got {type(text).__name__}")
    position = 0
    while True:
        match = _OPEN_TAG.search(text, position)
        if match is None:
            if not text.strip():
                return _invalid("the turn is empty")
            return _invalid("no <search> or <answer> tag found")
        tag = match.group(1)
        closing = f"</{tag}>"
        end = text.find(closing, match.end())
        if end < 0:
            return _invalid(f"<{tag}> is never closed with {closing}")
        if tag == "think":
            position = end + len(closing)
            continue
        content = text[match.end() : end]
        if _NESTED_TAG.search(content):
            return _invalid(f"<{tag}>...{closing} contains another <search> or <answer> tag")
        return Action(kind=tag, content=content.strip())  # type: ignore[arg-type]


def invalid_action_message(error: str) -> str:
    """The observation after an invalid action: what was wrong and what was expected."""
    return f"Invalid action: {error}. {_EXPECTED}"


def no_tools_message() -> str:
    """The reason a search is invalid in an env without tools (math)."""
    return "this task has no search tool; give your final answer with <answer>your answer</answer>"


def budget_line(calls_left: int) -> str:
    """The line that states the remaining budget when ``reveal_budget=True``."""
    plural = "call" if calls_left == 1 else "calls"
    return f"You have {calls_left} tool {plural} left."


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def render_information(hits: Sequence[Hit], max_chars: int | None = None) -> str:
    """Render search hits in passkt's layout (close to Search-R1's, not the same: see
    ``passkt.envs.search_r1`` for the exact one).

    ``<information>Doc 1 (Title: T) text\\nDoc 2 (Title: T) text</information>``; no hits gives
    ``NO_RESULTS``.

    Args:
        hits: The ranked hits, best first.
        max_chars: If set, each document's text is shortened (ending in "…") so that the whole
            block fits in ``max_chars`` characters.

    Returns:
        The observation text.
    """
    if not hits:
        return NO_RESULTS
    texts = [hit.text for hit in hits]
    heads = [f"Doc {i} (Title: {hit.title}) " for i, hit in enumerate(hits, start=1)]
    frame = len("<information></information>") + len(hits) - 1 + sum(map(len, heads))
    if max_chars is not None and frame + sum(map(len, texts)) > max_chars:
        share = max((max_chars - frame) // len(hits), 1)
        texts = [_clip(text, share) for text in texts]
    docs = "\n".join(head + text for head, text in zip(heads, texts, strict=True))
    return f"<information>{docs}</information>"
