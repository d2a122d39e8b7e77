"""Tests of the synthetic task source (passkt.envs.sources.synthetic and its world)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import operator
import os
import re
import subprocess
import sys
from collections import Counter

import pytest
from rank_bm25 import BM25Okapi

from passkt.envs import tasks as task_registry
from passkt.envs.sources import synthetic, synthetic_world
from passkt.envs.sources.synthetic import load_tasks
from passkt.envs.sources.synthetic_world import build_world

CATEGORIES = ("bridge", "comparison", "math")
SPLITS = ("train", "test")
YEAR = re.compile(r"\b(1[6-9]\d\d|20\d\d)\b")


def tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bm25_ranking(task, query: str) -> list[int]:
    """Paragraph indices by BM25 score over the task's own paragraphs, ties by index."""
    bm25 = BM25Okapi([tokens(f"{p.title} {p.text}") for p in task.paragraphs])
    scores = bm25.get_scores(tokens(query))
    return sorted(range(len(scores)), key=lambda i: (-scores[i], i))


def full_text(paragraph) -> str:
    return f"{paragraph.title} {paragraph.text}"


ALL_HOPS = {"hops": (2, 3, 4), "num_tasks": 3000}


@functools.cache
def cached(category: str, split: str, **kwargs) -> tuple:
    """``load_tasks`` once per argument set (the tests below only read the tasks)."""
    return tuple(load_tasks(category, split, **kwargs))


def every_task(category: str, split: str) -> tuple:
    """All bridge tasks of every hops (3,000 per split), or the 1,000 comparison tasks."""
    return cached(category, split, **(ALL_HOPS if category == "bridge" else {}))


@pytest.fixture(scope="module")
def bridge_tasks():
    """Every bridge task of both splits, hops 2, 3 and 4."""
    return every_task("bridge", "test") + every_task("bridge", "train")


@pytest.fixture(scope="module")
def comparison_tasks():
    return every_task("comparison", "test") + every_task("comparison", "train")


@pytest.fixture(scope="module")
def world():
    return build_world(0)


# --- determinism, counts, ids, splits ---


@pytest.mark.parametrize("category", CATEGORIES)
def test_same_seed_same_tasks_byte_for_byte_and_other_seeds_differ(category):
    first = load_tasks(category, "test", num_tasks=200)
    again = load_tasks(category, "test", num_tasks=200)
    assert repr(first) == repr(again)  # repr includes metadata, which == leaves out
    other = load_tasks(category, "test", num_tasks=200, seed=1)
    assert [t.question for t in other] != [t.question for t in first]


def test_tasks_do_not_depend_on_the_process_hash_seed():
    code = (
        "import hashlib; from passkt.envs.sources.synthetic import load_tasks; "
        "print(hashlib.sha256(repr([load_tasks(c, 'test', num_tasks=100) "
        "for c in ('bridge', 'comparison', 'math')]).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    here = [load_tasks(c, "test", num_tasks=100) for c in CATEGORIES]
    assert out.stdout.strip() == hashlib.sha256(repr(here).encode()).hexdigest(), out.stderr


def test_world_is_deterministic_and_seeds_differ():
    fresh = synthetic_world.build_world.__wrapped__(0)  # bypass the cache
    assert fresh == build_world(0)
    assert fresh.paragraphs == build_world(0).paragraphs
    other = synthetic_world.build_world.__wrapped__(1)
    assert {e.name for e in other.entities} != {e.name for e in fresh.entities}


def test_first_tasks_do_not_depend_on_num_tasks():
    for category, split, count in (("bridge", "test", 40), ("math", "train", 25)):
        few = load_tasks(category, split, num_tasks=count)
        assert [repr(t) for t in few] == [repr(t) for t in cached(category, split)[:count]]


def test_bridge_ids_are_stable_across_hops_selections():
    mixed = {t.task_id: t for t in load_tasks("bridge", "test", hops=(2, 3), num_tasks=100)}
    alone = load_tasks("bridge", "test", hops=3, num_tasks=50)
    assert all(repr(mixed[t.task_id]) == repr(t) for t in alone)


@pytest.mark.parametrize("category", CATEGORIES)
@pytest.mark.parametrize("split", SPLITS)
def test_default_counts_ids_and_fields(category, split):
    tasks = cached(category, split)
    assert len(tasks) == synthetic.DEFAULT_NUM_TASKS == 1000
    pattern = {"bridge": r"syn-bridge-h[234]-\d{6}", "comparison": r"syn-comparison-\d{6}"}
    ids = [t.task_id for t in tasks]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(pattern.get(category, r"syn-math-\d{6}"), i) for i in ids)
    assert len({t.question for t in tasks}) == len(tasks)
    assert all(t.source == "synthetic" and t.split == split for t in tasks)
    assert all(t.category == category for t in tasks)
    if category != "math":
        assert all(len(t.paragraphs) == synthetic.CORPUS_SIZE for t in tasks)
        assert all(len({p.title for p in t.paragraphs}) == synthetic.CORPUS_SIZE for t in tasks)
        assert all(t.gold_queries == t.gold_titles for t in tasks)


