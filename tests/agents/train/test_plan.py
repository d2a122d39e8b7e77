"""The plan check: batch splits, engine rules and memory per GPU, before anything starts.

Every documented command with ``--check`` (in ``docs/training.md`` and ``benchmarks/README.md``)
is run as written: each passes, or fails in one line exactly where the page says it does. The
runs the check exists for fail in one line naming the rule and its fix.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.model_shape import KNOWN_MODELS, model_shape
from passkt.agents.train.plan import (
    EpisodeTokens,
    Launch,
    PlanError,
    check_plan,
    memory,
    steps_per_run,
)
from passkt.cli import main

ROOT = Path(__file__).resolve().parents[3]
QWEN = "hf:Qwen/Qwen2.5-7B-Instruct"
PAPER_GRPO = [
    "--policy", QWEN, "--group-size", "8", "--tasks-per-step", "16", "--micro-batch-size", "4",
    "--t-train", "5", "--max-new-tokens", "512", "--dtype", "bfloat16",
    "--gradient-checkpointing", "--finetune", "full",
]  # fmt: skip


def check(capsys, *argv: str) -> tuple[int, str, str]:
    """``passkt train ... --check``: exit code, stdout, stderr."""
    try:
        code = main(["train", *argv, "--check"])
    except SystemExit as e:
        code = int(e.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("passkt: error: "), err
    return lines[0]


# --------------------------------------------------------------------------- the three runs


def test_the_seven_train_one_serve_row_as_written_fails_naming_the_split_and_its_fix(capsys):
    argv = ["grpo", "--backend", "trl", *PAPER_GRPO, "--rollout-engine", "vllm-server"]
    code, _, err = check(capsys, *argv, "--world-size", "7", "--sharding", "zero3")
    line = one_line_error(code, err)
    assert "batch split" in line and "128 rows" in line and "on 7 process(es)" in line
    assert "fix: tasks_per_step = 14" in line
    code, out, _ = check(capsys, *argv, "--tasks-per-step", "14", "--world-size", "7")
    assert code == 0 and "112 rows over micro-batches of 4 on 7 process(es) = 4" in out


def test_the_paper_sft_batch_on_eight_trl_ranks_fails_and_the_profiles_batch_passes(capsys):
    argv = ["sft", "--backend", "trl", "--policy", QWEN, "--batch-size", "16", "--world-size", "8"]
    line = one_line_error(*check(capsys, *argv, "--micro-batch-size", "4")[::2])
    assert "batch split" in line and "batch_size = 16 rows" in line
    assert "micro_batch_size = 2" in line
    code, out, _ = check(capsys, *argv, "--micro-batch-size", "2")
    assert code == 0 and "= 1 accumulation steps" in out
    # passkt's own trainer splits examples over processes, not micro-batches: 16 / 8 passes
    assert check(capsys, "sft", "--policy", QWEN, "--batch-size", "16", "--world-size", "8")[0] == 0


def test_full_fine_tuning_with_a_vllm_engine_per_rank_does_not_fit_80_gb(capsys):
    argv = ["grpo", *PAPER_GRPO, "--rollout-engine", "vllm", "--world-size", "8"]
    line = one_line_error(*check(capsys, *argv, "--gpu-memory", "80")[::2])
    assert "memory per GPU" in line and "vLLM 24.0" in line and "of 80 GB" in line
    assert "fix: finetune = 'lora'" in line and "--backend trl under ZeRO-3" in line
    code, out, _ = check(capsys, *argv, "--gpu-memory", "80", "--finetune", "lora")
    assert code == 0 and "[ok] memory per GPU" in out
    code, out, _ = check(
        capsys, *argv, "--gpu-memory", "80", "--backend", "trl", "--sharding", "zero3"
    )
    assert code == 0


# --------------------------------------------------------------------------- documented commands


def documented_checks() -> list[tuple[str, str]]:
    """``(page, command)`` of every ``passkt train ... --check`` line of the two pages."""
    found = []
    for page in ("docs/training.md", "benchmarks/README.md"):
        text = (ROOT / page).read_text(encoding="utf-8").replace("\\\n", " ")
        for line in text.splitlines():
            if line.strip().startswith("passkt train") and "--check" in line:
                found.append((page, line.strip()))
    return found


def test_the_pages_document_checks():
    pages = {page for page, _ in documented_checks()}
    assert pages == {"docs/training.md", "benchmarks/README.md"}


@pytest.mark.parametrize(("page", "command"), documented_checks())
def test_every_documented_check_gives_what_its_page_says(page, command, capsys):
    """A command passes, unless its page writes ``# fails: RULE`` after it."""
    command, _, expected = command.partition("# fails:")
    argv = shlex.split(command, comments=True)[2:]
    code, out, err = check(capsys, *[a for a in argv if a != "--check"])
    if expected.strip():
        assert expected.strip() in one_line_error(code, err), (page, err)
    else:
        assert code == 0, (page, err)
        assert "[FAIL]" not in out


