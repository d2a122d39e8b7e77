"""The matched-data SFT control through TRL's ``SFTTrainer`` (the optional extra ``trl``).

The same expert episodes as ``train_sft`` (``sft.expert_examples``: the oracle's, a ``py:``
agent's, the policy's own successes, or ``data_path``), tokenized once by passkt, go to TRL as a
pre-tokenized dataset: ``input_ids`` and ``assistant_masks`` (1 at the model's own tokens, 0 at
the prompt and every observation), so TRL's labels are passkt's ``policy_mask`` and its loss is
the token-mean NLL of ``train_sft`` (``aggregation="token_mean"``). Under ``accelerate launch``
TRL's trainer shards with DeepSpeed ZeRO or FSDP like the GRPO route.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from passkt.agents.train.config import SFTConfig, policy_path
from passkt.agents.train.report import make_callback
from passkt.agents.train.sft import ExpertExample, expert_examples
from passkt.agents.train.trl import finish_trl_run, lora_config, refuse_unhonoured
from passkt.envs.errors import MissingDependencyError

_SCHEDULERS = {"constant": "constant", "linear": "linear", "cosine": "cosine"}


def sft_rows(examples: Sequence[ExpertExample]) -> list[dict[str, list[int]]]:
    """One pre-tokenized row per expert episode: its ids and its loss mask."""
    return [
        {
            "input_ids": list(e.sequence.token_ids),
            "assistant_masks": [int(m) for m in e.sequence.policy_mask],
        }
        for e in examples
    ]


def trl_sft_args(config: SFTConfig, world_size: int = 1, **overrides: Any) -> dict[str, Any]:
    """``trl.SFTConfig`` keyword arguments equivalent to a passkt ``SFTConfig``.

    Raises:
        ValueError: For ``aggregation="sequence_mean"`` (TRL averages over tokens), or a batch
            that does not split into micro-batches over the processes.
    """
    if config.aggregation != "token_mean":
        raise ValueError("TRL's SFTTrainer averages over tokens: use aggregation='token_mean'.")
    per_pass = config.micro_batch_size * world_size
    if config.batch_size % per_pass:
        raise ValueError(
            f"batch_size={config.batch_size} does not split into micro-batches of "
            f"{config.micro_batch_size} on {world_size} process(es)."
        )
    import torch  # optional: the hf extra

    args: dict[str, Any] = {
        "output_dir": config.output_dir,
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "weight_decay": config.weight_decay,
        "lr_scheduler_type": _SCHEDULERS[config.lr_scheduler],
        "warmup_steps": config.warmup_steps,
        "num_train_epochs": config.epochs,
        "max_steps": config.max_steps if config.max_steps is not None else -1,
        "per_device_train_batch_size": config.micro_batch_size,
        "gradient_accumulation_steps": config.batch_size // per_pass,
        "max_grad_norm": config.max_grad_norm if config.max_grad_norm is not None else 0.0,
        "max_length": None,  # passkt cut the episodes (max_length) already
        "logging_steps": 1,
        "save_strategy": "steps" if config.save_every else "no",
        "save_steps": config.save_every or 500,
        "save_total_limit": config.save_total_limit,
        "report_to": "none",  # our MetricsLogger callback writes the same sinks as train_sft
        "use_cpu": not torch.cuda.is_available(),
        "bf16": config.dtype == "bfloat16",
        "model_init_kwargs": {"dtype": config.dtype if config.dtype != "auto" else "auto"},
        "disable_tqdm": not config.progress,
    }
    if config.gradient_checkpointing:
        args["gradient_checkpointing"] = True
    refuse_unhonoured(config)
    args.update(overrides)
    return args


def make_trl_sft_trainer(config: SFTConfig, **trl_overrides: Any) -> Any:
    """A ``trl.SFTTrainer`` on ``config``'s expert episodes, masked as ``train_sft`` masks them."""
    try:
        from datasets import Dataset  # optional: the trl extra
        from trl import SFTConfig as TRLConfig  # optional: the trl extra
        from trl import SFTTrainer  # optional: the trl extra
    except ImportError as e:
        raise MissingDependencyError("trl", "trl") from e
    from transformers import AutoTokenizer  # optional: the hf extra

    path = policy_path(config.policy)
    tokenizer = AutoTokenizer.from_pretrained(path)
    examples = expert_examples(config, tokenizer)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return SFTTrainer(
        model=path,
        args=TRLConfig(**trl_sft_args(config, world, **trl_overrides)),
        train_dataset=Dataset.from_list(sft_rows(examples)),
        processing_class=tokenizer,
        peft_config=lora_config(config),
        callbacks=[make_callback(Path(config.output_dir), config.report_to, config.to_dict())],
    )


def train_sft_trl(config: SFTConfig, *, resume: bool = False, **trl_overrides: Any) -> Any:
    """Train with TRL's ``SFTTrainer`` as ``train_sft`` trains with ours; the final model goes to
    ``output_dir/final`` as a plain HF folder (LoRA merged), which ``passkt eval`` loads.

    Returns:
        A ``TrainResult`` (the final folder on the main process, the steps, the last metrics).
    """
    # optional: the hf extra (torch, transformers)
    from transformers.trainer_utils import get_last_checkpoint

    trainer = make_trl_sft_trainer(config, **trl_overrides)
    exists = resume and os.path.isdir(config.output_dir)
    trainer.train(resume_from_checkpoint=get_last_checkpoint(config.output_dir) if exists else None)
    return finish_trl_run(trainer, config, "loss")
