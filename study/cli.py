"""``passkt study``: run the matched-data study from a profile, remake its report, draw a sweep.

``passkt`` loads this module on demand through :func:`add_parser`::

    passkt study run tiny --out runs/study-tiny --jobs 2      every stage of a shipped profile
    passkt study run my_profile.toml --out runs/mine         a profile of your own
    passkt study run --stage eval-base --out runs/study-tiny  one stage (the profile is stored)
    passkt study report runs/study-tiny                      remake the report (seconds)
    passkt study report results/powered                      remake summary.md from data/ alone
    passkt study sweep runs/a runs/b runs/c --out runs/sweep  boundary change across studies
    passkt study export runs/powered --to results/powered    keep a piece's counts and state
    passkt study restore results/powered --out runs/powered  put the state back (fresh checkout)
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from passkt.agents.preflight import int_in, positive_float
from passkt.study import gpu_plan, keep, pipeline, sweep
from passkt.study.profile import StudyError, known_profiles, resolve
from passkt.study.stages import STAGES
from passkt.study.summary import DATA_DIR, DataError, make_summary, read_data


def add_parser(subparsers: Any) -> None:
    """Add ``study`` (with ``run``, ``report`` and ``sweep``) to the ``passkt`` command line."""
    study = subparsers.add_parser(
        "study",
        help="run the matched-data study (base, SFT, GRPO, RFT) from a profile",
        description=__doc__.split("\n\n")[0],
        epilog=pipeline.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = study.add_subparsers(dest="verb", metavar="VERB", required=True)
    run = verbs.add_parser(
        "run",
        help="run a study's stages (all by default); a rerun resumes unit by unit",
        epilog=pipeline.EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "profile_arg",
        nargs="?",
        metavar="PROFILE",
        help=f"{', '.join(known_profiles())} or PATH.toml (default: the one stored in --out)",
    )
    run.add_argument("--stage", choices=(*STAGES, "all"), default="all", help="run only this stage")
    pipeline.add_arguments(run)
    run.set_defaults(func=_run)
    report = verbs.add_parser(
        "report",
        help="remake a study's report from its finished stages, or its summary from data/",
        description="Remake OUT/report/ from a study folder's finished stages; on a folder "
        "that holds a report's data/ (e.g. a committed copy), remake summary.md and its figures "
        "from that data alone.",
    )
    report.add_argument("out", metavar="DIR", type=Path, help="a study folder or a report folder")
    report.set_defaults(func=_report)
    keep = verbs.add_parser(
        "export",
        help="keep what a piece of a study made: counts of finished evaluations and the state",
        description="Write the counts of every finished evaluation into TO/data (merged with "
        "earlier pieces) and the profile, splits, finished base models and the trained models "
        "whose evaluations are unfinished into TO/state, so a study run in pieces survives a "
        "fresh checkout (commit TO).",
    )
    keep.add_argument("out", metavar="OUT", type=Path, help="the study folder")
    keep.add_argument("--to", required=True, type=Path, help="the kept copy, e.g. results/NAME")
    keep.add_argument("--seeds", help="only these seeds (default all of the profile's)")
    keep.set_defaults(func=_export)
    back = verbs.add_parser(
        "restore",
        help="put an exported study state back into a study folder",
        description="Copy DIR/state (profile, splits, base models) and the timing lines into "
        "OUT, leaving whatever OUT already holds; then continue with `passkt study run --out OUT`.",
    )
    back.add_argument("source", metavar="DIR", type=Path, help="the kept copy (export --to)")
    back.add_argument("--out", required=True, type=Path, help="the study folder to continue")
    back.set_defaults(func=_restore)
    check = verbs.add_parser(
        "check",
        help="check that every training run of a profile can start and fit on N GPUs",
        description="Resolve every training run of a profile (SFT, GRPO, RFT per category, with "
        "[train]'s backend and TRL options) and run the plan check of `passkt train --check` on "
        "each: batch splits per process, engine rules, the vLLM version, memory per GPU with the "
        "arithmetic. Exit 2 naming the first rule a run breaks and the setting that fixes it.",
    )
    check.add_argument(
        "profile", metavar="PROFILE", help=f"{', '.join(known_profiles())} or PATH.toml"
    )
    check.add_argument(
        "--gpus", type=int_in(1, 1024), required=True, help="GPUs of the machine (to 1024)"
    )
    check.add_argument(
        "--gpu-memory", type=positive_float, default=80.0, metavar="GB", help="per GPU (80)"
    )
    check.add_argument(
        "--sharding",
        choices=("ddp", "zero3", "fsdp"),
        help="default: zero3 for full fine-tuning through TRL on several GPUs, else ddp",
    )
    check.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a profile key, as study run --set")  # fmt: skip
    check.add_argument(
        "--markdown",
        action="store_true",
        help="print the memory and time table of benchmarks/README.md for the documented routes",
    )
    check.set_defaults(func=_check)
    draw = verbs.add_parser("sweep", help="compare the boundary change across finished studies")
    draw.add_argument("studies", nargs="+", help="finished study folders")
    draw.add_argument("--out", required=True, help="where sweep.md and its figures go")
    draw.set_defaults(func=_sweep)


def _run(args: argparse.Namespace) -> int:
    if args.profile_arg is not None:
        if args.profile is not None and args.profile != args.profile_arg:
            print(
                f"passkt study: error: two profiles: {args.profile_arg} and --profile "
                f"{args.profile}",
                file=sys.stderr,
            )
            return 2
        args.profile = args.profile_arg
    return _guarded(lambda: pipeline.run_args(args))


def _report(args: argparse.Namespace) -> int:
    if (args.out / DATA_DIR / "study.json").is_file() and not (args.out / "profile.json").exists():
        try:
            path = make_summary(read_data(args.out / DATA_DIR), args.out)
        except DataError as e:
            print(f"passkt study: error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {path} from {args.out / DATA_DIR}")
        return 0
    return _guarded(lambda: pipeline.run(["report", "--out", str(args.out)]))


def _export(args: argparse.Namespace) -> int:
    def work() -> None:
        study = pipeline.study_at(args.out, args.seeds)
        done = keep.export(study, args.to)
        runs = sum(len(names) for names in done["evaluations"].values())
        bases = ", ".join(done["bases"]) or "(none)"
        trained = ", ".join(done["trained"])
        trained = f", trained models {trained} (their evaluations unfinished)" if trained else ""
        print(
            f"kept {runs} evaluation(s) in {args.to / 'data'}, bases {bases}{trained} in "
            f"{args.to / keep.STATE_DIR} and {len(done['analyses'])} analysis table(s) in "
            f"{args.to / keep.ANALYSIS_DIR}"
        )

    return _guarded(work)


def _restore(args: argparse.Namespace) -> int:
    def work() -> None:
        restored = keep.restore(args.source, args.out)
        print(f"restored {len(restored)} file(s) into {args.out}")

    return _guarded(work)


def _check(args: argparse.Namespace) -> int:
    def work() -> None:
        if args.gpus < 1:
            raise StudyError(f"--gpus must be >= 1, got {args.gpus}")
        profile = resolve(args.profile, args.set)
        if args.markdown:
            print(gpu_plan.estimate_markdown(profile, args.gpus, args.gpu_memory))
            return
        failures = []
        for route in gpu_plan.profile_routes(profile, args.gpus, args.sharding):
            try:
                reports = gpu_plan.check_route(profile, route, args.gpu_memory)
            except ValueError as e:
                raise StudyError(str(e)) from e
            for cat, report in reports:
                print(f"== {route.name}, category {cat}")
                print("\n".join(report.lines()))
                failed = report.failure
                if failed is not None:
                    where = f"{route.method} (category {cat})"
                    failures.append(f"{where}: {failed.name}: {failed.detail}; fix: {failed.fix}")
        if failures:
            raise StudyError(failures[0])
        print(f"every training run of {args.profile} can start on {args.gpus} GPU(s)")

    return _guarded(work)


def _sweep(args: argparse.Namespace) -> int:
    return sweep.main([*args.studies, "--out", args.out])


def _guarded(work: Any) -> int:
    """Run ``work``; a study error is one line on stderr and exit code 2 (nothing else written)."""
    pipeline.stop_on_sigterm()
    try:
        work()
    except StudyError as e:
        print(f"passkt study: error: {e}", file=sys.stderr)
        return 2
    except pipeline.Terminated:
        print("passkt study: terminated (SIGTERM); run the same command again", file=sys.stderr)
        return 128 + signal.SIGTERM
    return 0
