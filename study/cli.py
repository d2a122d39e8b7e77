"""``passkt study``: run the matched-data study from a profile, remake its report, draw a sweep.

``passkt`` loads this module on demand through :func:`add_parser`::

    passkt study run tiny --out runs/study-tiny --jobs 2      every stage of a shipped profile
    passkt study run my_profile.toml --out runs/mine         a profile of your own
    passkt study run --stage eval-base --out runs/study-tiny  one stage (the profile is stored)
    passkt study report runs/study-tiny                      remake the report (seconds)
    passkt study report results/powered                      remake summary.md from data/ alone
    passkt study sweep runs/a runs/b runs/c --out runs/sweep  boundary change across studies
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from passkt.study import pipeline, sweep
from passkt.study.profile import StudyError, known_profiles
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
