"""The 8 x 80 GB table of ``benchmarks/README.md`` is what ``passkt study check --markdown``
prints: the estimate and the plan check are one piece of arithmetic."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from passkt.agents.train.plan import steps_per_run
from passkt.cli import main
from passkt.study.gpu_plan import category_config, documented_routes, evaluations, profile_routes
from passkt.study.profile import resolve

README = Path(__file__).resolve().parents[2] / "benchmarks" / "README.md"
START, END = "<!-- gpu-plan-table:start -->\n", "<!-- gpu-plan-table:end -->"


def test_the_readme_table_is_the_commands_output(capsys):
    assert main(["study", "check", "paper", "--gpus", "8", "--gpu-memory", "80", "--markdown"]) == 0
    printed = capsys.readouterr().out
    text = README.read_text(encoding="utf-8")
    assert START in text and END in text
    committed = text.split(START, 1)[1].split(END, 1)[0]
    assert committed == printed, (
        "benchmarks/README.md's GPU table is stale: paste the output of `passkt study check "
        "paper --gpus 8 --markdown` between its markers"
    )


def test_the_table_counts_27_evaluations_and_trls_120_steps():
    profile = resolve("paper")
    assert evaluations(profile) == 3 * (3 + 3 * 2)  # base x 3 (base_repeats), SFT and RL per seed
    table = README.read_text(encoding="utf-8").split(START, 1)[1].split(END, 1)[0]
    assert "(27 evaluations)" in table
    grpo = category_config(profile, "grpo", "C")
    steps = steps_per_run(grpo, "trl", profile["limit_train"])
    assert steps == 120 and steps_per_run(grpo, "passkt", profile["limit_train"]) == 130
    prose = " ".join(README.read_text(encoding="utf-8").split())
    assert f"= {steps} steps a run through TRL" in prose


def test_documented_routes_pass_and_the_one_documented_not_to_fit_fails():
    from passkt.study.gpu_plan import check_route

    profile = resolve("paper")
    for route in documented_routes(8):
        reports = check_route(profile, route, 80)
        failures = [report.failure for _, report in reports if report.failure is not None]
        if route.fits:
            assert not failures, (route.name, failures)
        else:
            assert failures and all(f.name == "memory per GPU" for f in failures), route.name


@pytest.mark.parametrize(
    ("overrides", "engine", "train_gpus"),
    [
        ([], "hf", 8),
        (["train.trl.use_vllm=true"], "vllm", 8),
        (["train.trl.use_vllm=true", "train.trl.vllm_mode='server'"], "vllm-server", 7),
    ],
)
def test_the_profiles_trl_options_become_the_rollout_engine(overrides, engine, train_gpus):
    profile = resolve("paper", overrides)
    (grpo,) = [r for r in profile_routes(profile, 8) if r.method == "grpo"]
    assert grpo.fields.get("rollout_engine", "hf") == engine and grpo.train_gpus == train_gpus
    assert grpo.sharding == "zero3" and re.match(r"grpo, trl", grpo.name)


def test_a_study_training_run_that_cannot_split_stops_before_its_model_loads(monkeypatch):
    """``study run``'s training stage makes the same check first, with the launcher's world."""
    import types

    from passkt.agents.train.config import GRPOConfig
    from passkt.study import stages
    from passkt.study.profile import StudyError

    profile = resolve("paper")
    config = GRPOConfig(policy="hf:Qwen/Qwen2.5-7B-Instruct", tasks_per_step=16, group_size=8)
    monkeypatch.setattr(stages, "train_config", lambda *args: config)
    monkeypatch.setenv("WORLD_SIZE", "7")
    with pytest.raises(StudyError, match=r"^grpo/C/s0: batch split: .*fix: tasks_per_step = 14"):
        stages.make_training(types.SimpleNamespace(profile=profile), "grpo", "C", 0)
