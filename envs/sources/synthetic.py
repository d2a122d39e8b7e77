"""The ``synthetic`` task source: bridge, comparison and math tasks over a generated world.

Offline, seeded and contamination-free: every fact lives in ``synthetic_world``'s fictional
world, so a model can only answer a retrieval task by reading the task's paragraphs.

- ``bridge`` (category C): a chain of entities ``e1 -> e2 -> ... -> eh`` (``hops`` = h paragraphs,
  e.g. film -> director -> birth city). Only ``e1`` is named in the question; among the task's ten
  paragraphs, ``e(i+1)``'s name occurs only in ``ei``'s paragraph and its own, no paragraph names
  an earlier entity of the chain, and no word of a name in hop ``j``'s paragraph occurs in the
  question, a distractor or a hop before ``j - 1``: a searcher that only queries names it has read
  needs ``h`` searches (checked exactly in ``tests/envs/test_gold_chain.py``). The answer (a year
  or a name) is in the last paragraph. The question paraphrases the paragraphs, so a search for
  the question text finds the first hop and its look-alikes, not a later hop.
- ``comparison`` (category B): two entities of one kind named in the question, looked up
  independently ("Who is older, A or B?", "Are A and B in the same country?"); neither
  paragraph contains a word of the other's name, so one search never finds both.
- ``math`` (category A): integer word problems of 2 to 4 steps; numbers written as digits.

Tasks are made in a fixed order from one random stream per (seed, category, split[, hops]), so
the first ``n`` tasks do not depend on ``num_tasks`` and task ids are stable. Train and test never
share a question; bridge and comparison tasks of the two splits start from disjoint entities.
"""

from __future__ import annotations

import difflib
import functools
import operator
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from passkt.envs.sources.synthetic_world import (  # noqa: F401  (Entity, World: re-exported)
    RELATIONS,
    Entity,
    World,
    build_world,
)
from passkt.envs.tasks import Task

CATEGORIES = ("bridge", "comparison", "math")
HOPS = (2, 3, 4)
DEFAULT_HOPS = (2, 3)
DEFAULT_NUM_TASKS = 1000
MAX_NUM_TASKS = 20_000
"""Most tasks one call may ask for (bridge has fewer: about 2,300 to 3,300 per hops and split)."""
CORPUS_SIZE = 10
"""Paragraphs per retrieval task: the gold ones plus distractors (HotpotQA's setting)."""

_OPTIONS = ("hops", "seed", "num_tasks")
_SPLITS = ("train", "test")

# Questions paraphrase the paragraphs ("birthplace" for "born ... from"): besides the start
# entity's name they share no content word with the paragraphs, so a search for the question
# text finds the first hop (and look-alikes of it), rarely a later hop.
_START_NP = {kind: "{name}" for kind in RELATIONS} | {"film": "the film {name}"}
_RELATION_NP = {
    ("film", "director"): "the director of {np}",
    ("film", "studio"): "the studio behind {np}",
    ("company", "founder"): "the founder of {np}",
    ("company", "hq"): "the hometown of {np}",
    ("band", "leader"): "the leader of {np}",
    ("band", "city"): "the hometown of {np}",
    ("person", "university"): "the alma mater of {np}",
    ("person", "city"): "the birthplace of {np}",
    ("university", "city"): "the hometown of {np}",
    ("city", "country"): "the nation of {np}",
}
_ESTABLISHED = "In what year was {np} established?"
_FINALS = {
    "person": {
        "year": "What is the birth year of {np}?",
        "city": "What is the birthplace of {np}?",
        "university": "What is the alma mater of {np}?",
    },
    "company": {"year": _ESTABLISHED, "hq": "Where is {np} headquartered?"},
    "band": {"year": "In what year did {np} begin?", "city": "What is the hometown of {np}?"},
    "university": {"year": _ESTABLISHED, "city": "What is the hometown of {np}?"},
    "city": {"year": _ESTABLISHED, "country": "Which nation is {np} part of?"},
    "country": {"year": "In what year did {np} gain independence?"},
}


