"""The manifest of a run: what was asked for (the request, ``MATCH_KEYS``) and where it ran.

Split from ``passkt.eval.store``, which re-exports these names; the store writes the manifest once
per run directory and checks a resumed request against it.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import json
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.redact import redact_value
from passkt.eval.chunk_digests import INTEGRITY
from passkt.eval.run_integrity import check_no_secrets

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "MATCH_KEYS",
    "REPORT_KEYS",
    "chunk_bounds",
    "make_manifest",
]

MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1

MATCH_KEYS: tuple[str, ...] = (
    "format",
    "env_id",
    "env_kwargs",
    "split",
    "policy",
    "policy_options",
    "sampling",
    "n",
    "budgets",
    "seed",
    "share_prefix",
    "chunk_tasks",
    "task_ids",
    "seeding",
)
"""Manifest keys that decide which samples a run draws: a resumed run must match all of them."""

REPORT_KEYS: tuple[str, ...] = ("name", "num_tasks", "num_chunks", "integrity")
"""Further manifest keys that change what a report says (the run's label, its size) or how it is
read (``integrity``: the run keeps per-chunk digests). With ``MATCH_KEYS`` they are hashed into
the first record of each chunk, so an edit of any of them is refused by name."""

_VERSIONED_PACKAGES = ("gymnasium", "numpy", "torch", "transformers", "vllm", "openai", "peft")


def _jsonable(value: Any) -> Any:
    """A canonical JSON form (Paths and tuples become strings and lists)."""
    return json.loads(json.dumps(value, default=str))


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("passkt", *_VERSIONED_PACKAGES):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def git_commit() -> str | None:
    """The commit of the source tree passkt runs from, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=here,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if out.returncode == 0 and commit else None


def make_manifest(
    *,
    env_id: str,
    env_kwargs: Mapping[str, Any],
    split: str,
    policy: str,
    policy_options: Mapping[str, Any] | None,
    sampling: Mapping[str, Any],
    n: int,
    budgets: Sequence[int],
    seed: int,
    share_prefix: bool,
    chunk_tasks: int,
    task_ids: Sequence[str],
    name: str | None = None,
    runtime: Mapping[str, Any] | None = None,
    seeding: str | None = "per-sample",
) -> dict[str, Any]:
    """The manifest of a run: the request (``MATCH_KEYS``) plus provenance.

    Args:
        env_id: Registered env id.
        env_kwargs: ``gym.make`` kwargs besides ``split`` and ``max_tool_calls``.
        split: Task split.
        policy: Policy spec or description (e.g. ``scripted:heuristic``, ``hf:Qwen/...``).
        policy_options: Backend options that change samples (``seed=`` of a scripted policy).
        sampling: ``SamplingParams`` as a dict.
        n: Samples per (task, T).
        budgets: The T grid (sorted).
        seed: Run seed (chunk seeds derive from it).
        share_prefix: Whether budgets share one rollout (prefix sharing).
        chunk_tasks: Tasks per chunk.
        task_ids: The tasks, in run order.
        name: Run name used in tables and legends (default: the policy).
        runtime: Options that do not change the samples (``device=``); recorded, not checked.
        seeding: How samples are seeded (``passkt.eval.evaluate.SEEDING``); ``None`` for a run
            made before the key existed (its chunks are seeded from their index).

    Raises:
        ValueError: when an option looks like a secret (``api_key``, ``token``, ...), which the
            manifest would hold in plain text; name an environment variable instead.
    """
    check_no_secrets((*(policy_options or {}), *(runtime or {})), MANIFEST_FILE)
    manifest = {
        "format": FORMAT_VERSION,
        "name": name or policy,
        "env_id": env_id,
        "env_kwargs": dict(env_kwargs),
        "split": split,
        "policy": policy,
        "policy_options": dict(policy_options or {}),
        "runtime": dict(runtime or {}),
        "sampling": dict(sampling),
        "n": int(n),
        "budgets": sorted(int(b) for b in budgets),
        "seed": int(seed),
        "share_prefix": bool(share_prefix),
        "chunk_tasks": int(chunk_tasks),
        "task_ids": list(task_ids),
        **({} if seeding is None else {"seeding": seeding}),
        "num_tasks": len(task_ids),
        "num_chunks": len(chunk_bounds(len(task_ids), chunk_tasks)),
        "integrity": INTEGRITY,
        "versions": package_versions(),
        "git_commit": git_commit(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return redact_value(_jsonable(manifest))  # a key in a URL or option value is never written


def chunk_bounds(num_tasks: int, chunk_tasks: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` task slices of the chunks: they depend only on the two sizes."""
    if chunk_tasks < 1:
        raise ValueError(f"chunk_tasks must be >= 1, got {chunk_tasks}")
    return [(i, min(i + chunk_tasks, num_tasks)) for i in range(0, num_tasks, chunk_tasks)]
