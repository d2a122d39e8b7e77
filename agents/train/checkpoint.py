"""Checkpoints of both trainers: Hugging Face folders plus the trainer state, saved atomically.

Layout of ``output_dir/checkpoint-STEP/``:

- ``config.json``, ``model.safetensors``, ``generation_config.json``, tokenizer files: a plain
  Hugging Face model folder. ``HFPolicy(path)``, ``passkt eval --policy hf:path`` and
  ``AutoModelForCausalLM.from_pretrained(path)`` load it. With LoRA these are the *merged*
  weights (base + adapter), computed out of place so the live model is not touched.
- ``adapter/`` (LoRA only): the peft adapter, which resuming loads onto the base model.
- ``optimizer_state.json`` + ``optimizer_state.safetensors``: optimizer and scheduler;
  ``rng_state_RANK.json`` + ``rng_state_RANK.safetensors``: the python, numpy and torch RNG
  states of every process; ``trainer_state.json``: step, epoch, data order, config. No file is
  pickled, so resuming from a folder someone else wrote cannot run their code
  (``passkt.agents.train.safe_state``); a checkpoint of an older passkt with ``.pt`` files is
  refused rather than unpickled.

A checkpoint is written to a hidden temporary folder and renamed into place, so a crash leaves
either the whole checkpoint or none; ``latest_checkpoint`` ignores the temporary folders.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from passkt.agents.train.safe_state import UnsafeStateError, load_state, save_state, state_files

logger = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
STATE_JSON = "trainer_state.json"
STATE_NAME = "optimizer_state"
LEGACY_PICKLES = ("trainer_state.pt", "rng_state_0.pt")
"""Files of the old, pickled checkpoint format (never loaded)."""
ADAPTER_DIR = "adapter"


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    """``output_dir/checkpoint-STEP``."""
    return Path(output_dir) / f"checkpoint-{step}"


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints in ``output_dir``, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _CHECKPOINT.match(path.name)
        if match and (path / STATE_JSON).is_file():
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint in ``output_dir``, or None."""
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def rng_state() -> dict[str, Any]:
    """The python, numpy and torch (CPU and CUDA) RNG states of this process."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what ``rng_state`` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def merged_lora_state_dict(peft_model: Any) -> dict[str, torch.Tensor]:
    """The state dict of the base model with every LoRA update added to its weight.

    Out of place (the live model keeps its separate adapter), so saving a checkpoint never
    perturbs training: merging and unmerging in place would round the base weights.
    """
    # optional: the hf extra (torch, transformers)
    from peft.tuners.lora import Linear as LoraLinear

    base = peft_model.get_base_model()
    adapter = peft_model.active_adapter
    deltas: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if isinstance(module, LoraLinear):
            if adapter in module.merged_adapters:
                continue  # already inside the base weight
            deltas[f"{name}.weight"] = module.get_delta_weight(adapter)
        elif hasattr(module, "lora_A"):
            raise NotImplementedError(
                f"Merging LoRA layer {name} ({type(module).__name__}) is not supported; target "
                "linear layers only (lora_target_modules)."
            )
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for key, value in base.state_dict().items():
            if "lora_" in key:
                continue
            clean = key.replace(".base_layer.", ".")
            if clean in deltas:
                value = value + deltas.pop(clean).to(value.dtype)
            merged[clean] = value
    if deltas:
        raise RuntimeError(f"LoRA deltas without a base weight: {sorted(deltas)}")
    return merged


def save_model_folder(model: Any, tokenizer: Any, folder: Path) -> None:
    """Write ``model`` (merged if it is a peft model, plus its adapter) and the tokenizer."""
    if hasattr(model, "peft_config"):
        model.save_pretrained(folder / ADAPTER_DIR, safe_serialization=True)
        base = model.get_base_model()
        merged = merged_lora_state_dict(model)
        base.save_pretrained(folder, state_dict=merged, safe_serialization=True)
    else:
        model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def save_checkpoint(
    output_dir: str | Path,
    step: int,
    *,
    model: Any,
    tokenizer: Any,
    trainer_state: dict[str, Any],
    info: dict[str, Any],
    rank: int = 0,
    world_size: int = 1,
    barrier: Callable[[], None] = lambda: None,
    keep: int | None = None,
) -> Path:
    """Save a checkpoint atomically; every process calls this (rank 0 writes the shared parts).

    Args:
        output_dir: The run folder.
        step: Optimizer steps done (the checkpoint's name).
        model: The unwrapped model (peft or plain).
        tokenizer: Its tokenizer.
        trainer_state: Optimizer, scheduler, ... state dicts, same on every rank (tensors,
            numbers, strings, containers: what ``safe_state.save_state`` takes).
        info: JSON-ready facts (step, epoch, data order, config) for ``trainer_state.json``.
        rank: This process's rank; ``world_size``: the number of processes.
        barrier: Waits for every process (``accelerator.wait_for_everyone``).
        keep: Keep only the newest ``keep`` checkpoints.

    Returns:
        The checkpoint folder.
    """
    final = checkpoint_dir(output_dir, step)
    tmp = Path(output_dir) / f".checkpoint-{step}.tmp"
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    barrier()
    save_state(rng_state(), tmp, f"rng_state_{rank}")
    if rank == 0:
        save_model_folder(model, tokenizer, tmp)
        save_state(trainer_state, tmp, STATE_NAME)
        info = {**info, "step": step, "world_size": world_size}
        (tmp / STATE_JSON).write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    barrier()
    if rank == 0:
        _fsync_tree(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        if keep is not None:
            for old in list_checkpoints(output_dir)[:-keep]:
                shutil.rmtree(old, ignore_errors=True)
        logger.info("saved checkpoint %s", final)
    barrier()
    return final


def load_trainer_state(folder: Path, rank: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(trainer_state, info)`` of a checkpoint; restores this process's RNG states too.

    A process whose rank has no RNG file (the run had fewer processes) takes rank 0's. Nothing
    is unpickled (see the module docstring).

    Raises:
        UnsafeStateError: a state file is missing or malformed, or the checkpoint is in the old
            pickled format.
    """
    info = json.loads((folder / STATE_JSON).read_text())
    if not state_files_exist(folder, STATE_NAME):
        legacy = [name for name in LEGACY_PICKLES if (folder / name).is_file()]
        if legacy:
            raise UnsafeStateError(
                f"{folder}: the optimizer and RNG states are pickled ({', '.join(legacy)}), an old "
                "passkt format that could run code when loaded, so it is not loaded. Its model "
                "folder still loads (hf:PATH); to continue training, start a new run from it."
            )
    state = load_state(folder, STATE_NAME)
    rng_name = f"rng_state_{rank}"
    if not state_files_exist(folder, rng_name):
        rng_name = "rng_state_0"
    set_rng_state(load_state(folder, rng_name))
    return state, info


def state_files_exist(folder: Path, name: str) -> bool:
    """Whether ``save_state`` wrote ``name`` in ``folder``."""
    return all(path.is_file() for path in state_files(folder, name))


def load_adapter(peft_model: Any, folder: Path) -> None:
    """Load a checkpoint's LoRA adapter weights into a peft model built with the same config."""
    from peft import set_peft_model_state_dict  # optional: the hf extra (torch, transformers)
    from safetensors.torch import load_file  # optional: the hf extra (torch, transformers)

    path = folder / ADAPTER_DIR / "adapter_model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: this checkpoint was not saved by a LoRA run (finetune='lora'); "
            "resume it with finetune='full'."
        )
    result = set_peft_model_state_dict(peft_model, load_file(str(path)))
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"{path}: adapter keys the model does not have: {unexpected[:5]}")


def truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines logged after ``step`` (by a run that crashed past its last checkpoint).

    The file is rewritten atomically, so a resumed run's ``metrics.jsonl`` equals that of a run
    that was never interrupted. A torn last line (a crash while logging) is dropped.

    Raises:
        ValueError: a line before the last is not JSON (names the file and line).
    """
    if not path.is_file():
        return
    kept = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if number == len(lines):  # torn by a crash mid-write: that step is logged again
                continue
            raise ValueError(
                f"{path}: line {number} is not valid JSON ({e}); the file was edited or corrupted. "
                "Delete or repair that line, then resume."
            ) from e
        if isinstance(record, dict) and record.get("step", 0) <= step:
            kept.append(line)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
