"""Fact-disjoint splits: no evaluation problem asks a fact that a fine-tuning problem asks.

Generated over every task of the synthetic sources' splits (not hand-picked examples): the
overlap levels agree with direct counts, and the study's split stage with ``fact_disjoint``
leaves zero shared facts (this test fails on any).
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.study.facts import LEVELS, asked_facts, chain_entities, overlap, question_entities
from passkt.study.profile import DEFAULTS, StudyError
from passkt.study.stages import Study, make_splits

ENVS = ["BridgeQA-v0", "ComparisonQA-v0", "Math-v0"]


def _tasks(env_id, split, **kwargs):
    return list(gym.make(env_id, split=split, **kwargs).unwrapped.tasks)


@pytest.mark.parametrize("env_id", ENVS)
def test_overlap_levels_are_direct_counts_over_every_task(env_id):
    test, train = _tasks(env_id, "test"), _tasks(env_id, "train")[:200]
    found = overlap(test, train)
    facts = set().union(*(asked_facts(t) for t in train))
    chains = set().union(*(chain_entities(t) for t in train))
    named = set().union(*(question_entities(t) for t in train))
    answers = {t.answer.strip().lower() for t in train}
    direct = {
        "fact": sum(bool(asked_facts(t) & facts) for t in test),
        "chain": sum(bool(chain_entities(t) & chains) for t in test),
        "question": sum(bool(question_entities(t) & named) for t in test),
        "answer": sum(t.answer.strip().lower() in answers for t in test),
    }
    assert found == {level: direct[level] / len(test) for level in LEVELS}
    for task in test:
        assert asked_facts(task) and all(
            str(task.answer).strip().lower() in f for f in asked_facts(task)
        )


def test_a_bridge_fact_is_the_last_entity_its_attribute_and_the_answer():
    for task in _tasks("BridgeQA-v0", "test"):
        (fact,) = asked_facts(task)
        assert fact == (task.gold_titles[-1], task.metadata["final"], task.answer.strip().lower())


def _study(tmp_path, limit_eval, fact_disjoint=True):
    profile = {
        **DEFAULTS,
        "limit_eval": limit_eval,
        "limit_train": 200,
        "fact_disjoint": fact_disjoint,
    }
    return Study(tmp_path, profile, ["C"], [0])


def test_fact_disjoint_splits_share_no_fact_and_keep_the_eval_size(tmp_path):
    study = _study(tmp_path, 300)
    made = make_splits(study, "C")
    assert made["eval"] == 300 and made["fact_disjoint"]
    by_id = {t.task_id: t for t in _tasks("BridgeQA-v0", "test")}
    train_ids = (tmp_path / "splits" / "C" / "train.txt").read_text().split()
    eval_ids = (tmp_path / "splits" / "C" / "eval.txt").read_text().split()
    train = [t for t in _tasks("BridgeQA-v0", "train") if t.task_id in set(train_ids)]
    shared = overlap([by_id[i] for i in eval_ids], train)
    assert shared["fact"] == 0.0
    plain = _study(tmp_path / "plain", 300, fact_disjoint=False)
    make_splits(plain, "C")
    plain_ids = (tmp_path / "plain" / "splits" / "C" / "eval.txt").read_text().split()
    assert overlap([by_id[i] for i in plain_ids], train)["fact"] > 0.3  # what it removes


def test_too_few_fact_disjoint_problems_is_one_clear_error(tmp_path):
    with pytest.raises(StudyError, match="that ask no fine-tuning fact, fewer than limit_eval"):
        make_splits(_study(tmp_path, 999), "C")


@pytest.mark.parametrize("name", ["calibrated"])
def test_a_shipped_fact_disjoint_profile_asks_no_fine_tuning_fact(tmp_path, name):
    """The study profiles that promise fact-disjoint splits keep it on their real splits: no
    evaluation or calibration problem asks a fact a fine-tuning problem asks, and no calibration
    problem one an evaluation problem asks."""
    from passkt.study.pipeline import run, study_at

    out = tmp_path / name
    run(["splits", "--out", str(out), "--profile", name])
    study = study_at(out, None)
    assert study.profile["fact_disjoint"]
    for cat in study.categories:
        env_id, kwargs = study.env(cat)
        by_split = {
            split: {t.task_id: t for t in _tasks(env_id, split, **kwargs)}
            for split in ("test", "train")
        }
        parts = {
            part: [by_split[split][i] for i in study.task_ids(cat, part)]
            for part, split in (("eval", "test"), ("calibration", "test"), ("train", "train"))
        }
        assert overlap(parts["eval"], parts["train"])["fact"] == 0.0
        assert overlap(parts["calibration"], parts["train"] + parts["eval"])["fact"] == 0.0
