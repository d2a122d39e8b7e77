"""The tool-use env that Math-v0, ComparisonQA-v0 and BridgeQA-v0 specialise.

One episode is one task: the agent reads the question, may search (each search, and each invalid
turn, is a tool call), and ends by answering. The class docstring below is the spec shared by the
three envs; each env's own docstring adds its category, defaults and version history.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import gymnasium as gym
import numpy as np

from passkt.envs import search_r1, tool_calls
from passkt.envs.contract import AgentInterface
from passkt.envs.errors import UnknownTaskError
from passkt.envs.protocol import (
    ANSWER_RECEIVED,
    FINAL_NOTICE,
    TRUNCATED_MESSAGE,
    Action,
    budget_line,
    invalid_action_message,
    no_tools_message,
    parse_action,
    passkt_protocol,
    render_information,
)
from passkt.envs.retrieval import (
    resolve_fill,
)
from passkt.envs.scoring import score_answer
from passkt.envs.search import (
    CorpusArg,
    RetrieverArg,
    Retrievers,
    check_search_args,
)
from passkt.envs.spaces import ActionText, UnicodeText
from passkt.envs.tasks import Category, Task, load_tasks

__all__ = ["ACTION_MAX_LENGTH", "OBSERVATION_MAX_LENGTH", "ToolUseEnv"]

OBSERVATION_MAX_LENGTH = 2**17
"""Longest observation, in characters (search results are shortened to fit)."""
ACTION_MAX_LENGTH = 2**17
"""Longest action in ``action_space``; ``step`` still accepts (and parses) longer strings."""
_SUFFIX_RESERVE = 512
"""Room kept for the budget line or the final notice after a question or search results."""

ProtocolName = Literal["passkt", "search-r1", "tools"]
"""``protocol=``: passkt's chat protocol, Search-R1's exact one (``passkt.envs.search_r1``), or
passkt's with tool calls for actions (``passkt.envs.tool_calls``)."""


@dataclass
class _Episode:
    """The mutable state of one episode (the only thing ``fork`` copies)."""

    task: Task
    core: str
    """The last observation without its budget line or final notice."""
    observation: str
    tool_calls: int = 0
    turns: int = 0
    finished: bool = False
    last_action: str | None = None
    action_kind: str | None = None
    answer: str | None = None
    correct: bool = False
    f1: float = 0.0
    score_note: str | None = None


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _score(task: Task, prediction: str) -> tuple[bool, float, str | None]:

    score = score_answer(task, prediction)
    return bool(score.correct), float(score.f1), score.note