@dataclass(frozen=True)
class BridgeTemplate:
    """A relation chain and the attribute asked of its last entity."""

    start: str
    """Kind of the entity named in the question."""
    relations: tuple[str, ...]
    """Relations followed from the start (``hops - 1`` of them)."""
    final: str
    """``"year"`` or a relation of the last entity; its value (or target's name) is the answer."""

    @property
    def kinds(self) -> tuple[str, ...]:
        """Kinds of the chain's entities, one per hop."""
        kinds = [self.start]
        for relation in self.relations:
            kinds.append(RELATIONS[kinds[-1]][relation])
        return tuple(kinds)

    @property
    def hops(self) -> int:
        """Number of paragraphs to read (= minimum number of searches)."""
        return len(self.relations) + 1

    @property
    def name(self) -> str:
        """A readable id, e.g. ``film.director>person.city``."""
        steps = [f"{kind}.{rel}" for kind, rel in zip(self.kinds[:-1], self.relations, strict=True)]
        return ">".join([*steps, f"{self.kinds[-1]}.{self.final}"])

    def question(self, start_name: str) -> str:
        """The question about the chain that starts at the entity called ``start_name``."""
        np = _START_NP[self.start].format(name=start_name)
        for kind, relation in zip(self.kinds[:-1], self.relations, strict=True):
            np = _RELATION_NP[kind, relation].format(np=np)
        return _FINALS[self.kinds[-1]][self.final].format(np=np)


@functools.cache
def bridge_templates(hops: int) -> tuple[BridgeTemplate, ...]:
    """Every bridge template of ``hops`` paragraphs, in a fixed order."""

    def paths(kind: str, length: int) -> Iterator[tuple[str, ...]]:
        if length == 0:
            yield ()
            return
        for relation, target in RELATIONS[kind].items():
            for rest in paths(target, length - 1):
                yield (relation, *rest)

    out = []
    for start in _START_NP:
        for relations in paths(start, hops - 1):
            last = BridgeTemplate(start, relations, "year").kinds[-1]
            out.extend(BridgeTemplate(start, relations, final) for final in _FINALS[last])
    return tuple(out)


def _chain(world: World, template: BridgeTemplate, start: int) -> tuple[list[int], str] | None:
    """The chain's entity ids and the answer, or None if a hop could be skipped.

    A hop is skipped if a paragraph read earlier names its entity, or shares a name word with
    its paragraph (then a search for that word could find it): the name words of hop ``j``'s
    paragraph may occur only in hop ``j - 1``'s paragraph and in later hops'.
    """
    ids = [start]
    for relation in template.relations:
        ids.append(world.entities[ids[-1]].link(relation))
    chain = set(ids)
    for i, eid in enumerate(ids):
        expected = {ids[i + 1]} if i + 1 < len(ids) else set()
        if chain.intersection(world.entities[eid].linked) != expected:
            return None
        known = {w.lower() for w in world.entities[start].name.split()}  # from the question
        known = known.union(*(world.tokens[k] for k in ids[: max(i - 1, 0)]))
        if i > 0 and not world.name_tokens[eid].isdisjoint(known):
            return None
    last = world.entities[ids[-1]]
    if template.final == "year":
        return ids, str(last.year)
    return ids, world.entities[last.link(template.final)].name


def _bridge_maker(world: World, rng: random.Random, split: str, template: BridgeTemplate):
    """A maker of the template's tasks, one per call, from shuffled starts of the split."""
    starts = list(world.split_ids(template.start, split))
    rng.shuffle(starts)

    def make(index: int) -> Task | None:
        found = None
        while starts and found is None:
            found = _chain(world, template, starts.pop())
        if found is None:
            return None
        ids, answer = found
        # Look-alikes of the named entity first; later hops only get distractors that share
        # no name word with them (else a search for that word could skip a hop).
        plan = [(world.siblings(ids[0]), 2), (world.mates(ids[0]), 1)]
        plan += [(world.mates(i), 1) for i in ids[1:]]
        private = frozenset().union(*(world.name_tokens[i] for i in ids[1:]))
        names = tuple(world.entities[i].name for i in ids)
        return _retrieval_task(
            world, rng, ids, plan, private,
            task_id=f"syn-bridge-h{template.hops}-{index:06d}",
            category="bridge",
            question=template.question(names[0]),
            answer=answer,
            split=split,
            metadata={
                "hops": template.hops, "template": template.name, "chain": names,
                "chain_kinds": template.kinds, "relations": template.relations,
                "final": template.final, "seed": world.seed,
            },
        )  # fmt: skip

    return make


