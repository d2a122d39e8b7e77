"""Where step metrics go besides ``metrics.jsonl``: TensorBoard and Weights & Biases.

``passkt train grpo|sft`` (``MetricsLogger``) and the TRL adapter (through transformers' own
``report_to``) send the same slash-named metrics (``reward/mean``, ``episode/tool_calls``...) to
the same places. W&B runs offline unless the user's ``WANDB_MODE`` says otherwise, so it works
without a network or an account (``wandb sync`` uploads the run later).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class Sink:
    """One metrics destination."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink(Sink):
    """TensorBoard event files in ``output_dir/tb``."""

    def __init__(self, output_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            raise ImportError(
                "tensorboard=True needs the tensorboard package: pip install tensorboard "
                "(or set tensorboard=False; metrics.jsonl is always written)"
            ) from e
        self._writer = SummaryWriter(str(output_dir / "tb"))

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                self._writer.add_scalar(name, value, step)

    def close(self) -> None:
        self._writer.close()


class WandbSink(Sink):
    """A Weights & Biases run in ``output_dir/wandb`` (offline by default)."""

    def __init__(self, output_dir: Path, config: Mapping[str, Any] | None = None) -> None:
        try:
            import wandb
        except ImportError as e:
            raise ImportError(
                "report_to=wandb needs the wandb package: pip install wandb "
                "(or leave wandb out of report_to; metrics.jsonl is always written)"
            ) from e
        os.environ.setdefault("WANDB_MODE", "offline")
        output_dir.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            dir=str(output_dir),
            project=os.environ.get("WANDB_PROJECT", "passkt"),
            name=output_dir.name,
            config=dict(config or {}),
            reinit="create_new",
        )

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        numbers = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
        self._run.log(numbers, step=step)

    def close(self) -> None:
        self._run.finish()


def make_sinks(
    report_to: Sequence[str], output_dir: Path, config: Mapping[str, Any] | None = None
) -> list[Sink]:
    """The sinks ``report_to`` names (``tensorboard``, ``wandb``)."""
    sinks: list[Sink] = []
    for name in dict.fromkeys(report_to):
        if name == "tensorboard":
            sinks.append(TensorBoardSink(output_dir))
        elif name == "wandb":
            sinks.append(WandbSink(output_dir, config))
        else:
            raise ValueError(f"report_to: unknown sink {name!r}; expected 'tensorboard' or 'wandb'")
    return sinks


def trl_report_to(report_to: Sequence[str]) -> list[str] | str:
    """transformers' ``report_to`` for the same sinks (offline W&B as above)."""
    if "wandb" in report_to:
        os.environ.setdefault("WANDB_MODE", "offline")
    return list(dict.fromkeys(report_to)) or "none"
