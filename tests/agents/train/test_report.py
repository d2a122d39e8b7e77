"""Metric sinks: W&B offline without a network, clear errors for unknown or missing sinks."""

from __future__ import annotations

import sys

import pytest

from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.report import MetricsLogger


@pytest.mark.slow  # starts the wandb service (a few seconds)
def test_wandb_runs_offline_and_holds_the_logged_metrics(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    logger = MetricsLogger(tmp_path, enabled=True, report_to=("wandb",), config={"seed": 3})
    logger.log(1, {"reward/mean": 0.25, "episode/tool_calls": 2.0})
    logger.log(2, {"reward/mean": 0.875})
    logger.close()
    wandb.teardown()  # the wandb service writes the run file in the background; wait for it
    (run,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")  # offline: a local file only
    data = run.read_bytes()
    assert b"reward/mean" in data and b"episode/tool_calls" in data and b"0.875" in data


def test_a_disabled_logger_opens_no_sink(tmp_path):
    logger = MetricsLogger(tmp_path, enabled=False, report_to=("wandb", "tensorboard"))
    logger.log(1, {"reward/mean": 1.0})
    logger.close()
    assert list(tmp_path.iterdir()) == []


def test_missing_wandb_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import fails
    with pytest.raises(ImportError, match="pip install wandb"):
        MetricsLogger(tmp_path, enabled=True, report_to=("wandb",))


def test_report_to_is_checked_and_tensorboard_true_joins_it():
    with pytest.raises(ValueError, match="report_to: unknown \\['mlflow'\\]"):
        GRPOConfig(policy="hf:/m", report_to=("mlflow",))
    assert GRPOConfig(policy="hf:/m", tensorboard=True).report_to == ("tensorboard",)
    assert GRPOConfig(policy="hf:/m", report_to="wandb,tensorboard").report_to == (
        "wandb",
        "tensorboard",
    )
