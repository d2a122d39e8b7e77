"""Tests for the real-data task sources: hotpotqa, math500, gsm8k."""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from real_data import DATA as DATA_DIR

from passkt.envs.errors import DatasetFormatError, MissingDependencyError
from passkt.envs.scoring import number_equal
from passkt.envs.sources import hotpotqa
from passkt.envs.sources.hotpotqa import is_test_id, load_tasks, order_bridge_titles
from passkt.envs.sources.math_data import load_gsm8k, load_math500
from passkt.envs.tasks import Paragraph
from passkt.envs.tasks import load_tasks as load_registered

SUBSET = DATA_DIR / "hotpotqa_dev_distractor_subset.json"
HERE = Path(__file__).resolve().parent
SAMPLE = DATA_DIR / "hotpotqa_sample.json"
MATH500 = DATA_DIR / "math500.jsonl"
GSM8K = DATA_DIR / "gsm8k_sample.jsonl"


@pytest.fixture(scope="module")
def subset_records() -> list[dict[str, Any]]:
    return json.loads(SUBSET.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def subset_tasks() -> dict[tuple[str, str], list]:
    path = SUBSET
    return {
        (category, split): load_tasks(category, split, path=path)
        for category in ("bridge", "comparison")
        for split in ("train", "test")
    }


def _to_hf_layout(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["_id"],
        "question": record["question"],
        "answer": record["answer"],
        "type": record["type"],
        "level": record["level"],
        "supporting_facts": {
            "title": [title for title, _ in record["supporting_facts"]],
            "sent_id": [sent_id for _, sent_id in record["supporting_facts"]],
        },
        "context": {
            "title": [title for title, _ in record["context"]],
            "sentences": [sentences for _, sentences in record["context"]],
        },
    }


def _all(tasks: dict[tuple[str, str], list], category: str) -> list:
    return tasks[(category, "train")] + tasks[(category, "test")]


# --- HotpotQA: counts, content, layouts -----------------------------------------------------


def test_subset_counts_per_type(subset_tasks: dict) -> None:
    assert len(_all(subset_tasks, "bridge")) == 402
    assert len(_all(subset_tasks, "comparison")) == 85


def test_sample_counts_per_type() -> None:
    path = SAMPLE
    counts = {
        category: sum(len(load_tasks(category, split, path=path)) for split in ("train", "test"))
        for category in ("bridge", "comparison")
    }
    assert counts == {"bridge": 39, "comparison": 14}


def test_tasks_carry_the_record_content(subset_records: list, subset_tasks: dict) -> None:
    by_id = {record["_id"]: record for record in subset_records}
    for (category, split), tasks in subset_tasks.items():
        for task in tasks:
            record = by_id[task.task_id]
            assert (task.category, task.split, task.source) == (category, split, "hotpotqa")
            assert record["type"] == category
            assert (task.question, task.answer, task.answer_type) == (
                record["question"],
                record["answer"],
                "text",
            )
            assert task.paragraphs == tuple(
                Paragraph(title, "".join(sentences)) for title, sentences in record["context"]
            )
            gold = {title for title, _ in record["supporting_facts"]}
            assert set(task.gold_titles) == gold and len(task.gold_titles) == len(gold)
            assert task.gold_queries == task.gold_titles
            assert task.depth == len(gold) == 2
            assert task.metadata["level"] == record["level"]


def test_paragraph_text_keeps_the_official_leading_spaces(subset_tasks: dict) -> None:
    # Official sentences after the first start with a space; joining with "" keeps one space.
    task = next(
        t for t in _all(subset_tasks, "comparison") if t.task_id == "5a8b57f25542995d1e6f1371"
    )
    text = dict((p.title, p.text) for p in task.paragraphs)["Ed Wood (film)"]
    assert "Ed Wood. The film concerns" in text
    assert "  " not in text and not text.startswith(" ")


def test_comparison_gold_order_is_supporting_fact_order(subset_records: list) -> None:
    path = SUBSET
    tasks = load_tasks("comparison", "test", path=path) + load_tasks(
        "comparison", "train", path=path
    )
    by_id = {record["_id"]: record for record in subset_records}
    for task in tasks:
        facts = by_id[task.task_id]["supporting_facts"]
        assert task.gold_titles == tuple(dict.fromkeys(title for title, _ in facts))


def test_hf_layout_json_and_jsonl_give_identical_tasks(
    subset_records: list, subset_tasks: dict, tmp_path: Path
) -> None:
    hf_records = [_to_hf_layout(record) for record in subset_records]
    hf_json = tmp_path / "hf.json"
    hf_json.write_text(json.dumps(hf_records), encoding="utf-8")
    hf_jsonl = tmp_path / "hf.jsonl"
    hf_jsonl.write_text("\n".join(json.dumps(r) for r in hf_records) + "\n", encoding="utf-8")
    official_jsonl = tmp_path / "official.jsonl"
    official_jsonl.write_text("\n".join(json.dumps(r) for r in subset_records), encoding="utf-8")
    for path in (hf_json, hf_jsonl, official_jsonl):
        for (category, split), expected in subset_tasks.items():
            tasks = load_tasks(category, split, path=path)
            assert tasks == expected, (path.name, category, split)
            assert [t.metadata for t in tasks] == [t.metadata for t in expected]


def test_hub_dataset_goes_through_datasets(
    subset_records: list, subset_tasks: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []

    def fake_load_dataset(name: str, config: str | None, split: str) -> list[dict]:
        calls.append((name, config, split))
        return [_to_hf_layout(record) for record in subset_records]

    monkeypatch.setitem(
        sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset)
    )
    tasks = load_tasks("bridge", "test", dataset="hotpotqa/hotpot_qa")
    assert calls == [("hotpotqa/hotpot_qa", "distractor", "validation")]
    assert tasks == subset_tasks[("bridge", "test")]


def test_hub_dataset_without_datasets_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(MissingDependencyError, match=r"datasets.*passkt\[hub\]"):
        load_tasks("bridge", "test", dataset="hotpotqa/hotpot_qa")


def test_registry_loads_the_source(subset_tasks: dict) -> None:
    tasks = load_registered("hotpotqa", "bridge", "test", path=str(SUBSET))
    assert tasks == subset_tasks[("bridge", "test")]


# --- splits ---------------------------------------------------------------------------------


def test_splits_are_disjoint_complete_and_deterministic(subset_tasks: dict) -> None:
    path = SUBSET
    for category in ("bridge", "comparison"):
        train = {t.task_id for t in subset_tasks[(category, "train")]}
        test = {t.task_id for t in subset_tasks[(category, "test")]}
        assert not train & test
        assert load_tasks(category, "test", path=path) == subset_tasks[(category, "test")]
    n_test = sum(len(subset_tasks[(c, "test")]) for c in ("bridge", "comparison"))
    assert 0.25 < n_test / 487 < 0.42  # 1/3 expected; binomial sd is about 0.02


def test_split_is_stable_when_the_file_grows(subset_records: list, tmp_path: Path) -> None:
    small = tmp_path / "small.json"
    small.write_text(json.dumps(subset_records[:150]), encoding="utf-8")
    for split in ("train", "test"):
        grown = {t.task_id for t in load_tasks("bridge", split, path=SUBSET)}
        first = {t.task_id for t in load_tasks("bridge", split, path=small)}
        small_ids = {r["_id"] for r in subset_records[:150]}
        assert first == grown & small_ids


def test_test_fraction_extremes_and_limit() -> None:
    path = SUBSET
    assert load_tasks("comparison", "test", path=path, test_fraction=0.0) == []
    assert len(load_tasks("comparison", "train", path=path, test_fraction=0.0)) == 85
    assert len(load_tasks("comparison", "test", path=path, test_fraction=1.0)) == 85
    limited = load_tasks("bridge", "train", path=path, limit=5)
    assert limited == load_tasks("bridge", "train", path=path)[:5]
    assert load_tasks("bridge", "train", path=path, limit=0) == []


def test_is_test_id_is_a_hash_threshold() -> None:
    ids = [f"id-{i}" for i in range(2000)]
    share = sum(is_test_id(i, 0.3) for i in ids) / len(ids)
    assert 0.26 < share < 0.34
    # monotone in the fraction: a test record stays test when the fraction grows
    assert all(is_test_id(i, 0.5) for i in ids if is_test_id(i, 0.3))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(split="dev"), "split must be 'train' or 'test'"),
        (dict(test_fraction=1.5), r"test_fraction must be in \[0, 1\]"),
        (dict(limit=-1), "limit must be None or an integer >= 0"),
        (dict(category="math"), "source='math500' or 'gsm8k'"),
    ],
)
def test_bad_options(kwargs: dict, match: str) -> None:
    args = {"category": "bridge", "split": "test", "path": SAMPLE} | kwargs
    with pytest.raises(ValueError, match=match):
        load_tasks(**args)