def test_the_study_check_passes_every_run_of_the_paper_profile_on_8_gpus(capsys):
    code = main(["study", "check", "paper", "--gpus", "8", "--gpu-memory", "80"])
    out = capsys.readouterr().out
    assert code == 0 and "every training run of paper can start on 8 GPU(s)" in out
    assert out.count("== ") == 6  # sft and grpo x 3 categories
    code = main(["study", "check", "paper", "--gpus", "8", "--set", "train.trl.use_vllm=true",
                 "--set", "train.trl.vllm_mode='server'"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "batch split" in err and "tasks_per_step = 14" in err


# --------------------------------------------------------------------------- the arithmetic


def test_qwen_7b_counts_by_hand():
    shape = KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"]
    # embeddings and head 152,064 x 3,584 each; a block: q, o 3,584^2, k, v 3,584 x 512, MLP
    # 3 x 3,584 x 18,944, two norms
    block = 2 * 3584**2 + 2 * 3584 * 512 + 3 * 3584 * 18944 + 2 * 3584
    assert shape.parameters == 2 * 152064 * 3584 + 28 * block + 3584
    assert shape.lora_parameters(16) == 28 * 16 * (7168 + 4096 + 4096 + 7168 + 3 * 22528)
    assert shape.kv_bytes_per_token() == 28 * 2 * 4 * 128 * 2  # 56 KiB


def test_episode_tokens_and_steps_by_hand():
    config = GRPOConfig(policy=QWEN, t_train=5, max_new_tokens=512, tasks_per_step=16)
    episode = EpisodeTokens.of(config)
    assert (episode.typical, episode.worst) == (160 + 2 * 340 + 3 * 150, 160 + 5 * 340 + 6 * 512)
    config.epochs = 10
    assert steps_per_run(config, "passkt", 200) == 130  # the last 8 tasks wrap around
    assert steps_per_run(config, "trl", 200) == 120  # TRL's sampler drops them


def test_zero3_shards_16_bytes_a_parameter_and_ddp_keeps_the_training_dtype():
    shape = KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"]
    config = GRPOConfig(policy=QWEN, dtype="bfloat16")
    sharded = memory(config, shape, Launch("trl", 8, "zero3", 80))
    assert sharded.model_states == pytest.approx(16 * shape.parameters / 8 / 1e9)
    ddp = memory(config, shape, Launch("passkt", 8, "ddp", 80))
    assert ddp.model_states == pytest.approx(8 * shape.parameters / 1e9)
    assert ddp.contexts == sharded.contexts == 1.5


def test_checkpointing_and_the_token_cap_bound_the_activations():
    shape = KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"]
    launch = Launch("passkt", 1, "ddp", 80)
    plain = GRPOConfig(policy=QWEN, dtype="bfloat16", max_new_tokens=512, finetune="lora")
    checkpointed = GRPOConfig(**{**plain.to_dict(), "gradient_checkpointing": True})
    capped = GRPOConfig(**{**checkpointed.to_dict(), "micro_batch_tokens": 8192})
    sizes = [memory(c, shape, launch).activations for c in (plain, checkpointed, capped)]
    assert sizes[0] > 5 * sizes[1] > 5 * sizes[2] > 0
    tokens = min(4 * EpisodeTokens.of(plain).worst, 8192)
    assert sizes[2] == pytest.approx(
        tokens * (28 * 3584 * 2 + shape.layer_values_per_token() * 2) / 1e9
    )


def test_a_local_model_is_read_from_its_config_and_an_unknown_one_is_a_warning(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
        '"num_attention_heads": 4, "vocab_size": 100, "tie_word_embeddings": true}'
    )
    shape = model_shape(f"hf:{tmp_path}")
    assert shape is not None and shape.kv_heads == 4 and shape.tied
    report = check_plan(GRPOConfig(policy="hf:org/unknown"), Launch(gpu_memory_gb=80))
    assert report.failure is None
    assert any("not estimated" in c.detail and c.warning for c in report.checks)


def test_the_library_raises_the_same_line():
    config = SFTConfig(policy=QWEN, batch_size=16, micro_batch_size=4)
    with pytest.raises(PlanError, match=r"^batch split: .*fix: batch_size = 32"):
        check_plan(config, Launch("trl", 8)).raise_on_failure()
    with pytest.raises(ValueError, match="world size must be >= 1"):
        Launch(world_size=0)


def test_the_launch_comes_from_the_launchers_environment(capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    code, out, _ = check(capsys, "grpo", "--backend", "trl", "--policy", QWEN)
    assert code == 0 and re.search(r"on 8 training process\(es\), backend trl, zero3", out)


def test_memory_for_typical_episodes_must_fit_and_for_the_worst_is_a_warning():
    config = GRPOConfig(
        policy=QWEN, dtype="bfloat16", gradient_checkpointing=True, max_new_tokens=512
    )
    usage = memory(config, KNOWN_MODELS["Qwen/Qwen2.5-7B-Instruct"], Launch("trl", 8, "zero3", 80))
    between = (usage.total_typical + usage.total) / 2
    report = check_plan(config, Launch("trl", 8, "zero3", between))
    (line,) = [c for c in report.checks if c.name == "memory per GPU"]
    assert report.failure is None and line.warning and "the worst may not" in line.detail
    short = check_plan(config, Launch("trl", 8, "zero3", usage.total_typical - 1))
    assert short.failure is not None and short.failure.name == "memory per GPU"


def test_the_trained_model_sampling_a_sharded_model_is_a_warning_naming_vllm():
    report = check_plan(GRPOConfig(policy=QWEN), Launch("trl", 8, "zero3"))
    (line,) = [c for c in report.checks if c.name == "rollout engine"]
    assert line.warning and "--rollout-engine vllm" in line.fix and report.failure is None


@pytest.mark.parametrize("engine", ["vllm", "vllm-server"])
def test_a_vllm_engine_without_vllm_is_one_line_naming_the_extra(
    engine, tmp_path, capsys, monkeypatch
):
    from passkt.agents.train import versions

    monkeypatch.setattr(versions, "installed_vllm", lambda: None)
    out = tmp_path / "run"
    argv = ["train", "grpo", "--backend", "trl", "--policy", "hf:m", "--rollout-engine", engine]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(out)])
    line = one_line_error(exit_info.value.code, capsys.readouterr().err)
    assert "pip install 'passkt[vllm]'" in line and not out.exists()
