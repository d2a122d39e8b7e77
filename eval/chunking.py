"""How an evaluation is cut into chunks (saved, resumable) and batches (rolled out together).

Each (task, sample) draws from its own seed, :func:`sample_seed`, so neither the chunk size nor
the batching changes which samples a run draws (for policies that honour per-row seeds, marked
``seeds_each_row``; see ``SamplingParams.seeds``). That frees both sizes for what they are for: a
chunk (default one task) is the unit a crash can lose, a batch is what the policy generates for at
once, and batches are sized from the policy's measured speed so that one takes about
``chunk_seconds`` (two minutes by default). A policy that samples a whole batch from one
generator (one without ``seeds_each_row``) keeps one chunk per batch, so its draws stay
reproducible.
Runs made before per-sample seeding seeded each chunk from its index (:func:`chunk_seed`); they
resume the way they were started, one chunk per batch.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from passkt.eval.store import MANIFEST_FILE

__all__ = [
    "DEFAULT_CHUNK_EPISODES",
    "DEFAULT_CHUNK_SECONDS",
    "SEEDING",
    "Batching",
    "chunk_seed",
    "default_chunk_tasks",
    "sample_seed",
    "stored_scheme",
]

DEFAULT_CHUNK_EPISODES = 256
"""Most (task, sample) episodes batched into one rollout: ``ceil(256 / n)`` tasks. Larger batches
run better on a GPU; smaller ones lose less work to a crash."""

DEFAULT_CHUNK_SECONDS = 120.0
"""A rollout batch is sized from the policy's measured speed to take about this long, so a crash
loses at most a few minutes of work (never less than one chunk)."""

SEEDING = "per-sample"
"""The manifest's ``seeding`` of new runs: each (task, sample) from :func:`sample_seed`."""


def default_chunk_tasks(n: int) -> int:
    """Tasks in ``DEFAULT_CHUNK_EPISODES`` episodes: the largest batch, and the chunk size of runs
    made before per-sample seeding."""
    return max(1, -(-DEFAULT_CHUNK_EPISODES // n))


def chunk_seed(seed: int, chunk: int) -> int:
    """The rollout seed of one chunk of a run made before per-sample seeding (resumes only)."""
    state = np.random.SeedSequence([int(seed) % 2**63, int(chunk)]).generate_state(1)[0]
    return int(state) % (2**31 - 1)


def sample_seed(seed: int, task_id: str, sample: int) -> int:
    """The seed of one (task, sample): a well-mixed function of the run seed, the task id and the
    sample index only, so the same sample is drawn whatever chunk or batch it runs in."""
    task = int.from_bytes(hashlib.sha256(task_id.encode("utf-8")).digest()[:8], "little")
    state = np.random.SeedSequence([int(seed) % 2**63, task, int(sample)]).generate_state(1)[0]
    return int(state) % (2**31 - 1)


def stored_scheme(out_dir: str | Path | None, resume: bool) -> tuple[str | None, int | None]:
    """``(seeding, chunk_tasks)`` of the run a resume continues (``(SEEDING, None)`` otherwise):
    a run keeps the seeding and the chunk size it was started with."""
    path = None if out_dir is None else Path(out_dir) / MANIFEST_FILE
    if not resume or path is None or not path.is_file():
        return SEEDING, None
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return SEEDING, None  # RunStore.open reports the broken manifest
    chunk = stored.get("chunk_tasks")
    return stored.get("seeding"), chunk if isinstance(chunk, int) else None


@dataclass
class Batching:
    """How chunks are grouped into rollout batches.

    With per-sample seeds a batch may hold any number of consecutive chunks without changing a
    sample, so it is sized from the measured seconds per task to take about ``seconds`` (at
    most ``max_tasks`` tasks, at least one chunk); the first batch is one chunk, to measure.
    Runs seeded per chunk roll out one chunk per batch with :func:`chunk_seed`, and so does a
    policy that samples a batch jointly (no ``seeds_each_row``), so that its draws do not depend
    on timing.
    """

    seed: int
    per_sample: bool
    seconds: float
    max_tasks: int
    adaptive: bool = True
    """Whether batches may follow the measured speed: only for a policy that seeds each row on
    its own (``seeds_each_row``); any other samples a batch jointly, so its batches stay one
    chunk each, and reproducible."""
    tasks: int = 1

    def take(self, todo: Sequence[int], bounds: Sequence[tuple[int, int]]) -> list[int]:
        """The next batch: consecutive unfinished chunks from the start of ``todo``."""
        group = [todo[0]]
        if not (self.per_sample and self.adaptive):
            return group
        size = bounds[todo[0]][1] - bounds[todo[0]][0]
        for chunk in todo[1:]:
            more = bounds[chunk][1] - bounds[chunk][0]
            if size + more > self.tasks or chunk != group[-1] + 1:
                break
            group.append(chunk)
            size += more
        return group

    def measured(self, tasks: int, seconds: float) -> None:
        """Size the next batch from this one's speed."""
        per_task = max(seconds, 1e-9) / tasks
        self.tasks = max(1, min(self.max_tasks, math.floor(self.seconds / per_task)))

    def rollout_seeds(self, ids: Sequence[str], n: int, chunk: int) -> dict[str, Any]:
        """``rollout`` keyword arguments that seed a batch of tasks starting at ``chunk``."""
        if not self.per_sample:
            return {"seed": chunk_seed(self.seed, chunk)}
        seeds = {(t, s): sample_seed(self.seed, t, s) for t in ids for s in range(n)}
        return {"seed": self.seed, "episode_seeds": seeds}
