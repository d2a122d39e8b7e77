"""vLLM rollouts in passkt's own GRPO: a colocated engine kept in step with the trained weights.

``GRPOConfig(rollout_engine="vllm")`` samples the training rollouts with a vLLM engine in the
training process (one per process under DDP) instead of transformers' decoding loop; training
itself stays in transformers / accelerate. After every optimizer step the engine gets the new
weights (``TrainingRun.optimizer_step`` calls ``VLLMTrainingPolicy.sync``):

- full fine-tuning: every parameter, gathered one at a time when ZeRO-3 or FSDP2 shards it
  (``gathered_parameters``), renamed to the checkpoint names vLLM's model expects
  (``vllm_weight_name``), through vLLM's own ``model.load_weights`` (the call TRL's colocate mode
  makes), then the prefix cache is reset (its entries were computed with the old weights);
- LoRA: the adapter is saved to ``output_dir/vllm-lora/rank-R/step-N`` and used from the next
  request on as ``LoRARequest(name, id, path)`` with a fresh name and id per step
  (``lora_request_args``): vLLM caches adapters by id, so reusing an id would keep sampling from
  the first step's adapter. The adapter is saved from this process's copy: use LoRA with DDP
  (``ddp.yaml``), not with a sharded model.

vLLM needs a CUDA GPU. Everything that decides *what* is sent (names, which tensors, adapter
folders and ids, which folders to delete) is a pure function tested here; the engine calls are the
few thin lines of ``VLLMTrainingPolicy``. This path was not run on a GPU in this repository.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import socket
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.vllm_policy import (
    VLLMPolicy,
    generate_with_engine,
)

logger = logging.getLogger(__name__)

_WRAPPER_PREFIXES = ("module.", "_orig_mod.", "base_model.model.")
"""Prefixes that DDP, ``torch.compile`` and peft put in front of the checkpoint names."""
_WRAPPER_INFIXES = ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def vllm_weight_name(name: str) -> str | None:
    """The checkpoint name vLLM loads for a training parameter, or None for LoRA's own weights.

    ``module.model.layers.0.self_attn.q_proj.weight`` (DDP) and
    ``base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight`` (peft) both become
    ``model.layers.0.self_attn.q_proj.weight``.
    """
    if ".lora_" in name or "lora_magnitude_vector" in name:
        return None
    changed = True
    while changed:
        changed = False
        for prefix in _WRAPPER_PREFIXES:
            if name.startswith(prefix):
                name, changed = name[len(prefix) :], True
    for infix in _WRAPPER_INFIXES:
        name = name.replace(infix, "")
    return name.replace(".base_layer.", ".")


def full_weights(named_parameters: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``(vLLM name, tensor)`` of every base weight (LoRA's own matrices left out)."""
    out = []
    seen = set()
    for name, tensor in named_parameters:
        target = vllm_weight_name(name)
        if target is None or target in seen:  # tied weights appear once
            continue
        seen.add(target)
        out.append((target, tensor.detach()))
    return out


def gathered_parameters(model: Any) -> Iterator[tuple[str, Any]]:
    """``model.named_parameters()`` with sharded parameters made whole, one at a time.

    A DeepSpeed ZeRO-3 shard is gathered for the duration of its item (a collective: every
    process iterates), an FSDP2 ``DTensor`` becomes its full tensor; others are given as they are.
    Consume each item before asking for the next (``VLLMTrainingPolicy.sync`` loads it at once).
    """
    for name, param in model.named_parameters():
        if hasattr(param, "ds_id"):  # DeepSpeed ZeRO-3
            import deepspeed

            with deepspeed.zero.GatheredParameters([param]):
                yield name, param.data
        elif hasattr(param, "full_tensor"):  # FSDP2
            yield name, param.full_tensor()
        else:
            yield name, param


def adapter_folder(output_dir: str | Path, rank: int, step: int) -> Path:
    """Where the LoRA adapter of optimizer step ``step`` goes for process ``rank``'s engine."""
    return Path(output_dir) / "vllm-lora" / f"rank-{rank}" / f"step-{step}"


def lora_request_args(step: int, folder: str | Path) -> tuple[str, int, str]:
    """``LoRARequest(name, int_id, path)`` arguments: a fresh name and a positive id per step."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return f"passkt-step-{step}", step + 1, str(folder)


def stale_adapter_folders(folders: Sequence[Path], current: Path, keep: int = 2) -> list[Path]:
    """Adapter folders safe to delete: all but the newest ``keep`` steps and never ``current``."""

    def step_of(folder: Path) -> int:
        return int(folder.name.removeprefix("step-"))

    ordered = sorted((f for f in folders if f.name.startswith("step-")), key=step_of)
    return [f for f in ordered[: max(len(ordered) - keep, 0)] if f != current]


VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The ``max_lora_rank`` values vLLM's ``LoRAConfig`` accepts."""


