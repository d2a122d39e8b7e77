"""Scripted policies: an oracle that follows the gold chain, and a model-free heuristic agent.

Both speak the same protocol as a model (``<search>``/``<answer>`` tags, or tool calls when the
env publishes tools: ``SamplingParams.tools``) and read only the conversation, so they run through
the rollout engine, the evaluator and the SFT data builder like any other ``Policy``. Their choices
do not depend on the format, so their PASS@(k,T) surfaces are the same under both.

- ``OraclePolicy`` knows each task's gold queries and answer. It searches the gold chain in order
  and answers once it has read every gold paragraph; if the budget runs out first it admits it does
  not know. Its trajectories are the expert data of the SFT control.
- ``HeuristicPolicy`` knows nothing. It pulls candidate names out of the question and the retrieved
  text, searches a random one it has not tried, and answers with a name (or yes / no) drawn from
  what it read. Its PASS@(k,T) surface grows with both k and T without being perfect: a cheap,
  model-free baseline and test subject for the evaluator.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

import numpy as np

from passkt.agents.policy import Completion, Conversation, SamplingParams
from passkt.envs import tool_calls
from passkt.envs.protocol import FINAL_NOTICE, SYSTEM_PROMPTS
from passkt.envs.tasks import Task

_INFO = re.compile(r"<information>(.*?)</information>", re.DOTALL)
_DOC = re.compile(r"Doc \d+ \(Title: (.*?)\) (.*?)(?=\nDoc \d+ \(Title: |\Z)", re.DOTALL)
_NAME = re.compile(r"\b[A-Z][\w'\-]*(?:\s+(?:of\s+|the\s+|de\s+|van\s+|von\s+)?[A-Z][\w'\-]*)*")
_YEAR = re.compile(r"\b\d{3,4}\b")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_STOP_NAMES = frozenset(
    """What Which Who Whom Whose Where When Why How Is Are Was Were Do Does Did In On At The A An
    Of For From By To And Or Both Doc Title Name If It He She They This That His Her Its""".split()  # noqa: SIM905
)
_YES_NO_START = ("is ", "are ", "was ", "were ", "do ", "does ", "did ", "can ", "has ", "have ")


def budget_exhausted(observation: str) -> bool:
    """Whether an observation carries the env's final notice (no tool calls left), in either
    format."""
    return FINAL_NOTICE in observation or tool_calls.FINAL_NOTICE in observation


def write_action(kind: str, content: str, tools: bool) -> str:
    """``<kind>content</kind>``, or in the tool format the call of the tool ``kind``."""
    if tools:
        return tool_calls.render_tool_call(kind, {tool_calls.TOOL_ARGUMENTS[kind]: content})
    return f"<{kind}>{content}</{kind}>"


def _question(conversation: Conversation) -> str:
    for message in conversation:
        if message["role"] == "user":
            return message["content"]
    raise ValueError("The conversation has no user message with the question.")


def _calls_made(conversation: Conversation) -> int:
    return sum(message["role"] == "assistant" for message in conversation)


_OBSERVED = ("user", "tool")
"""Roles of the messages that carry observations (``tool`` in the tool format)."""


def _last_observation(conversation: Conversation) -> str:
    return conversation[-1]["content"] if conversation[-1]["role"] in _OBSERVED else ""


class OraclePolicy:
    """Follows each task's gold chain: searches ``task.gold_queries`` in order, then answers.

    Args:
        tasks: The tasks it may be asked about; a conversation is matched to its task by the
            question text in its first user message.
        think: Prefix each action with a one-line ``<think>`` that says why (expert trajectories
            read more like a model's). A model that never saw such sentences in pretraining (the
            testbed base) has to learn their format before any strategy: ``think=False`` writes
            the bare actions instead.
        worked: Solve a task that carries its computation (the synthetic math problems'
            ``start`` / ``steps``) step by step before answering, in the worked-solution format
            of the testbed's pretraining corpus, rather than giving the bare answer.
    """

    spec = "scripted:oracle"
    seeds_each_row = True
    """Honours ``SamplingParams.seeds``: a row's completion does not depend on its batch."""

    def __init__(self, tasks: Iterable[Task], *, think: bool = True, worked: bool = False) -> None:
        self.think = think
        self.worked = worked
        self._by_question: dict[str, Task] = {}
        for task in tasks:
            self._by_question.setdefault(task.question, task)
        if not self._by_question:
            raise ValueError("OraclePolicy needs the tasks it will be asked about; got none.")

    def task_for(self, conversation: Conversation) -> Task:
        """The task whose question appears in the conversation's first user message."""
        question = _question(conversation)
        task = self._by_question.get(question)
        if task is not None:
            return task
        for text, candidate in self._by_question.items():
            if text in question:
                return candidate
        raise KeyError(f"OraclePolicy does not know the question {question[:80]!r}")

    def act(self, conversation: Conversation, tools: bool = False) -> str:
        """The oracle's next turn for one conversation (``tools``: as a tool call)."""
        task = self.task_for(conversation)
        step = _calls_made(conversation)
        final = budget_exhausted(_last_observation(conversation))
        if step < len(task.gold_queries) and not final:
            query = task.gold_queries[step]
            why = f"<think>I need to look up {query}.</think>\n" if self.think else ""
            return why + write_action("search", query, tools)
        steps = worked_steps(task) if self.worked else None
        if steps is not None:
            return f"<think>{steps}</think>\n" + write_action("answer", task.answer, tools)
        if step >= len(task.gold_queries):
            why = "<think>I have found everything I need.</think>\n" if self.think else ""
            return why + write_action("answer", task.answer, tools)
        why = "<think>I could not finish the search.</think>\n" if self.think else ""
        return why + write_action("answer", "unknown", tools)

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        return [
            Completion(self.act(conversation, tools=bool(params.tools)))
            for conversation in conversations
            for _ in range(params.n)
        ]


