"""One process of a distributed trainer test; run with ``torchrun --nproc_per_node 2``.

``python distributed_worker.py sft|grpo MODEL OUT_DIR`` trains with the test's settings (the same
code a single process runs) and writes ``OUT_DIR/weights_rank{RANK}.pt``: this process's final
trainable weights, so the test can check that the ranks agree.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
from train_sources import register_test_sources

from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.grpo import train_grpo
from passkt.agents.train.sft import train_sft


def sft_config(model: str, out: str, batch_size: int, micro_batch_size: int) -> SFTConfig:
    """The SFT run both the 2-process and the 1-process side of the test use."""
    return SFTConfig(
        policy=f"hf:{model}",
        env_id="BridgeQA-v0",
        env_kwargs={"source": "people"},
        t_train=2,
        finetune="full",
        learning_rate=3e-3,
        batch_size=batch_size,
        micro_batch_size=micro_batch_size,
        max_steps=3,
        output_dir=out,
        progress=False,
    )


def grpo_config(model: str, out: str) -> GRPOConfig:
    return GRPOConfig(
        policy=f"hf:{model}",
        env_id="Math-v0",
        env_kwargs={"source": "digits"},
        t_train=0,
        group_size=8,
        tasks_per_step=4,
        micro_batch_size=8,
        learning_rate=1e-3,
        max_steps=8,
        max_new_tokens=12,
        output_dir=out,
        progress=False,
    )


def trainable_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def main(kind: str, model: str, out: str) -> None:
    torch.set_num_threads(1)
    register_test_sources()
    if kind == "sft":
        result = train_sft(sft_config(model, out, batch_size=4, micro_batch_size=1))
    else:
        result = train_grpo(grpo_config(model, out))
    rank = int(os.environ.get("RANK", "0"))
    torch.save(trainable_weights(result.model), Path(out) / f"weights_rank{rank}.pt")


if __name__ == "__main__":
    main(*sys.argv[1:4])
