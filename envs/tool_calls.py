"""The tool-calling action format: the same episode as the text tags, spoken as function calls.

Instruction models are trained and served with function calling: the chat template takes
``tools=`` (JSON schemas) and the model writes a structured call. With ``protocol="tools"`` a passkt
env publishes its actions as two such tools (``search(query)`` and ``answer(answer)``; an env
without search, math, publishes none and keeps its ``<answer>`` tag) and reads a turn's first call.

The action stays text, so that one format reaches every backend and every record: a call is
written as Qwen2.5's (Hermes') chat templates write it,
``<tool_call>\\n{"name": "search", "arguments": {"query": "..."}}\\n</tool_call>``. A
transformers or vLLM model emits exactly that text; an OpenAI-compatible server returns
``tool_calls``, which ``passkt.agents.openai_policy`` writes back in this form. Everything else is
unchanged: the same searches return the same documents, the budget T counts the same calls, the
final notice comes after the T-th call (worded for tools), and a malformed call is an invalid
action with an observation that says what was wrong, as a malformed tag is.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from passkt.envs.contract import AgentInterface
from passkt.envs.protocol import Action

__all__ = [
    "FINAL_NOTICE",
    "STOP",
    "TOOL_ARGUMENTS",
    "TOOL_SCHEMAS",
    "TRUNCATED_MESSAGE",
    "invalid_action_message",
    "no_call_error",
    "parse_tool_call",
    "render_tool_call",
    "tool_calls_in",
    "tools_protocol",
    "without_tool_calls",
]

STOP: tuple[str, ...] = ("</tool_call>",)
"""Generation stops after a call's closing tag: one call per turn, as one tag per turn."""

FINAL_NOTICE = "You have no tool calls left. Answer now by calling answer."
"""The tool format's final notice (the tags' one names the ``<answer>`` tag)."""

TRUNCATED_MESSAGE = "Episode over: no tool calls were left and the turn did not call answer."

_SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": (
            "Search the document collection. Returns the best matching documents inside "
            "<information>...</information>."
        ),
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "The search query."}},
            "required": ["query"],
        },
    },
}
_ANSWER = {
    "type": "function",
    "function": {
        "name": "answer",
        "description": "Give the final answer. This ends the episode.",
        "parameters": {
            "type": "object",
            "properties": {
                "answer": {"type": "string", "description": "The answer: a short phrase."}
            },
            "required": ["answer"],
        },
    },
}
TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (_SEARCH, _ANSWER)
"""The tools of an env with search, in the OpenAI function format that chat templates take."""

_TOOLS = (
    "You can search a document collection with the search tool; its results come back inside "
    "<information>...</information>. You may think first inside <think>...</think>. When you "
    "know the answer, call the answer tool. Each turn must end with exactly one tool call."
)

