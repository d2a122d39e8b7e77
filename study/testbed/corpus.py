"""The base model's pretraining mixture: noisy agent episodes in the protocol, plus world text.

The base policy plays the part of an instruct model before agent training: it should speak the
protocol, search in many different ways and answer often wrongly. So its corpus is broad and
noisy, never expert data alone:

- **Episodes** of every category (bridge with 2 and 3 hops, comparison, math) on training-split
  tasks, run through the real envs by ``NoisyAgentPolicy``, rendered with the system prompts in the
  chat template exactly as the rollout engine tokenizes them. Each turn of an episode is, at random:
  a *guided* turn with probability ``guided`` (search the next gold entity, but only once its name
  has appeared in the conversation; answer with the gold answer only once every gold paragraph has
  been read; for math, a worked solution whose steps are each wrong with probability
  ``math_error_rate``); a *malformed* turn with probability ``invalid_rate`` (an action with a
  missing or mismatched tag, which the env answers with its invalid-action message); otherwise a
  ``HeuristicPolicy`` turn (search any name seen so far, guess an answer). Episodes are spread
  evenly over the guided rates (default 0, 0.25, 0.5, 0.75: from pure heuristic to mostly
  guided) and over the budgets T (default 0, 1, 2, 3, 5, hidden, so the final notice appears).
- **World paragraphs**: every paragraph of the synthetic world as a plain document, the
  analogue of encyclopedic text in an LLM's pretraining (a model may memorise some facts and
  answer without searching, as a real base model can on HotpotQA).
- **Arithmetic facts** (``arithmetic_facts``, default none): correct steps such as ``37 + 8 =
  45.``, the analogue of the arithmetic an LLM reads in pretraining; without them the only
  arithmetic a base sees is in the noisy agent's worked solutions, a fifth of whose steps are
  wrong.

The episodes use training tasks only, and skip the first ``reserved_tasks`` of each category:
those are left for the matched-data SFT and GRPO runs, so both start from problems the base has
never seen. Test tasks never appear.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from passkt.agents.policy import Completion, Conversation, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import HeuristicPolicy, budget_exhausted
from passkt.agents.tiny import END_OF_TEXT, IM_END
from passkt.envs.protocol import FINAL_NOTICE
from passkt.envs.sources import synthetic
from passkt.envs.sources.synthetic import math_problem
from passkt.envs.sources.synthetic_world import build_world
from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)

CATEGORY_ENVS = {"bridge": "BridgeQA-v0", "comparison": "ComparisonQA-v0", "math": "Math-v0"}

_SEARCH = re.compile(r"<search>(.*?)</search>", re.DOTALL)
_TITLE = re.compile(r"Doc \d+ \(Title: (.*?)\) ")
_MATH_SYMBOL = {"+": "+", "-": "-", "*": "*", "/": "/"}
FACTS_PER_DOCUMENT = 32
"""Arithmetic facts per plain document (``CorpusConfig.arithmetic_facts``)."""


@dataclass(frozen=True)
class CorpusConfig:
    """What goes into the base model's pretraining corpus."""

    world_seed: int = 0
    """Seed of the synthetic world and its tasks (the ``synthetic`` source's ``seed``)."""
    seed: int = 0
    """Seed of the episodes' randomness."""
    episodes_per_category: int = 4000
    """Episodes of each category (spread over guided rates x budgets)."""
    reserved_tasks: int = 200
    """The first training tasks of each category, left out (the SFT / GRPO problems)."""
    tasks_per_category: int = 1000
    """Training tasks the episodes are drawn from (after the reserved ones)."""
    samples_per_task: int = 2
    """Episodes per task and cell (different random turns)."""
    guided_rates: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75)
    """Chance that a turn is guided; the episodes are spread evenly over these rates."""
    budgets: tuple[int, ...] = (0, 1, 2, 3, 5)
    """Hidden budgets T of the retrieval episodes (math episodes always have T = 0)."""
    answer_rate: float = 0.15
    """``HeuristicPolicy``'s chance of answering after each search."""
    invalid_rate: float = 0.03
    """Chance that a turn is malformed."""
    math_error_rate: float = 0.2
    """Chance that a step of a guided math solution is computed wrongly."""
    paragraph_repeats: int = 2
    """How often every world paragraph appears as a document."""
    arithmetic_facts: int = 0
    """Correct arithmetic facts (``37 + 8 = 45.``) as plain documents of ``FACTS_PER_DOCUMENT``:
    the steps of fresh random problems of the math source, written as a worked solution writes
    them (0: none, the corpus of the `testbed` profile's base)."""

    def __post_init__(self) -> None:
        for name in ("episodes_per_category", "tasks_per_category", "samples_per_task"):
            if getattr(self, name) < 1:
                raise ValueError(f"CorpusConfig.{name} must be >= 1, got {getattr(self, name)}")
        if min(self.reserved_tasks, self.paragraph_repeats, self.arithmetic_facts) < 0:
            raise ValueError(
                "CorpusConfig.reserved_tasks, paragraph_repeats and arithmetic_facts must be "
                f">= 0, got {self.reserved_tasks}, {self.paragraph_repeats}, "
                f"{self.arithmetic_facts}"
            )
        rates = (*self.guided_rates, self.answer_rate, self.invalid_rate, self.math_error_rate)
        if not self.guided_rates or not all(0.0 <= r <= 1.0 for r in rates):
            raise ValueError(
                "CorpusConfig: guided_rates (non-empty), answer_rate, invalid_rate and "
                f"math_error_rate must lie in [0, 1], got {rates}"
            )
        if not self.budgets or min(self.budgets) < 0:
            raise ValueError(f"CorpusConfig.budgets must be non-negative ints, got {self.budgets}")
        object.__setattr__(self, "guided_rates", tuple(float(r) for r in self.guided_rates))
        object.__setattr__(self, "budgets", tuple(int(b) for b in self.budgets))