def test_path_or_dataset_is_required() -> None:
    with pytest.raises(ValueError, match=r"Pass exactly one of path=.*dataset=.*got neither"):
        load_tasks("bridge", "test")
    with pytest.raises(ValueError, match="got both"):
        load_tasks("bridge", "test", path="x.json", dataset="hotpotqa/hotpot_qa")


def test_missing_file_names_the_path_and_a_hint(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match=r"nope\.json.*hotpotqa\.github\.io"):
        load_tasks("bridge", "test", path=missing)


# --- bridge ordering rule -------------------------------------------------------------------


def test_order_rule_unit_cases() -> None:
    texts = {
        "Kiss and Tell (1945 film)": "A film starring Shirley Temple as Corliss Archer.",
        "Shirley Temple": "Shirley Temple Black was an actress and diplomat.",
    }
    titles = ("Shirley Temple", "Kiss and Tell (1945 film)")
    question = "What post did the woman who played Corliss Archer in Kiss and Tell hold?"
    assert order_bridge_titles(question, titles, texts) == (
        ("Kiss and Tell (1945 film)", "Shirley Temple"),
        "mention",
    )
    neither = {"A": "alpha text", "B": "beta text"}
    assert order_bridge_titles("Where is B from?", ("A", "B"), neither) == (("B", "A"), "question")
    assert order_bridge_titles("Where?", ("A", "B"), neither) == (("A", "B"), "supporting_facts")
    both = {"A": "about B", "B": "about A"}
    assert order_bridge_titles("Is A older?", ("B", "A"), both) == (("A", "B"), "question")
    # whole words only, HTML entities unescaped
    partial = {"Art": "Artists paint.", "I&quot;s": 'a manga called I"s', "X": "nothing"}
    assert order_bridge_titles("?", ("X", "Art"), partial)[1] == "supporting_facts"
    assert order_bridge_titles("?", ("X", "I&quot;s"), {**partial, "X": 'see I"s'})[0][0] == "X"