def test_bridge_default_hops_are_two_and_three_interleaved():
    tasks = load_tasks("bridge", "test", num_tasks=11)
    assert [t.depth for t in tasks] == [2, 3] * 5 + [2]
    assert Counter(t.depth for t in cached("bridge", "test")) == {2: 500, 3: 500}


@pytest.mark.parametrize("hops", [2, 3, 4])
def test_at_least_1000_bridge_tasks_per_hops_and_split(hops):
    for split in SPLITS:
        tasks = cached("bridge", split, hops=hops)
        assert {t.depth for t in tasks} == {hops}
        assert {t.metadata["hops"] for t in tasks} == {hops}
        assert len({t.metadata["template"] for t in tasks}) >= 10  # varied relation chains


@pytest.mark.parametrize("category", CATEGORIES)
def test_splits_share_no_question_and_no_starting_entity(category):
    train, test = (every_task(category, split) for split in SPLITS)
    assert not {t.question for t in train} & {t.question for t in test}
    if category == "bridge":
        starts = [{t.metadata["chain"][0] for t in tasks} for tasks in (train, test)]
        assert not starts[0] & starts[1]
    elif category == "comparison":
        names = [{n for t in tasks for n in t.metadata["entities"]} for tasks in (train, test)]
        assert not names[0] & names[1]
    else:
        problems = [
            {(t.metadata["start"], t.metadata["steps"]) for t in ts} for ts in (train, test)
        ]
        assert not problems[0] & problems[1]


# --- the bridge chain ---


def test_bridge_chain_names_occur_only_where_the_chain_says(bridge_tasks):
    for task in bridge_tasks:
        texts = [full_text(p).lower() for p in task.paragraphs]
        titles = [p.title for p in task.paragraphs]
        gold = [titles.index(name) for name in task.gold_titles]  # golds are in the corpus
        names = [name.lower() for name in task.gold_titles]
        assert task.depth == len(names) == task.metadata["hops"]
        assert [i for i, text in enumerate(texts) if names[0] in text] == [gold[0]], task.task_id
        for hop in range(1, len(names)):
            where = {i for i, text in enumerate(texts) if names[hop] in text}
            assert where == {gold[hop - 1], gold[hop]}, task.task_id  # previous hop and its own
            # No later paragraph names an earlier entity.
            assert not any(names[j] in texts[gold[hop]] for j in range(hop)), task.task_id
        assert task.answer.lower() in texts[gold[-1]], task.task_id
        assert names[0] in task.question.lower()
        assert not any(name in task.question.lower() for name in names[1:]), task.task_id
        assert task.answer.lower() not in task.question.lower(), task.task_id


def test_bridge_answer_is_the_asked_attribute_of_the_last_entity(bridge_tasks, world):
    for task in bridge_tasks[:1000]:
        chain = [world.by_name(name) for name in task.metadata["chain"]]
        for entity, relation, following in zip(
            chain[:-1], task.metadata["relations"], chain[1:], strict=True
        ):
            assert entity.link(relation) == following.id
        last, final = chain[-1], task.metadata["final"]
        expected = str(last.year) if final == "year" else world.entities[last.link(final)].name
        assert task.answer == expected


