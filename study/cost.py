"""The study report's last sections: the cost (``timings.jsonl``, every unit's attempts) and the
profile the study ran."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from passkt.study.report_format import markdown_table
from passkt.study.stages import STAGES

__all__ = ["cost_markdown", "profile_markdown", "read_timings", "stage_order"]


def read_timings(out: Path) -> list[dict[str, Any]]:
    """Every line of ``OUT/timings.jsonl`` (none before the first unit ran)."""
    path = out / "timings.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def cost_markdown(out: Path) -> str:
    """The report's ``## Cost`` section: every unit's wall time, attempts and threads, per stage."""
    lines = read_timings(out)
    units: dict[tuple[str, str], list[dict]] = defaultdict(list)
    stages: dict[str, float] = defaultdict(float)
    for line in lines:
        if line["status"] == "stage":
            stages[line["stage"]] += line["seconds"]
        else:
            units[line["stage"], line["unit"]].append(line)
    by_stage: dict[str, list] = defaultdict(list)
    for (stage, unit), attempts in units.items():
        by_stage[stage].append((unit, attempts))
    rows = []
    for stage in sorted(by_stage, key=stage_order):
        unit_seconds = sum(a["seconds"] for _, attempts in by_stage[stage] for a in attempts)
        wall = stages.get(stage)
        rows.append(
            [stage, str(len(by_stage[stage])), f"{unit_seconds:.1f}",
             "-" if wall is None else f"{wall:.1f}"]
        )  # fmt: skip
    total = sum(stages.values())
    rows.append(["**total**", "", "", f"{total:.1f} ({total / 60:.1f} min)"])
    detail = []
    for stage in sorted(by_stage, key=stage_order):
        for unit, attempts in by_stage[stage]:
            seconds = sum(a["seconds"] for a in attempts)
            failed = sum(a["status"] == "failed" for a in attempts)
            threads = attempts[-1].get("threads")
            detail.append(
                [stage, unit, f"{seconds:.1f}", str(len(attempts)), str(failed),
                 "-" if threads is None else str(threads)]
            )  # fmt: skip
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        "## Cost\n\nWall time of every unit (all attempts, including interrupted ones) from "
        f"`timings.jsonl`; this machine has {cores} cores. Stage wall time is the time the stage "
        "took with its units run in parallel (`--jobs`), summed over calls; this report's own "
        "time is recorded after it is written.\n\n"
        + markdown_table(["stage", "units", "unit seconds", "stage wall seconds"], rows)
        + "\n"
        + markdown_table(["stage", "unit", "seconds", "attempts", "failed", "threads"], detail)
    )


def stage_order(stage: str) -> int:
    """A stage's place in the pipeline (unknown stages last): the order of cost tables."""

    return STAGES.index(stage) if stage in STAGES else len(STAGES)


def profile_markdown(out: Path) -> str:
    """The report's ``## Profile`` section: the profile the study ran, as stored."""
    stored = json.loads((out / "profile.json").read_text(encoding="utf-8"))
    return (
        f"## Profile\n\nFrom `{stored['source']}` (stored in `profile.json`):\n\n```json\n"
        + json.dumps(stored["profile"], indent=2)
        + "\n```\n"
    )
