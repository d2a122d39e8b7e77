"""A study's compact data: what its summary is computed from, written and read.

Per run, per problem and T: the correct count among the n samples, how many of those episodes
ended by the agent's own answer before the budget ran out, and how many were cut off
(:func:`episode_counts`); plus the study's categories, problems, T grids and timing lines.
:func:`write_data` writes the ``data/`` folder (merging pieces run on different machines),
:func:`read_data` reads and checks it. :mod:`passkt.study.summary` makes the summary from it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DATA_DIR",
    "SHARED",
    "DataError",
    "RunCounts",
    "StudyData",
    "episode_counts",
    "read_data",
    "write_data",
]

DATA_DIR = "data"
DATA_VERSION = 2
_ROLE_RANK = {"base": 0, "SFT": 1, "RL": 2, "RFT": 3}
SHARED = -1
"""The seed of a base run that every replicate trained from (no ``base.per_seed``)."""


class DataError(ValueError):
    """A data folder that cannot be read: the message names the file."""


IDENTITY_KEYS = ("env_id", "env_kwargs", "task_ids", "budgets")
"""What makes two exports of a category the same study (the rest, such as the entity overlap and
the targets, describes it and may be added by a newer export)."""


PER_REPLICATE_KEYS = ("configs", "calibration")
"""Descriptive keys kept per replicate (trained configs, each base's calibration): a piece that
exports some seeds adds to them rather than replacing the other seeds'."""


@dataclass(frozen=True)
class RunCounts:
    """One evaluation, compactly: counts per problem and T among its n samples."""

    name: str
    role: str
    """``base``, ``SFT``, ``RL`` or ``RFT``."""
    seed: int
    """The replicate: the training seed (and with per-seed bases, the pretraining seed); a base
    shared by every replicate has ``SHARED``."""
    n: int
    correct: np.ndarray
    """``(P, T)`` successes."""
    answered: np.ndarray
    """``(P, T)`` episodes the agent ended by answering before its budget ran out."""
    cut: np.ndarray
    """``(P, T)`` episodes truncated at the budget (no answer after the final notice)."""


@dataclass(frozen=True)
class StudyData:
    """What the summary is made from: one category's runs on shared problems, per category."""

    name: str
    per_seed: bool
    level: float
    categories: dict[str, dict[str, Any]]
    """``cat -> {"env_id", "task_ids", "budgets", "runs": [RunCounts]}``."""
    timings: list[dict[str, Any]]
    """The study's ``timings.jsonl`` lines (every unit and stage, every piece)."""
    margin: float | None = None
    """The equivalence margin the plan pre-registered (profile ``stats.margin``): a change whose
    interval lies inside ``±margin`` is *equivalent* to none. ``None``: none was registered, so
    a change whose interval includes 0 is inconclusive, never "no change"."""
    planned_seeds: int | None = None
    """The replicates the plan fixes (the profile's ``seeds``): the plan decides its claim with
    all of them in, and a look with fewer is interim. ``None``: no plan recorded, so every look
    is read as final."""


# ---------------------------------------------------------------------- export (from a study)


def episode_counts(
    records: Sequence[dict[str, Any]], ids: Sequence[str], budgets: Sequence[int], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(correct, answered, cut)`` counts ``(P, T)`` from a run's result records.

    An episode *answered* when it terminated with fewer tool calls than its budget (the agent
    chose to answer); it was *cut* when it was truncated at the budget; the rest answered after
    the final notice that no calls were left (forced)."""
    row = {task: i for i, task in enumerate(ids)}
    col = {t: j for j, t in enumerate(budgets)}
    correct = np.zeros((len(ids), len(budgets)), dtype=np.int64)
    answered = np.zeros_like(correct)
    cut = np.zeros_like(correct)
    seen = np.zeros_like(correct)
    for r in records:
        i, j = row.get(r["task_id"]), col.get(r["budget"])
        if i is None or j is None:
            continue
        seen[i, j] += 1
        correct[i, j] += bool(r["correct"])
        answered[i, j] += bool(r.get("terminated")) and int(r.get("tool_calls", 0)) < r["budget"]
        cut[i, j] += bool(r.get("truncated"))
    if (seen != n).any():
        raise DataError(
            f"a run has {int(seen.min())}..{int(seen.max())} episodes per cell, not n={n}"
        )
    return correct, answered, cut


def _run_json(run: RunCounts) -> dict[str, Any]:
    return {
        "name": run.name,
        "role": run.role,
        "seed": run.seed,
        "n": run.n,
        "correct": run.correct.tolist(),
        "answered": run.answered.tolist(),
        "cut": run.cut.tolist(),
    }


def write_data(folder: Path, data: StudyData, *, merge: bool = False) -> Path:
    """Write ``data``: ``study.json`` (the study, its categories' problems and T grids),
    ``runs/<cat>-<role>-s<seed>.json`` (one evaluation each) and ``timings.jsonl``.

    ``merge``: keep the runs and timing lines already in ``folder`` (a study run in pieces, on
    machines that each hold only their piece's run folders), replacing runs of the same name.

    Raises:
        DataError: ``merge`` into a folder of another study (other problems or T grid).
    """
    meta = {
        "version": DATA_VERSION,
        "name": data.name,
        "per_seed": data.per_seed,
        "level": data.level,
        **({} if data.margin is None else {"margin": data.margin}),
        **({} if data.planned_seeds is None else {"planned_seeds": data.planned_seeds}),
        "categories": {
            c: {k: v for k, v in spec.items() if k != "runs"}
            for c, spec in sorted(data.categories.items())
        },
    }
    meta = json.loads(json.dumps(meta))
    lines = [json.dumps(t, sort_keys=True) for t in data.timings]
    if merge and (folder / "study.json").is_file():
        old = read_data(folder)
        for cat, spec in old.categories.items():
            mine = meta["categories"].get(cat)
            same = json.loads(json.dumps({k: v for k, v in spec.items() if k != "runs"}))
            if mine is not None and any(same.get(k) != mine.get(k) for k in IDENTITY_KEYS):
                raise DataError(
                    f"{folder / 'study.json'}: category {cat} holds other problems "
                    "or another T grid than this study's; export to another folder"
                )
            if mine is not None:  # per-replicate records: an earlier piece's replicates stay
                for key in PER_REPLICATE_KEYS:
                    if key in same or key in mine:
                        mine[key] = {**same.get(key, {}), **mine.get(key, {})}
            meta["categories"].setdefault(cat, same)  # descriptive keys: the newer export's
        kept = [json.dumps(t, sort_keys=True) for t in old.timings]
        lines = kept + [line for line in lines if line not in set(kept)]
    runs_dir = folder / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    if not merge:
        for stale in runs_dir.glob("*.json"):
            stale.unlink()
    _write_text(folder / "study.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")
    for cat, spec in data.categories.items():
        for run in spec["runs"]:
            body = {"category": cat, **_run_json(run)}
            text = json.dumps(body, sort_keys=True, separators=(",", ":")) + "\n"
            _write_text(runs_dir / f"{cat}-{run.role}-s{run.seed}.json", text)
    _write_text(folder / "timings.jsonl", "".join(line + "\n" for line in lines))
    return folder


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def read_data(folder: Path) -> StudyData:
    """The data folder written by :func:`write_data` (checked: every run on its category's grid).

    Raises:
        DataError: a missing or unreadable file, or counts off the grid, naming the file.
    """
    meta_path = folder / "study.json"
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{meta_path}: cannot read the study's data ({e})") from e
    if meta.get("version") != DATA_VERSION:
        raise DataError(f"{meta_path}: data version {meta.get('version')}, expected {DATA_VERSION}")
    categories = {cat: {**spec, "runs": []} for cat, spec in sorted(meta["categories"].items())}
    for path in sorted((folder / "runs").glob("*.json")):
        try:
            r = json.loads(path.read_text(encoding="utf-8"))
            spec = categories[r["category"]]
            shape = (len(spec["task_ids"]), len(spec["budgets"]))
            arrays = [np.asarray(r[key], dtype=np.int64) for key in ("correct", "answered", "cut")]
            bad = any(a.shape != shape or (a < 0).any() or (a > r["n"]).any() for a in arrays)
            if bad:
                raise DataError(f"{path}: counts off the {shape} grid or outside 0..n")
            run = RunCounts(r["name"], r["role"], int(r["seed"]), int(r["n"]), *arrays)
        except DataError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"{path}: cannot read the run's counts ({e})") from e
        spec["runs"].append(run)
    for spec in categories.values():
        spec["runs"].sort(key=lambda r: (_ROLE_RANK.get(r.role, 9), r.seed))
    timings = []
    path = folder / "timings.jsonl"
    if path.is_file():
        try:
            timings = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
        except ValueError as e:
            raise DataError(f"{path}: not JSON lines ({e})") from e
    margin, planned = meta.get("margin"), meta.get("planned_seeds")
    return StudyData(
        meta["name"],
        bool(meta["per_seed"]),
        float(meta["level"]),
        categories,
        timings,
        None if margin is None else float(margin),
        None if planned is None else int(planned),
    )
