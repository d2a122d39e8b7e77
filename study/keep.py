"""Keep a study that runs in pieces: export what a piece made into the repository, restore it.

A study of several hours runs in pieces (a pretraining, then one seed's training and evaluations),
possibly on different machines, and a run folder (``runs/...``, ignored by git) does not survive a
fresh checkout. So after each piece::

    passkt study export runs/powered --to results/powered     # then commit results/powered

writes into ``results/powered``:

- ``data/``: the compact counts of every finished evaluation (one file each, merged with the
  pieces exported before) and the study's timing lines: what ``summary.md`` is made from;
- ``state/``: the stored profile, the splits and every finished base model (a few MB each), or
  an unfinished pretraining's last checkpoint: what the next piece needs to start from; and a
  finished training whose evaluation has not finished (its model, without the optimizer state),
  dropped again once that evaluation's counts are in ``data/``;
- ``analysis/<cat>-s<seed>/``: each finished analyze unit's tables (strategy diversity, segment
  perplexity; ``analysis.json`` and its Markdown), kilobytes: the analyses need the transcripts,
  which are not kept, so a fresh checkout could not remake them.

On a fresh checkout, ``passkt study restore results/powered --out runs/powered`` puts the state
back, so the next piece (``passkt study run --out runs/powered --seeds 1``) trains from the same
bases on the same problems; ``passkt study report results/powered`` remakes the summary.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

from passkt.agents.folders import mark_folder
from passkt.study.calibrate import CALIBRATION_FILE, choose, read_points
from passkt.study.cost import read_timings
from passkt.study.profile import PROFILE_FILE, StudyError, claim
from passkt.study.report import study_data
from passkt.study.stages import ROLES, Study, calibrator_of, read_done
from passkt.study.summary import DATA_DIR, write_data
from passkt.study.testbed.pretrain import STEPS_DIR, kept_step_dir

STATE_DIR = "state"
ANALYSIS_DIR = "analysis"
ANALYSIS_FILES = ("analysis.json", "diversity.md", "perplexity.md")

__all__ = ["ANALYSIS_DIR", "STATE_DIR", "export", "restore"]


def export(study: Study, to: Path) -> dict[str, Any]:
    """Write the finished evaluations' counts into ``to/data`` and the state into ``to/state``.

    Returns:
        What was written: evaluations per category, bases kept, analyses kept.
    """
    claim(to, "study-export", "--to")
    made = [c for c in study.categories if (study.splits_dir(c) / "done.json").is_file()]
    study = replace(study, categories=made)  # categories never started have nothing to keep
    data = study_data(study, finished_only=True)
    write_data(to / DATA_DIR, data, merge=True)
    mark_folder(to, "study-export")
    state = to / STATE_DIR
    state.mkdir(parents=True, exist_ok=True)
    shutil.copy2(study.out / PROFILE_FILE, state / PROFILE_FILE)
    for cat in study.categories:
        _copy_tree(study.splits_dir(cat), state / "splits" / cat)
    kept = []
    for pretrain_seed in study.bases():
        folder = study.base_folder(pretrain_seed)
        if not (folder / "done.json").is_file():
            if (folder / "checkpoint").is_dir():  # an unfinished pretraining resumes from here
                _copy_tree(folder / "checkpoint", state / folder.name / "checkpoint")
                for path in folder.glob("*.json*"):
                    _copy_file(path, state / folder.name / path.name)
                for step in _candidate_steps(study, pretrain_seed):
                    kept_dir = kept_step_dir(folder, step)
                    _copy_tree(kept_dir, state / study.relative(kept_dir))
                kept.append(f"{folder.name} (unfinished)")
            continue
        done = read_done(folder, "base")
        # an earlier piece kept this base's unfinished pretraining: the model replaces it
        shutil.rmtree(state / folder.name / "checkpoint", ignore_errors=True)
        shutil.rmtree(state / folder.name / STEPS_DIR, ignore_errors=True)
        models = {c["model"] for c in done.get("calibrated", {}).values()}
        if done.get("in_study"):  # a pretrained base: its model (or chosen steps) travel along
            for model in sorted(models or {done["model"]}):
                _copy_tree(study.out / model, state / model)
        if (folder / CALIBRATION_FILE).is_file():
            _copy_file(folder / CALIBRATION_FILE, state / folder.name / CALIBRATION_FILE)
        _copy_file(folder / "done.json", state / folder.name / "done.json")
        kept.append(folder.name)
    trained = _keep_trainings(study, state)
    analyses = []
    for cat in study.categories:
        for seed in study.seeds:
            folder = study.analysis_dir(cat, seed)
            if not (folder / "done.json").is_file():
                continue
            for name in ANALYSIS_FILES:
                if (folder / name).is_file():
                    _copy_file(folder / name, to / ANALYSIS_DIR / f"{cat}-s{seed}" / name)
            analyses.append(f"{cat}-s{seed}")
    runs = {cat: [r.name for r in spec["runs"]] for cat, spec in data.categories.items()}
    return {"evaluations": runs, "bases": kept, "trained": trained, "analyses": analyses}


TRAINER_STATE = ("optimizer_state", "rng_state")
"""Files of a trainer's checkpoint that only resume its training: a finished one leaves them."""