def test_bridge_order_on_the_real_data(subset_tasks: dict, record_property: Any) -> None:
    # Each task's order satisfies the step its metadata names; the answer's title is never
    # searched before the last hop (15 of 402 tasks were, before the answer steps).
    tasks = _all(subset_tasks, "bridge")
    rules: dict[str, int] = {}
    for task in tasks:
        texts = {p.title: p.text for p in task.paragraphs}
        first, second = task.gold_titles
        answer = hotpotqa._answer_name(task.answer)
        rule = task.metadata["gold_order_rule"]
        rules[rule] = rules.get(rule, 0) + 1
        assert hotpotqa._name(first) != answer.lower(), f"{task.task_id}: answer searched first"
        if rule == "answer_title":
            assert hotpotqa._name(second) == answer.lower()
        elif rule == "answer":
            assert hotpotqa._mentions(texts[second], answer), task.task_id
            assert not hotpotqa._mentions(texts[first], answer), task.task_id
            assert not hotpotqa._mentions(task.question, second), task.task_id
        elif rule == "mention":
            assert hotpotqa._mentions(texts[first], second), task.task_id
            assert not hotpotqa._mentions(texts[second], first), task.task_id
        elif rule == "question":
            assert hotpotqa._mentions(task.question, first), task.task_id
            assert not hotpotqa._mentions(task.question, second), task.task_id
        else:
            assert rule == "supporting_facts", rule
    record_property("bridge_order_rules", rules)
    # 402 bridge records: answer 246, answer_title 82, mention 54, question 11, facts 9.
    assert rules["answer"] + rules["answer_title"] > 300, rules


def test_bridge_order_agrees_with_the_hand_labels(subset_tasks: dict, record_property: Any) -> None:
    # 40 tasks ordered by reading them (tests/envs/data/bridge_order_labels.json, drawn with a
    # seed; benchmarks/bridge_order.py). The rule without the answer steps agreed on 36, the
    # supporting-fact order on 36.
    labels = json.loads((HERE / "data" / "bridge_order_labels.json").read_text(encoding="utf-8"))
    by_id = {task.task_id: task for task in _all(subset_tasks, "bridge")}
    agree = sum(
        label["order"] is None or list(by_id[label["id"]].gold_titles) == label["order"]
        for label in labels["labels"]
    )
    record_property("bridge_order_hand_agreement", agree)
    assert (agree, len(labels["labels"])) == (39, 40)


