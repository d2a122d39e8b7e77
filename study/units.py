"""The units of each stage of a study: what runs, in which folder, after which other units."""

from __future__ import annotations

import json
from pathlib import Path

from passkt.study.analysis import make_analysis, make_comparison
from passkt.study.profile import StudyError
from passkt.study.report import make_report
from passkt.study.stages import (
    ROLES,
    STAGES,
    Study,
    Unit,
    floor_names,
    make_base,
    make_eval,
    make_splits,
    make_training,
)


def _eval_needs(study: Study, cat: str, seed: int) -> tuple[tuple[str, Path], ...]:
    needs = [("eval-base", folder) for folder in study.floor_eval_dirs(cat)]
    needs += [("eval-trained", study.eval_dir(cat, r.lower(), seed)) for r in study.trained_roles()]
    return tuple(needs)


def stage_units(study: Study, stage: str) -> list[Unit]:
    """The units of ``stage`` for the selected categories and seeds, in run order."""
    cats, seeds = study.categories, study.seeds
    if stage == "splits":
        return [Unit(c, study.splits_dir(c), lambda c=c: make_splits(study, c)) for c in cats]
    if stage == "base":
        return [
            Unit(
                study.base_folder(p).name,
                study.base_folder(p),
                lambda p=p: make_base(study, p),
                # a calibrated base reads every category's calibration split
                tuple(("splits", study.splits_dir(c)) for c in study.categories)
                if study.calibrates
                else (),
            )
            for p in study.bases()
        ]
    if stage == "eval-base":
        bases = study.bases()
        return [
            Unit(
                f"{c}/{folder.name}",
                folder,
                lambda c=c, r=r, p=p: make_eval(study, c, "base", None, repeat=r, pretrain_seed=p),
                (
                    ("splits", study.splits_dir(c)),
                    ("base", study.base_folder(p)),
                ),
            )
            for p in bases
            for c in cats
            for r, folder in enumerate(study.base_eval_dirs(c, p))
        ]
    if stage == "train":
        # GRPO first: it is the slow one, so with --jobs the SFT runs fill in around it.
        methods = sorted(study.methods(), key=lambda m: m != "grpo")
        return [
            Unit(
                f"{m}/{c}/s{s}",
                study.train_dir(m, c, s),
                lambda m=m, c=c, s=s: make_training(study, m, c, s),
                (("splits", study.splits_dir(c)), ("base", study.base_folder(study.base_of(s)))),
            )
            for m in methods
            for c in cats
            for s in seeds
        ]
    if stage == "eval-trained":
        return [
            Unit(
                f"{c}/{ROLES[m].lower()}-s{s}",
                study.eval_dir(c, ROLES[m].lower(), s),
                lambda m=m, c=c, s=s: make_eval(study, c, ROLES[m], s),
                (("train", study.train_dir(m, c, s)),),
            )
            for c in cats
            for s in seeds
            for m in study.methods()
        ]
    if stage in ("compare", "analyze"):
        if stage == "compare":
            for c in cats:
                for s in seeds:
                    _forget_other_floor(study, c, s, study.compare_dir(c, s))
        folder, make = {
            "compare": (study.compare_dir, make_comparison),
            "analyze": (study.analysis_dir, make_analysis),
        }[stage]
        return [
            Unit(
                f"{c}/s{s}",
                folder(c, s),
                lambda c=c, s=s, make=make: make(study, c, s),
                _eval_needs(study, c, s),
            )
            for c in cats
            for s in seeds
        ]
    if stage == "report":
        needs = [("compare", study.compare_dir(c, s)) for c in cats for s in seeds]
        needs += [("analyze", study.analysis_dir(c, s)) for c in cats for s in seeds]
        _forget_other_report(study, needs)
        return [Unit("report", study.report_dir, lambda: make_report(study), tuple(needs))]
    raise StudyError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")


def _forget_other_report(study: Study, needs: list[tuple[str, Path]]) -> None:
    """A report made for other categories or seeds, with another noise floor, or before a
    comparison or analysis it reads was made again, is made again (it takes seconds)."""
    marker = study.report_dir / "done.json"
    if marker.is_file():
        done = json.loads(marker.read_text(encoding="utf-8"))
        made_for = (done.get("categories"), done.get("seeds"), done.get("floor", {}))
        floor = {c: floor_names(study, c) for c in study.categories}
        made = marker.stat().st_mtime_ns
        newer = [f for _, f in needs if (f / "done.json").is_file()
                 and (f / "done.json").stat().st_mtime_ns > made]  # fmt: skip
        if made_for != (study.categories, study.seeds, floor) or newer:
            marker.unlink()


def _forget_other_floor(study: Study, cat: str, seed: int, folder: Path) -> None:
    """A comparison read against another set of base evaluations (``eval.floor_pretrain_seeds``
    changed) is made again. Comparisons made before the floor was recorded had the base's own
    repeats, which is what ``floor_pretrain_seeds = []`` gives."""
    marker = folder / "done.json"
    if marker.is_file():
        done = json.loads(marker.read_text(encoding="utf-8"))
        recorded = done.get("floor", [study.relative(f) for f in study.base_eval_dirs(cat)])
        if recorded != floor_names(study, cat, seed):
            marker.unlink()
