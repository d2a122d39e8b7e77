"""passkt.study.lr_trials: short trainer runs per learning rate, on the training split."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")


from passkt.study import lr_trials
from passkt.study import pipeline as study

BASE = [
    "--profile", "tiny", "--limit-eval", "3", "--limit-train", "6", "--categories", "C",
    "--set", "base.pretrain.max_steps=5", "--set", "base.pretrain.episodes_per_category=24",
    "--set", "base.pretrain.block_size=128", "--set", "base.pretrain.paragraph_repeats=1",
    "--set", "base.pretrain.progress=false", "--set", "sft.batch_size=6",
    "--set", "sft.micro_batch_size=6",
]  # fmt: skip


@pytest.fixture(scope="module")
def based(tmp_path_factory):
    out = tmp_path_factory.mktemp("lr") / "study"
    study.run(["base", "--out", str(out), *BASE])
    return out


@pytest.mark.slow
def test_a_larger_rate_fits_the_expert_data_faster(based, tmp_path, capsys):
    """SFT on the study's own training split: the same 8 steps lower the training NLL more at
    1e-2 than at 1e-5 (learning, measured on the training signal); each run trains the split's
    tasks and nothing of the evaluation split."""
    out = tmp_path / "trials"
    argv = [str(based), "--method", "sft", "--category", "C", "--lrs", "1e-5,1e-2"]
    argv += ["--max-steps", "8", "--window", "2", "--no-progress", "--out", str(out)]
    assert lr_trials.main(argv) == 0
    rows = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    slow, fast = rows
    assert (slow["lr"], fast["lr"]) == (1e-5, 1e-2) and slow["steps"] == fast["steps"] == 8
    assert fast["last"] < fast["first"] - 0.1  # it learned
    assert fast["last"] < slow["last"] - 0.1  # and faster than the tiny rate
    assert abs(slow["first"] - fast["first"]) < 0.5  # from the same base, on the same data
    config = json.loads((out / "lr0.01" / "checkpoint-8" / "trainer_state.json").read_text())
    train_ids = set((based / "splits" / "C" / "train.txt").read_text().split())
    assert set(config["config"]["task_ids"]) == train_ids
    assert config["config"]["learning_rate"] == 1e-2
    assert (out / "trials.png").stat().st_size > 0
    assert "| 0.01 | 8 |" in (out / "trials.md").read_text()
    assert "lr_trials sentence: sft C:" in capsys.readouterr().out
    # A rerun resumes each finished run: no step is trained or logged twice.
    lines = (out / "lr0.01" / "metrics.jsonl").read_text().splitlines()
    assert lr_trials.main(argv) == 0
    assert (out / "lr0.01" / "metrics.jsonl").read_text().splitlines() == lines


def test_bad_arguments_name_what_to_fix(tmp_path, capsys):
    missing = tmp_path / "nothing"
    assert lr_trials.main([str(missing), "--method", "sft", "--category", "C", "--lrs", "1e-3",
                           "--out", str(tmp_path / "o")]) == 2  # fmt: skip
    assert "holds no study yet" in capsys.readouterr().err
    out = tmp_path / "s"
    study.run(["splits", "--out", str(out), *BASE])
    for args, message in (
        (["--lrs", "fast"], "--lrs 'fast'"),
        (["--lrs", "0,-1"], "positive rates"),
        (["--lrs", "1e-3", "--category", "Z"], "--category Z: not among"),
        (["--lrs", "1e-3", "--method", "rft"], "--method rft: not among"),
        (["--lrs", "1e-3"], "base"),
    ):
        argv = [str(out), "--method", "sft", "--category", "C", *args, "--out", str(tmp_path / "o")]
        assert lr_trials.main(argv) == 2, args
        assert message in capsys.readouterr().err