def _retrieval_task(
    world: World, rng: random.Random, golds: Sequence[int], plan, private, **fields: Any
) -> Task:
    """A bridge or comparison task: the golds and their distractors, shuffled."""
    count = CORPUS_SIZE - len(golds)
    ids = [*golds, *world.distractors(golds, rng, plan, count, private)]
    rng.shuffle(ids)
    titles = tuple(world.entities[g].name for g in golds)
    paragraphs = tuple(world.entities[i].paragraph for i in ids)
    return Task(
        paragraphs=paragraphs, gold_titles=titles, gold_queries=titles, depth=len(golds),
        source="synthetic", **fields,
    )  # fmt: skip


def _round_robin(makers: list[Callable[[int], Task | None]], count: int, what: str) -> list[Task]:
    """Take tasks from each maker in turn (variety) until ``count``; a maker that returns None
    is exhausted."""
    tasks: list[Task] = []
    active = list(makers)
    while active and len(tasks) < count:
        for make in list(active):
            task = make(len(tasks))
            if task is None:
                active.remove(make)
                continue
            tasks.append(task)
            if len(tasks) == count:
                break
    if len(tasks) < count:
        raise ValueError(
            f"synthetic task source: only {len(tasks)} {what} tasks exist; "
            "ask for fewer with num_tasks (or use another seed)"
        )
    return tasks


class _Comparison(NamedTuple):
    kind: str
    attribute: str
    """``"year"`` (which one is earlier / later) or a relation (do both share its target?)."""
    earlier: bool | None
    """For ``"year"``: True if the entity with the smaller year is the answer."""
    question: str

    @property
    def name(self) -> str:
        if self.attribute != "year":
            return f"{self.kind}.{self.attribute}"
        return f"{self.kind}.{'earlier' if self.earlier else 'later'}"


_COMPARISONS = (
    _Comparison("person", "year", True, "Who is older, {a} or {b}?"),
    _Comparison("person", "year", False, "Who was born later, {a} or {b}?"),
    _Comparison("person", "city", None, "Were {a} and {b} born in the same city?"),
    _Comparison("person", "university", None, "Did {a} and {b} study at the same university?"),
    _Comparison("film", "year", True, "Which film came out first, {a} or {b}?"),
    _Comparison("film", "year", False, "Which film is newer, {a} or {b}?"),
    _Comparison(
        "film", "director", None, "Were the films {a} and {b} directed by the same person?"
    ),
    _Comparison("film", "studio", None, "Were the films {a} and {b} made by the same studio?"),
    _Comparison("company", "year", True, "Which company was founded earlier, {a} or {b}?"),
    _Comparison("company", "hq", None, "Are {a} and {b} based in the same city?"),
    _Comparison("band", "year", True, "Which band was formed first, {a} or {b}?"),
    _Comparison("band", "city", None, "Are the bands {a} and {b} from the same city?"),
    _Comparison("university", "year", True, "Which university is older, {a} or {b}?"),
    _Comparison("university", "city", None, "Are {a} and {b} in the same city?"),
    _Comparison("city", "year", True, "Which city was founded earlier, {a} or {b}?"),
    _Comparison("city", "country", None, "Are {a} and {b} in the same country?"),
)


def _comparison_pair(
    world: World, rng: random.Random, spec: _Comparison, pool: Sequence[int], first: bool, seen
) -> tuple[int, int, str] | None:
    """Two entities of ``pool`` and the answer: the first entity (or "yes") iff ``first``."""
    members = frozenset(pool)
    for _ in range(200):
        a = rng.choice(pool)
        ea = world.entities[a]
        if spec.attribute != "year" and first:  # "yes": one that shares the target
            b = rng.choice(world.sharing(spec.kind, spec.attribute, ea.link(spec.attribute)))
        else:
            b = rng.choice(pool)
        eb = world.entities[b]
        key = (spec, frozenset((a, b)))
        shared_word = not (
            world.tokens[a].isdisjoint(eb.name.lower().split())
            and world.tokens[b].isdisjoint(ea.name.lower().split())
        )
        if a == b or b not in members or key in seen or shared_word:
            continue  # a shared title word would let one search find both paragraphs
        if spec.attribute == "year":
            if ea.year == eb.year:
                continue
            winner, loser = (a, b) if (ea.year < eb.year) == spec.earlier else (b, a)
            seen.add(key)
            a, b = (winner, loser) if first else (loser, winner)
            return a, b, world.entities[winner].name
        if first or ea.link(spec.attribute) != eb.link(spec.attribute):
            seen.add(key)
            answer = "yes" if first else "no"
            return (a, b, answer) if rng.random() < 0.5 else (b, a, answer)
    return None