def _keep_trainings(study: Study, state: Path) -> list[str]:
    """Keep each finished training whose evaluation is unfinished, so the next piece evaluates it
    without training it again; drop a kept one whose evaluation has finished. Returns the units
    kept (``grpo/C/s5``)."""
    kept = []
    for method in study.methods():
        for cat in study.categories:
            for seed in study.seeds:
                folder = study.train_dir(method, cat, seed)
                target = state / study.relative(folder)
                if (study.eval_dir(cat, ROLES[method].lower(), seed) / "done.json").is_file():
                    shutil.rmtree(target, ignore_errors=True)  # its counts are in data/ now
                    continue
                if not (folder / "done.json").is_file():
                    continue
                done = read_done(folder, "train")
                model = study.out / done["model"] if done.get("in_study") else None
                if model is not None and model.resolve().is_relative_to(folder.resolve()):
                    for path in sorted(p for p in model.iterdir() if p.is_file()):
                        if not path.name.startswith(TRAINER_STATE) and not path.name.endswith(
                            ".tmp"
                        ):
                            _copy_file(path, target / model.relative_to(folder) / path.name)
                for name in ("config.json", "done.json"):  # done.json last: it marks it whole
                    if (folder / name).is_file():
                        _copy_file(folder / name, target / name)
                kept.append(f"{method}/{cat}/s{seed}")
    return kept


def _candidate_steps(study: Study, pretrain_seed: int | None) -> list[int]:
    """The kept steps of an unfinished calibrated pretraining that the rule may still choose:
    each category's current choice and every kept step not yet evaluated (a later choice is
    never an earlier step than the current one, so the others need not travel)."""
    if not study.calibrates:
        return []
    calibrator = calibrator_of(study, pretrain_seed)
    steps = set(calibrator.kept_steps(10**12))
    points = read_points(calibrator.folder)
    unread = set()  # steps an undecided category has still to read
    for cat, target in calibrator.targets.items():
        if not choose(points.get(cat, []), target, final=False).decided:
            unread |= steps - {p.step for p in points.get(cat, [])}
    current = {c["step"] for c in calibrator.choices(final=False).values()}
    return sorted(unread | (current & steps))


def restore(source: Path, out: Path) -> list[str]:
    """Put ``source/state`` back into the study folder ``out`` (made if missing).

    Returns:
        The paths restored, relative to ``out``.

    Raises:
        StudyError: ``source`` holds no state, or ``out`` holds another study.
    """
    claim(out, "study")
    state = source / STATE_DIR
    profile = state / PROFILE_FILE
    if not profile.is_file():
        raise StudyError(f"{profile} is missing: {source} holds no exported study state")
    mine = out / PROFILE_FILE
    if mine.is_file():
        stored = json.loads(mine.read_text(encoding="utf-8"))["profile"]
        if stored != json.loads(profile.read_text(encoding="utf-8"))["profile"]:
            raise StudyError(
                f"{out} holds another study than {source} (their {PROFILE_FILE} differ); "
                "restore into a new folder"
            )
    restored = []
    for path in sorted(p for p in state.rglob("*") if p.is_file()):
        relative = path.relative_to(state)
        target = out / relative
        if not target.exists():
            _copy_file(path, target)
            restored.append(relative.as_posix())
    mark_folder(out, "study")
    timings = source / DATA_DIR / "timings.jsonl"
    if timings.is_file() and not read_timings(out):
        _copy_file(timings, out / "timings.jsonl")
        restored.append("timings.jsonl")
    return restored


def _copy_tree(source: Path, target: Path) -> None:
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        if path.name.endswith(".tmp"):
            continue
        _copy_file(path, target / path.relative_to(source))


def _copy_file(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    tmp.replace(target)
