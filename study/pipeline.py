"""The matched-data study, stage by stage: does RL widen the capability boundary, or sharpen it?

For each category (A math, B comparison, C bridge) and training seed: evaluate the base policy,
train SFT and GRPO on the same 200 problems from the same base, evaluate both on the same 100
problems, compare the PASS@(k,T) surfaces, run the mechanism analyses, and write one report::

    passkt study run tiny --out runs/study-tiny
    passkt study run --stage eval-base --out runs/study-tiny --jobs 2   (one stage)

Stages, in order: ``splits``, ``base``, ``eval-base``, ``train``, ``eval-trained``, ``compare``,
``analyze``, ``report`` (``all`` runs them in turn). Each stage is made of units (one evaluation,
one training run, ...); a finished unit leaves a ``done.json`` and is skipped by a rerun, and an
interrupted one resumes (evaluations chunk by chunk, trainers from their last checkpoint). Every
unit's wall time goes to ``OUT/timings.jsonl``. See ``docs/study.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from passkt.agents.preflight import MAX_THREADS, int_in, threads_count
from passkt.agents.threads import apply_threads, threads_per_job
from passkt.eval.cli import _positive_int
from passkt.study.profile import (
    StudyError,
    known_profiles,
    pin,
    resolve,
    resolve_stored,
)
from passkt.study.stages import STAGES, Study, Unit
from passkt.study.units import stage_units

PARALLEL_STAGES = ("base", "eval-base", "train", "eval-trained", "compare", "analyze")
"""Stages whose units are independent, so ``--jobs N`` may run N of them at once (base: each
pretraining seed writes its own folder)."""
TIMINGS_FILE = "timings.jsonl"
DONE_FILE = "done.json"
_PRINT_LOCK = threading.Lock()

EXAMPLES = """\
examples:
  passkt study run tiny --out runs/study-tiny --jobs 2
  passkt study run --stage train --out runs/study-tiny --method grpo --categories C
  passkt study run paper --out runs/paper \\
      --set env.A.kwargs.path=data/math500.jsonl --set env.B.kwargs.path=data/hotpot.json
  passkt study run tiny --out /tmp/slice \\
      --limit-eval 3 --limit-train 3 --n 2 --set base.pretrain.max_steps=5
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m passkt.study.pipeline",
        description=__doc__.split("\n\n")[0],
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("stage", choices=(*STAGES, "all"), help="the stage to run (all: every stage)")
    add_arguments(p)
    return p


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of a stage run (everything but the stage), shared with ``passkt study run``."""
    p.add_argument(
        "--profile",
        help=f"{', '.join(known_profiles())} or PATH.toml (default: the one stored in --out)",
    )
    p.add_argument("--out", required=True, type=Path, help="the study folder")
    p.add_argument("--categories", help="only these categories, e.g. A,C (default: all)")
    p.add_argument("--seeds", help="only these training seeds, e.g. 0,1 (default: all)")
    p.add_argument(
        "--method",
        choices=("sft", "grpo", "rft"),
        help="train / evaluate only this method (rft: the on-policy control, if the profile's "
        "methods list it)",
    )
    p.add_argument(
        "--jobs", type=int_in(1, 256), default=1, help="units run at once (subprocesses, to 256)"
    )
    p.add_argument(
        "--threads",
        type=threads_count,
        help=f"torch threads here, to {MAX_THREADS} (--jobs gives each unit cores // jobs)",
    )
    p.add_argument("--only", help="run just this unit of the stage (as --jobs does)")
    p.add_argument("--limit-eval", type=_positive_int, help="override limit_eval (eval problems)")
    p.add_argument(
        "--limit-train", type=_positive_int, help="override limit_train (training problems)"
    )
    p.add_argument(
        "--n", type=int_in(1, 10_000), help="override eval.n (samples per problem and T, to 10,000)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile key (TOML value), e.g. --set grpo.max_steps=2",
    )


def _overrides(args: argparse.Namespace) -> list[str]:
    shortcuts = [("limit_eval", args.limit_eval), ("limit_train", args.limit_train)]
    shortcuts.append(("eval.n", args.n))
    return [f"{k}={v}" for k, v in shortcuts if v is not None] + list(args.set)


def _selection(text: str | None, allowed: Sequence, kind: str, cast=str) -> list:
    if text is None:
        return list(allowed)
    try:
        chosen = [cast(part.strip()) for part in text.split(",") if part.strip()]
    except ValueError as e:
        raise StudyError(f"--{kind} {text!r}: {e}") from e
    unknown = [c for c in chosen if c not in allowed]
    if unknown or not chosen:
        raise StudyError(
            f"--{kind} {text!r}: {unknown or 'nothing'} not among the profile's {kind} "
            f"{list(allowed)}"
        )
    return chosen


def open_study(args: argparse.Namespace) -> Study:
    """Resolve the profile, pin it to ``--out`` and apply the selections."""
    overrides = _overrides(args)
    requested, source = None, None
    if args.profile is not None:
        requested = resolve(args.profile, overrides)
        source = " ".join([args.profile, *(f"--set {o}" for o in overrides)])
    elif overrides:
        # Without --profile, overrides are checked against the stored profile (they must agree).
        requested = resolve_stored(args.out, overrides)
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        raise StudyError("--jobs and --threads must be >= 1")
    if requested is not None:  # check the selections before a new folder is pinned
        _selection(args.categories, requested["categories"], "categories")
        _selection(args.seeds, requested["seeds"], "seeds", int)
        _selection(args.method, requested["methods"], "methods")
    profile = pin(args.out, requested, source)
    return Study(
        out=args.out,
        profile=profile,
        categories=_selection(args.categories, profile["categories"], "categories"),
        seeds=_selection(args.seeds, profile["seeds"], "seeds", int),
        method=args.method,
    )


def study_at(out: Path, seeds: str | None = None) -> Study:
    """The study stored in ``out`` (its own profile), with an optional seed selection."""
    selection = ["--seeds", seeds] if seeds else []
    return open_study(_parser().parse_args(["all", "--out", str(out), *selection]))


# ---------------------------------------------------------------------- running units


def say(text: str) -> None:
    with _PRINT_LOCK:
        print(text, flush=True)


def _record(out: Path, line: dict) -> None:
    """Append one line to ``timings.jsonl`` (one write: safe with concurrent subprocesses)."""
    payload = (json.dumps(line) + "\n").encode()
    fd = os.open(out / TIMINGS_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, payload)
    finally:
        os.close(fd)


def is_done(unit: Unit) -> bool:
    return (unit.folder / DONE_FILE).is_file()


def _write_done(unit: Unit, payload: dict) -> None:
    unit.folder.mkdir(parents=True, exist_ok=True)
    tmp = unit.folder / (DONE_FILE + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    tmp.replace(unit.folder / DONE_FILE)


def _main_process() -> bool:
    """False on the other ranks of a ``torchrun`` launch (only rank 0 records)."""
    return os.environ.get("RANK", "0") == "0"


class Terminated(BaseException):
    """SIGTERM arrived (a scheduler's time limit, ``kill``): unwinds like Ctrl-C."""


def stop_on_sigterm() -> None:
    """Turn SIGTERM into ``Terminated`` so the aborted unit's attempt is still recorded.

    By default SIGTERM ends the process at once, without the ``except`` that writes the
    ``timings.jsonl`` line of the unit in progress; its cost would vanish from the report.
    """

    def handler(signum: int, frame: object) -> None:
        raise Terminated(f"signal {signum} (SIGTERM)")

    signal.signal(signal.SIGTERM, handler)


def run_unit(study: Study, stage: str, unit: Unit, threads: int | None) -> None:
    """Run one unit in this process: its work, then its ``done.json`` and timing line."""
    if not _main_process():
        unit.work()
        return
    say(f"[{stage}] {unit.key}: started")
    started, clock = time.time(), time.perf_counter()
    line = {"stage": stage, "unit": unit.key, "start": started, "threads": threads}
    try:
        payload = unit.work()
    except BaseException as e:
        seconds = time.perf_counter() - clock
        status = "aborted" if isinstance(e, KeyboardInterrupt | Terminated) else "failed"
        _record(study.out, {**line, "seconds": seconds, "status": status, "error": repr(e)})
        say(f"[{stage}] {unit.key}: FAILED after {seconds:.1f} s: {e!r}")
        raise
    seconds = time.perf_counter() - clock
    _write_done(unit, {"unit": unit.key, "stage": stage, "seconds": seconds, **payload})
    _record(study.out, {**line, "seconds": seconds, "status": "done"})
    say(f"[{stage}] {unit.key}: done in {seconds:.1f} s")


def _check_needs(stage: str, units: Sequence[Unit], out: Path) -> None:
    for unit in units:
        for earlier, folder in unit.needs:
            if not (folder / DONE_FILE).is_file():
                raise StudyError(
                    f"[{stage}] {unit.key} needs {folder}, which the {earlier!r} stage makes and "
                    f"has not finished: run `passkt study run --stage {earlier} --out {out}` first"
                )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def cuda_devices(environ: dict[str, str] | None = None) -> list[str]:
    """The CUDA devices this process may use: ``CUDA_VISIBLE_DEVICES`` when set, else
    ``0 .. torch.cuda.device_count() - 1`` (none without torch or CUDA)."""
    environ = os.environ if environ is None else environ
    if "CUDA_VISIBLE_DEVICES" in environ:
        return [d.strip() for d in environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    try:
        import torch  # optional: the study's testbed runs without it
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())]