def _comparison_maker(world: World, rng: random.Random, split: str, spec: _Comparison, seen):
    """A maker of the spec's tasks; answers alternate between first and second (yes and no)."""
    pool = world.split_ids(spec.kind, split)
    made = [0]

    def make(index: int) -> Task | None:
        found = _comparison_pair(world, rng, spec, pool, made[0] % 2 == 0, seen)
        if found is None:
            return None
        made[0] += 1
        a, b, answer = found
        ea, eb = world.entities[a], world.entities[b]
        values: tuple = (ea.year, eb.year)
        if spec.attribute != "year":
            values = tuple(world.entities[e.link(spec.attribute)].name for e in (ea, eb))
        plan = [(world.siblings(a), 2), (world.siblings(b), 2)]
        plan += [(world.mates(a), 1), (world.mates(b), 1)]
        return _retrieval_task(
            world, rng, (a, b), plan, frozenset(),
            task_id=f"syn-comparison-{index:06d}",
            category="comparison",
            question=spec.question.format(a=ea.name, b=eb.name),
            answer=answer,
            split=split,
            metadata={
                "template": spec.name, "kind": spec.kind, "attribute": spec.attribute,
                "entities": (ea.name, eb.name), "values": values, "seed": world.seed,
            },
        )  # fmt: skip

    return make


_ITEMS = ("coins", "apples", "books", "stamps", "shells", "cards", "marbles", "pens")
_MATH_START = (
    "{name} has {a} {items}.",
    "{name} starts the day with {a} {items}.",
    "A box that {name} keeps holds {a} {items}.",
)
_MATH_STEPS = {
    "+": ("{name} gets {b} more {items}.", "{name} finds {b} more {items}.",
          "Then {b} more {items} are added."),
    "-": ("{name} gives away {b} {items}.", "{name} loses {b} {items}.",
          "Then {b} {items} are taken away."),
    "*": ("Then the number of {items} becomes {b} times as large.",
          "{name} ends up with {b} times as many {items} as before."),
    "/": ("{name} puts the {items} into {b} equal piles and keeps one pile.",
          "{name} splits the {items} into {b} equal groups and keeps one group."),
}  # fmt: skip
_MATH_ASK = ("How many {items} does {name} have now?", "How many {items} are left at the end?")
_MATH_MAX = 500
_MATH_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.floordiv}
"""The step operators; a ``/`` step always divides exactly."""