# --------------------------------------------------------------------------- the noisy agent


def worked_solution(task: Task, rng: np.random.Generator, error_rate: float) -> str:
    """A step-by-step solution of a synthetic math task; each step is wrong with ``error_rate``.

    A wrong step carries its error forward, as a careless solver would.
    """
    value = int(task.metadata["start"])
    lines = []
    for op, operand in task.metadata["steps"]:
        result = _step(value, op, operand)
        if rng.random() < error_rate:
            result = max(0, result + int(rng.choice([-10, -2, -1, 1, 2, 10])))
        lines.append(f"{value} {_MATH_SYMBOL[op]} {operand} = {result}.")
        value = result
    return f"<think>{' '.join(lines)}</think>\n<answer>{value}</answer>"


def _step(value: int, op: str, operand: int) -> int:
    """One exact step of a synthetic math problem (``/`` divides exactly there)."""
    if op == "/":
        return value // operand
    return {"+": value + operand, "-": value - operand, "*": value * operand}[op]


def arithmetic_documents(count: int, seed: int) -> list[str]:
    """``count`` correct arithmetic facts, ``FACTS_PER_DOCUMENT`` to a document.

    The facts are the steps of fresh random problems of the synthetic math source (so their
    numbers are distributed as a solver meets them), written exactly as ``worked_solution`` writes
    a step. They are the testbed's analogue of the arithmetic an LLM reads in pretraining: the
    skill, never a test problem's solution (a fact may be one step of one, as ``12 / 2 = 6.`` is
    of many).
    """

    rng = random.Random(f"passkt-corpus/{seed}/arithmetic")
    facts: list[str] = []
    while len(facts) < count:
        value, steps, _ = math_problem(rng)
        for op, operand in steps:
            result = _step(value, op, operand)
            facts.append(f"{value} {_MATH_SYMBOL[op]} {operand} = {result}.")
            value = result
    facts = facts[:count]
    return [
        " ".join(facts[i : i + FACTS_PER_DOCUMENT]) for i in range(0, count, FACTS_PER_DOCUMENT)
    ]


