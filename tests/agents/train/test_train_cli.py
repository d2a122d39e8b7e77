"""``passkt train grpo|sft``: flags from the config dataclasses, --config files, --resume."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from passkt.agents.train.report import read_metrics
from passkt.eval.cli import main


def resolved(capsys, *argv: str) -> dict:
    assert main(["train", *argv, "--print-config"]) == 0
    return json.loads(capsys.readouterr().out)


def test_flags_override_the_config_file_which_overrides_defaults(tmp_path, capsys):
    path = tmp_path / "grpo.json"
    path.write_text(json.dumps({"policy": "hf:base", "group_size": 4, "learning_rate": 1e-5}))
    config = resolved(
        capsys,
        "grpo",
        "--config",
        str(path),
        "--learning-rate",
        "2e-6",
        "--env",
        "ComparisonQA-v0",
        "--env-kwargs",
        "source=hotpotqa,path=dev.json,top_k=5",
        "--lora-target-modules",
        "q_proj,v_proj",
        "--max-steps",
        "none",
        "--no-progress",
    )
    assert config["group_size"] == 4  # from the file
    assert config["learning_rate"] == 2e-6  # the flag wins
    assert config["clip_high"] == 0.2  # the default
    assert config["env_id"] == "ComparisonQA-v0"
    assert config["env_kwargs"] == {"source": "hotpotqa", "path": "dev.json", "top_k": 5}
    assert config["lora_target_modules"] == ["q_proj", "v_proj"]
    assert config["max_steps"] is None and config["progress"] is False
    assert resolved(capsys, "sft", "--policy", "hf:m")["finetune"] == "lora"  # SFT's default


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["grpo", "--policy", "hf:m", "--group-size", "x"], "--group-size expects int"),
        (["grpo", "--policy", "hf:m", "--advantage", "ppo"], "invalid choice: 'ppo'"),
        (["grpo", "--policy", "hf:m", "--group-size", "1"], "group_size must be >= 2"),
        (["grpo", "--policy", "scripted:oracle"], "cannot be trained"),
        (["sft", "--policy", "hf:m", "--group-size", "8"], "unrecognized arguments"),
        (["grpo", "--config", "missing.json"], "--config file missing.json does not exist"),
        (["grpo", "--env-kwargs", "hops"], "bad --env-kwargs item 'hops'"),
    ],
)
def test_bad_command_lines_fail_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", *argv, "--print-config"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_train_sft_then_resume_from_the_command_line(tiny64, people, tmp_path, capsys):
    out = tmp_path / "sft"
    common = [
        "train",
        "sft",
        "--policy",
        f"hf:{tiny64}",
        "--env",
        "BridgeQA-v0",
        "--env-kwargs",
        "source=people",
        "--t-train",
        "2",
        "--finetune",
        "full",
        "--batch-size",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main([*common, "--max-steps", "2"]) == 0
    assert Path(capsys.readouterr().out.strip()) == out / "checkpoint-2"
    with pytest.raises(SystemExit):  # a second run into the same folder needs --resume
        main([*common, "--max-steps", "3"])
    assert "already holds a run" in capsys.readouterr().err
    assert main([*common, "--max-steps", "3", "--resume"]) == 0
    assert Path(capsys.readouterr().out.strip()) == out / "checkpoint-3"
    assert [m["step"] for m in read_metrics(out)] == [1, 2, 3]
    assert json.loads((out / "config.json").read_text())["max_steps"] == 3


def test_env_kwargs_are_read_as_passkt_eval_reads_them():
    from passkt.agents.specs import parse_env_kwargs
    from passkt.agents.train.cli import parse_kwargs

    text = 'hops=[2,3],source_options={"num_tasks": 40},path="a,b.json"'
    assert parse_kwargs(text) == parse_env_kwargs(text)
    assert parse_kwargs(text)["hops"] == [2, 3]
    with pytest.raises(argparse.ArgumentTypeError, match="bad --env-kwargs item"):
        parse_kwargs("hops")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--env", "BridgeQA-v9"], "Unknown env id 'BridgeQA-v9'. Did you mean 'BridgeQA-v0'"),
        (["--env", "BridgQA-v0"], "Did you mean 'BridgeQA-v0'"),
        (["--env-kwargs", "hopz=2"], "unexpected keyword argument 'hopz'"),
    ],
)
def test_bad_env_fails_in_one_line_before_the_model_loads(flags, message, tmp_path, capsys):
    argv = ["train", "grpo", "--policy", f"hf:{tmp_path / 'no-model'}", *flags]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("kind", ["DEEPSPEED", "FSDP"])
def test_passkt_trainer_refuses_a_sharded_accelerate_state_before_writing(
    kind, tiny64, tmp_path, capsys, monkeypatch
):
    """Under a DeepSpeed ZeRO or FSDP accelerate config passkt's trainer stops in one line that
    names --backend trl, and leaves no output folder."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    import passkt.agents.train.loop as loop

    state = SimpleNamespace(distributed_type=DistributedType[kind])
    monkeypatch.setattr(loop, "make_accelerator", lambda: state)
    out = tmp_path / "grpo"
    argv = ["train", "grpo", "--policy", f"hf:{tiny64}", "--env", "BridgeQA-v0"]
    argv += ["--env-kwargs", "source=people", "--max-steps", "1", "--out", str(out)]
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and kind in err[0] and "--backend trl" in err[0]
    assert not out.exists()


@pytest.mark.parametrize("kind", ["NO", "MULTI_CPU", "MULTI_GPU"])
def test_passkt_trainer_keeps_one_process_and_ddp(kind):
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from passkt.agents.train.loop import refuse_sharding

    refuse_sharding(SimpleNamespace(distributed_type=DistributedType[kind]))


def test_backend_flag_is_checked_and_sft_has_trls_too(capsys):
    with pytest.raises(SystemExit):
        main(["train", "grpo", "--backend", "deepspeed", "--print-config"])
    assert "invalid choice" in capsys.readouterr().err
    assert main(["train", "sft", "--backend", "trl", "--policy", "hf:m", "--check"]) == 0
    assert "backend trl" in capsys.readouterr().out