def worked_steps(task: Task) -> str | None:
    """The worked solution of a task that carries its computation (synthetic math's metadata
    ``start`` and ``steps``), one ``a op b = c.`` per step; None for any other task."""
    meta = task.metadata or {}
    if "start" not in meta or "steps" not in meta:
        return None
    value, lines = int(meta["start"]), []
    for op, operand in meta["steps"]:
        exact = {"+": value + operand, "-": value - operand, "*": value * operand}.get(op)
        result = value // operand if exact is None else exact
        lines.append(f"{value} {op} {operand} = {result}.")
        value = result
    return " ".join(lines)


# The heuristic reads the whole conversation every turn, and the n samples of a task read the same
# question and search results: parsing each text once (the caches below, keyed by the text) cut
# the evaluator's CPU with this policy by about half (``benchmarks/eval_cost.py --before``).
_PARSED_TEXTS = 16384


def _names(text: str) -> list[str]:
    """Capitalised name spans and years in ``text``, in order, without duplicates."""
    return list(_parsed_names(text))


@functools.lru_cache(maxsize=_PARSED_TEXTS)
def _parsed_names(text: str) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for match in _NAME.finditer(text):
        words = match.group(0).split()
        while words and words[0] in _STOP_NAMES:
            words = words[1:]
        name = " ".join(words)
        if name and name not in _STOP_NAMES:
            seen.setdefault(name, None)
    for match in _YEAR.finditer(text):
        seen.setdefault(match.group(0), None)
    return tuple(seen)


