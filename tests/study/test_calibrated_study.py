"""A calibrated study end to end (``[calibrate]``): the calibration split, the chosen bases used
by every later stage, the summary's regime and design tables, export and restore."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from passkt.cli import main as passkt
from passkt.envs.contract import task_records
from passkt.eval.evaluate import env_info
from passkt.study import pipeline as study
from passkt.study.facts import asked_facts
from passkt.study.profile import StudyError

pytestmark = pytest.mark.slow

SLICE = [
    "--profile", "tiny", "--limit-eval", "3", "--limit-train", "4", "--n", "2",
    "--set", "categories=['A', 'C']", "--set", "seeds=[0, 1]", "--set", "base.per_seed=true",
    "--set", "fact_disjoint=true",
    "--set", "base.pretrain.max_steps=20", "--set", "base.pretrain.save_every=5",
    "--set", "base.pretrain.episodes_per_category=24", "--set", "base.pretrain.block_size=128",
    "--set", "base.pretrain.paragraph_repeats=1", "--set", "base.pretrain.progress=false",
    "--set", "eval.chunk_tasks=1", "--set", "eval.base_repeats=1",
    "--set", "grpo.max_steps=1", "--set", "grpo.tasks_per_step=2", "--set", "grpo.group_size=2",
    "--set", "sft.max_steps=1", "--set", "sft.batch_size=2", "--set", "stats.n_boot=20",
    "--set", "analyze.perplexity_of=['RL']",
    "--set", "calibrate.every=5", "--set", "calibrate.from_step=10", "--set", "calibrate.n=2",
    "--set", "calibrate.limit=4", "--set", "post_hoc=['the SFT rate, after its trial']",
    "--set", "targets.A={pass_n = [0.0, 0.5]}",
    "--set", "targets.C={pass1 = [0.3, 0.4], pass_n = [0.0, 0.5]}",
]  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrated") / "study"
    study.run(["all", "--out", str(out), *SLICE, "--jobs", "2"])
    return out


def _ids(path: Path) -> list[str]:
    return path.read_text().split()


def test_the_calibration_split_shares_nothing_with_evaluation_or_fine_tuning(finished):
    for cat, env_id, kwargs in (("A", "Math-v0", {}), ("C", "BridgeQA-v0", {"hops": [2, 3]})):
        parts = {p: _ids(finished / "splits" / cat / f"{p}.txt") for p in
                 ("eval", "train", "calibration")}  # fmt: skip
        assert len(parts["calibration"]) == 4
        by_split = {
            split: {t.task_id: t for t in task_records(env_info(env_id, kwargs, split).contract,
                                                       split, None)}
            for split in ("test", "train")
        }  # fmt: skip
        tasks = {
            "eval": [by_split["test"][i] for i in parts["eval"]],
            "calibration": [by_split["test"][i] for i in parts["calibration"]],
            "train": [by_split["train"][i] for i in parts["train"]],
        }
        cal = tasks["calibration"]
        assert not set(parts["calibration"]) & set(parts["eval"])
        for other in ("eval", "train"):
            assert not {t.question for t in cal} & {t.question for t in tasks[other]}
            facts = set().union(*(asked_facts(t) for t in tasks[other]))
            assert not any(asked_facts(t) & facts for t in cal)


def test_every_stage_uses_the_base_the_rule_chose_for_its_category(finished):
    for seed, folder in ((0, "base"), (1, "base-p1")):
        done = json.loads((finished / folder / "done.json").read_text())
        rows = [json.loads(x) for x in (finished / folder / "calibration.jsonl").read_text()
                .splitlines()]  # fmt: skip
        for cat in ("A", "C"):
            chosen = done["calibrated"][cat]
            assert chosen["step"] in [r["step"] for r in rows if r["category"] == cat]
            model = (finished / chosen["model"]).resolve()
            assert model.parent.name == "steps" and (model / "config.json").is_file()
            manifest = json.loads((finished / "eval" / cat / folder / "manifest.json").read_text())
            assert manifest["policy"] == f"lean:{model}"
            for method in ("sft", "grpo"):
                trained = json.loads(
                    (finished / "train" / method / cat / f"seed{seed}" / "done.json").read_text()
                )
                assert trained["config"]["policy"] == f"lean:{chosen['model']}"
                assert trained["config"]["task_ids"] == _ids(
                    finished / "splits" / cat / "train.txt"
                )


def test_the_summary_shows_each_base_against_the_regime_and_the_design(finished):
    text = (finished / "report" / "summary.md").read_text()
    assert text.count("**Bases against the regime**") == 2
    assert text.count("| base seed 0 |") == 2 and text.count("| base seed 1 |") == 2
    assert "## Design" in text and "| RL-s1 |" in text and "| SFT-s0 |" in text
    assert "Choices made after reading data: the SFT rate, after its trial." in text
    assert (finished / "report" / "figures" / "calibration-C.png").is_file()


def test_export_keeps_the_chosen_steps_and_the_summary_is_remade_from_data(finished, tmp_path):
    to = tmp_path / "results"
    assert passkt(["study", "export", str(finished), "--to", str(to)]) == 0
    state = to / "state"
    for folder in ("base", "base-p1"):
        done = json.loads((finished / folder / "done.json").read_text())
        for chosen in done["calibrated"].values():
            assert (state / chosen["model"] / "model.safetensors").is_file()
        assert not (state / folder / "model").exists()
        assert (state / folder / "calibration.jsonl").is_file()
    data_only = tmp_path / "copy"
    shutil.copytree(to / "data", data_only / "data")
    passkt(["study", "report", str(data_only)])
    passkt(["study", "report", str(to)])
    assert (data_only / "summary.md").read_text() == (to / "summary.md").read_text()
    assert "**Bases against the regime**" in (to / "summary.md").read_text()
    again = tmp_path / "again"
    passkt(["study", "restore", str(to), "--out", str(again)])
    ran = study.run(["base", "--out", str(again)]).ran["base"]
    assert ran == []  # the restored bases are finished: nothing pretrains again


def test_a_pretraining_cut_short_before_the_rule_decides_is_no_finished_base(tmp_path):
    out = tmp_path / "cut"
    cut = ["--set", "base.pretrain.max_minutes=0.0001", "--set", "seeds=[0]"]
    study.run(["splits", "--out", str(out), *SLICE, *cut])
    with pytest.raises(StudyError, match=r"stopped at step \d+ .*before the calibration"):
        study.run(["base", "--out", str(out)])
    assert not (out / "base" / "done.json").exists()