def test_the_answer_steps_put_the_answer_last() -> None:
    texts = {
        "Hal Moore": "A general who received the Cross.",
        "Julia Compton Moore": "The wife of Hal Moore.",
    }
    titles = ("Julia Compton Moore", "Hal Moore")
    question = "Who was the wife of the general who received the Cross?"
    assert order_bridge_titles(question, titles, texts) == (titles, "mention")  # reversed
    assert order_bridge_titles(question, titles, texts, "Julia Compton Moore") == (
        ("Hal Moore", "Julia Compton Moore"),
        "answer_title",
    )
    texts = {
        "List": "Drivers: Pedro Rodríguez won; Pérez reached the podium.",
        "Pérez": "Born 1990.",
    }
    question = "Which other driver has held the podium besides the one born in 1990?"
    assert order_bridge_titles(question, ("List", "Pérez"), texts, "Pedro Rodríguez.") == (
        ("Pérez", "List"),
        "answer",
    )
    # The question names the paragraph holding the answer: the solver may start there.
    texts = {"Hoodlum": "Luciano (Andy García) appears.", "Luciano": "A crime boss."}
    question = "Who played the crime boss in Hoodlum?"
    assert order_bridge_titles(question, ("Luciano", "Hoodlum"), texts, "Andy García") == (
        ("Hoodlum", "Luciano"),
        "mention",
    )


# --- HotpotQA: broken files -----------------------------------------------------------------


def _good_record(record_id: str = "abc") -> dict[str, Any]:
    return {
        "_id": record_id,
        "answer": "Paris",
        "question": "Where is the Louvre?",
        "supporting_facts": [["Louvre", 0], ["Paris", 0]],
        "context": [["Louvre", ["The Louvre is in Paris.", " It is big."]], ["Paris", ["Paris."]]],
        "type": "bridge",
        "level": "hard",
    }


def _broken(**changes: Any) -> dict[str, Any]:
    record = _good_record("bad1")
    for key, value in changes.items():
        if value is None:
            del record[key]
        else:
            record[key] = value
    return record


@pytest.mark.parametrize(
    ("record", "key", "problem"),
    [
        (_broken(question=None), "question", "missing key"),
        (_broken(answer=42), "answer", "expected str, got int"),
        (_broken(answer=""), "answer", "empty after HotpotQA normalization"),
        (_broken(answer=" The ."), "answer", "empty after HotpotQA normalization"),
        (
            _broken(context={"title": ["Louvre"], "sentences": [[], []]}),
            "context",
            "1 titles but 2",
        ),
        (_broken(context=[["Louvre", "The Louvre."], ["Paris", []]]), "context", "sentences must"),
        (_broken(context=[["Louvre", ["ok", 7]], ["Paris", []]]), "context", "not a string"),
        (_broken(context=[["Louvre"]]), "context", r"paragraph 0 is not a \[title, sentences\]"),
        (_broken(supporting_facts=[["Eiffel", 0]]), "supporting_facts", "'Eiffel' is not a"),
        (_broken(supporting_facts=[["Louvre", "0"]]), "supporting_facts", "not a .title, sent_id"),
        (_broken(supporting_facts=[]), "supporting_facts", "empty"),
        (_broken(type="multi"), "type", "'multi' is not one of"),
        (_broken(context={"sentences": []}), "context.title", "missing key"),
    ],
)
def test_broken_record_names_file_record_and_key(
    record: dict, key: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "broken_hotpot.json"
    path.write_text(json.dumps([_good_record(), record]), encoding="utf-8")
    pattern = rf"broken_hotpot\.json: record 1 \(_id 'bad1'\): key '{re.escape(key)}': .*{problem}"
    with pytest.raises(DatasetFormatError, match=pattern) as info:
        load_tasks("bridge", "test", path=path, test_fraction=1.0)
    assert info.value.key == key


def test_broken_files_without_ids(tmp_path: Path) -> None:
    path = tmp_path / "noid.jsonl"
    path.write_text(json.dumps(_good_record()) + "\n\n" + json.dumps(_broken(_id=None)) + "\n")
    with pytest.raises(DatasetFormatError, match=r"noid\.jsonl: record 1 \(line 3\): key '_id'"):
        load_tasks("bridge", "test", path=path)
    path.write_text(json.dumps(_good_record()) + "\n{not json\n")
    with pytest.raises(DatasetFormatError, match=r"noid\.jsonl: record 1 \(line 2\).*invalid JSON"):
        load_tasks("bridge", "test", path=path)
    path.write_text('[{"_id": "a"}, 7]')
    with pytest.raises(DatasetFormatError, match=r"record 0 \(_id 'a'\): key 'question'"):
        load_tasks("bridge", "test", path=path)
    path.write_text("[7]")
    with pytest.raises(DatasetFormatError, match=r"record 0: key '\(record\)'.*got int"):
        load_tasks("bridge", "test", path=path)
    path.write_text("[1, 2")
    with pytest.raises(DatasetFormatError, match=r"noid\.jsonl: record \(file\).*invalid JSON"):
        load_tasks("bridge", "test", path=path)


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([_good_record("same"), _good_record("same")]))
    with pytest.raises(DatasetFormatError, match=r"dup\.json: record 1: key '_id': duplicate"):
        load_tasks("bridge", "test", path=path)


