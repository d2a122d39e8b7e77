"""Bases in the study's regime by a rule fixed in the profile, read on a calibration split.

A study's question needs bases with room above their boundary: a base that already solves 95 of
100 problems at least once leaves no +0.04 gain to detect. Choosing the base by looking at it is
a forking path, so the choice is a rule, written in the profile (``[calibrate]`` with
``[targets]``) before anything is trained, and read on problems that neither the evaluation nor
the fine-tuning sees (``splits/<cat>/calibration.txt``).

While a base pretrains, the model of every ``calibrate.every``-th step from
``calibrate.from_step`` on is kept (``steps/step-N/``) and evaluated on the calibration split at
the category's largest T (math: T = 0) with ``calibrate.n`` samples: pass@1 and the boundary
pass@(n, T_max), one row per (step, category) in ``calibration.jsonl``. Per category,
:func:`choose` then applies the rule:

1. A category is *decided* once a kept step puts its boundary above the target range (more
   pretraining only raises it) or pretraining reaches its last step; pretraining stops as soon
   as every category is decided (so a base costs only the steps its choice needs).
2. Among the kept steps whose boundary lies inside its range, the earliest whose pass@1 lies
   inside its range too; if none, the one whose pass@1 is nearest its range (the boundary target
   comes first: the room above it is what the question needs).
3. If no kept step put the boundary inside, the step whose boundary is nearest its range; the
   summary then reports the base as outside the regime (it is used, never dropped by eye).

The category's base is then that step's model: seed s's SFT, GRPO and RFT on math train from
its math checkpoint, on bridge from its bridge checkpoint, and are compared with them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CALIBRATION_FILE", "Calibrator", "Choice", "Point", "choose", "distance"]

CALIBRATION_FILE = "calibration.jsonl"


@dataclass(frozen=True)
class Point:
    """One kept step of one category on the calibration split."""

    step: int
    pass1: float
    pass_n: float


@dataclass(frozen=True)
class Choice:
    """What the rule picks for one category (``step`` None: nothing evaluated yet)."""

    step: int | None
    decided: bool
    reason: str


def distance(value: float, bounds: Sequence[float]) -> float:
    """How far ``value`` lies outside ``[low, high]`` (0 inside)."""
    low, high = bounds
    return max(low - value, value - high, 0.0)


def choose(
    points: Sequence[Point], target: Mapping[str, Sequence[float]], *, final: bool
) -> Choice:
    """The rule of the module docstring for one category.

    ``target``: ``{"pass_n": [low, high], "pass1": [low, high]}`` (pass1 optional); ``final``:
    pretraining has reached its last step, so the category is decided whatever its boundary.
    """
    points = sorted(points, key=lambda p: p.step)
    if not points:
        return Choice(None, final, "no kept step was evaluated")
    span_n = target["pass_n"]
    span_1 = target.get("pass1", (0.0, 1.0))
    decided = final or any(p.pass_n > span_n[1] for p in points)
    inside = [p for p in points if distance(p.pass_n, span_n) == 0]
    if inside:
        both = [p for p in inside if distance(p.pass1, span_1) == 0]
        if both:
            return Choice(both[0].step, decided, "boundary and pass@1 inside their targets")
        best = min(inside, key=lambda p: (distance(p.pass1, span_1), p.step))
        side = "below" if best.pass1 < span_1[0] else "above"
        return Choice(
            best.step,
            decided,
            f"boundary inside its target, pass@1 {side} its target at every such step (nearest)",
        )
    best = min(points, key=lambda p: (distance(p.pass_n, span_n), p.step))
    return Choice(best.step, decided, "no kept step put the boundary inside its target (nearest)")


def read_points(folder: Path) -> dict[str, list[Point]]:
    """``calibration.jsonl`` of a base folder, per category."""
    out: dict[str, list[Point]] = {}
    path = folder / CALIBRATION_FILE
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line:
                row = json.loads(line)
                out.setdefault(row["category"], []).append(
                    Point(int(row["step"]), float(row["pass1"]), float(row["pass_n"]))
                )
    return out


def rates(correct: np.ndarray, n: int) -> tuple[float, float]:
    """pass@1 and pass@n of per-problem success counts among ``n`` samples."""
    correct = np.asarray(correct)
    return float((correct / n).mean()), float((correct > 0).mean())


class Calibrator:
    """The ``on_keep`` hook of one base's pretraining: evaluates kept steps, says when to stop.

    ``evaluate(cat, step, model_dir)`` returns the per-problem success counts on the
    calibration split (the study passes one that runs ``passkt.eval.evaluate``); rows already in
    ``calibration.jsonl`` are not evaluated again, so a resumed pretraining picks up where it
    was stopped.
    """

    def __init__(
        self,
        folder: Path,
        targets: Mapping[str, Mapping[str, Sequence[float]]],
        *,
        from_step: int,
        n: int,
        evaluate: Any,
    ) -> None:
        self.folder, self.targets, self.from_step, self.n = folder, targets, from_step, n
        self._evaluate = evaluate

    def kept_steps(self, up_to: int) -> list[int]:
        steps = []
        for path in (self.folder / "steps").glob("step-*"):
            if path.name.removeprefix("step-").isdigit():
                step = int(path.name.removeprefix("step-"))
                if self.from_step <= step <= up_to and (path / "config.json").is_file():
                    steps.append(step)
        return sorted(steps)

    def __call__(self, step: int, kept: Path | None = None) -> bool:
        """Evaluate every kept step up to ``step`` that an undecided category lacks; True once
        every category is decided."""
        points = read_points(self.folder)
        for s in self.kept_steps(step):
            for cat, target in self.targets.items():
                before = [p for p in points.get(cat, []) if p.step < s]
                done = any(p.step == s for p in points.get(cat, []))
                if done or choose(before, target, final=False).decided:
                    continue
                model = self.folder / "steps" / f"step-{s}"
                pass1, pass_n = rates(self._evaluate(cat, s, model), self.n)
                row = {"category": cat, "step": s, "pass1": pass1, "pass_n": pass_n, "n": self.n}
                with (self.folder / CALIBRATION_FILE).open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row, sort_keys=True) + "\n")
                points.setdefault(cat, []).append(Point(s, pass1, pass_n))
        return all(
            choose(points.get(cat, []), target, final=False).decided
            for cat, target in self.targets.items()
        )

    def choices(self, *, final: bool) -> dict[str, dict[str, Any]]:
        """Per category: the chosen step, its model folder (relative to the base folder), the
        reason and every evaluated point."""
        points = read_points(self.folder)
        out = {}
        for cat, target in self.targets.items():
            mine = sorted(points.get(cat, []), key=lambda p: p.step)
            choice = choose(mine, target, final=final)
            out[cat] = {
                "step": choice.step,
                "model": None if choice.step is None else f"steps/step-{choice.step}",
                "reason": choice.reason,
                "points": [[p.step, p.pass1, p.pass_n] for p in mine],
                "n": self.n,
            }
        return out