class ToolUseEnv(gym.Env[str, str]):
    """A question-answering episode with a search tool and a budget of T tool calls.

    ## Description
    A task (question, gold answer, own paragraphs) is drawn at reset. Each turn the agent writes
    free text, optionally ``<think>...</think>``, ending in ``<search>query</search>`` or
    ``<answer>text</answer>`` (Search-R1 tags; ``passkt.envs.protocol``). The env owns how an
    agent should talk to it: ``env.protocol`` (an ``AgentInterface``: system prompt, stop strings,
    chat or stream layout). ``protocol="search-r1"`` switches every string to Search-R1's own
    (``passkt.envs.search_r1``): its prompt, documents as ``Doc 1(Title: "T") text`` appended to
    one assistant stream, its invalid-action message, and no final notice. ``protocol="tools"``
    keeps everything but the actions, which become function calls (``passkt.envs.tool_calls``):
    ``env.protocol.tools`` publishes ``search(query)`` and ``answer(answer)`` as JSON schemas and a
    turn ends in ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; an env without
    search (math) publishes no tools and keeps its ``<answer>`` tag.

    ## Action Space
    ``ActionText``: any Unicode string (``step`` also parses strings longer than
    ``ACTION_MAX_LENGTH``). ``action_space.sample()`` gives a random well-formed action (an
    answer when T = 0, where a search could only end the episode).

    ## Observation Space
    ``UnicodeText(max_length=OBSERVATION_MAX_LENGTH)``. Reset: the question. After a search:
    ``<information>Doc 1 (Title: T) text\\nDoc 2 (Title: T) text</information>`` (top ``top_k``
    BM25 hits; ``<information>No documents found.</information>`` if none; with ``search_fill``,
    on by default for HotpotQA, always ``min(top_k, N)`` hits). After an invalid turn:
    ``Invalid action: <reason>. End your turn with exactly one action: ...``. When no call is left
    (after the T-th call, or at reset when T = 0) the observation ends with ``\\n\\n`` and
    ``FINAL_NOTICE``; with ``reveal_budget=True`` other observations end with ``\\n\\n`` and
    ``You have N tool calls left.``.

    ## Starting State
    A task drawn uniformly with ``self.np_random``, or ``options={"task_id": ...}``.

    ## Rewards
    1.0 when the answer is correct (HotpotQA normalized exact match against the answer or an
    alias; mathematical equivalence for math), else 0.0.

    ## Episode End
    Terminated when the agent answers. Truncated (reward 0) when the turn after the final notice is
    not an answer. Searches and invalid turns are tool calls; the answer is not. An episode has at
    most T + 1 turns and is never both terminated and truncated.

    ## Information
    ``task_id``, ``category``, ``tool_calls``, ``turns``, ``budget`` (T), ``depth`` (the task's
    minimum number of calls), ``action`` (the kind of the last action: ``"search"``,
    ``"answer"``, ``"invalid"``; ``None`` at reset), ``answer`` (``None`` until answered),
    ``correct``, ``f1``, ``score_note`` (why an answer was not compared and scored 0, e.g. a math
    answer too costly to compare within the CPU limit; otherwise ``None``).

    ## Arguments
    See the env classes; every argument is checked at construction.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "render_fps": 4}
    category: ClassVar[Category]
    """The task category this env poses."""
    has_tools: ClassVar[bool] = True
    """Whether ``<search>`` is a tool (False for math: every search is invalid)."""
    takes_hops: ClassVar[bool] = False
    """Whether ``hops=`` (the depth of synthetic bridge tasks) applies to this env."""

    def __init__(
        self,
        *,
        source: str = "synthetic",
        split: str = "test",
        path: str | None = None,
        hops: int | None = None,
        source_options: dict[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
        max_tool_calls: int = 5,
        reveal_budget: bool = False,
        top_k: int = 3,
        corpus: CorpusArg = "task",
        retriever: RetrieverArg = None,
        render_mode: str | None = None,
        protocol: ProtocolName = "passkt",
        search_fill: bool | None = None,
    ) -> None:
        name = type(self).__name__
        self.max_tool_calls = _check_int("max_tool_calls", max_tool_calls, 0)
        if protocol not in ("passkt", "search-r1", "tools"):
            raise ValueError(f"protocol must be 'passkt', 'search-r1' or 'tools', got {protocol!r}")
        if protocol == "search-r1" and (reveal_budget or not self.has_tools):
            raise ValueError(
                f"{name}: protocol='search-r1' needs a search tool and a hidden budget "
                "(Search-R1 never states the budget)"
            )
        self.protocol_name: ProtocolName = protocol
        self._tool_format = protocol == "tools" and self.has_tools
        """Actions are function calls (math has no search, so it keeps its ``<answer>`` tag)."""
        if not self.has_tools and max_tool_calls != 0:
            raise ValueError(
                f"{name} has no tools, so max_tool_calls must be 0 (got {max_tool_calls}); "
                "evaluate it at T = 0 only."
            )
        if not isinstance(reveal_budget, bool):
            raise ValueError(f"reveal_budget must be True or False, got {reveal_budget!r}")
        self.reveal_budget = reveal_budget
        self.top_k = _check_int("top_k", top_k, 1)
        search_corpus = check_search_args(name, corpus, retriever)
        self.search_fill = resolve_fill(name, search_fill, source, tasks, retriever)
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be None or one of {self.metadata['render_modes']}, "
                f"got {render_mode!r}"
            )
        self.render_mode = render_mode
        self.tasks: tuple[Task, ...] = self._load(source, split, path, hops, source_options, tasks)
        self._task_index = {task.task_id: i for i, task in enumerate(self.tasks)}
        self._retrievers = Retrievers(retriever, search_corpus, self.tasks)
        self.action_space = self._action_space(self.max_tool_calls)
        self.observation_space = UnicodeText(OBSERVATION_MAX_LENGTH)
        self._episode: _Episode | None = None
        self._failed_reset: str | None = None
        """Why the last ``reset`` failed (until one succeeds): later calls say so."""

    # --- construction helpers -------------------------------------------------------------------

    def _load(
        self,
        source: str,
        split: str,
        path: str | None,
        hops: int | None,
        source_options: dict[str, Any] | None,
        tasks: Sequence[Task] | None,
    ) -> tuple[Task, ...]:
        name = type(self).__name__
        if hops is not None and not self.takes_hops:
            # As for any argument the env does not take (hops= is the depth of bridge tasks).
            raise TypeError(f"{name}.__init__() got an unexpected keyword argument 'hops'")
        if tasks is not None:
            if path is not None or hops is not None or source_options:
                raise ValueError(
                    f"{name}: pass either tasks= (your own Task list) or path=/hops=/"
                    "source_options= (for a task source), not both."
                )
            loaded = tuple(tasks)
            where = "tasks="
        else:
            options = dict(source_options or {})
            for key, value in (("path", path), ("hops", hops)):
                if value is not None:
                    if key in options:
                        raise ValueError(f"{name}: {key} is given twice (also in source_options)")
                    options[key] = str(value) if key == "path" else value
            try:
                loaded = tuple(load_tasks(source, self.category, split, **options))  # type: ignore[arg-type]
            except TypeError as e:
                raise ValueError(
                    f"{name}: task source {source!r} rejected the options {sorted(options)}: {e}. "
                    "Remove the options this source does not take (hops= is for the synthetic "
                    "source only; path= is for file-based sources)."
                ) from e
            where = f"source {source!r} (split {split!r}, options {options})"
        self._validate_tasks(loaded, where)
        return loaded

    def _validate_tasks(self, tasks: tuple[Task, ...], where: str) -> None:
        name = type(self).__name__
        if not tasks:
            raise ValueError(f"{name}: {where} gave no tasks; check the split and the options.")
        seen: set[str] = set()
        limit = OBSERVATION_MAX_LENGTH - _SUFFIX_RESERVE
        for i, task in enumerate(tasks):
            if not isinstance(task, Task):
                raise ValueError(
                    f"{name}: {where}: item {i} is a {type(task).__name__}, not a Task"
                )
            if task.category != self.category:
                raise ValueError(
                    f"{name}: {where}: task {task.task_id!r} has category {task.category!r}, but "
                    f"{name} poses {self.category!r} tasks; use the env of that category."
                )
            if task.task_id in seen:
                raise ValueError(f"{name}: {where}: task_id {task.task_id!r} occurs twice")
            if len(task.question) > limit:
                raise ValueError(
                    f"{name}: {where}: task {task.task_id!r} has a question of "
                    f"{len(task.question)} characters; the limit is {limit}."
                )
            seen.add(task.task_id)

    # --- Gymnasium API --------------------------------------------------------------------------

    @property
    def np_random(self) -> Any:
        """Gymnasium's ``np_random``; a fork's is its parent's, copied as it was at the fork."""
        state = getattr(self, "_forked_rng_state", None)
        if self._np_random is None and state is not None:
            bit_generator = getattr(np.random, state["bit_generator"])()
            bit_generator.state = state
            self._np_random, self._forked_rng_state = np.random.Generator(bit_generator), None
        return gym.Env.np_random.fget(self)

    @np_random.setter
    def np_random(self, value: Any) -> None:
        gym.Env.np_random.fset(self, value)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode on a random task, or on ``options["task_id"]``.

        Args:
            seed: Seeds ``self.np_random`` (the only randomness the env uses).
            options: ``{"task_id": str}`` to choose the task; no other keys.

        Returns:
            The question (plus the final notice when T = 0) and the info dict.

        Raises:
            UnknownTaskError: ``task_id`` is not one of ``self.tasks``. The episode before it
                is over either way: ``step`` raises ``UnknownTaskError`` again, naming the failed
                reset, until a reset succeeds.
        """
        self._episode = None  # a reset that fails must not leave the previous episode running
        if options is not None and not isinstance(options, Mapping):
            raise ValueError(
                f"reset(options=...) must be a dict such as {{'task_id': 'id'}}, got "
                f"{type(options).__name__} {options!r:.80}"
            )
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"task_id"}
        if unknown:
            raise ValueError(f"reset(options=...) takes only 'task_id', got {sorted(unknown)}")
        if "task_id" in options:
            try:
                task = self._find_task(options["task_id"])
            except UnknownTaskError as error:
                self._failed_reset = str(error)
                raise
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        core = (
            search_r1.question(task.question)
            if self.protocol_name == "search-r1"
            else task.question
        )
        episode = _Episode(task=task, core=core, observation="")
        self._episode, self._failed_reset = episode, None
        episode.observation = self._with_suffix(core, self.max_tool_calls, episode)
        return episode.observation, self._info(episode)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Apply one assistant turn (any text; see the Action Space section).

        Returns:
            observation, reward, terminated, truncated, info.

        Raises:
            UnknownTaskError: The last ``reset`` failed on an unknown ``task_id``.
            gymnasium.error.ResetNeeded: The episode has ended, or ``reset`` was never called.
        """
        episode = self._episode
        if episode is None and self._failed_reset is not None:
            raise UnknownTaskError(
                f"step() after a failed reset: {self._failed_reset} Call reset() with a task_id "
                "of this env's tasks (or none) before stepping."
            )
        if episode is None or episode.finished:
            raise gym.error.ResetNeeded("The episode has ended (or never began): call reset().")
        r1 = self.protocol_name == "search-r1"
        if self._tool_format:
            parsed = tool_calls.parse_tool_call(action)
        else:
            parsed = search_r1.parse_action(action) if r1 else parse_action(action)
        if parsed.kind == "search" and not self.has_tools:
            parsed = Action(kind="invalid", error=no_tools_message())
        episode.turns += 1
        episode.last_action = action if isinstance(action, str) else repr(action)
        episode.action_kind = parsed.kind
        reward, terminated, truncated = 0.0, False, False
        if parsed.kind == "answer":
            episode.answer = parsed.content
            episode.correct, episode.f1, episode.score_note = _score(episode.task, parsed.content)
            reward, terminated = float(episode.correct), True
            episode.finished = True
            observation = ANSWER_RECEIVED
        elif episode.tool_calls >= self.max_tool_calls:
            truncated = episode.finished = True
            observation = tool_calls.TRUNCATED_MESSAGE if self._tool_format else TRUNCATED_MESSAGE
        else:
            episode.tool_calls += 1
            if parsed.kind == "search":
                episode.core = self._search(episode.task, parsed.content)
            elif r1:
                episode.core = search_r1.INVALID_MESSAGE
            elif self._tool_format:
                episode.core = tool_calls.invalid_action_message(parsed.error or "invalid action")
            else:
                episode.core = invalid_action_message(parsed.error or "invalid action")
            observation = self._with_suffix(episode.core, self.max_tool_calls, episode)
        episode.observation = observation
        return observation, reward, terminated, truncated, self._info(episode)

    def render(self) -> str | None:
        """``render_mode="ansi"``: the task, the budget used, the last action and observation."""
        if self.render_mode is None:
            gym.logger.warn("render() was called without render_mode; pass render_mode='ansi'.")
            return None
        episode = self._episode
        if episode is None:
            return "No episode: call reset().\n"
        header = (
            f"{type(self).__name__} task {episode.task.task_id} | tool calls "
            f"{episode.tool_calls}/{self.max_tool_calls} | turns {episode.turns}"
        )
        parts = [header]
        if episode.last_action is not None:
            parts.append(f"--- action ({episode.action_kind}) ---\n{episode.last_action}")
        parts.append(f"--- observation ---\n{episode.observation}")
        return "\n".join(parts) + "\n"

    # --- prefix sharing -------------------------------------------------------------------------

    def fork(self, max_tool_calls: int) -> tuple[ToolUseEnv, str]:
        """Copy the episode in progress with another budget.

        The copy is what an episode with budget ``max_tool_calls`` would be after the same turns:
        the returned observation is the one that episode would show now (the last observation,
        with the final notice if no call is left, and the budget line if ``reveal_budget``), and
        its later rewards and info are that episode's. The copy shares the task list and the
        search indexes (read-only) and the spaces (and their sampling RNG), copies the episode
        state, and gets the RNG's state as it is now (a generator is built only if the copy is
        reset without a seed); it is the raw env (no Gymnasium wrappers).

        Args:
            max_tool_calls: The copy's budget T, at least the number of calls made so far.

        Returns:
            ``(env_copy, observation)``.

        Raises:
            ValueError: No episode in progress, or the budget is below the calls already made.
        """
        episode = self._episode
        if episode is None or episode.finished:
            raise ValueError("fork() needs an episode in progress: call reset() (and not end it).")
        _check_int("max_tool_calls", max_tool_calls, 0)
        if max_tool_calls < episode.tool_calls:
            raise ValueError(
                f"fork(max_tool_calls={max_tool_calls}): the episode has already made "
                f"{episode.tool_calls} tool calls; the budget must be at least that."
            )
        if not self.has_tools and max_tool_calls != 0:
            raise ValueError(f"{type(self).__name__} has no tools: fork(max_tool_calls=0) only")
        clone = copy.copy(self)
        clone.max_tool_calls = max_tool_calls
        clone._episode = copy.copy(episode)  # immutable fields only: a shallow copy is a copy
        # Only the episode is copied now: the spaces are shared (read-only settings), and the
        # RNG, which only reset() draws from, is rebuilt from its state if the clone uses it.
        # Deep copies of the three cost about 250 us a fork, most of what a fork cost.
        rng, pending = self._np_random, getattr(self, "_forked_rng_state", None)
        clone._np_random = None
        clone._forked_rng_state = pending if rng is None else rng.bit_generator.state
        if self.spec is not None:  # one spec per budget, shared by this env and its forks
            specs = self.__dict__.setdefault("_budget_specs", {})
            if max_tool_calls not in specs:
                kwargs = {**self.spec.kwargs, "max_tool_calls": max_tool_calls}
                specs[max_tool_calls] = dataclasses.replace(self.spec, kwargs=kwargs)
            clone.spec = specs[max_tool_calls]
        if (max_tool_calls == 0) != (self.max_tool_calls == 0):
            clone.action_space = clone._action_space(max_tool_calls)  # answers only at T = 0
        clone._episode.observation = clone._with_suffix(episode.core, max_tool_calls, episode)
        return clone, clone._episode.observation

    # --- helpers --------------------------------------------------------------------------------

    def _action_space(self, budget: int) -> ActionText:
        # With no call to spend a search only truncates: sample answers (as check_env expects).
        tags = ("search", "answer") if self.has_tools and budget > 0 else ("answer",)
        arguments = {"search": "query", "answer": "answer"} if self._tool_format else None
        return ActionText(ACTION_MAX_LENGTH, tags=tags, tool_arguments=arguments)

    @property
    def protocol(self) -> AgentInterface:
        """How an agent talks to this env: the category's system prompt and the action stop
        strings (``protocol="passkt"``), Search-R1's prompt and stream (``"search-r1"``), or the
        tool schemas and the call's stop string (``"tools"``)."""
        if self.protocol_name == "search-r1":
            return search_r1.PROTOCOL
        if self._tool_format:
            return tool_calls.tools_protocol(self.category)
        return passkt_protocol(self.category)

    @property
    def task(self) -> Task | None:
        """The task of the current episode (``None`` before the first reset)."""
        return None if self._episode is None else self._episode.task

    def _find_task(self, task_id: Any) -> Task:
        index = self._task_index.get(task_id) if isinstance(task_id, str) else None
        if index is None:
            close = difflib.get_close_matches(str(task_id), list(self._task_index), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise UnknownTaskError(
                f"{type(self).__name__}: no task with task_id {task_id!r} among "
                f"{len(self.tasks)} tasks.{hint} See env.unwrapped.tasks for the ids."
            )
        return self.tasks[index]

    def _search(self, task: Task, query: str) -> str:
        retriever = self._retrievers.for_task(task)
        if self.search_fill:  # a built-in backend (resolve_fill): it takes fill=
            hits = retriever.search(query, self.top_k, fill=True)  # type: ignore[call-arg]
        else:
            hits = retriever.search(query, self.top_k)
        if self.protocol_name == "search-r1":
            return search_r1.render_information(hits)
        return render_information(hits, max_chars=OBSERVATION_MAX_LENGTH - _SUFFIX_RESERVE)

    def _with_suffix(self, core: str, budget: int, episode: _Episode) -> str:
        calls_left = budget - episode.tool_calls
        if self.protocol_name == "search-r1":
            return core  # Search-R1's last turn comes without a notice
        if calls_left <= 0:
            notice = tool_calls.FINAL_NOTICE if self._tool_format else FINAL_NOTICE
            return f"{core}\n\n{notice}"
        if self.reveal_budget:
            return f"{core}\n\n{budget_line(calls_left)}"
        return core

    def _info(self, episode: _Episode) -> dict[str, Any]:
        return {
            "task_id": episode.task.task_id,
            "category": episode.task.category,
            "tool_calls": episode.tool_calls,
            "turns": episode.turns,
            "budget": self.max_tool_calls,
            "depth": episode.task.depth,
            "action": episode.action_kind,
            "answer": episode.answer,
            "correct": episode.correct,
            "f1": episode.f1,
            "score_note": episode.score_note,
        }
