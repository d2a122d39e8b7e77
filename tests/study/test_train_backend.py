"""The paper profile's ``train.backend``: passkt's GRPO or TRL's GRPOTrainer through the adapter."""

from __future__ import annotations

from pathlib import Path

import pytest

STUDY_DIR = Path(__file__).resolve().parents[2] / "study"

from passkt.study.profile import StudyError, resolve  # noqa: E402


def test_paper_trains_with_trl_by_default_and_with_passkt_when_asked():
    assert resolve("paper")["train"]["backend"] == "trl"
    assert resolve("tiny")["train"]["backend"] == "passkt"
    assert resolve("paper", ['train.backend="passkt"'])["train"]["backend"] == "passkt"
    trl = resolve("paper", ["train.trl.use_vllm=true"])["train"]
    assert trl["backend"] == "trl" and trl["trl"] == {"use_vllm": True}  # TRL options pass on


def test_the_paper_grpo_settings_map_onto_trl_on_eight_processes():
    from passkt.agents.train.config import GRPOConfig
    from passkt.agents.train.trl import trl_args

    fields = resolve("paper")["grpo"]
    config = GRPOConfig.from_dict({**fields, "policy": "hf:Qwen/Qwen2.5-7B-Instruct"})
    args = trl_args(config, world_size=8)
    assert args["num_generations"] == 8 and args["per_device_train_batch_size"] == 4
    assert args["gradient_accumulation_steps"] * 4 * 8 == fields["tasks_per_step"] * 8


def test_an_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(StudyError, match=r"train\.backend must be passkt .* or trl"):
        resolve("paper", ['train.backend="verl"'])
    with pytest.raises(StudyError, match="unknown key 'backnd'"):
        resolve("paper", ['train.backnd="trl"'])


@pytest.mark.parametrize(
    ("name", "kind"), [("ddp", "MULTI_GPU"), ("zero3", "DEEPSPEED"), ("fsdp", "FSDP")]
)
def test_the_accelerate_configs_load_in_accelerate(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(STUDY_DIR / "accelerate" / f"{name}.yaml"))
    assert config.distributed_type.name == kind
    assert config.num_processes == 8 and config.mixed_precision == "bf16"
    if kind == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] == 3


def test_a_study_folder_made_before_train_existed_still_resolves(tmp_path):
    import json

    from passkt.study.profile import pin

    profile = resolve("tiny")
    old = {k: v for k, v in profile.items() if k != "train"}  # as written before this key
    (tmp_path / "profile.json").write_text(json.dumps({"source": "tiny", "profile": old}))
    assert pin(tmp_path, None, None)["train"]["backend"] == "passkt"
    assert pin(tmp_path, profile, "tiny") == profile  # the same profile, not "another one"
