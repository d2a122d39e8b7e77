"""passkt.study.calibration_curve: snapshots of a pretraining run, evaluated per step."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from passkt.study import calibration_curve


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cal") / "base"
    command = [
        sys.executable, "-m", "passkt", "--threads", "1", "testbed", "pretrain",
        "--size", "nano", "--max-steps", "4", "--save-every", "2", "--episodes-per-category", "24",
        "--block-size", "128", "--paragraph-repeats", "1", "--no-progress", "--out", str(out),
    ]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True)
    return out


def test_a_checkpoint_replaced_while_copied_is_not_kept(pretrained, tmp_path):
    source = tmp_path / "checkpoint"
    shutil.copytree(pretrained / "model", source)
    (source / "state.json").write_text(json.dumps({"step": 500}))
    assert not calibration_curve._snapshot(source, tmp_path / "model-250", 250)
    assert not (tmp_path / "model-250").exists()
    assert not (tmp_path / "model-250.partial").exists()
    config = pretrained / "pretrain_config.json"
    assert calibration_curve._snapshot(source, tmp_path / "model-500", 500, config)
    assert (tmp_path / "model-500" / "config.json").exists()
    kept = json.loads((tmp_path / "model-500" / "pretrain_config.json").read_text())
    assert kept == json.loads(config.read_text()) and kept["max_steps"] == 4  # its recipe


@pytest.mark.slow
def test_the_final_model_is_evaluated_once_with_its_intervals(pretrained, tmp_path):
    args = [str(pretrained), "--out", str(tmp_path / "cal"), "--n", "2", "--limit", "3"]
    args += ["--categories", "C,A", "--every", "1000", "--poll", "0.1"]
    assert calibration_curve.main(args) == 0
    rows = [json.loads(x) for x in (tmp_path / "cal" / "curve.jsonl").read_text().splitlines()]
    assert [(r["step"], r["category"]) for r in rows] == [("final", "C"), ("final", "A")]
    for r in rows:
        for value, lower, upper in (r["pass1"], r["pass_n"]):
            assert 0.0 <= lower <= value <= upper <= 1.0
        assert r["pass_n"][0] >= r["pass1"][0]
        manifest = json.loads(
            (tmp_path / "cal" / f"eval-final-{r['category']}" / "manifest.json").read_text()
        )
        assert manifest["n"] == 2 and len(manifest["task_ids"]) == 3
    assert {
        m["env_id"]
        for m in (
            json.loads((tmp_path / "cal" / f"eval-final-{c}" / "manifest.json").read_text())
            for c in "CA"
        )
    } == {"BridgeQA-v0", "Math-v0"}
    table = (tmp_path / "cal" / "curve.md").read_text()
    assert table.count("| final |") == 2
    assert calibration_curve.main(args) == 0  # done: nothing evaluated again
    assert len((tmp_path / "cal" / "curve.jsonl").read_text().splitlines()) == 2


def test_unknown_category_is_refused(pretrained, tmp_path, capsys):
    with pytest.raises(SystemExit):
        calibration_curve.main([str(pretrained), "--out", str(tmp_path), "--categories", "D"])
    assert "unknown ['D']" in capsys.readouterr().err
