"""Segments of assistant text and the token sequence of a stored trajectory.

Each character an assistant wrote belongs to one segment:

- ``query``: inside ``<search>...</search>`` of the turn's action (exactly the text the env
  searched for, before stripping);
- ``answer``: inside ``<answer>...</answer>`` of the turn's action (the graded text);
- ``tag``: the literal tags ``<think>``, ``</think>``, ``<search>``, ``</search>``, ``<answer>``,
  ``</answer>`` outside the action's content;
- ``reasoning``: everything else: ``<think>`` content, free text around the action, and any text
  after the action's closing tag.

The action is located by the env's own rules (:func:`passkt.envs.protocol.parse_action`): think
blocks are skipped and the first ``<search>``/``<answer>`` outside them counts; in an invalid turn
nothing is ``query`` or ``answer``. A token whose characters straddle two segments (byte-level BPE
merges ``>`` with the next word, e.g. ``>Alder``) takes the segment of most of its characters; a tie
goes to the content segment over ``tag``.

Token sequence. A trajectory's tokens are rebuilt from its stored messages exactly as the rollout
engine builds them (``passkt.agents.rollout.ChatTokens``): the chat-templated prompt up to the
first assistant turn, then each assistant turn's tokens, then the template's tokens for the next
observation (end of turn, user message, generation prompt). Result files keep text, not ids, so
each assistant turn is tokenized again (``tokenizer(text, add_special_tokens=False)``, with
``return_offsets_mapping`` to place every token in a segment); for the policy's own tokenizer this
is the canonical tokenization, which may differ from the sampled ids in rare cases, and for another
scoring model it is the only one possible.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from passkt.agents.rollout import ChatTokens

__all__ = [
    "ALL",
    "SEGMENTS",
    "Span",
    "TrajectoryTokens",
    "segment_spans",
    "token_segments",
    "trajectory_tokens",
]

SEGMENTS: tuple[str, ...] = ("query", "answer", "reasoning", "tag")
"""Segment names; the order also breaks ties between segments sharing one token."""

ALL = "all"
"""The pseudo-segment of every scored token."""

_TAG = re.compile(r"</?(?:think|search|answer)>")
_OPEN_TAG = re.compile(r"<(think|search|answer)>")
_NESTED_TAG = re.compile(r"</?(search|answer)>")
_ACTION_SEGMENT = {"search": "query", "answer": "answer"}


@dataclass(frozen=True)
class Span:
    """Characters ``text[start:end]`` of one segment."""

    start: int
    end: int
    segment: str


def _action_content(text: str) -> tuple[int, int, str] | None:
    """``(start, end, segment)`` of the action's content, by ``parse_action``'s rules, or None."""
    position = 0
    while True:
        match = _OPEN_TAG.search(text, position)
        if match is None:
            return None
        tag = match.group(1)
        end = text.find(f"</{tag}>", match.end())
        if end < 0:
            return None
        if tag == "think":
            position = end + len("</think>")
            continue
        if _NESTED_TAG.search(text, match.end(), end):
            return None
        return match.end(), end, _ACTION_SEGMENT[tag]


def _char_segments(text: str) -> list[str]:
    labels = ["reasoning"] * len(text)
    for match in _TAG.finditer(text):
        labels[match.start() : match.end()] = ["tag"] * (match.end() - match.start())
    action = _action_content(text)
    if action is not None:  # all of the searched / graded text, even a stray "<think>" in it
        start, end, segment = action
        labels[start:end] = [segment] * (end - start)
    return labels


def segment_spans(text: str) -> tuple[Span, ...]:
    """Split one assistant turn into consecutive segment spans covering all of ``text``.

    Example: ``segment_spans("<think>hm</think><search>q</search>")`` gives the spans
    ``<think>`` (tag), ``hm`` (reasoning), ``</think><search>`` (tag), ``q`` (query) and
    ``</search>`` (tag).
    """
    labels = _char_segments(text)
    spans: list[Span] = []
    start = 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            spans.append(Span(start, i, labels[start]))
            start = i
    return tuple(spans)


def token_segments(text: str, offsets: Sequence[tuple[int, int]]) -> list[str]:
    """The segment of each token of ``text`` given its character ``offsets``.

    A token takes the segment of most of its characters; ties go to the earlier segment in
    :data:`SEGMENTS` (content before ``tag``). A token with an empty span takes the segment of the
    character at its start.
    """
    labels = _char_segments(text)
    rank = {segment: i for i, segment in enumerate(SEGMENTS)}
    out = []
    for start, end in offsets:
        if not labels:
            out.append("reasoning")
            continue
        if end <= start:
            out.append(labels[min(max(start, 0), len(labels) - 1)])
            continue
        counts = Counter(labels[start:end])
        out.append(min(counts, key=lambda s: (-counts[s], rank[s])))
    return out


# ---------------------------------------------------------------------- token sequences


@dataclass(frozen=True)
class TrajectoryTokens:
    """A trajectory as the scoring model sees it.

    Attributes:
        token_ids: The whole sequence: prompt, assistant turns, observations.
        segments: Per token, its segment for assistant tokens and ``None`` for context tokens.
    """

    token_ids: tuple[int, ...]
    segments: tuple[str | None, ...]

    @property
    def scored_positions(self) -> list[int]:
        """Positions of the assistant (scored) tokens."""
        return [i for i, s in enumerate(self.segments) if s is not None]


def _encode_with_offsets(tokenizer: Any, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    except NotImplementedError as e:
        raise ValueError(
            f"{type(tokenizer).__name__} cannot return character offsets; segment perplexity "
            "needs a fast tokenizer (AutoTokenizer.from_pretrained(..., use_fast=True))"
        ) from e
    return list(encoded["input_ids"]), [tuple(o) for o in encoded["offset_mapping"]]


def trajectory_tokens(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> TrajectoryTokens:
    """Rebuild a trajectory's token sequence the way the rollout engine builds it.

    Args:
        tokenizer: A fast Hugging Face tokenizer with a chat template.
        messages: The transcript: system and user messages, then assistant turns, each but the
            last followed by one user message (the observation).

    Raises:
        ValueError: for a tokenizer without a chat template or offsets, or a transcript whose
            roles do not follow that pattern.
    """

    chat = ChatTokens(tokenizer)
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    ids = chat.prompt_ids([dict(m) for m in messages[:first]])
    segments: list[str | None] = [None] * len(ids)
    previous = "assistant"
    for index in range(first, len(messages)):
        role, content = messages[index].get("role"), messages[index].get("content", "")
        if role == "assistant":
            turn_ids, offsets = _encode_with_offsets(tokenizer, content)
            ids += turn_ids
            segments += token_segments(content, offsets)
        elif role == "user" and previous == "assistant":
            observation = chat.observation_ids(content)
            ids += observation
            segments += [None] * len(observation)
        else:
            raise ValueError(
                f"message {index} has role {role!r} after a {previous!r} message; expected the "
                "rollout pattern system, user, assistant, user, assistant, ..."
            )
        previous = role
    return TrajectoryTokens(tuple(ids), tuple(segments))