def vllm_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds a LoRA of ``rank`` (warns when it
    rounds up; an adapter of a smaller rank than the engine's maximum loads as it is).

    Raises:
        ValueError: For a rank above vLLM's largest (512) or below 1.
    """
    if rank < 1 or rank > VLLM_LORA_RANKS[-1]:
        raise ValueError(f"lora_r={rank}: vLLM serves LoRA ranks 1 to {VLLM_LORA_RANKS[-1]}")
    accepted = next(r for r in VLLM_LORA_RANKS if r >= rank)
    if accepted != rank:
        logger.warning(
            "lora_r=%d is not a rank vLLM accepts (%s): its engine gets max_lora_rank=%d",
            rank,
            ", ".join(map(str, VLLM_LORA_RANKS)),
            accepted,
        )
    return accepted


def engine_placement(world_size: int) -> dict[str, Any]:
    """``vllm.LLM`` arguments that put one engine in each training process, as TRL's colocated
    engine is made: the engine joins the launcher's processes
    (``distributed_executor_backend="external_launcher"``) and runs in this process on its own
    GPU (``LOCAL_RANK``), with no engine subprocess. A single process does the same (a launcher
    of one, :func:`launcher_environment`): with vLLM's default engine subprocess,
    :func:`load_weights`' function would have to be pickled, which vLLM refuses unless
    ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``. ``world_size`` is kept for the signature's sake."""
    del world_size
    return {"distributed_executor_backend": "external_launcher"}


def launcher_environment(
    rank: int, world_size: int, environ: dict[str, str], free_port: int
) -> dict[str, str]:
    """The variables ``external_launcher`` reads that ``environ`` lacks (a process not started
    by ``torchrun`` / ``accelerate launch``): ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR`` and ``MASTER_PORT`` (``free_port``), as TRL sets them for its colocated
    engine. Variables a launcher set are never changed."""
    wanted = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "localhost",
        "MASTER_PORT": str(free_port),
    }
    return {key: value for key, value in wanted.items() if not environ.get(key)}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("localhost", 0))
        return int(sock.getsockname()[1])


def load_weights(llm: Any, weights: list[tuple[str, Any]]) -> None:
    """Load ``(vLLM name, tensor)`` pairs into the engine's model through ``LLM.apply_model``
    (vLLM's ``collective_rpc`` to every worker), which exists with vLLM's multiprocessing on or
    off, unlike the engine's in-process driver worker (which only exists with it off)."""
    llm.apply_model(functools.partial(_load_into, weights=weights))


def _load_into(model: Any, weights: list[tuple[str, Any]]) -> None:
    model.load_weights(weights)


class VLLMTrainingPolicy(VLLMPolicy):
    """``VLLMPolicy`` over the model being trained, synced after every optimizer step."""

    def __init__(
        self,
        model: str | Path,
        *,
        lora_rank: int | None = None,
        output_dir: str | Path = ".",
        rank: int = 0,
        world_size: int = 1,
        gpu_memory_utilization: float = 0.3,
        seed: int = 0,
    ) -> None:
        engine_kwargs: dict[str, Any] = engine_placement(world_size)
        os.environ.update(launcher_environment(rank, world_size, dict(os.environ), _free_port()))
        if lora_rank is not None:
            engine_kwargs.update(
                enable_lora=True, max_lora_rank=vllm_lora_rank(lora_rank), max_loras=1
            )
        super().__init__(
            model,
            gpu_memory_utilization=gpu_memory_utilization,
            seed=seed,
            engine_kwargs=engine_kwargs,
        )
        self.lora = lora_rank is not None
        self.output_dir, self.rank = Path(output_dir), rank
        self._lora_request: Any = None

    @property
    def pad_token_id(self) -> int:
        """The id the trainer pads training batches with (attention-masked, never trained)."""
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)

    def sync(self, model: Any, step: int) -> None:
        """Give the engine the weights of ``model`` after optimizer step ``step``."""
        if self.lora:
            folder = adapter_folder(self.output_dir, self.rank, step)
            model.save_pretrained(str(folder))
            from vllm.lora.request import LoRARequest  # optional: the vllm extra (CUDA only)

            self._lora_request = LoRARequest(*lora_request_args(step, folder))
            for stale in stale_adapter_folders(list(folder.parent.iterdir()), folder):
                shutil.rmtree(stale, ignore_errors=True)
            return
        seen: set[str] = set()
        for name, tensor in gathered_parameters(model):  # one at a time: ZeRO-3 / FSDP gathers
            target = vllm_weight_name(name)
            if target is not None and target not in seen:
                seen.add(target)
                load_weights(self.llm, [(target, tensor.detach())])
        self.llm.reset_prefix_cache()

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """As ``VLLMPolicy.generate_ids``, with the current step's LoRA adapter if any."""
        return generate_with_engine(
            self.llm, self._vllm, prompts, params, self.decode, lora_request=self._lora_request
        )
