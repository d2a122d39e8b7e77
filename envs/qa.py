"""The question-answering envs with a search tool: one spec, two categories.

``BridgeQAEnv`` (sequential retrieval) and ``ComparisonQAEnv`` (independent retrieval) differ only
in their tasks: both take the arguments of ``ToolUseEnv`` and share the spec below, which each
fills with its own summary, description and category (``qa_docstring``).
"""

from __future__ import annotations

from string import Template
from typing import ClassVar

from passkt.envs.base import ToolUseEnv

__all__ = ["QAEnv", "qa_docstring"]

_SPEC = Template(
    """$summary

## Description
$description

## Action Space
Any Unicode string (``passkt.envs.spaces.ActionText``). A turn is free text, optionally
``<think>...</think>``, ending in ``<search>query</search>`` or ``<answer>text</answer>``;
the first complete action counts and text after its closing tag is ignored. Anything else is
an invalid action.

## Observation Space
Any Unicode string of at most 131,072 characters (``passkt.envs.spaces.UnicodeText``):

- reset: the question;
- a search: ``<information>Doc 1 (Title: T) text\\nDoc 2 (Title: T) text</information>``
  with the ``top_k`` best BM25 hits, or ``<information>No documents found.</information>``;
- an invalid action: ``Invalid action: <reason>. End your turn with exactly one action:
  <search>your query</search> to search, or <answer>your answer</answer> to give the final
  answer.``;
- when no tool call is left (after the T-th call, or at reset when T = 0) the observation
  ends with ``\\n\\nYou have no tool calls left. Answer now with <answer>your
  answer</answer>.``; with ``reveal_budget=True`` every other observation ends with
  ``\\n\\nYou have N tool calls left.``;
- the last observation: ``Episode over: your answer was recorded.`` or, when truncated,
  ``Episode over: no tool calls were left and the turn did not end in <answer>...</answer>.``

## Starting State
A task drawn uniformly from the split with ``self.np_random``, or the one named by
``reset(options={"task_id": ...})``.

## Rewards
1.0 if the answer matches the gold answer (or an alias) after HotpotQA normalization
(lowercase, no punctuation, no articles, single spaces), else 0.0. Token F1 is in ``info``.

## Episode End
T = ``max_tool_calls``. Searches and invalid actions are tool calls; the answer is not.
Terminated when the agent answers. After the T-th call the next turn must be an answer; if it
is not, the episode is truncated with reward 0. At most T + 1 turns; never both terminated
and truncated.

## Information
``task_id``, ``category`` (``"$category"``), ``tool_calls``, ``turns``, ``budget`` (T),
``depth`` (minimum calls that solve the task), ``action`` (``"search"``, ``"answer"``,
``"invalid"``, or ``None`` at reset), ``answer`` (``None`` until answered), ``correct``,
``f1``.

## Arguments
- ``source``: task source name (``"synthetic"``, ``"hotpotqa"``, or one added with
  ``passkt.envs.register_source``).
- ``split``: ``"train"`` or ``"test"`` (disjoint).
- ``path``: file (or hub dataset name) for file-based sources such as ``hotpotqa``.
$hops- ``source_options``: further keyword arguments for the source (e.g. ``{"seed": 1}``).
- ``tasks``: your own list of $category ``Task`` objects instead of a source.
- ``max_tool_calls``: the budget T (default 5, the study's T_train).
- ``reveal_budget``: state the calls left in every observation (default False, which makes
  an episode with budget T the prefix of one with a larger budget).
- ``top_k``: documents per search (default 3).
- ``corpus``: what a search reaches (open-domain settings besides the study's):

  - ``"task"`` (default): the task's own paragraphs (the study's setting);
  - ``"global"``: one index over the union of all the env's tasks' paragraphs (deduplicated
    by title and text);
  - the folder of a saved ``passkt.envs.corpus.Corpus`` (a ``str`` or ``os.PathLike``), or a
    ``Corpus`` object: one prebuilt corpus for every task, e.g. all paragraphs of a HotpotQA
    file (``Corpus.from_hotpotqa(path).save(folder)``) or a synthetic world with more
    distractor entities (``Corpus.from_world(seed, scale=20)``). A folder is memory-mapped
    and opened once per process (``passkt.envs.corpus.open_corpus``).
- ``retriever``: how a search is scored:

  - ``None`` (default): rank-bm25 for ``"task"`` and ``"global"``; the corpus's own bm25s
    index for a ``Corpus`` (bm25s' Robertson BM25, which ranks as rank-bm25 except through
    words in more than half the paragraphs; see ``passkt.envs.retrieval``);
  - ``"rank_bm25"``: the reference (over a ``Corpus`` it builds an in-memory index of all
    its paragraphs: slow at scale, meant for checks);
  - ``"bm25s"``: rank-bm25's exact scores from a bm25s index for ``"task"`` and
    ``"global"``; the saved bm25s index for a ``Corpus`` (same as ``None``);
  - a callable ``paragraphs -> Retriever``, called on the corpus chosen by ``corpus``;
  - a ``Retriever`` object, used as is for every task (``corpus`` must stay ``"task"``),
    e.g. ``passkt.envs.wikipedia.WikipediaTool(cache="wiki.sqlite")`` for live Wikipedia
    with an on-disk cache (``pip install 'passkt[wiki]'``).
- ``search_fill``: a search on a non-empty corpus returns exactly ``min(top_k, N)``
  documents, the zero-score ones last in corpus order. ``None`` (default): on for
  ``source="hotpotqa"`` (a search engine over each question's 10 paragraphs always shows
  ``top_k``), off for the synthetic source (its minimum depth T* needs a search to show only
  what it names) and for ``tasks=``; only the built-in backends take ``True``.
- ``render_mode``: ``None`` or ``"ansi"``.
- ``protocol``: ``"passkt"`` (default), ``"search-r1"`` (Search-R1's exact prompt, stream
  and document format; ``passkt.envs.search_r1``) or ``"tools"`` (the same episode with
  function calls for actions: ``env.protocol.tools`` holds the ``search`` and ``answer``
  schemas and a turn ends in ``<tool_call>{...}</tool_call>``; ``passkt.envs.tool_calls``).

## Version History
- v0: initial version.
"""
)
_HOPS = "- ``hops``: bridge depth for the synthetic source (2, 3 or 4; ``None``: all).\n"


def qa_docstring(summary: str, description: str, category: str, *, hops: bool) -> str:
    """The class docstring of a QA env: the shared spec with this env's own parts filled in."""
    text = _SPEC.substitute(
        summary=summary, description=description, category=category, hops=_HOPS if hops else ""
    )
    return "\n".join(("    " + line if line else line) for line in text.split("\n")).strip()


class QAEnv(ToolUseEnv):
    """A question answered with a search tool; subclasses set ``category`` and the spec."""

    takes_hops: ClassVar[bool] = False
    """Whether ``hops=`` (the synthetic bridge depth) applies to this env's tasks."""