def math_problem(rng: random.Random) -> tuple[int, tuple[tuple[str, int], ...], int]:
    """A start value, 2 to 4 steps ``(op, operand)`` and the result (never negative)."""
    value = start = rng.randint(2, 60)
    steps = []
    for _ in range(rng.randint(2, 4)):
        divisors = [d for d in range(2, 6) if value % d == 0]
        options = ["+"] + ["-"] * (value >= 2) + ["*"] * (value * 2 <= _MATH_MAX)
        op = rng.choice(options + ["/"] * bool(divisors))
        if op == "+":
            operand = rng.randint(1, 30)
        elif op == "-":
            operand = rng.randint(1, value - 1)
        elif op == "*":
            operand = rng.randint(2, min(5, _MATH_MAX // value))
        else:
            operand = rng.choice(divisors)
        value = _MATH_OPS[op](value, operand)
        steps.append((op, operand))
    return start, tuple(steps), value


def _math_tasks(seed: int, split: str, count: int) -> list[Task]:
    rng = random.Random(f"passkt-synthetic/{seed}/math")
    world = build_world(seed)
    names = sorted({world.entities[i].name_words[0] for i in world.of_kind("person")})
    seen: set = set()
    tasks: list[Task] = []
    while len(tasks) < count:
        start, steps, value = math_problem(rng)
        name, items = rng.choice(names), rng.choice(_ITEMS)
        sentences = [rng.choice(_MATH_START).format(name=name, a=start, items=items)]
        sentences += [
            rng.choice(_MATH_STEPS[op]).format(name=name, b=b, items=items) for op, b in steps
        ]
        sentences.append(rng.choice(_MATH_ASK).format(name=name, items=items))
        if (start, steps) in seen:
            continue
        seen.add((start, steps))
        if _SPLITS[(len(seen) - 1) % 2] != split:  # unique problems alternate between splits
            continue
        tasks.append(
            Task(
                task_id=f"syn-math-{len(tasks):06d}",
                category="math",
                question=" ".join(sentences),
                answer=str(value),
                answer_type="number",
                source="synthetic",
                split=split,
                metadata={"start": start, "steps": steps, "name": name, "items": items},
            )
        )
    return tasks


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _hint(value: Any, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(value), choices, n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


def _checked(category, split, hops, seed, num_tasks, unknown) -> tuple[int, tuple[int, ...]]:
    """Validate ``load_tasks``'s arguments; return the task count and the hops."""
    where = "synthetic task source"
    for name in unknown:
        raise TypeError(
            f"{where}: unknown option {name!r}.{_hint(name, _OPTIONS)} "
            f"Known options: {', '.join(_OPTIONS)}."
        )
    if category not in CATEGORIES:
        raise ValueError(
            f"{where}: unknown category {category!r}.{_hint(category, CATEGORIES)} "
            f"Expected one of: {', '.join(CATEGORIES)}."
        )
    if split not in _SPLITS:
        raise ValueError(f"{where}: split must be 'train' or 'test', got {split!r}")
    if not _is_int(seed):
        raise TypeError(f"{where}: seed must be an int, got {seed!r}")
    if num_tasks is not None and not (_is_int(num_tasks) and 1 <= num_tasks <= MAX_NUM_TASKS):
        raise ValueError(
            f"{where}: num_tasks must be an int in 1..{MAX_NUM_TASKS} or None, got {num_tasks!r}"
        )
    if category != "bridge" and hops is not None:
        raise ValueError(
            f"{where}: hops is for the bridge category only; leave it None for {category}"
        )
    if hops is None:
        values: tuple = DEFAULT_HOPS
    elif _is_int(hops):
        values = (hops,)
    else:
        values = tuple(hops) if isinstance(hops, Sequence) and not isinstance(hops, str) else ()
    if (
        not values
        or len(set(values)) < len(values)
        or not all(_is_int(h) and h in HOPS for h in values)
    ):
        raise ValueError(
            f"{where}: hops must be one of {HOPS} or a sequence of distinct ones, got {hops!r}"
        )
    return num_tasks or DEFAULT_NUM_TASKS, values


def load_tasks(
    category: str,
    split: str,
    *,
    hops: int | Sequence[int] | None = None,
    seed: int = 0,
    num_tasks: int | None = None,
    **unknown_options: Any,
) -> list[Task]:
    """Make the synthetic tasks of one category and split.

    Args:
        category: ``"bridge"``, ``"comparison"`` or ``"math"``.
        split: ``"train"`` or ``"test"`` (disjoint questions and starting entities).
        hops: Bridge only: 2, 3 or 4, or a sequence of them (default ``(2, 3)``); the tasks of
            several hops are interleaved and ``num_tasks`` is shared evenly between them.
        seed: The world and the tasks; the same seed gives the same tasks, byte for byte.
        num_tasks: How many tasks (default 1,000); the first ``n`` tasks are the same for any
            larger ``num_tasks``.
        **unknown_options: Not accepted: any other option raises ``TypeError``.

    Returns:
        The tasks, ids ``syn-bridge-h2-000123``, ``syn-comparison-000123``, ``syn-math-000123``.

    Raises:
        TypeError: an unknown option, or a seed that is not an int.
        ValueError: a bad category, split, hops or num_tasks, or more tasks than exist.
    """
    count, hop_values = _checked(category, split, hops, seed, num_tasks, unknown_options)
    if category == "math":
        return _math_tasks(seed, split, count)
    world = build_world(seed)
    if category == "comparison":
        rng = random.Random(f"passkt-synthetic/{seed}/comparison/{split}")
        seen: set = set()
        makers = [_comparison_maker(world, rng, split, spec, seen) for spec in _COMPARISONS]
        return _round_robin(makers, count, f"comparison/{split}")
    groups = []
    for i, h in enumerate(hop_values):  # one stream per hops: ids do not depend on the others
        rng = random.Random(f"passkt-synthetic/{seed}/bridge/{split}/h{h}")
        makers = [_bridge_maker(world, rng, split, t) for t in bridge_templates(h)]
        wanted = count // len(hop_values) + (i < count % len(hop_values))
        groups.append(_round_robin(makers, wanted, f"bridge/{split} hops={h}"))
    return [g[i] for i in range(len(groups[0])) for g in groups if i < len(g)]