def gpu_slots(jobs: int, devices: Sequence[str]) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of each of ``jobs`` concurrent workers: the devices split into
    ``jobs`` equal groups (a job per GPU, or several GPUs per job), or, with more jobs than
    devices, one device each in turn (jobs then share a GPU). No devices: no slots."""
    if not devices:
        return []
    if jobs <= len(devices):
        width = len(devices) // jobs
        return [",".join(devices[i * width : (i + 1) * width]) for i in range(jobs)]
    return [devices[i % len(devices)] for i in range(jobs)]


def _selection_args(study: Study) -> list[str]:
    """The categories, seeds and method this call selected, for a unit's subprocess: a unit
    depends on them (a comparison's noise floor is the selected seeds' bases)."""
    args = ["--categories", ",".join(study.categories), "--seeds", ",".join(map(str, study.seeds))]
    return args + (["--method", study.method] if study.method else [])


def _run_children(study: Study, stage: str, units: Sequence[Unit], jobs: int) -> None:
    """Run units as ``python -m passkt.study.pipeline STAGE --only UNIT`` subprocesses, ``jobs``
    at a time."""
    threads = threads_per_job(jobs)  # affinity and cgroup quota, shared by the jobs
    logs = study.out / "logs" / stage
    logs.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    devices = cuda_devices()
    if len(devices) < jobs and devices:
        say(f"[{stage}] {jobs} jobs share {len(devices)} GPU(s): lower --jobs if they run out")
    slots: queue.Queue[str] = queue.Queue()
    for slot in gpu_slots(jobs, devices):
        slots.put(slot)

    def child(unit: Unit) -> None:
        if failed:
            return  # a unit failed: start nothing new
        log = logs / f"{_slug(unit.key)}.log"
        command = [sys.executable, "-m", "passkt.study.pipeline", stage, "--out", str(study.out)]
        command += ["--only", unit.key, "--threads", str(threads), *_selection_args(study)]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        slot = slots.get() if devices else None  # a free GPU group: at most `jobs` run at once
        if slot is not None:
            env["CUDA_VISIBLE_DEVICES"] = slot
        on = f" on GPU {slot}" if slot is not None else ""
        say(f"[{stage}] {unit.key}: started in a subprocess ({threads} thread(s){on}), log {log}")
        clock = time.perf_counter()
        try:
            with open(log, "ab") as handle:
                done = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env)
        finally:
            if slot is not None:
                slots.put(slot)
        code = done.returncode
        seconds = time.perf_counter() - clock
        if code != 0:
            failed.append(f"{unit.key} (exit {code}, log {log})")
            say(f"[{stage}] {unit.key}: FAILED after {seconds:.1f} s; see {log}")
        else:
            say(f"[{stage}] {unit.key}: done in {seconds:.1f} s")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(child, units))
    if failed:
        raise StudyError(f"[{stage}] failed: {'; '.join(failed)}")


def run_stage(
    study: Study, stage: str, *, only: str | None = None, jobs: int = 1, threads: int | None = None
) -> list[str]:
    """Run a stage's unfinished units; returns the keys of the units it ran."""
    units = stage_units(study, stage)
    if only is not None:
        chosen = [u for u in units if u.key == only]
        if not chosen:
            keys = ", ".join(u.key for u in units)
            raise StudyError(f"--only {only!r}: no such unit in stage {stage}; units: {keys}")
        units = chosen
    pending = [u for u in units if not is_done(u)]
    for unit in units:
        if unit not in pending:
            say(f"[{stage}] {unit.key}: done before, skipped")
    if not pending:
        return []
    _check_needs(stage, pending, study.out)
    clock, started = time.perf_counter(), time.time()
    if jobs > 1 and len(pending) > 1 and stage in PARALLEL_STAGES:
        _run_children(study, stage, pending, jobs)
    else:
        for unit in pending:
            run_unit(study, stage, unit, threads)
    if only is None:
        seconds = time.perf_counter() - clock
        line = {"stage": stage, "unit": "*", "start": started, "seconds": seconds, "jobs": jobs}
        _record(study.out, {**line, "units": len(pending), "status": "stage"})
        say(f"[{stage}] {len(pending)} unit(s) in {seconds:.1f} s")
    return [u.key for u in pending]