@functools.lru_cache(maxsize=_PARSED_TEXTS)
def _documents(observation: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """(title, text) of the documents of each search result in one observation."""
    blocks = []
    for block in _INFO.findall(observation):
        docs = tuple((t.strip(), body.strip()) for t, body in _DOC.findall(block))
        if docs:
            blocks.append(docs)
    return tuple(blocks)


def _retrieved(conversation: Conversation) -> list[list[tuple[str, str]]]:
    """(title, text) of the documents of each search result so far, oldest result first."""
    return [
        list(docs)
        for message in conversation
        if message["role"] in _OBSERVED
        for docs in _documents(message["content"])
    ]


@functools.lru_cache(maxsize=_PARSED_TEXTS)
def _searched(turn: str) -> tuple[str, ...]:
    tagged = [q.strip() for q in re.findall(r"<search>(.*?)</search>", turn, re.DOTALL)]
    called = tool_calls.parse_tool_call(turn)
    return tuple(tagged + ([called.content] if called.kind == "search" else []))


def _queries(conversation: Conversation) -> set[str]:
    found = set()
    for message in conversation:
        if message["role"] == "assistant":
            found.update(_searched(message["content"]))
    return found


class HeuristicPolicy:
    """A stochastic, model-free agent that searches names it has seen and guesses an answer.

    Each turn it either answers (more likely the more it has read, and always after the final
    notice) or searches a name it has not searched yet, preferring names from the latest results.
    With ``temperature`` 0 every choice takes the first candidate, so the policy is deterministic.

    Args:
        seed: Mixed with each row's ``params.seeds`` entry, or with ``params.seed`` and the row
            index when the call gives no per-row seeds.
        answer_rate: Chance of answering after each search (before the final notice).
    """

    spec = "scripted:heuristic"
    seeds_each_row = True
    """Honours ``SamplingParams.seeds``: a row's completion does not depend on its batch."""

    def __init__(self, seed: int = 0, *, answer_rate: float = 0.15) -> None:
        if not 0.0 <= answer_rate <= 1.0:
            raise ValueError(f"answer_rate must be in [0, 1], got {answer_rate}")
        self.seed = seed
        self.answer_rate = answer_rate

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        out = []
        for row, conversation in enumerate(conversations):
            for j in range(params.n):
                own = None if params.seeds is None else [params.seeds[row], j]
                rng = np.random.default_rng(
                    [self.seed, *own] if own else [self.seed, params.seed or 0, row, j]
                )
                greedy = params.temperature == 0
                text = self.act(conversation, rng, greedy=greedy, tools=bool(params.tools))
                out.append(Completion(text))
        return out

    def act(
        self,
        conversation: Conversation,
        rng: np.random.Generator,
        *,
        greedy: bool,
        tools: bool = False,
    ) -> str:
        """One turn for one conversation (``tools``: as a tool call)."""
        question = _question(conversation)

        def pick(options: Sequence[str]) -> str:
            return options[0] if greedy else options[int(rng.integers(len(options)))]

        blocks = _retrieved(conversation)
        final = budget_exhausted(_last_observation(conversation))
        if _is_math(conversation):
            numbers = _NUMBER.findall(question) or ["0"]
            return f"<answer>{pick(numbers)}</answer>"  # math answers with its tag in any format
        tried = _queries(conversation)
        fresh = [name for name in self._search_candidates(question, blocks) if name not in tried]
        answer_now = (
            final or not fresh or (blocks and rng.random() < self.answer_rate and not greedy)
        )
        if answer_now:
            return write_action("answer", self._guess(question, blocks, pick), tools)
        return write_action("search", pick(fresh), tools)

    @staticmethod
    def _search_candidates(question: str, blocks: list[list[tuple[str, str]]]) -> list[str]:
        """Names to search: from the latest result's top document first, then older ones."""
        in_question = set(_names(question))
        if not blocks:
            return _names(question)

        def new_names(title: str, body: str) -> list[str]:
            return [
                n for n in _names(body) if n not in in_question and n != title and not n.isdigit()
            ]

        ordered = [n for title, body in blocks[-1] for n in new_names(title, body)]
        ordered += [
            n for block in blocks[:-1] for title, body in block for n in new_names(title, body)
        ]
        return list(dict.fromkeys(ordered + _names(question)))

    @staticmethod
    def _guess(question: str, blocks: list[list[tuple[str, str]]], pick) -> str:
        """An answer: yes / no, one of two compared names, or a name from the top document."""
        lowered = question.lower()
        in_question = _names(question)
        reasoned = _compare(question, in_question, blocks)
        if reasoned is not None:
            return pick(
                [
                    reasoned,
                    pick(["yes", "no"] if lowered.startswith(_YES_NO_START) else in_question[-2:]),
                ]
            )
        if lowered.startswith(_YES_NO_START):
            return pick(["yes", "no"])
        if " or " in lowered and len(in_question) >= 2:
            return pick(in_question[-2:])
        if not blocks:
            return pick(in_question or ["unknown"])
        title, body = blocks[-1][0]
        surname = title.split()[-1]
        options = [n for n in _names(body) if n not in (title, surname) and n not in in_question]
        return pick(options or [title])


_EARLY = ("older", "earlier", "first", "oldest")
_LATE = ("later", "newer", "younger", "last", "newest")


def _compare(
    question: str, in_question: list[str], blocks: list[list[tuple[str, str]]]
) -> str | None:
    """Answer a comparison from the two retrieved pages, when both were read; else None.

    Years decide "which is older / came first / is newer" questions; shared names (a city, a
    university, a director) decide "the same ...?" questions.
    """
    pages = {title: body for block in blocks for title, body in block}
    names = [name for name in in_question if name in pages][-2:]
    if len(names) < 2:
        return None
    lowered = question.lower()
    if lowered.startswith(_YES_NO_START):
        shared = set(_names(pages[names[0]])) & set(_names(pages[names[1]]))
        shared -= {*names, *(n.split()[-1] for n in names)}
        shared = {n for n in shared if not n.isdigit()}
        return "yes" if shared else "no"
    years = [_YEAR.findall(pages[name]) for name in names]
    if not all(years):
        return None
    first, second = int(years[0][0]), int(years[1][0])
    if any(word in lowered for word in _EARLY):
        return names[0] if first <= second else names[1]
    if any(word in lowered for word in _LATE):
        return names[0] if first >= second else names[1]
    return None


def _is_math(conversation: Conversation) -> bool:
    first = conversation[0]
    return first["role"] == "system" and first["content"] == SYSTEM_PROMPTS["math"]