def malformed(action: str, rng: np.random.Generator) -> str:
    """A broken version of a well-formed action that still ends in a stop string (so a model
    that imitates it stops), but that the env rejects as invalid."""
    match = re.fullmatch(r"<(search|answer)>(.*)</(search|answer)>", action, re.DOTALL)
    content = match.group(2) if match else action
    variants = (
        f"{content}</search>",  # no opening tag
        f"<answer><search>{content}</search>",  # answer never closed
        f"<search>{content}</answer>",  # mismatched closing tag
    )
    return variants[int(rng.integers(len(variants)))]


class NoisyAgentPolicy:
    """A scripted agent of adjustable quality: guided, heuristic or malformed turns at random.

    Args:
        tasks: The tasks it is asked about (the guided turns look up their gold chain).
        guided: Chance that a turn is guided (see the module docstring).
        answer_rate: ``HeuristicPolicy``'s chance of answering after each search.
        invalid_rate: Chance that a turn is malformed.
        math_error_rate: Chance that a step of a guided math solution is wrong.
        seed: Mixed with each call's ``params.seed`` and the row index.
    """

    spec = "scripted:noisy"

    def __init__(
        self,
        tasks: Sequence[Task],
        *,
        guided: float,
        answer_rate: float = 0.15,
        invalid_rate: float = 0.03,
        math_error_rate: float = 0.2,
        seed: int = 0,
    ) -> None:
        self._by_question = {task.question: task for task in tasks}
        self.guided = guided
        self.invalid_rate = invalid_rate
        self.math_error_rate = math_error_rate
        self.seed = seed
        self.heuristic = HeuristicPolicy(seed, answer_rate=answer_rate)

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        out = []
        for row, conversation in enumerate(conversations):
            for j in range(params.n):
                rng = np.random.default_rng([self.seed, 7, params.seed or 0, row, j])
                out.append(Completion(self.act(conversation, rng)))
        return out

    def act(self, conversation: Conversation, rng: np.random.Generator) -> str:
        """One turn for one conversation."""
        task = self._task(conversation)
        action = None
        if rng.random() < self.guided:
            action = self._guided(task, conversation, rng)
        if action is None:
            action = self.heuristic.act(_without_notice(conversation), rng, greedy=False)
        if rng.random() < self.invalid_rate:
            action = malformed(action, rng)
        return action

    def _task(self, conversation: Conversation) -> Task:
        question = next(m["content"] for m in conversation if m["role"] == "user")
        task = self._by_question.get(question)
        if task is not None:
            return task
        for text, task in self._by_question.items():  # the question with the final notice
            if question.startswith(text):
                return task
        raise KeyError(f"NoisyAgentPolicy does not know the question {question[:80]!r}")

    def _guided(
        self, task: Task, conversation: Conversation, rng: np.random.Generator
    ) -> str | None:
        """The guided turn, or None when it knows no better than the heuristic."""
        if task.category == "math":
            return worked_solution(task, rng, self.math_error_rate)
        seen_text = " ".join(m["content"] for m in conversation if m["role"] == "user")
        searched = {
            q.strip()
            for m in conversation
            if m["role"] == "assistant"
            for q in _SEARCH.findall(m["content"])
        }
        read = set(_TITLE.findall(seen_text))
        if all(title in read for title in task.gold_titles):
            return f"<answer>{task.answer}</answer>"
        if budget_exhausted(conversation[-1]["content"]):
            return None
        for query in task.gold_queries:
            if query not in searched and query in seen_text:
                return f"<search>{query}</search>"
        return None


