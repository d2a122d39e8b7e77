"""``passkt testbed pretrain``: flags map onto PretrainConfig; the run leaves a loadable model."""

from __future__ import annotations

import json

import pytest

from passkt.cli import main

SMALL = [
    "--size", "nano", "--episodes-per-category", "12", "--paragraph-repeats", "0",
    "--block-size", "64", "--batch-size", "2", "--max-steps", "4", "--warmup-steps", "1",
    "--eval-every", "4", "--save-every", "4", "--log-every", "2", "--no-progress",
]  # fmt: skip


def test_print_config_shows_the_flags_over_the_defaults(tmp_path, capsys):
    out = tmp_path / "base"
    assert main(["testbed", "pretrain", "--out", str(out), *SMALL, "--print-config"]) == 0
    config = json.loads(capsys.readouterr().out)
    assert config["output_dir"] == str(out) and config["max_steps"] == 4
    assert config["block_size"] == 64 and config["progress"] is False
    assert config["learning_rate"] == 3e-3  # untouched flags keep the defaults
    assert not out.exists()  # printing the config runs nothing


def test_pretrain_writes_a_model_that_the_lean_spec_loads(tmp_path, capsys):
    from passkt.agents.lean import LeanPolicy
    from passkt.agents.specs import load_policy

    out = tmp_path / "base"
    assert main(["testbed", "pretrain", "--out", str(out), *SMALL, "--threads", "1"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    assert printed == str(out / "model")
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines if "loss/all" in x] == [2, 4]
    policy = load_policy(f"lean:{printed}")
    assert isinstance(policy, LeanPolicy) and policy.fallback_reason is None


def test_bad_flags_name_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["testbed", "pretrain", "--out", str(tmp_path), "--size", "huge"])
    assert "--size" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["testbed", "pretrain", "--out", str(tmp_path), "--guided-rates", "0.1,abc"])
    assert "--guided-rates" in capsys.readouterr().err
