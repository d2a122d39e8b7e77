"""The run around a trainer's step: set-up, resume, optimizer step, logging, evaluation, saving.

``TrainingRun.start`` loads the model (from the newest checkpoint of ``output_dir`` with
``resume=True``); ``plan`` fixes the data order, builds the optimizer, prepares both for the
devices and restores the trainer state; ``end_step`` logs the step's metrics, evaluates and saves
when it is due. GRPO and SFT differ only in what one step does.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from passkt.agents.folders import mark_folder
from passkt.agents.hf import HFPolicy
from passkt.agents.lean import LeanPolicy
from passkt.agents.model_files import check_model_files
from passkt.agents.preflight import (
    check_dtype,
    check_policy_spec,
    missing_top,
    remove_created,
)
from passkt.agents.progress import progress_bar
from passkt.agents.train.checkpoint import (
    latest_checkpoint,
    load_trainer_state,
    save_checkpoint,
    truncate_metrics,
)
from passkt.agents.train.common import (
    BatchSchedule,
    evaluate,
    load_model,
    load_task_list,
    make_accelerator,
    make_optimizer,
    total_steps,
)
from passkt.agents.train.config import TrainConfig, policy_path, rollout_backend
from passkt.agents.train.options import refuse_options
from passkt.agents.train.report import MetricsLogger
from passkt.agents.train.vllm_sync import VLLMTrainingPolicy
from passkt.envs.errors import PassktError

logger = logging.getLogger(__name__)


class RunExistsError(PassktError, FileExistsError):
    """``output_dir`` already holds a run and ``resume`` was not asked for."""


@dataclass(frozen=True)
class TrainResult:
    """What a finished (or resumed and finished) run leaves behind."""

    output_dir: Path
    checkpoint: Path | None
    """The final checkpoint folder (an HF model folder); None on processes other than rank 0."""
    steps: int
    """Optimizer steps done in total (including those before a resume)."""
    last_metrics: dict[str, float]
    """The metrics of the last step."""
    model: Any = field(default=None, repr=False, compare=False)
    """The trained model itself (a peft model with LoRA), still in memory on this process."""


def _items_digest(item_ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(item_ids).encode()).hexdigest()[:16]


@dataclass
class TrainingRun:
    """Everything one training run holds between steps."""

    config: TrainConfig
    accelerator: Any
    model: Any
    """The model as prepared by the accelerator (DDP-wrapped on several processes)."""
    unwrapped: Any
    """The model itself (a peft model with LoRA): used for sampling and saving."""
    tokenizer: Any
    metrics: MetricsLogger
    resume_from: Path | None = None
    """The checkpoint this run continues from."""
    policy: Any = None
    """An ``HFPolicy`` over ``unwrapped``: the rollout policy is always the current model."""
    optimizer: Any = None
    scheduler: Any = None
    schedule: BatchSchedule | None = None
    item_ids: list[str] = field(default_factory=list)
    total_steps: int = 0
    start_step: int = 0
    eval_tasks: list[Any] = field(default_factory=list)
    last_metrics: dict[str, float] = field(default_factory=dict)
    last_checkpoint: Path | None = None
    optimizer_steps: int = 0
    """Optimizer updates made by this process since it started (GRPO: ``num_iterations`` a step)."""
    lock: Any = None
    """The main process's writer lock on ``output_dir`` (``passkt.agents.run_lock``), held until
    ``close`` (``finish``, or leaving the ``with`` block on an error)."""
    _bar: Any = None

    def __enter__(self) -> TrainingRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the writer lock (safe to call twice)."""
        if self.lock is not None:
            self.lock.release()

    @property
    def rank(self) -> int:
        return int(self.accelerator.process_index)

    @property
    def world(self) -> int:
        return int(self.accelerator.num_processes)

    @property
    def is_main(self) -> bool:
        return bool(self.accelerator.is_main_process)

    @property
    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    @classmethod
    def start(cls, config: TrainConfig, *, resume: bool = False) -> TrainingRun:
        """Load the model and tokenizer (from the newest checkpoint when resuming).

        Call ``plan`` next, once the items (tasks or examples) of the run are known.

        Args:
            config: The run's config.
            resume: Continue from the newest checkpoint in ``output_dir`` (a fresh start when there
                is none). Without it, an ``output_dir`` that already holds a run is an error.
        """
        preflight(config, resume=resume)
        accelerator = make_accelerator()
        refuse_sharding(accelerator)  # before the output folder is made
        lock = None
        created = None
        if accelerator.is_main_process:  # one writer per output_dir, taken before reading it
            from passkt.agents.run_lock import RunLock

            created = missing_top(Path(config.output_dir))
            Path(config.output_dir).mkdir(parents=True, exist_ok=True)
            advice = "then resume it (resume=True, --resume) or choose another output_dir (--out)"
            lock = RunLock.acquire(Path(config.output_dir), advice=advice)
            mark_folder(config.output_dir, "training-run")
        try:
            checkpoint = _find_checkpoint(Path(config.output_dir), resume)
            _seed_everything(config.seed)
            model, tokenizer = load_model(config, resume_from=checkpoint)
            metrics = MetricsLogger(
                Path(config.output_dir),
                enabled=accelerator.is_main_process,
                report_to=config.report_to,
                config=config.to_dict(),
            )
        except BaseException:
            if lock is not None:
                lock.release()
                remove_created(Path(config.output_dir), created)  # nothing left behind
            raise
        return cls(
            config=config,
            accelerator=accelerator,
            model=model,
            unwrapped=model,
            tokenizer=tokenizer,
            metrics=metrics,
            resume_from=checkpoint,
            lock=lock,
        )

    def plan(
        self, item_ids: Sequence[str], per_step: int, optimizer_steps_per_step: int = 1
    ) -> None:
        """Fix the data order, build the optimizer, prepare for the devices, restore the state.

        Args:
            item_ids: Stable ids of the items the data order permutes (checked on resume).
            per_step: Items per optimizer step over all processes.
            optimizer_steps_per_step: Optimizer updates per step (GRPO's ``num_iterations``).
        """

        policy_class = HFPolicy
        if rollout_backend(self.config.policy) == "lean":
            policy_class = LeanPolicy
        config, accelerator = self.config, self.accelerator
        if per_step % accelerator.num_processes:
            raise ValueError(
                f"{per_step} items per step cannot be split evenly over "
                f"{accelerator.num_processes} processes; make it a multiple of the process count."
            )
        self.item_ids = list(item_ids)
        self.schedule = BatchSchedule(len(item_ids), per_step, config.seed)
        self.total_steps = total_steps(config, self.schedule)
        optimizer, self.scheduler = make_optimizer(
            self.model, config, self.total_steps * optimizer_steps_per_step
        )
        self.model, self.optimizer = accelerator.prepare(self.model, optimizer)
        self.unwrapped = accelerator.unwrap_model(self.model)
        if getattr(config, "rollout_engine", "hf") == "vllm":
            self.policy = _vllm_policy(config, self.rank, self.world)
        else:
            self.policy = policy_class(
                self.unwrapped, tokenizer=self.tokenizer, batch_size=config.generation_batch_size
            )
        if self.resume_from is not None:
            state, info = load_trainer_state(self.resume_from, accelerator.process_index)
            if info.get("items_digest") != _items_digest(self.item_ids):
                raise ValueError(
                    f"{self.resume_from}: the checkpoint was trained on another task / example "
                    "list than this config gives; resume with the same config (see config.json)."
                )
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.start_step = int(info["step"])
            self.optimizer_steps = self.start_step * optimizer_steps_per_step
            if hasattr(self.policy, "sync"):  # the vLLM engine starts from the initial weights
                self.policy.sync(self.unwrapped, self.optimizer_steps)
            logger.info("resuming from %s at step %d", self.resume_from, self.start_step)
        if accelerator.is_main_process:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            truncate_metrics(self.output_dir / "metrics.jsonl", self.start_step)
            config.save(self.output_dir / "config.json")
        accelerator.wait_for_everyone()
        if config.eval_every:
            self.eval_tasks = load_task_list(config, config.eval_split, limit=config.eval_limit)
        self.last_checkpoint = self.resume_from

    def steps(self, desc: str) -> Iterator[int]:
        """The remaining step indices, with a progress bar on the main process."""
        if self.start_step == 0 and self.eval_tasks:
            self.metrics.log(0, self.evaluate())
        self._bar = progress_bar(
            total=self.total_steps,
            initial=self.start_step,
            desc=desc,
            disable=not (self.config.progress and self.is_main),
            dynamic_ncols=True,
        )
        try:
            yield from range(self.start_step, self.total_steps)
        finally:
            self._bar.close()

    def local_items(self, step: int) -> list[str]:
        """This process's share of step ``step``'s items (ids)."""
        items = self.schedule.items(step)
        return [self.item_ids[i] for i in items[self.rank :: self.world]]

    def optimizer_step(self) -> float:
        """Clip the gradient, step the optimizer and the schedule; return the gradient norm."""
        grad_norm = float("nan")
        if self.config.max_grad_norm is not None:
            norm = self.accelerator.clip_grad_norm_(
                self.model.parameters(), self.config.max_grad_norm
            )
            grad_norm = float(norm)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        if hasattr(self.policy, "sync"):  # a vLLM engine samples the rollouts: give it the weights
            self.policy.sync(self.unwrapped, self.optimizer_steps)
        return grad_norm

    def end_step(self, step: int, metrics: Mapping[str, float], postfix: str = "") -> None:
        """Log step ``step`` (0-based), then evaluate and save when they are due."""
        done = step + 1
        metrics = dict(metrics)
        metrics["epoch"] = done / self.schedule.steps_per_epoch
        metrics["lr"] = float(self.scheduler.get_last_lr()[0])
        if self.config.eval_every and (done % self.config.eval_every == 0):
            metrics.update(self.evaluate())
        self.metrics.log(done, metrics)
        self.last_metrics = metrics
        if self._bar is not None:
            self._bar.update(1)
            if postfix:
                self._bar.set_postfix_str(postfix, refresh=False)
        last = done == self.total_steps
        if last or (self.config.save_every and done % self.config.save_every == 0):
            self.save(done)

    def evaluate(self) -> dict[str, float]:
        """Greedy pass@1 on the evaluation tasks."""
        return evaluate(self.policy, self.config, self.eval_tasks, self.accelerator)

    def save(self, done: int) -> Path:
        """Write ``checkpoint-DONE`` (every process takes part)."""
        info = {
            "epoch": done / self.schedule.steps_per_epoch,
            "items_digest": _items_digest(self.item_ids),
            "data_order": self.schedule.epoch_order((done) // self.schedule.steps_per_epoch),
            "config": self.config.to_dict(),
        }
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        self.last_checkpoint = save_checkpoint(
            self.config.output_dir,
            done,
            model=self.unwrapped,
            tokenizer=self.tokenizer,
            trainer_state=state,
            info=info,
            rank=self.rank,
            world_size=self.world,
            barrier=self.accelerator.wait_for_everyone,
            keep=self.config.save_total_limit,
        )
        return self.last_checkpoint

    def finish(self) -> TrainResult:
        """Close the logs, release the writer lock and return the result."""
        self.metrics.close()
        self.accelerator.wait_for_everyone()
        self.close()
        return TrainResult(
            output_dir=self.output_dir,
            checkpoint=self.last_checkpoint if self.is_main else None,
            steps=self.total_steps,
            last_metrics=self.last_metrics,
            model=self.unwrapped,
        )


def _vllm_policy(config: TrainConfig, rank: int, world_size: int = 1) -> Any:
    """The colocated vLLM engine of ``rollout_engine="vllm"`` (see ``vllm_sync``), started from
    the initial weights (``plan`` syncs it at once when resuming)."""

    return VLLMTrainingPolicy(
        policy_path(config.policy),
        lora_rank=config.lora_r if config.finetune == "lora" else None,
        output_dir=config.output_dir,
        rank=rank,
        world_size=world_size,  # one engine per process, on its own GPU
        gpu_memory_utilization=config.vllm_gpu_memory_utilization,
        seed=config.seed + rank,
    )


SHARDED = ("DEEPSPEED", "FSDP", "MEGATRON_LM")
"""accelerate's ``DistributedType`` names that shard the model, which passkt's trainers refuse."""


def refuse_sharding(accelerator: Any) -> None:
    """Refuse an accelerate state that shards the model (DeepSpeed ZeRO, FSDP, Megatron-LM).

    passkt's trainers keep DDP and one process: their rollouts generate with the unsharded
    model, and their step accumulates gradients with ``no_sync``, which ZeRO >= 2 ignores. TRL's
    ``GRPOTrainer`` (``--backend trl``) does both under sharding.

    Raises:
        ValueError: One line naming the state and ``--backend trl``.
    """
    kind = getattr(accelerator.distributed_type, "name", str(accelerator.distributed_type))
    if kind in SHARDED:
        raise ValueError(
            f"passkt's own trainer runs in one process or under DDP, not {kind} (the accelerate "
            "config asks for it); shard through TRL instead: passkt train grpo --backend trl "
            "(train_grpo_trl), or launch without the DeepSpeed / FSDP config."
        )


def holds_training_run(output_dir: Path) -> bool:
    """Whether ``output_dir`` holds a training run (a checkpoint, or the metrics of one)."""
    return latest_checkpoint(output_dir) is not None or (output_dir / "metrics.jsonl").is_file()


def preflight(config: TrainConfig, *, resume: bool) -> None:
    """The checks of ``passkt.agents.preflight`` that come before the output folder is made:
    the policy (a model folder with a ``config.json`` and sound files), its dtype, and the files
    of the checkpoint a resume would read (``passkt.agents.model_files``). (``--resume`` on a
    folder without a run is refused by the command line, ``holds_training_run``.)"""
    refuse_options(config, "passkt")  # e.g. a vLLM server, which only TRL's route syncs
    policy = config.policy if ":" in config.policy else f"hf:{config.policy}"
    check_policy_spec(policy, trainable=True)
    check_dtype(config.dtype, "dtype")
    if resume:
        checkpoint = latest_checkpoint(Path(config.output_dir))
        if checkpoint is not None:  # every file a resume reads, before anything is loaded
            check_model_files(checkpoint)


def _find_checkpoint(output_dir: Path, resume: bool) -> Path | None:
    checkpoint = latest_checkpoint(output_dir)
    if resume:
        if checkpoint is None:
            logger.info("resume=True but %s has no checkpoint: starting from scratch", output_dir)
        return checkpoint
    if checkpoint is not None or (output_dir / "metrics.jsonl").is_file():
        raise RunExistsError(
            f"{output_dir} already holds a run; pass resume=True (--resume) to continue it, "
            "or choose another output_dir."
        )
    return None


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


class Timer:
    """Wall-clock seconds of named phases: ``with timer("rollout"): ...``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str) -> _Phase:
        return _Phase(self, name)


class _Phase:
    def __init__(self, timer: Timer, name: str) -> None:
        self.timer, self.name = timer, name

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - self.start
        self.timer.seconds[self.name] = self.timer.seconds.get(self.name, 0.0) + elapsed
