"""Gold chains: the expert query sequence solves a bridge task of depth h at T = h, and an agent
that may only query names it has read cannot read the whole gold chain with fewer than h calls.

The second claim is checked exactly, by a search over every sequence of queries such an agent
could make: a state is the set of paragraphs read so far, and from a state the agent may query any
name (a run of capitalized words, or one of its words) in the question or in a paragraph it read.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re

import gymnasium as gym
import pytest
from real_data import DATA

from passkt.envs import Paragraph, Task, load_tasks
from passkt.envs.retrieval import RankBM25Retriever

HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"
TOP_K = 3
SAMPLE_PER_HOPS = 100  # tasks 0, 10, 20, ... of each hops value: 300 in all

needs_synthetic = pytest.mark.skipif(
    importlib.util.find_spec("passkt.envs.sources.synthetic") is None,
    reason="the synthetic task source (envs/sources/synthetic.py) is not written yet",
)

_FUNCTION_WORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "at",
        "by",
        "doc",
        "for",
        "from",
        "he",
        "her",
        "his",
        "how",
        "in",
        "is",
        "it",
        "its",
        "many",
        "most",
        "of",
        "on",
        "she",
        "the",
        "they",
        "this",
        "title",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
    ]
)


def names(text: str) -> set[str]:
    """Capitalized names in ``text``: each maximal run of capitalized words, and each word of it
    (sentence-initial function words such as "In" or "It" are not names)."""
    found: set[str] = set()
    run: list[str] = []
    for token in [*re.findall(r"[\w'-]+|[^\w\s]", text), "."]:
        if token[0].isupper() and token.lower() not in _FUNCTION_WORDS:
            run.append(token)
        elif run:
            found.add(" ".join(run))
            found.update(run)
            run = []
    return found


def fewest_calls_to_read_chain(task: Task, max_calls: int) -> int | None:
    """The fewest searches after which a name-restricted agent can have read every gold paragraph
    (``None`` if more than ``max_calls``); exact breadth-first search over read-sets."""
    retriever = RankBM25Retriever(task.paragraphs)
    index = {p.title: i for i, p in enumerate(task.paragraphs)}
    gold = sum(1 << index[title] for title in task.gold_titles)
    paragraph_names = [names(f"{p.title} {p.text}") for p in task.paragraphs]

    @functools.cache
    def read_by(query: str) -> int:
        return sum(1 << hit.doc_index for hit in retriever.search(query, TOP_K))

    frontier, seen = {0}, {0}
    for calls in range(1, max_calls + 1):
        following = set()
        for state in frontier:
            known = names(task.question).union(
                *(n for i, n in enumerate(paragraph_names) if state >> i & 1)
            )
            for query in known:
                new = state | read_by(query)
                if new & gold == gold:
                    return calls
                if new not in seen:
                    seen.add(new)
                    following.add(new)
        frontier = following
    return None


def synthetic_sample(hops: int) -> list[Task]:
    return load_tasks("synthetic", "bridge", "test", hops=hops)[::10][:SAMPLE_PER_HOPS]


@needs_synthetic
@pytest.mark.parametrize("hops", [2, 3, 4])
def test_gold_chain_solves_at_t_equals_depth(hops: int) -> None:
    tasks = synthetic_sample(hops)
    env = gym.make("BridgeQA-v0", tasks=tasks, max_tool_calls=hops).unwrapped
    for task in tasks:
        assert task.depth == hops == len(task.gold_queries) == len(task.gold_titles)
        env.reset(options={"task_id": task.task_id})
        for query, title in zip(task.gold_queries, task.gold_titles, strict=True):
            obs, *_ = env.step(f"<search>{query}</search>")
            assert f"(Title: {title})" in obs, (task.task_id, query)
        assert task.answer in obs
        _, reward, terminated, _, info = env.step(f"<answer>{task.answer}</answer>")
        assert (reward, terminated, info["tool_calls"]) == (1.0, True, hops), task.task_id


@needs_synthetic
@pytest.mark.parametrize("hops", [2, 3, 4])
def test_name_restricted_agent_needs_depth_calls(hops: int) -> None:
    shortcuts = {}
    for task in synthetic_sample(hops):
        calls = fewest_calls_to_read_chain(task, hops)
        assert calls is not None, f"{task.task_id}: the gold chain is not readable in {hops} calls"
        if calls < hops:
            shortcuts[task.task_id] = calls
    assert shortcuts == {}, f"read the whole chain in fewer than {hops} calls: {shortcuts}"


def test_the_search_finds_a_shortcut_when_one_exists() -> None:
    """The checker itself: a corpus where one query reaches two hops is caught."""
    leaky = Task(
        "leak",
        "bridge",
        "Where was the director of Film Alpha born?",
        "Lumen",
        paragraphs=(
            Paragraph("Film Alpha", "Film Alpha was directed by Oska Brand."),
            Paragraph(
                "Oska Brand", "Oska Brand was born in Lumen. Oska Brand directed Film Alpha."
            ),
            *(Paragraph(f"Filler {i}", "Nothing here.") for i in range(4)),
        ),
        gold_titles=("Film Alpha", "Oska Brand"),
        gold_queries=("Film Alpha", "Oska Brand"),
        depth=2,
    )
    assert fewest_calls_to_read_chain(leaky, 2) == 1
    sealed = Task(
        "sealed",
        "bridge",
        "Where was the director of Film Alpha born?",
        "Lumen",
        paragraphs=(
            Paragraph("Film Alpha", "Film Alpha was directed by Oska Brand."),
            Paragraph("Oska Brand", "Oska Brand was born in Lumen."),
            *(Paragraph(f"Filler {i}", "Nothing here.") for i in range(4)),
        ),
        gold_titles=("Film Alpha", "Oska Brand"),
        gold_queries=("Film Alpha", "Oska Brand"),
        depth=2,
    )
    assert fewest_calls_to_read_chain(sealed, 2) == 2


# --- real HotpotQA ---

BUDGETS = (0, 1, 2, 3, 5)


def _hotpot_bridge_tasks() -> list[Task]:
    if importlib.util.find_spec("passkt.envs.sources.hotpotqa") is not None:
        return load_tasks("hotpotqa", "bridge", "test", path=str(HOTPOT), test_fraction=1.0)
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))  # loader not written yet
    tasks = []
    for r in records:
        if r["type"] != "bridge":
            continue
        titles = tuple(dict.fromkeys(title for title, _ in r["supporting_facts"]))
        paragraphs = tuple(Paragraph(t, "".join(s)) for t, s in r["context"])
        tasks.append(
            Task(
                r["_id"],
                "bridge",
                r["question"],
                r["answer"],
                paragraphs=paragraphs,
                gold_titles=titles,
                gold_queries=titles,
                depth=len(titles),
            )
        )
    return tasks


def gold_chain_success(tasks: list[Task], budget: int) -> float:
    """Share of tasks a gold-chain reader solves at budget T: it issues the gold queries (at most
    T), then answers the gold answer only if that answer appears in what it read (the question
    included), else says it does not know."""
    from passkt.envs.scoring import normalize_answer

    env = gym.make("BridgeQA-v0", tasks=tasks, max_tool_calls=budget).unwrapped
    solved = 0
    for task in tasks:
        obs, _ = env.reset(options={"task_id": task.task_id})
        read = [obs]
        for query in task.gold_queries[:budget]:
            obs, *_ = env.step(f"<search>{query}</search>")
            read.append(obs)
        found = f" {normalize_answer(task.answer)} " in f" {normalize_answer(' '.join(read))} "
        answer = task.answer if found else "I do not know"
        _, reward, terminated, truncated, _ = env.step(f"<answer>{answer}</answer>")
        assert terminated and not truncated
        solved += reward == 1.0
    return solved / len(tasks)


def test_gold_chain_on_real_hotpotqa(record_property) -> None:
    from passkt.envs.scoring import normalize_answer

    tasks = _hotpot_bridge_tasks()
    assert len(tasks) == 402
    success = {t: gold_chain_success(tasks, t) for t in BUDGETS}
    record_property("gold_chain_success_by_T", success)
    in_question = sum(
        f" {normalize_answer(t.answer)} " in f" {normalize_answer(t.question)} " for t in tasks
    ) / len(tasks)
    assert success[0] == pytest.approx(in_question)
    assert success[0] < 0.05
    assert success[1] > success[0]
    assert success[2] >= 0.85
    assert success[2] == success[3] == success[5]  # HotpotQA gold chains have two hops