def test_bridge_gold_paragraph_positions_are_shuffled(bridge_tasks):
    first_gold = Counter(
        [p.title for p in t.paragraphs].index(t.gold_titles[0]) for t in bridge_tasks
    )
    assert len(first_gold) == synthetic.CORPUS_SIZE
    assert max(first_gold.values()) < 0.2 * len(bridge_tasks)


# --- retrieval with BM25 ---


def test_each_gold_title_query_ranks_its_paragraph_first(bridge_tasks, comparison_tasks):
    # Default suite: a sixth of the tasks; the slow test below checks all of them.
    for task in (bridge_tasks + comparison_tasks)[::6]:
        for title in task.gold_titles:
            assert task.paragraphs[bm25_ranking(task, title)[0]].title == title, task.task_id


def test_gold_title_words_stay_rare_in_every_corpus(bridge_tasks, comparison_tasks):
    # What keeps BM25's idf of a title word positive (<= 4 of 10 paragraphs contain it).
    for task in bridge_tasks + comparison_tasks:
        corpus = [set(tokens(full_text(p))) for p in task.paragraphs]
        for word in {w for title in task.gold_titles for w in tokens(title)}:
            if word.capitalize() not in synthetic_world.NAME_SUFFIXES:
                assert sum(word in doc for doc in corpus) <= synthetic_world.MAX_SHARED


@pytest.mark.slow
def test_each_gold_title_query_ranks_its_paragraph_first_in_every_task():
    for category, split in itertools.product(("bridge", "comparison"), SPLITS):
        for task in every_task(category, split):
            for title in task.gold_titles:
                assert task.paragraphs[bm25_ranking(task, title)[0]].title == title, task.task_id


def name_words(text: str) -> set[str]:
    """Lowercase words of the capitalized runs in ``text`` (names), without sentence starts."""
    runs = re.findall(r"(?<![.?] )(?<!^)\b[A-Z]\w+(?: [A-Z]\w+)*", text)
    return {w.lower() for run in runs for w in run.split()}


def test_no_earlier_paragraph_shares_a_name_word_with_a_later_hop(bridge_tasks):
    # So no search for a name read before hop j - 1 (or in the question) can find hop j's
    # paragraph: a reader must take the hops one by one.
    for task in bridge_tasks:
        by_title = {p.title: p for p in task.paragraphs}
        gold = [by_title[title] for title in task.gold_titles]
        distractors = [p for p in task.paragraphs if p.title not in task.gold_titles]
        for j in range(1, len(gold)):
            words = name_words(gold[j].text) | {w.lower() for w in gold[j].title.split()}
            early = [*distractors, *gold[: j - 1]]
            assert not words & set(tokens(task.question)), task.task_id
            assert not any(words & set(tokens(full_text(p))) for p in early), task.task_id


def test_comparison_entities_share_no_name_word(comparison_tasks):
    for task in comparison_tasks:
        first, second = (next(p for p in task.paragraphs if p.title == t) for t in task.gold_titles)
        assert not set(tokens(first.title)) & set(tokens(full_text(second))), task.task_id
        assert not set(tokens(second.title)) & set(tokens(full_text(first))), task.task_id


def test_question_text_alone_rarely_surfaces_a_later_hop(bridge_tasks):
    surfaced = Counter()
    for task in bridge_tasks[::4]:
        top3 = {task.paragraphs[i].title for i in bm25_ranking(task, task.question)[:3]}
        surfaced[task.depth] += bool(top3 & set(task.gold_titles[1:]))
    counts = Counter(t.depth for t in bridge_tasks[::4])
    rates = {hops: surfaced[hops] / counts[hops] for hops in counts}
    # Measured at seed 0: 1.7% (hops 2), 0.2% (3), 0% (4). "Most" would be < 50%.
    assert all(rate < 0.05 for rate in rates.values()), rates


# --- comparison ---