def _without_notice(conversation: Conversation) -> Conversation:
    """The conversation with the final notice moved out of the question into a message of its
    own, so that ``HeuristicPolicy`` (which takes names from the first user message) does not
    pick the notice's words ("You", "Answer") as candidate answers at T = 0."""
    first = next(i for i, m in enumerate(conversation) if m["role"] == "user")
    question = conversation[first]["content"]
    if FINAL_NOTICE not in question:
        return conversation
    clean = question.replace(FINAL_NOTICE, "").rstrip()
    view = [*conversation[:first], {"role": "user", "content": clean}, *conversation[first + 1 :]]
    if first == len(conversation) - 1:
        view.append({"role": "user", "content": FINAL_NOTICE})
    return view


# --------------------------------------------------------------------------- the corpus


@dataclass(frozen=True)
class Corpus:
    """Token documents for pretraining: one flat array plus where each document starts."""

    tokens: np.ndarray
    """``(N,)`` int32 token ids of every document, each ending in ``<|endoftext|>``."""
    assistant: np.ndarray
    """``(N,)`` bool: True at tokens the agent wrote (the policy tokens of the episodes)."""
    starts: np.ndarray
    """``(D + 1,)`` int64 document boundaries: document d is ``tokens[starts[d]:starts[d+1]]``."""
    stats: dict[str, Any] = field(default_factory=dict)
    """Counts and success rates per category (JSON-ready)."""

    @property
    def num_documents(self) -> int:
        return len(self.starts) - 1

    def save(self, path: str | Path) -> Path:
        """Write the corpus to one ``.npz`` file (the stats as JSON inside it)."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("wb") as f:
            np.savez(
                f, tokens=self.tokens, assistant=self.assistant, starts=self.starts,
                stats=np.array(json.dumps(self.stats)),
            )  # fmt: skip
        return out

    @classmethod
    def load(cls, path: str | Path) -> Corpus:
        """Read a corpus written by ``save``; a damaged file is one ``ValueError`` naming it."""
        try:
            with np.load(Path(path)) as data:
                return cls(
                    tokens=data["tokens"],
                    assistant=data["assistant"],
                    starts=data["starts"],
                    stats=json.loads(str(data["stats"])),
                )
        except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
            raise ValueError(f"{path}: not a testbed corpus written by Corpus.save ({e})") from e


def _training_tasks(category: str, config: CorpusConfig) -> list[Task]:

    count = config.reserved_tasks + config.tasks_per_category
    tasks = synthetic.load_tasks(category, "train", seed=config.world_seed, num_tasks=count)
    return tasks[config.reserved_tasks :]


def _episode_cells(category: str, config: CorpusConfig) -> list[tuple[float, int, list[Task]]]:
    """``(guided rate, budget, tasks)`` of each cell of a category's episodes, in order."""
    tasks = _training_tasks(category, config)
    order = np.random.default_rng([config.seed, len(category)]).permutation(len(tasks))
    budgets = (0,) if category == "math" else config.budgets
    cells = [(g, b) for g in config.guided_rates for b in budgets]
    per_cell = math.ceil(config.episodes_per_category / len(cells) / config.samples_per_task)
    out, cursor = [], 0
    for guided, budget in cells:
        out.append(
            (guided, budget, [tasks[order[(cursor + i) % len(tasks)]] for i in range(per_cell)])
        )
        cursor += per_cell
    return out


def task_entities(task: Task) -> set[str]:
    """The named things a task asks about: its gold titles (the chain of a bridge task, the two
    entities of a comparison) and, for math, the person in the story."""
    names = set(task.gold_titles)
    if task.metadata.get("name"):
        names.add(str(task.metadata["name"]))
    return names


def episode_tasks(config: CorpusConfig) -> list[Task]:
    """The tasks the corpus's agent episodes practise (every category)."""
    return [
        task
        for category in CATEGORY_ENVS
        for _, _, picked in _episode_cells(category, config)
        for task in picked
    ]


