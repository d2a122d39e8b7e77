"""Real data through ``datasets`` without network: hub-layout and saved folders, offline errors.

The hub itself cannot be reached here, so the hub's formats are made locally with ``datasets``'
own writers: a dataset repository's layout (parquet files per config and split, the configs in
its README.md), read by the same ``load_dataset`` call a hub name goes through, and
``save_to_disk`` folders. A hub name that is not cached fails with the one-line error that says
how to get it onto an offline machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from real_data import DATA

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.sources.hotpotqa import load_tasks
from passkt.envs.sources.math_data import load_gsm8k, load_math500
from passkt.envs.sources.records import is_hub_name

datasets = pytest.importorskip("datasets", reason="the hub extra: pip install 'passkt[hub]'")

HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"


def _hf_layout(record: dict) -> dict:
    """An official HotpotQA record in the hub dataset's columns."""
    facts, context = record["supporting_facts"], record["context"]
    return {
        "id": record["_id"],
        "question": record["question"],
        "answer": record["answer"],
        "type": record["type"],
        "level": record["level"],
        "supporting_facts": {"title": [t for t, _ in facts], "sent_id": [i for _, i in facts]},
        "context": {"title": [t for t, _ in context], "sentences": [s for _, s in context]},
    }


def _hub_repository(root: Path, config: str, split: str, rows: list[dict]) -> Path:
    """A dataset repository as the hub lays it out: ``<config>/<split>-*.parquet`` + README."""
    (root / config).mkdir(parents=True)
    datasets.Dataset.from_list(rows).to_parquet(
        str(root / config / f"{split}-00000-of-00001.parquet")
    )
    (root / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: {split}\n"
        f"    path: {config}/{split}-*\n---\n",
        encoding="utf-8",
    )
    return root


def test_hub_names_are_told_from_files(tmp_path: Path) -> None:
    assert is_hub_name("hotpotqa/hotpot_qa") and is_hub_name("HuggingFaceH4/MATH-500")
    assert not is_hub_name("data/hotpot_dev.json")  # a missing file stays a missing file
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_text("[]")
    assert not is_hub_name(tmp_path / "org" / "name")  # exists: a local file
    with pytest.raises(FileNotFoundError, match=r"hotpot_dev\.json.*hotpotqa\.github\.io"):
        load_tasks("bridge", "test", path="data/hotpot_dev.json")


def test_hotpotqa_in_the_hub_layout_loads_like_the_official_file(tmp_path: Path) -> None:
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))[:60]
    official = tmp_path / "dev.json"
    official.write_text(json.dumps(records), encoding="utf-8")
    repo = _hub_repository(
        tmp_path / "hotpot_qa", "distractor", "validation", [_hf_layout(r) for r in records]
    )
    for category in ("bridge", "comparison"):
        for split in ("train", "test"):
            expected = load_tasks(category, split, path=official, test_fraction=0.5)
            got = load_tasks(category, split, path=str(repo), test_fraction=0.5)
            assert got == expected and got, (category, split)
            assert [t.metadata for t in got] == [t.metadata for t in expected]
    plain = tmp_path / "plain"  # data files alone, no README: datasets' "default" config
    plain.mkdir()
    (repo / "distractor" / "validation-00000-of-00001.parquet").rename(plain / "validation.parquet")
    expected = load_tasks("bridge", "test", path=official, test_fraction=0.5)
    assert load_tasks("bridge", "test", path=str(plain), test_fraction=0.5) == expected
    env = gym.make("BridgeQA-v0", source="hotpotqa", path=str(plain), split="test")
    assert env.unwrapped.tasks[0].source == "hotpotqa"
    with pytest.raises(ValueError, match="Unknown split"):
        load_tasks("bridge", "test", path=str(plain), hf_split="train")


def test_math_sources_read_saved_datasets(tmp_path: Path) -> None:
    math500 = DATA / "math500.jsonl"
    gsm8k = DATA / "gsm8k_sample.jsonl"
    rows = [json.loads(line) for line in math500.read_text(encoding="utf-8").splitlines()[:40]]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(tmp_path / "m")
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    for split in ("train", "test"):
        expected = load_math500("math", split, path=tmp_path / "m.jsonl")
        assert load_math500("math", split, path=str(tmp_path / "m")) == expected
    with pytest.raises(ValueError, match=r"no split 'validation'.*test"):
        load_math500("math", "test", path=str(tmp_path / "m"), hf_split="validation")
    rows = [json.loads(line) for line in gsm8k.read_text(encoding="utf-8").splitlines()]
    datasets.Dataset.from_list(rows).save_to_disk(tmp_path / "g")
    expected = load_gsm8k("math", "test", path=gsm8k)
    assert load_gsm8k("math", "test", path=str(tmp_path / "g")) == expected and expected


@pytest.mark.slow
def test_hub_names_offline_fail_with_a_way_to_get_them(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env["HF_DATASETS_OFFLINE"] = "1"
    for source, name in (
        ("hotpotqa", "hotpotqa/hotpot_qa"),
        ("math500", "HuggingFaceH4/MATH-500"),
        ("gsm8k", "openai/gsm8k"),
    ):
        out = tmp_path / source
        env_id = "BridgeQA-v0" if source == "hotpotqa" else "Math-v0"
        done = subprocess.run(
            [sys.executable, "-m", "passkt.eval.cli", "eval", "--env", env_id, "--env-kwargs",
             f"source={source},path={name}", "--policy", "scripted:heuristic", "--out", str(out)],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr[-2000:]
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert lines[0].startswith(
            f"passkt: error: Could not load the Hugging Face dataset {name!r}"
        )
        assert "HF_DATASETS_OFFLINE=1" in lines[0] and "save_to_disk" in lines[0]
        assert not out.exists()