@dataclass(frozen=True)
class Outcome:
    """What one call did: the units it ran, per stage."""

    ran: dict[str, list[str]]


def run(argv: Sequence[str] | None = None) -> Outcome:
    """Parse ``argv`` and run the stage(s); errors raise ``StudyError`` (or ``SystemExit``)."""
    return run_args(_parser().parse_args(argv))


def run_args(args: argparse.Namespace) -> Outcome:
    """Run the stage(s) that parsed arguments name (``args.stage``: a stage or ``all``)."""
    study = open_study(args)
    apply_threads(args.threads)  # --threads, else the cores this process may use
    if args.only is not None and args.stage == "all":
        raise StudyError("--only names a unit of one stage; give that stage, not all")
    stages = STAGES if args.stage == "all" else (args.stage,)
    ran = {}
    for stage in stages:
        ran[stage] = run_stage(study, stage, only=args.only, jobs=args.jobs, threads=args.threads)
    return Outcome(ran)


def main(argv: Sequence[str] | None = None) -> int:
    stop_on_sigterm()
    try:
        run(argv)
    except StudyError as e:
        print(f"passkt study: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        print("passkt study: terminated (SIGTERM); rerun the stage to continue", file=sys.stderr)
        return 128 + signal.SIGTERM
    return 0


if __name__ == "__main__":
    sys.exit(main())