# --- MATH-500 and GSM8K ---------------------------------------------------------------------


def test_math500_loads_every_problem_once() -> None:
    path = MATH500
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    train, test = (load_math500("math", split, path=path) for split in ("train", "test"))
    assert len(train) + len(test) == 500
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    by_id = {row["unique_id"]: row for row in rows}
    for task in train + test:
        row = by_id[task.task_id]
        assert (task.question, task.answer, task.answer_type) == (
            row["problem"],
            row["answer"],
            "math",
        )
        assert (task.category, task.depth, task.paragraphs, task.source) == (
            "math",
            0,
            (),
            "math500",
        )
        assert task.metadata["subject"] == row["subject"]
    assert load_math500("math", "test", path=path, limit=3) == test[:3]


def test_gsm8k_answers_are_the_final_numbers() -> None:
    path = GSM8K
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    train, test = (load_gsm8k("math", split, path=path) for split in ("train", "test"))
    assert len(train) + len(test) == 50
    tasks = sorted(train + test, key=lambda t: int(t.task_id.removeprefix("gsm8k-")))
    assert [t.task_id for t in tasks] == [f"gsm8k-{i}" for i in range(50)]
    for task, row in zip(tasks, rows, strict=True):
        assert task.question == row["question"] and task.answer_type == "number"
        assert re.fullmatch(r"-?\d+(\.\d+)?", task.answer), task.answer
        last_line = row["answer"].splitlines()[-1]
        assert last_line.startswith("####") and number_equal(last_line, task.answer)
        assert "####" not in task.metadata["solution"]


def test_gsm8k_commas_are_removed(tmp_path: Path) -> None:
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "work\n#### 1,234"}) + "\n")
    assert load_gsm8k("math", "train", path=path, test_fraction=0.0)[0].answer == "1234"


@pytest.mark.parametrize(
    ("loader", "record", "key", "problem"),
    [
        (load_math500, {"problem": "p", "unique_id": "u1"}, "answer", "missing key"),
        (load_math500, {"problem": "p", "answer": " ", "unique_id": "u1"}, "answer", "empty"),
        (load_math500, {"problem": 3, "answer": "1", "unique_id": "u1"}, "problem", "got int"),
        (load_gsm8k, {"question": "q", "answer": "42"}, "answer", "no '####' found"),
        (load_gsm8k, {"question": "q", "answer": "x\n#### forty"}, "answer", "'forty'"),
        (load_gsm8k, {"answer": "#### 1"}, "question", "missing key"),
    ],
)
def test_broken_math_files(
    loader: Any, record: dict, key: str, problem: str, tmp_path: Path
) -> None:
    path = tmp_path / "broken_math.jsonl"
    good = {"problem": "p", "question": "q", "answer": "#### 1", "unique_id": "u0"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(DatasetFormatError, match=r"broken_math\.jsonl: record 1 \(line 2"):
        loader("math", "test", path=path)
    with pytest.raises(DatasetFormatError, match=rf"key '{key}': .*{problem}"):
        loader("math", "test", path=path)


def test_math_sources_reject_other_categories_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"only has the category 'math'.*'bridge'"):
        load_math500("bridge", "test", path=tmp_path / "x.jsonl")
    with pytest.raises(FileNotFoundError, match=r"x\.jsonl.*openai/grade-school-math"):
        load_gsm8k("math", "test", path=tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match=r"path=.*dataset="):
        load_math500("math", "test")
