"""One process of the emulated multi-process TRL route; run with ``torchrun --nproc_per_node 2``.

``python trl_emulated_worker.py ddp|zero3 MODEL OUT_DIR`` trains the TRL route
(``train_grpo_trl``, multi-turn rollouts on the ``people`` BridgeQA source) 2 steps under
accelerate's state for the launcher's processes: gloo DDP on the CPU, or DeepSpeed ZeRO-3 on
DeepSpeed's CPU accelerator (``DS_ACCELERATOR=cpu``). Then every rank computes the GRPO loss of its
half of one fixed batch through the trainer's wrapped model (DDP module or ZeRO-3 engine, which
gathers its shards), and rank 0 writes ``OUT_DIR/emulated.json``: the mean over ranks (the halves
hold equal token counts, so it is the loss of the whole batch), the steps and the world size. The
test compares it with one process's loss of the same batch on the saved ``final`` checkpoint.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import torch
from train_sources import register_test_sources

import passkt.agents.train.trl as trl_route
from passkt.agents.train.common import TokenSequence, collate, sequence_logprobs
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.grpo import grpo_loss

ZERO3 = {
    "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True},
    "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto",
    "train_batch_size": "auto",
    "gradient_clipping": "auto",
    "bf16": {"enabled": False},
    "fp16": {"enabled": False},
}
"""The study's ``zero3.yaml`` stage in fp32 (no bf16 kernels on this CPU path)."""


def emulated_config(model: str, out: str) -> GRPOConfig:
    return GRPOConfig(
        policy=f"hf:{model}",
        env_id="BridgeQA-v0",
        env_kwargs={"source": "people"},
        t_train=2,  # multi-turn: search, observation, answer
        group_size=2,
        tasks_per_step=2,
        micro_batch_size=2,
        learning_rate=1e-3,
        max_steps=2,
        max_new_tokens=8,
        finetune="full",
        output_dir=out,
        progress=False,
    )


def fixed_batch(vocab: int) -> tuple[list[TokenSequence], torch.Tensor]:
    """Four sequences of 12 tokens, the last 6 trained on, and their advantages."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (4, 12), generator=generator).tolist()
    mask = (False,) * 6 + (True,) * 6
    return [TokenSequence(tuple(row), mask) for row in ids], torch.tensor([1.0, -1.0, 0.5, -0.5])


def fixed_batch_loss(model, config: GRPOConfig, rows: slice, pad_id: int, vocab: int) -> float:
    """passkt's GRPO loss (token mean) of ``rows`` of the fixed batch under ``model``.

    The sampling log-probabilities are fixed at a uniform policy's, -log(vocab), so the ratio and
    the loss depend on the model's weights (with the model's own they would be 1 and -A)."""
    sequences, advantages = fixed_batch(vocab)
    batch = collate(sequences[rows], pad_id)
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, config.temperature)  # (B, L)
        old = torch.full_like(logp, -math.log(vocab))  # (B, L)
        loss, _, _ = grpo_loss(logp, batch.policy_mask, advantages[rows], config, logp_old=old)
    return float(loss)


def varying_reward(prompts, completions, **_) -> list[float]:
    """A stand-in for the env's reward that differs between samples (a random model never solves
    a task, so the env's rewards are all 0, the advantages too, and no weight would move)."""
    return [(len(str(completion)) % 5) / 4 for completion in completions]


def main(kind: str, model: str, out: str) -> None:
    torch.set_num_threads(1)
    register_test_sources()
    trl_route.env_reward = varying_reward
    made = []
    make = trl_route.make_trl_trainer
    trl_route.make_trl_trainer = lambda *a, **k: made.append(make(*a, **k)) or made[-1]
    config = emulated_config(model, out)
    overrides = {}
    if kind == "zero3":
        import deepspeed  # optional: the scale extra

        # On GPUs ``accelerate launch`` starts DeepSpeed's process group (NCCL) before the model
        # loads under zero.Init; on the CPU accelerator the worker starts it on gloo itself.
        deepspeed.init_distributed(dist_backend="gloo")
        overrides = {"deepspeed": ZERO3}
    result = trl_route.train_grpo_trl(config, **overrides)
    trainer = made[0]
    rank, world = trainer.accelerator.process_index, trainer.accelerator.num_processes
    half = slice(2 * rank, 2 * rank + 2)
    wrapped = trainer.model_wrapped
    wrapped.eval()
    vocab = int(result.model.config.vocab_size)
    pad_id = trainer.processing_class.pad_token_id
    loss = fixed_batch_loss(wrapped, config, half, pad_id, vocab)
    losses = trainer.accelerator.gather(torch.tensor([loss])).tolist()
    if trainer.accelerator.is_main_process:
        record = {
            "loss": sum(losses) / len(losses),
            "steps": result.steps,
            "world": world,
            "distributed_type": trainer.accelerator.distributed_type.name,
        }
        (Path(out) / "emulated.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:4])