def test_comparison_answers_follow_from_the_two_paragraphs(comparison_tasks):
    for task in comparison_tasks:
        by_title = {p.title: p for p in task.paragraphs}
        first, second = (by_title[name] for name in task.gold_titles)
        assert task.depth == 2 and task.gold_titles == task.metadata["entities"]
        assert all(name in task.question for name in task.gold_titles)
        if task.metadata["attribute"] == "year":
            years = [int(YEAR.search(p.text).group()) for p in (first, second)]
            assert years[0] != years[1]
            earliest = task.gold_titles[years.index(min(years))]
            latest = task.gold_titles[years.index(max(years))]
            assert task.answer in (earliest, latest)
            assert task.answer == (
                earliest if task.metadata["template"].endswith("earlier") else latest
            )
        else:
            values = task.metadata["values"]
            assert values[0] in first.text and values[1] in second.text
            assert task.answer == ("yes" if values[0] == values[1] else "no")


def test_comparison_answers_are_balanced(comparison_tasks):
    which = [t for t in comparison_tasks if t.answer not in ("yes", "no")]
    yes_no = [t for t in comparison_tasks if t.answer in ("yes", "no")]
    assert len(which) > 300 and len(yes_no) > 300
    first = sum(t.answer == t.gold_titles[0] for t in which) / len(which)
    yes = sum(t.answer == "yes" for t in yes_no) / len(yes_no)
    assert 0.45 <= first <= 0.55 and 0.45 <= yes <= 0.55
    assert len({t.metadata["template"] for t in comparison_tasks}) >= 12


def test_comparison_distractors_never_name_either_entity(comparison_tasks):
    for task in comparison_tasks:
        for name in task.gold_titles:
            assert [p.title for p in task.paragraphs if name in full_text(p)] == [name]


# --- math ---


def test_math_answers_recomputed_from_metadata():
    ops = {"+": operator.add, "-": operator.sub, "*": operator.mul}
    for task in cached("math", "test") + cached("math", "train"):
        value, steps = task.metadata["start"], task.metadata["steps"]
        assert 2 <= len(steps) <= 4
        for op, operand in steps:
            if op == "/":
                assert value % operand == 0
                value //= operand
            else:
                value = ops[op](value, operand)
            assert value >= 0
        assert task.answer == str(value)
        assert task.answer_type == "number" and task.depth == 0 and task.paragraphs == ()
        numbers = [int(n) for n in re.findall(r"\d+", task.question)]
        assert numbers == [task.metadata["start"], *(operand for _, operand in steps)]


def test_math_templates_vary():
    questions = [t.question for t in load_tasks("math", "test", num_tasks=300)]
    openings = Counter(" ".join(q.split()[1:3]) for q in questions)
    assert len(openings) >= 3
    assert len({q.split(".")[1].split()[1] for q in questions}) >= 5  # step verbs


# --- the world ---


def test_names_are_unique_and_never_inside_another_name(world):
    names = [e.name for e in world.entities]
    assert len(set(names)) == len(names)
    lowered = sorted({n.lower() for n in names}, key=len)
    joined = "\n".join(lowered)
    for name in lowered:
        assert joined.count(name) == 1, name  # only itself, as a whole or part of a name


def test_paragraphs_name_exactly_the_linked_entities(world):
    names = {e.name: e.id for e in world.entities}
    pattern = re.compile("|".join(sorted(map(re.escape, names), key=len, reverse=True)))
    for entity in world.entities:
        mentioned = {names[m] for m in pattern.findall(entity.paragraph.text)} - {entity.id}
        assert mentioned == set(entity.linked), entity.name
        assert entity.paragraph.title == entity.name


def test_paragraphs_are_short_and_the_vocabulary_small(world):
    lengths = [len(p.text.split()) for p in world.paragraphs]
    assert min(lengths) >= 20 and max(lengths) <= 45
    vocabulary = {w for p in world.paragraphs for w in tokens(full_text(p))}
    assert len(vocabulary) < 1200  # 1,002 at seed 0, of which 199 years


