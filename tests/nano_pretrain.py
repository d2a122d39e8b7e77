"""The smallest real pretraining the tests run: a nano model on a few episodes, seconds long."""

from __future__ import annotations

from pathlib import Path

from passkt.study.testbed.pretrain import PretrainConfig


def nano_config(folder: Path, **overrides) -> PretrainConfig:
    """A nano pretraining into ``folder/run`` (60 steps, checkpoints and evaluations every 30),
    with ``overrides`` applied."""
    values = dict(
        output_dir=str(folder / "run"), size="nano", episodes_per_category=24,
        paragraph_repeats=1, block_size=128, batch_size=4, max_steps=60, learning_rate=5e-3,
        warmup_steps=5, eval_every=30, save_every=30, log_every=10, progress=False,
    )  # fmt: skip
    return PretrainConfig(**{**values, **overrides})
