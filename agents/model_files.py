"""Model and checkpoint folders are checked file by file before anything loads them.

transformers, tokenizers and safetensors fail deep inside on a damaged file (``header too large``,
``'utf-8' codec can't decode byte 0x80``) without saying which file, and a pickled weights file
is a way to run someone else's code. ``check_model_files`` reads only what is cheap (each JSON
file, each template, each safetensors header) and raises ``ModelFileError`` with one line that
names the file and what is wrong:

- ``*.json`` (``config.json``, ``generation_config.json``, ``tokenizer.json``,
  ``trainer_state.json`` ...): UTF-8 text holding one JSON object;
- ``*.jinja`` (``chat_template.jinja``): UTF-8 text;
- ``*.safetensors``: a header of sane length that is a JSON object whose tensors lie inside the
  file;
- pickle-format weights (``pytorch_model.bin``, ``model.pt``, ``adapter_model.bin`` ...): refused,
  since unpickling can run arbitrary code; passkt writes and reads safetensors only.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from passkt.envs.errors import ModelFileError

__all__ = ["PICKLE_SUFFIXES", "check_model_files"]

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
"""Suffixes of pickle-format weight files (refused)."""

_MAX_HEADER = 100 << 20
"""The safetensors format's own limit on its JSON header (100 MB)."""
_SUBFOLDERS = ("adapter",)
"""Subfolders of a passkt checkpoint that are loaded too (the LoRA adapter)."""


def check_model_files(folder: str | Path) -> None:
    """Check every file of a model or checkpoint folder that a load would read.

    Args:
        folder: A local model folder (``config.json``, weights, tokenizer files) or a passkt
            checkpoint (the same, plus trainer and optimizer state and ``adapter/``).

    Raises:
        ModelFileError: one line naming the first damaged or refused file and what is wrong.
    """
    folder = Path(folder)
    for sub in (folder, *(folder / s for s in _SUBFOLDERS)):
        if not sub.is_dir():
            continue
        for path in sorted(sub.iterdir()):
            if path.is_file():
                _check_file(path)


def _is_pickled_weights(path: Path) -> bool:
    """Weights a load would unpickle: ``pytorch_model*.bin``, ``adapter_model.bin``,
    ``model*.bin``, and the pickled trainer state of an older passkt. Other pickles of a trainer's
    checkpoint (``optimizer.pt``, ``training_args.bin``) are never read by passkt."""
    name = path.name.lower()
    if not name.endswith(PICKLE_SUFFIXES):
        return False
    stem = name.rsplit(".", 1)[0]
    return stem.startswith(("pytorch_model", "model", "adapter_model", "consolidated")) or name in (
        "trainer_state.pt",
        "rng_state_0.pt",
    )


def _check_file(path: Path) -> None:
    name = path.name.lower()
    if _is_pickled_weights(path):
        raise ModelFileError(
            f"{path}: pickle-format weights are refused, because loading a pickle can run "
            "arbitrary code; remove the file, or convert it to safetensors "
            "(model.save_pretrained(folder, safe_serialization=True))"
        )
    if name.endswith(".json"):
        _check_json(path)
    elif name.endswith(".jinja"):
        _text(path)
    elif name.endswith(".safetensors"):
        _check_safetensors(path)


def _text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(
            f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); the file is damaged"
        ) from None
    except OSError as e:
        raise ModelFileError(f"{path}: cannot be read ({e.strerror or e})") from None


def _check_json(path: Path) -> None:
    try:
        value = json.loads(_text(path))
    except json.JSONDecodeError as e:
        raise ModelFileError(
            f"{path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); the file is "
            "damaged"
        ) from None
    if not isinstance(value, dict):
        raise ModelFileError(
            f"{path}: JSON of the wrong shape ({type(value).__name__}, expected an object); the "
            "file is damaged"
        )


def _check_safetensors(path: Path) -> None:
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise ModelFileError(f"{path}: not a safetensors file (shorter than its header)")
        (length,) = struct.unpack("<Q", prefix)
        if length > min(_MAX_HEADER, size - 8):
            raise ModelFileError(
                f"{path}: corrupt safetensors file (its header claims {length} bytes; the file "
                f"has {size})"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ModelFileError(f"{path}: corrupt safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ModelFileError(f"{path}: corrupt safetensors file (its header is not an object)")
    data = size - 8 - length
    for tensor, spec in header.items():
        if tensor == "__metadata__":
            continue
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data
        ):
            raise ModelFileError(
                f"{path}: corrupt safetensors file (tensor {tensor!r} lies outside the file; "
                "it was cut short or edited)"
            )
