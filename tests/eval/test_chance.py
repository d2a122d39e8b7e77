"""Chance floors: closed answer sets, the chance PASS@(k,T) and the boundary beyond chance."""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

import passkt.envs  # noqa: F401  (registers ComparisonQA-v0)
from passkt.agents.policy import Completion, SamplingParams
from passkt.envs.comparison_qa import answer_choices
from passkt.envs.scoring import normalize_answer
from passkt.envs.tasks import Task, load_tasks
from passkt.eval.chance import answer_set_sizes, benjamini_hochberg, binomial_tail, chance_floor
from passkt.eval.evaluate import evaluate
from passkt.eval.outcomes import OutcomeTable

HOTPOT = "tests/data/hotpotqa_dev_distractor_subset.json"


def test_binomial_tail_by_hand() -> None:
    # n = 3, p = 1/2: P(X >= 0..3) = 1, 7/8, 4/8, 1/8.
    np.testing.assert_allclose(binomial_tail(3, 0.5), [1, 7 / 8, 1 / 2, 1 / 8])
    np.testing.assert_allclose(binomial_tail(4, 0.0), [1, 0, 0, 0, 0])


def test_benjamini_hochberg_by_hand() -> None:
    # Sorted 0.001, 0.01, 0.03, 0.2 against 0.05 * (1, 2, 3, 4) / 4 = 0.0125, 0.025, 0.0375,
    # 0.05: the largest i with p_(i) <= threshold is 3, so the three smallest are rejected.
    rejected = benjamini_hochberg(np.array([0.03, 0.2, 0.001, 0.01]), 0.05)
    assert rejected.tolist() == [True, False, True, True]
    assert not benjamini_hochberg(np.array([0.04, 0.5]), 0.05).any()  # 0.04 > 0.025


@pytest.mark.parametrize("source, options", [("synthetic", {}), ("hotpotqa", {"path": HOTPOT})])
def test_declared_choices_hold_the_gold_answer(source: str, options: dict) -> None:
    """Every declared set holds the gold answer (so a uniform guess is right with 1/m), and an
    answer outside the two entities (a year, an alias) declares nothing."""
    tasks = load_tasks(source, "comparison", "test", **options)
    declared = 0
    for task in tasks:
        choices = answer_choices(task)
        gold = {normalize_answer(a) for a in task.answers}
        if choices is None:
            assert source == "hotpotqa" and not gold & {"yes", "no"}
            continue
        declared += 1
        assert len(choices) == 2 and gold & {normalize_answer(c) for c in choices}
    assert declared == len(tasks) if source == "synthetic" else 0 < declared < len(tasks)


def test_env_reports_choices_at_reset_and_the_run_reads_them() -> None:
    env = gym.make("ComparisonQA-v0", max_tool_calls=1)
    tasks = env.unwrapped.tasks[:5]
    for task in tasks:
        _, info = env.reset(options={"task_id": task.task_id})
        assert info["choices"] == answer_choices(task)
    ids = [t.task_id for t in tasks]
    assert answer_set_sizes("ComparisonQA-v0", {}, "test", ids) == dict.fromkeys(ids, 2)
    assert answer_set_sizes("BridgeQA-v0", {}, "test", ["syn-bridge-000000"]) == {}


def _table(counts: np.ndarray, n: int) -> OutcomeTable:
    """A table whose problem i has ``counts[i, j]`` successes at budget j."""
    correct = np.arange(n)[None, :, None] < counts[:, None, :]
    ids = tuple(f"t{i}" for i in range(len(counts)))
    return OutcomeTable(ids, tuple(range(counts.shape[1])), correct, name="hand")


def test_chance_floor_by_hand() -> None:
    """Problems with 2 choices, n = 10: 10/10 and 9/10 lie beyond chance, 6/10 does not; an
    open problem is beyond chance once solved; the chance pass@k averages 1 - (1/2)^k over the
    closed problems and 0 over the open one."""
    counts = np.array([[10], [9], [6], [0], [1]])
    sizes = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}  # t4 is open
    floor = chance_floor(_table(counts, 10), sizes, (1, 2, 10))
    assert floor is not None and floor.num_closed == 4
    np.testing.assert_allclose(floor.chance, [4 * (1 - 0.5**k) / 5 for k in (1, 2, 10)])
    # p-values 1/1024, 11/1024, 386/1024, (unsolved) 1, (open) 0. Sorted against BH's
    # 0.05 * i / 5 = 0.01, 0.02, 0.03, 0.04: 0, 0.00098, 0.0107 pass, 0.377 does not.
    assert floor.raw.tolist() == [4.0] and floor.beyond.tolist() == [3.0]
    assert floor.explained[0] == pytest.approx(0.25)
    assert floor.beyond_lower[0] <= 3 <= floor.beyond_upper[0]
    # 7/8 (p = 9/256 = 0.035) passes alone but not among five problems (BH threshold 0.03).
    seven = chance_floor(_table(np.array([[8], [7], [5], [0], [1]]), 8), sizes, (1,))
    assert seven.beyond.tolist() == [2.0]
    assert chance_floor(_table(counts, 10), {}, (1,)) is None  # nothing declared: no floor
    empty = chance_floor(_table(np.zeros((3, 1), dtype=int), 8), {"t0": 2}, (1,))
    assert math.isnan(empty.explained[0]) and "undefined" in empty.to_markdown()


class Guesser:
    """Answers at once with one of the question's declared choices, uniformly at random."""

    seeds_each_row = True

    def __init__(self, tasks: Sequence[Task]) -> None:
        self.tasks = [(t.question, answer_choices(t)) for t in tasks]

    def generate(self, conversations, params: SamplingParams) -> list[Completion]:
        out = []
        for row, conversation in enumerate(conversations):
            question = next(m["content"] for m in conversation if m["role"] == "user")
            choices = next(c for q, c in self.tasks if question.startswith(q))
            for j in range(params.n):
                rng = np.random.default_rng([params.seeds[row], j])
                out.append(Completion(f"<answer>{choices[rng.integers(len(choices))]}</answer>"))
        return out


def test_a_guessers_boundary_is_all_chance_and_an_oracles_is_not() -> None:
    """A uniform guesser on ComparisonQA-v0 solves nearly every problem at least once in 16
    samples, yet none beyond chance (0 inside its interval); per-problem tests without the
    false-discovery correction would list some. The oracle's boundary at T = 2 lies beyond
    chance almost entirely, so the test can tell the two apart."""
    tasks = gym.make("ComparisonQA-v0").unwrapped.tasks[:100]
    ids = [t.task_id for t in tasks]
    sizes = answer_set_sizes("ComparisonQA-v0", {}, "test", ids)
    guess = evaluate(
        "ComparisonQA-v0", Guesser(tasks), n=16, budgets=(0, 1), task_ids=ids, progress=False
    )
    floor = chance_floor(guess.outcomes, sizes, (1, 16))
    assert np.all(floor.raw >= 0.95 * len(ids))
    assert np.all(floor.beyond == 0) and np.all(floor.beyond_lower == 0)
    assert np.all(floor.beyond_upper > 0) and np.all(floor.explained == 1.0)
    tails = binomial_tail(16, 0.5)[guess.outcomes.counts()]
    assert (tails < 0.05).sum() > 0  # uncorrected tests would call some guesses skill
    oracle = evaluate(
        "ComparisonQA-v0", "scripted:oracle", n=16, budgets=(0, 2), task_ids=ids, progress=False
    )
    floor = chance_floor(oracle.outcomes, sizes, (1, 16))
    assert floor.beyond[1] >= 0.95 * len(ids) and floor.beyond[0] <= floor.raw[0]