def episode_entities(config: CorpusConfig) -> set[str]:
    """Every entity that the corpus's agent episodes ask about (every category): a problem that
    names one of them was practised, in other questions, during pretraining."""
    return {
        name
        for category in CATEGORY_ENVS
        for _, _, picked in _episode_cells(category, config)
        for task in picked
        for name in task_entities(task)
    }


def _category_episodes(
    category: str, config: CorpusConfig, tokenizer: Any, progress: bool
) -> tuple[list[tuple[list[int], list[bool]]], dict[str, Any]]:
    """Token documents and stats of one category's episodes."""

    count = config.reserved_tasks + config.tasks_per_category
    env_kwargs = {
        "split": "train",
        "source_options": {"seed": config.world_seed, "num_tasks": count},
    }
    docs: list[tuple[list[int], list[bool]]] = []
    correct = turns = invalid = 0
    for index, (guided, budget, picked) in enumerate(_episode_cells(category, config)):
        policy = NoisyAgentPolicy(
            picked, guided=guided, answer_rate=config.answer_rate,
            invalid_rate=config.invalid_rate, math_error_rate=config.math_error_rate,
            seed=config.seed,
        )  # fmt: skip
        result = rollout(
            policy, CATEGORY_ENVS[category], [t.task_id for t in picked],
            n=config.samples_per_task, budgets=(budget,), env_kwargs=env_kwargs,
            params=SamplingParams(seed=config.seed * 1000 + index), tokenizer=tokenizer,
            progress=progress,
        )  # fmt: skip
        for episode in result.episodes:
            docs.append((episode.token_ids, episode.policy_mask))
            correct += episode.correct
            turns += len(episode.turns)
            invalid += episode.actions.count("invalid")
    count = len(docs)
    stats = {
        "episodes": count,
        "success_rate": correct / count,
        "turns_per_episode": turns / count,
        "invalid_turn_rate": invalid / max(turns, 1),
    }
    return docs, stats


def build_corpus(config: CorpusConfig, tokenizer: Any, *, progress: bool = False) -> Corpus:
    """Run the episodes and tokenize everything (a few seconds per thousand episodes).

    Args:
        config: What to put in.
        tokenizer: The model's tokenizer (with the chat template).
        progress: Show progress bars.

    Returns:
        The corpus; documents in a fixed order (episodes by category, then paragraphs).
    """

    end_turn, end_doc = (tokenizer.convert_tokens_to_ids(t) for t in (IM_END, END_OF_TEXT))
    docs: list[tuple[list[int], list[bool]]] = []
    stats: dict[str, Any] = {"config": asdict(config), "categories": {}}
    for category in CATEGORY_ENVS:
        episodes, category_stats = _category_episodes(category, config, tokenizer, progress)
        docs += [([*ids, end_turn], [*mask, False]) for ids, mask in episodes]
        stats["categories"][category] = category_stats
    world = build_world(config.world_seed)
    texts = [p.text for p in world.paragraphs] * config.paragraph_repeats
    arithmetic = arithmetic_documents(config.arithmetic_facts, config.seed)
    texts += arithmetic
    encoded = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    docs += [(list(ids), [False] * len(ids)) for ids in encoded]
    lengths = np.array([len(ids) + 1 for ids, _ in docs], dtype=np.int64)
    tokens = np.fromiter(
        (t for ids, _ in docs for t in (*ids, end_doc)), dtype=np.int32, count=int(lengths.sum())
    )
    assistant = np.fromiter(
        (m for _, mask in docs for m in (*mask, False)), dtype=bool, count=len(tokens)
    )
    stats["paragraph_documents"] = len(texts) - len(arithmetic)
    stats["arithmetic_documents"] = len(arithmetic)
    stats["tokens"] = len(tokens)
    stats["assistant_tokens"] = int(assistant.sum())
    starts = np.concatenate([[0], np.cumsum(lengths)])
    stats = json.loads(json.dumps(stats))  # JSON-ready, as ``Corpus.load`` gives it back
    return Corpus(tokens=tokens, assistant=assistant, starts=starts, stats=stats)