SYSTEM_PROMPTS: dict[str, str] = {
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
"""The tool format's system prompt of each category with search (the tags' ones, reworded)."""


def tools_protocol(category: str) -> AgentInterface:
    """The protocol of a passkt env with search in the tool format: the category's prompt, the
    two tools, generation stopped after a call."""
    return AgentInterface(
        name="tools", system_prompt=SYSTEM_PROMPTS[category], stop=STOP, tools=TOOL_SCHEMAS
    )


TOOL_ARGUMENTS = {"search": "query", "answer": "answer"}
"""The one argument each tool takes (its schema's only required property)."""


_EXPECTED = (
    "End your turn with exactly one tool call: search with a query to search, or answer with "
    "your answer to give the final answer."
)


def render_tool_call(name: str, arguments: Mapping[str, Any] | str) -> str:
    """One call as Qwen2.5's chat template writes it (a ``</tool_call>`` inside an argument
    written ``<\\/tool_call>``, which JSON reads back the same); ``arguments`` given as a string (an
    OpenAI ``tool_calls`` entry that is not valid JSON) is kept verbatim, for the env to refuse."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            body = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {arguments}}}'
            return f"<tool_call>\n{body}\n</tool_call>"
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    payload = payload.replace("</tool_call>", "<\\/tool_call>")  # JSON's \/ keeps the call closed
    return f"<tool_call>\n{payload}\n</tool_call>"


def _scan(text: str) -> tuple[list[tuple[int, int]], str | None]:
    """The spans ``(start, end)`` of the complete ``<tool_call>...</tool_call>`` blocks outside
    ``<think>`` blocks, in order, and the tag left open where the scan stopped (``None`` if
    none).

    One left-to-right pass, like the tags' parser: a ``<think>`` block hides the calls inside
    it, and a call's body is kept verbatim, ``<think>`` text in its arguments included.
    """
    calls: list[tuple[int, int]] = []
    position = 0
    while True:
        thinks, called = text.find("<think>", position), text.find("<tool_call>", position)
        if thinks < 0 and called < 0:
            return calls, None
        if thinks >= 0 and (called < 0 or thinks < called):
            tag, start = "think", thinks
        else:
            tag, start = "tool_call", called
        opened = start + len(tag) + 2
        end = text.find(f"</{tag}>", opened)
        if end < 0:
            return calls, tag
        position = end + len(tag) + 3
        if tag == "tool_call":
            calls.append((start, position))


def tool_calls_in(text: str) -> list[str]:
    """The bodies of the complete ``<tool_call>`` blocks outside ``<think>`` blocks, in order."""
    opened, closed = len("<tool_call>"), len("</tool_call>")
    return [text[start + opened : end - closed].strip() for start, end in _scan(text)[0]]


def without_tool_calls(text: str) -> str:
    """``text`` without the blocks :func:`tool_calls_in` reads (a call inside ``<think>`` is
    thinking, and stays), stripped."""
    kept, position = [], 0
    for start, end in _scan(text)[0]:
        kept.append(text[position:start])
        position = end
    return ("".join(kept) + text[position:]).strip()


def no_call_error(text: str) -> str:
    """Why a turn without a complete call is invalid."""
    if not text.strip():
        return "the turn is empty"
    left_open = _scan(text)[1]
    if left_open is not None:
        return f"<{left_open}> is never closed with </{left_open}>"
    return "no tool call found"


def parse_tool_call(text: str) -> Action:
    """Parse one assistant turn of the tool format into an ``Action``.

    The first complete ``<tool_call>`` outside ``<think>`` blocks counts (text after it is
    ignored, as after a closing tag). Its body must be a JSON object ``{"name": ..., "arguments":
    {...}}`` naming ``search`` or ``answer`` with exactly that tool's one string argument
    (arguments given as a JSON string holding that object are accepted: some servers and
    templates double-encode them). Anything else is an invalid action whose ``error`` says why.
    """
    if not isinstance(text, str):
        kind = type(text).__name__
        return Action("invalid", error=f"the action must be text (a str), got {kind}")
    calls = tool_calls_in(text)
    if not calls:
        return Action("invalid", error=no_call_error(text))
    try:
        call = json.loads(calls[0])
    except ValueError as error:
        return Action("invalid", error=f"the tool call is not valid JSON ({error})")
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return Action("invalid", error='the tool call must be a JSON object with a "name"')
    name, arguments = call["name"], call.get("arguments", {})
    if name not in TOOL_ARGUMENTS:
        return Action("invalid", error=f"unknown tool {name[:80]!r}; the tools are search, answer")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: refused below as not an object
            arguments = json.loads(arguments)
    wanted = TOOL_ARGUMENTS[name]
    if not isinstance(arguments, dict) or set(arguments) != {wanted}:
        return Action("invalid", error=f'{name} takes exactly one argument, "{wanted}"')
    value = arguments[wanted]
    if not isinstance(value, str):
        return Action("invalid", error=f'{name}\'s "{wanted}" must be a string')
    return Action(name, content=value.strip())  # type: ignore[arg-type]


def invalid_action_message(error: str) -> str:
    """The observation after an invalid turn of the tool format."""
    return f"Invalid action: {error}. {_EXPECTED}"
