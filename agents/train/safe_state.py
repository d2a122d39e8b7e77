"""Save and load nested training state (optimizer, scheduler, RNG) without pickle.

``torch.load(weights_only=False)`` runs whatever a ``.pt`` file asks for, so resuming from a
run folder that someone else could write would execute their code. Here a state is split in
two files that load without executing anything: ``NAME.safetensors`` holds every tensor, and
``NAME.json`` holds the structure (dicts, lists, tuples, numbers, strings, bytes, numpy arrays),
with each tensor replaced by its key in the safetensors file.

The JSON form keeps what a state dict needs to round-trip exactly: dicts with integer keys (an
optimizer's ``state``), tuples (``betas``), bytes and numpy arrays (the RNG states).
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["UnsafeStateError", "load_state", "save_state", "state_files"]


class UnsafeStateError(ValueError):
    """A state file that is missing, malformed, or in a format that could run code."""


def state_files(folder: Path, name: str) -> tuple[Path, Path]:
    """``(NAME.json, NAME.safetensors)`` in ``folder``."""
    return folder / f"{name}.json", folder / f"{name}.safetensors"


def save_state(state: Any, folder: Path, name: str) -> None:
    """Write ``state`` as ``NAME.json`` + ``NAME.safetensors`` in ``folder`` (fsynced).

    Raises:
        TypeError: for a value of another type (the message gives its path in the state).
    """
    from safetensors.torch import save_file  # optional: the hf extra (torch, transformers)

    tensors: dict[str, torch.Tensor] = {}
    structure = _encode(state, tensors, "state")
    structure_path, tensor_path = state_files(folder, name)
    save_file(tensors, str(tensor_path))
    with structure_path.open("w", encoding="utf-8") as f:
        json.dump(structure, f)
        f.flush()
        os.fsync(f.fileno())


def load_state(folder: Path, name: str) -> Any:
    """Read what ``save_state`` wrote (tensors on the CPU).

    Raises:
        UnsafeStateError: when a file is missing or does not have the expected form.
    """
    from safetensors.torch import load_file  # optional: the hf extra (torch, transformers)

    structure_path, tensor_path = state_files(folder, name)
    if not structure_path.is_file() or not tensor_path.is_file():
        raise UnsafeStateError(
            f"{folder}: {structure_path.name} or {tensor_path.name} is missing; this is not a "
            "complete passkt checkpoint"
        )
    try:
        structure = json.loads(structure_path.read_text(encoding="utf-8"))
        tensors = load_file(str(tensor_path))
        return _decode(structure, tensors)
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise UnsafeStateError(f"{structure_path}: not a valid saved state ({e})") from e


def _encode(value: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.Tensor):
        key = str(len(tensors))
        tensors[key] = value.detach().cpu().contiguous().clone()
        return {"$tensor": key}
    if isinstance(value, np.ndarray):
        return {"$ndarray": [value.dtype.str, list(value.shape), value.ravel().tolist()]}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode("ascii")}
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, tensors, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise TypeError(f"{path}: dict key {key!r} of type {type(key).__name__}")
            items.append([key, _encode(item, tensors, f"{path}[{key!r}]")])
        return {"$dict": items}
    raise TypeError(f"{path}: cannot save a {type(value).__name__} without pickle")


def _decode(value: Any, tensors: dict[str, torch.Tensor]) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) != 1:
        raise ValueError(f"unexpected object with keys {sorted(value)[:5]}")
    ((tag, body),) = value.items()
    if tag == "$tensor":
        return tensors[body]
    if tag == "$ndarray":
        dtype, shape, data = body
        return np.asarray(data, dtype=np.dtype(dtype)).reshape(shape)
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$tuple":
        return tuple(_decode(v, tensors) for v in body)
    if tag == "$dict":
        return {key: _decode(item, tensors) for key, item in body}
    raise ValueError(f"unknown tag {tag!r}")