def test_no_name_word_can_hide_inside_a_question_word():
    # Seed independent: any name word is a concatenation of SYLLABLES of 4+ letters; check
    # that no such string occurs inside a question or math word unless the world reserves it.
    reserved = synthetic_world.reserved_substrings()
    texts = [
        *synthetic._START_NP.values(),
        *synthetic._RELATION_NP.values(),
        *(q for finals in synthetic._FINALS.values() for q in finals.values()),
        *(spec.question for spec in synthetic._COMPARISONS),
        *synthetic._ITEMS,
        *synthetic._MATH_START,
        *(s for steps in synthetic._MATH_STEPS.values() for s in steps),
        *synthetic._MATH_ASK,
    ]
    words = {w for text in texts for w in re.findall(r"[a-z]+", text.lower())}

    def syllabic(s: str) -> bool:
        ok = [True] + [False] * len(s)
        for end in range(1, len(s) + 1):
            ok[end] = any(
                ok[end - len(y)] and s.endswith(y, 0, end) for y in synthetic_world.SYLLABLES
            )
        return ok[-1]

    unsafe = {
        w[i:j]
        for w in words
        for i in range(len(w))
        for j in range(i + 4, len(w) + 1)
        if syllabic(w[i:j]) and w[i:j] not in reserved
    }
    assert not unsafe


def test_bigger_world_keeps_the_base_world_and_adds_look_alikes(world):
    big = build_world(0, scale=3)
    assert big.base_size == world.base_size == len(world.entities)
    assert big.entities[: world.base_size] == world.entities
    assert len(big.paragraphs) == 3 * len(world.paragraphs)
    names = [e.name for e in big.entities]
    assert len(set(names)) == len(names)
    base_surnames = {e.name_words[1] for e in world.entities if e.kind == "person"}
    extra_people = [e for e in big.entities[world.base_size :] if e.kind == "person"]
    assert sum(e.name_words[1] in base_surnames for e in extra_people) > len(extra_people) / 2


# --- registry and errors ---


def test_registered_source_loads_and_caches():
    first = task_registry.load_tasks("synthetic", "bridge", "test", hops=[2], num_tasks=5)
    again = task_registry.load_tasks("synthetic", "bridge", "test", hops=[2], num_tasks=5)
    assert [t.task_id for t in first] == [f"syn-bridge-h2-{i:06d}" for i in range(5)]
    assert all(a is b for a, b in zip(first, again, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"category": "bridge", "hop": 3}, TypeError, r"unknown option 'hop'.*Did you mean 'hops'"),
        ({"category": "bridge", "path": "x"}, TypeError, r"unknown option 'path'.*Known options"),
        ({"category": "brige"}, ValueError, r"unknown category 'brige'.*Did you mean 'bridge'"),
        ({"category": "bridge", "split": "dev"}, ValueError, r"split must be 'train' or 'test'"),
        ({"category": "bridge", "hops": 5}, ValueError, r"hops must be one of \(2, 3, 4\)"),
        ({"category": "bridge", "hops": (2, 2)}, ValueError, r"distinct"),
        ({"category": "bridge", "hops": ()}, ValueError, r"hops must be"),
        ({"category": "math", "hops": 2}, ValueError, r"hops is for the bridge category only"),
        (
            {"category": "math", "num_tasks": 0},
            ValueError,
            r"num_tasks must be an int in 1\.\.20000",
        ),
        ({"category": "math", "num_tasks": 10**6}, ValueError, r"num_tasks must be an int in"),
        ({"category": "math", "seed": "1"}, TypeError, r"seed must be an int"),
        ({"category": "bridge", "hops": 4, "num_tasks": 5000}, ValueError, r"only \d+ bridge/test"),
    ],
)
def test_bad_options_raise_clear_errors(kwargs, error, match):
    kwargs = {"split": "test", **kwargs}
    with pytest.raises(error, match=match):
        load_tasks(kwargs.pop("category"), kwargs.pop("split"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"scale": 0}, ValueError, r"scale must be in 1\.\.50"),
        ({"scale": 2.0}, TypeError, r"scale must be an int"),
        ({"seed": None}, TypeError, r"seed must be an int"),
    ],
)
def test_bad_world_arguments_raise_clear_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        build_world(**kwargs)


def test_world_lookups_name_what_is_missing(world):
    with pytest.raises(KeyError, match="no entity named 'Nobody'"):
        world.by_name("Nobody")
    with pytest.raises(KeyError, match="has no relation 'director'"):
        world.entities[world.of_kind("person")[0]].link("director")
    with pytest.raises(ValueError, match="unknown entity kind 'planet'"):
        world.of_kind("planet")
