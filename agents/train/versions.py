"""Which vLLM release the TRL route may meet, and whether the installed TRL supports it.

TRL's vLLM route reaches into engine internals (the colocated engine's model runner,
the server's weight-transfer endpoints), which change between vLLM releases; TRL states the
releases it supports in ``trl.import_utils.is_vllm_available`` and only warns outside them. The
``vllm`` extra pins :data:`PINNED_VLLM`, a release inside that range; the plan check compares
the installed vLLM (or, without one, the pin) against the installed TRL's range and warns on a
mismatch.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import re

from passkt.agents.train.rules import Check

PINNED_VLLM = "0.31.0"
"""The release ``pip install 'passkt[vllm]'`` installs (``pyproject.toml``'s ``vllm`` extra)."""
API_VLLM = "0.31.0"
"""The release ``tests/agents/vllm_api.json`` was read from (``benchmarks/vllm_api.py``)."""


def _release(version: str) -> tuple[int, ...]:
    """``"0.24.0+cu129"`` -> ``(0, 24, 0)``: the release numbers, local and pre tags dropped."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def trl_vllm_range() -> tuple[str, str] | None:
    """``(lowest, highest)`` vLLM release the installed TRL supports, read from its own check
    (None without TRL, or when the check no longer names a range)."""
    try:
        from trl import import_utils  # optional: the trl extra
    except ImportError:
        return None
    source = inspect.getsource(import_utils.is_vllm_available)
    found = re.findall(r'Version\("(\d+\.\d+\.\d+)"\)', source)
    return (found[0], found[1]) if len(found) >= 2 else None


def installed_vllm() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_version_check() -> Check:
    """A plan ``Check`` (a warning when it fails): the vLLM release against TRL's range."""
    supported = trl_vllm_range()
    installed = installed_vllm()
    version, where = (
        (installed, "installed") if installed else (PINNED_VLLM, "the vllm extra's pin")
    )
    if supported is None:
        return Check(
            "vLLM version", True, f"vLLM {version} ({where}); TRL not installed", warning=True
        )
    low, high = supported
    inside = _release(low) <= _release(version) <= _release(high)
    detail = f"vLLM {version} ({where}); the installed TRL supports {low} to {high}"
    fix = "" if inside else f"pip install 'vllm=={PINNED_VLLM}' (pip install -e '.[vllm]')"
    return Check("vLLM version", inside, detail, fix, warning=not inside)
