"""Search-R1's protocol, written from reading its code (github.com/PeterGriffinJin/Search-R1).

Search-R1 checkpoints were trained with one user turn (the instruction below with the question at
its end, no system message of its own: the chat template adds its default one) and one assistant
stream: each search's results are appended to the stream as ``\\n\\n<information>...</information>
\\n\\n`` and the model continues. Documents are ``Doc i(Title: T) text`` (no space before the
parenthesis), one a line; after the T-th search the model has one more turn with search disabled
(no notice), and the episode ends whatever it writes. A turn's action is the first
``<search>...</search>`` or ``<answer>...</answer>`` pair in it (no ``<think>`` rule).

Their corpus (wiki-18) stores each document as ``"Title"\\ntext``, and their renderer takes the
first line as the title, so every title the released checkpoints saw is in double quotes; passkt's
paragraphs have the title apart, so it adds the quotes (``Doc 1(Title: "T") text``).

Search-R1 generates each turn with the stop strings ``</search>``, ``</answer>``, decodes it, keeps
the text up to the first ``</search>`` (else ``</answer>``) and re-tokenizes that text; so does
this mode (``AgentInterface.cut_after_stop``): a sampled token that merges ``>`` with the newlines
after it is replaced by the ids of the text Search-R1 keeps, so the stream never holds
``</search>\n\n\n\n<information>``. Each turn is at most 500 tokens and each observation is
clipped to 500 tokens, as in Search-R1's training scripts. One difference is left, by design:
passkt stops a turn at its first stop string, where Search-R1 would keep a ``</search>`` that
follows a closed ``</answer>``; the two agree unless a turn closes an answer before a search.

``passkt.envs`` uses this module when an env is made with ``protocol="search-r1"``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from passkt.envs.contract import AgentInterface
from passkt.envs.protocol import Action
from passkt.envs.retrieval import Hit

__all__ = [
    "INVALID_MESSAGE",
    "PROMPT_TEMPLATE",
    "PROTOCOL",
    "parse_action",
    "question",
    "render_information",
]

PROMPT_TEMPLATE = (
    "Answer the given question. "
    "You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search "
    "engine by <search> query </search> and it will return the top searched results between "
    "<information> and </information>. You can search as many times as your want. If you find no "
    "further external knowledge needed, you can directly provide the answer inside <answer> and "
    "</answer>, without detailed illustrations. For example, <answer> Beijing </answer>. "
    "Question: {observation}\n"
)
"""The user turn (``{observation}`` is the question); "as your want" is theirs."""

INVALID_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n"
)
"""Appended to the stream after a turn without a search or an answer."""

STOP: tuple[str, ...] = ("</search>", "</answer>")
"""Search-R1 cuts each turn after its first ``</search>`` (else ``</answer>``)."""

LIMIT = 500
"""Search-R1's training scripts: ``max_response_length=500`` (tokens per turn) and
``max_obs_length=500`` (each observation's ids are clipped to it)."""

PROTOCOL = AgentInterface(
    name="search-r1",
    stop=STOP,
    layout="stream",
    prompt_template=PROMPT_TEMPLATE,
    max_turn_tokens=LIMIT,
    max_observation_tokens=LIMIT,
    cut_after_stop=True,
)
"""One user turn from the template, then one assistant stream (the env's observations already
carry Search-R1's newlines, so they are appended as they are), with Search-R1's 500-token clip of
each turn and each observation, and its cut of each turn after the first ``</search>`` (else
``</answer>``), re-tokenized."""

_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)


def question(text: str) -> str:
    """The question as Search-R1's data preparation writes it: stripped, ending in ``?``."""
    text = text.strip()
    return text if text.endswith("?") else text + "?"


def parse_action(text: str) -> Action:
    """The first ``<search>q</search>`` or ``<answer>a</answer>`` in the turn (stripped)."""
    match = _ACTION.search(text) if isinstance(text, str) else None
    if match is None:
        return Action(kind="invalid", error="no <search> or <answer> pair")
    return Action(kind=match.group(1), content=match.group(2).strip())  # type: ignore[arg-type]


def render_information(hits: Sequence[Hit]) -> str:
    """The text a search appends to the stream: ``\\n\\n<information>Doc 1(Title: "T") text\\n
    Doc 2(Title: "T") text</information>\\n\\n`` (the document list is stripped, as theirs is)."""
    docs = "".join(f'Doc {i}(Title: "{hit.title}") {hit.text}\n' for i, hit in enumerate(hits, 1))
    return f"\n\n<information>{docs.strip()}</information>\n\n"
