"""Checkpoints: HF folders that load anywhere, atomic saves, and exact resume after a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from passkt.agents.train import report
from passkt.agents.train.checkpoint import latest_checkpoint, list_checkpoints, truncate_metrics
from passkt.agents.train.common import is_timing_metric
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.grpo import train_grpo
from passkt.agents.train.report import read_metrics
from passkt.agents.train.sft import train_sft


class Crash(RuntimeError):
    pass


def crash_after_logging(monkeypatch: pytest.MonkeyPatch, step: int) -> None:
    """Make the run die right after it logs ``step`` (past its last checkpoint)."""
    original = report.MetricsLogger.log

    def log(self, done, metrics):
        original(self, done, metrics)
        if done == step:
            raise Crash(f"simulated crash after step {step}")

    monkeypatch.setattr(report.MetricsLogger, "log", log)


def comparable(output_dir: Path) -> list[dict]:
    """metrics.jsonl without wall-clock figures."""
    return [
        {k: v for k, v in line.items() if not is_timing_metric(k)}
        for line in read_metrics(output_dir)
    ]


def tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def assert_same_tensors(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


def run_interrupted(train, config, monkeypatch, crash_step: int):
    with monkeypatch.context() as patch:
        crash_after_logging(patch, crash_step)
        with pytest.raises(Crash):
            train(config)
    assert [m["step"] for m in read_metrics(config.output_dir)][-1] == crash_step
    return train(config, resume=True)


def test_grpo_resumes_after_a_crash_exactly(format_checkpoint, digit_tasks, tmp_path, monkeypatch):
    def config(name: str) -> GRPOConfig:
        return GRPOConfig(
            policy=f"hf:{format_checkpoint}",
            env_id="Math-v0",
            env_kwargs={"source": "digits"},
            t_train=0,
            group_size=4,
            tasks_per_step=2,
            micro_batch_size=3,  # uneven micro-batches: accumulation is exercised too
            learning_rate=1e-3,
            lr_scheduler="linear",
            warmup_steps=1,
            max_steps=4,
            save_every=2,
            max_new_tokens=12,
            output_dir=str(tmp_path / name),
            progress=False,
        )

    whole = train_grpo(config("whole"))
    resumed = run_interrupted(train_grpo, config("resumed"), monkeypatch, crash_step=3)

    assert comparable(tmp_path / "whole") == comparable(tmp_path / "resumed")
    assert [m["step"] for m in read_metrics(tmp_path / "resumed")] == [1, 2, 3, 4]
    assert len({m["lr"] for m in read_metrics(tmp_path / "whole")}) > 1  # the schedule moved
    assert_same_tensors(
        tensors(whole.checkpoint / "model.safetensors"),
        tensors(resumed.checkpoint / "model.safetensors"),
    )
    assert whole.checkpoint.name == resumed.checkpoint.name == "checkpoint-4"
    # and training did change the weights (so equality above is not vacuous)
    start = tensors(format_checkpoint / "model.safetensors")
    final = tensors(whole.checkpoint / "model.safetensors")
    assert any(not torch.equal(start[k], final[k]) for k in start)


def test_lora_sft_resumes_exactly_and_saves_loadable_models(tiny64, people, tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from passkt.agents.hf import HFPolicy

    def config(name: str) -> SFTConfig:
        return SFTConfig(
            policy=f"hf:{tiny64}",
            env_id="BridgeQA-v0",
            env_kwargs=people.env_kwargs,
            t_train=2,
            finetune="lora",
            lora_r=4,
            lora_dropout=0.1,  # dropout draws from the torch RNG: its state must be restored
            learning_rate=1e-2,
            batch_size=2,
            micro_batch_size=1,
            epochs=2,  # 4 steps
            save_every=1,
            save_total_limit=2,
            output_dir=str(tmp_path / name),
            progress=False,
        )

    whole = train_sft(config("whole"))
    resumed = run_interrupted(train_sft, config("resumed"), monkeypatch, crash_step=3)

    assert comparable(tmp_path / "whole") == comparable(tmp_path / "resumed")
    for name in ("adapter/adapter_model.safetensors", "model.safetensors"):
        assert_same_tensors(tensors(whole.checkpoint / name), tensors(resumed.checkpoint / name))
    assert [p.name for p in list_checkpoints(tmp_path / "whole")] == [
        "checkpoint-3",
        "checkpoint-4",
    ]

    # The merged folder is a plain HF model equal to base + adapter.
    merged = AutoModelForCausalLM.from_pretrained(whole.checkpoint)
    base = AutoModelForCausalLM.from_pretrained(tiny64)
    adapted = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny64), whole.checkpoint / "adapter"
    ).eval()
    ids = torch.tensor([[5, 17, 42, 99, 3, 250]])
    with torch.no_grad():
        torch.testing.assert_close(merged(ids).logits, adapted(ids).logits, atol=1e-5, rtol=1e-5)
        assert not torch.allclose(merged(ids).logits, base(ids).logits, atol=1e-3)
    assert HFPolicy(whole.checkpoint).tokenizer.chat_template  # tokenizer saved with the model


def test_latest_checkpoint_skips_partial_saves(tmp_path):
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-10").mkdir()  # no trainer_state.json: never finished
    (tmp_path / ".checkpoint-12.tmp").mkdir()
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert latest_checkpoint(tmp_path / "missing") is None


def test_truncate_metrics_drops_lines_after_the_checkpoint(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": s, "x": s}) + "\n" for s in (0, 1, 2, 3)))
    truncate_metrics(path, 2)
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [0, 1, 2]
