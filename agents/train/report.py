"""Where step metrics go besides ``metrics.jsonl``: TensorBoard and Weights & Biases.

``passkt train grpo|sft`` (``MetricsLogger``) and the TRL adapter (through transformers' own
``report_to``) send the same slash-named metrics (``reward/mean``, ``episode/tool_calls``...) to
the same places. W&B runs offline unless the user's ``WANDB_MODE`` says otherwise, so it works
without a network or an account (``wandb sync`` uploads the run later).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.folders import mark_folder


class Sink:
    """One metrics destination."""

    def log(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class TensorBoardSink(Sink):
    """TensorBoard event files in ``output_dir/tb``."""

    def __init__(self, output_dir: Path) -> None:
        try:
            # optional: the hf extra (torch, transformers)
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
            import wandb  # optional: the wandb extra
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


class MetricsCallback:
    """A transformers ``TrainerCallback`` that sends a TRL run's logs through ``MetricsLogger``.

    So a TRL run writes ``metrics.jsonl``, ``tb/`` and ``wandb/`` like ``passkt train grpo``, with
    the same names (transformers' own TensorBoard / W&B callbacks would prefix them ``train/``).
    Built by ``make_callback`` (transformers is imported there).
    """


def make_callback(output_dir: Path, report_to: Sequence[str], config: Mapping[str, Any]) -> Any:
    """The ``TrainerCallback`` described in ``MetricsCallback`` (only the main process writes)."""
    from transformers import TrainerCallback  # optional: the hf extra (torch, transformers)

    from passkt.agents.train.checkpoint import truncate_metrics  # start-up cost: torch, 1 s

    class _Callback(TrainerCallback, MetricsCallback):
        def __init__(self) -> None:
            self.logger: MetricsLogger | None = None

        def on_train_begin(self, args, state, control, **kwargs):
            if state.is_world_process_zero:  # a resumed run drops the lines past its checkpoint
                output_dir.mkdir(parents=True, exist_ok=True)
                mark_folder(output_dir, "training-run")
                truncate_metrics(output_dir / "metrics.jsonl", int(state.global_step))
            self.logger = MetricsLogger(
                output_dir, enabled=state.is_world_process_zero, report_to=report_to, config=config
            )

        def on_log(self, args, state, control, logs=None, **kwargs):
            if self.logger is None or not logs or "train_runtime" in logs:  # the closing summary
                return
            numbers = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}
            self.logger.log(int(state.global_step), numbers)

        def on_train_end(self, args, state, control, **kwargs):
            if self.logger is not None:
                self.logger.close()

    return _Callback()


class MetricsLogger:
    """Appends one JSON line per step to ``output_dir/metrics.jsonl``, and to the ``report_to``
    sinks (``passkt.agents.train.report``: TensorBoard, W&B).

    Only the main process writes; the others hold a disabled logger.
    """

    def __init__(
        self,
        output_dir: Path,
        *,
        enabled: bool,
        tensorboard: bool = False,
        report_to: Sequence[str] = (),
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = output_dir / "metrics.jsonl"
        self.enabled = enabled
        sinks = [*report_to, *(["tensorboard"] if tensorboard else [])]
        self._sinks = make_sinks(sinks, output_dir, config) if enabled else []

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Write one line ``{"step": step, **metrics}``."""
        if not self.enabled:
            return
        record = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
        for sink in self._sinks:
            sink.log(step, {k: _plain(v) for k, v in metrics.items()})

    def close(self) -> None:
        for sink in self._sinks:
            sink.close()


def _plain(value: Any) -> Any:
    """A plain Python number for a 0-d tensor or a numpy scalar (both have ``item``)."""
    return value.item() if hasattr(value, "item") else value


def read_metrics(output_dir: str | Path) -> list[dict[str, Any]]:
    """The lines of a run's ``metrics.jsonl``."""
    path = Path(output_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
