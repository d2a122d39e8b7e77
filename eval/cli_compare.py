"""``passkt compare``: the paired comparison of two or more runs.

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`.
"""

from __future__ import annotations

import argparse
import datetime as _dt
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.preflight import int_in
from passkt.eval.cli import _add_stats_options, _positive_int, parse_int_list
from passkt.eval.reports import write_comparison
from passkt.eval.store import read_manifest

__all__ = ["ENV_SETTINGS", "FORMAT_KWARGS", "add_parser", "check_same_envs"]

COMPARE_EXAMPLES = """\
examples:
  passkt compare runs/base runs/rl                       gaps rl - base, boundary sets, Venn
  passkt compare runs/base runs/rl runs/sft --names base,rl,sft --budget 5 --out runs/cmp
  passkt compare runs/base runs/rl --repeats runs/base-seed1,runs/base-seed2
      noise floor from three evaluations of base; differences beyond it are marked (descriptive)
  passkt compare runs/base runs/rl --repeats runs/base-seed1 --peers runs/base2,runs/base2-seed1
      the floor also holds base2 (the base recipe pretrained with another seed), twice evaluated
  passkt compare runs/base runs/rl --headline gap@64,5 --method bootstrap
"""


def _dir_list(text: str | None) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()] if text else []


ENV_SETTINGS = ("env_id", "env_kwargs")
"""What makes two runs' problems the same: compared runs must agree on these."""

FORMAT_KWARGS = frozenset({"protocol"})
"""Env kwargs that change how the agent acts (tags or tool calls), not the problems: runs that
differ only in them compare the same problems."""


def _env_setting(manifest: Mapping[str, Any], key: str) -> Any:
    """``env_id`` as registered (``module:Env-v0`` and ``Env-v0`` name one env), ``env_kwargs``
    without the action format."""
    value = manifest.get(key)
    if key == "env_id" and isinstance(value, str):
        return value.rpartition(":")[2]
    if key == "env_kwargs" and isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k not in FORMAT_KWARGS}
    return value


def check_same_envs(runs: Sequence[str | Path]) -> None:
    """Refuse runs made with different env settings, naming the setting and both values: their
    tasks share ids but not questions, so a paired comparison would compare unlike problems."""
    first = read_manifest(runs[0])
    for run in runs[1:]:
        other = read_manifest(run)
        for key in ENV_SETTINGS:
            if _env_setting(first, key) != _env_setting(other, key):
                raise ValueError(
                    f"{run} was made with {key} {other.get(key)!r}, {runs[0]} with "
                    f"{first.get(key)!r}; compare runs of one env setting, or pass "
                    "--allow-different-envs"
                )


def _cmd_compare(args: argparse.Namespace) -> int:
    ks = parse_int_list(args.ks, "--ks") if args.ks is not None else None
    if len(args.runs) >= 2 and not args.allow_different_envs:
        check_same_envs([*args.runs, *_dir_list(args.repeats), *_dir_list(args.peers)])
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    out = args.out
    if out is None:  # next to the reference run, never into the current directory
        out = Path(args.runs[0]).parent / f"compare-{_dt.datetime.now():%Y%m%d-%H%M%S}"
    report = write_comparison(
        args.runs,
        out,
        names=names,
        ks=ks,
        budget=args.budget,
        n_boot=args.n_boot,
        level=args.level,
        method=args.method,
        headline=args.headline,
        repeats=_dir_list(args.repeats),
        peers=_dir_list(args.peers),
        reliability_k=args.reliability_k,
    )
    print(report.markdown)
    print(f"passkt: comparison written to {report.out_dir}/")
    return 0


def add_parser(subparsers: Any) -> None:
    """Add ``compare`` to the ``passkt`` command line."""
    p = subparsers.add_parser(
        "compare",
        help="paired comparison of two or more runs",
        description="Gap pass@k(run) - pass@k(RUN_A) per (k, T) with paired CIs over problems and "
        "samples, cells significant after Holm's correction, one pre-declared headline test, the "
        "crossover k, whether the gap widens with k, the same for pass^k (all k episodes "
        "succeed), the change in boundary, pass@1 and pass^k per T in one table, boundary sets "
        "and Venn counts, and chance floors for envs that declare closed answer sets.",
        epilog=COMPARE_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="RUN_A (reference) RUN_B ...")
    p.add_argument("--names", metavar="A,B,...", help="run names (default: from the manifests)")
    p.add_argument(
        "--budget", type=int_in(0, 1000), help="T of the boundary sets (default: largest shared)"
    )
    p.add_argument(
        "--out", metavar="DIR", help="default compare-<time> next to RUN_A (in its parent folder)"
    )
    p.add_argument(
        "--repeats",
        metavar="DIR,...",
        help="more evaluations of RUN_A's policy with other --seed values: the noise floor "
        "(descriptive); differences beyond it are marked. A claim about a training recipe needs "
        "the seed-level test (passkt.eval.seeds) of several independently trained policies",
    )
    p.add_argument(
        "--peers",
        metavar="DIR,...",
        help="evaluations of other policies made the same way as RUN_A's (e.g. the base "
        "pretrained with another seed), evaluated the same way: they join the noise floor",
    )
    p.add_argument(
        "--headline",
        metavar="widening@T|gap@K,T",
        help="the one test declared in advance, read without correction (default: the "
        "widening gap(k_max) - gap(k_min) at the largest T)",
    )
    p.add_argument(
        "--reliability-k",
        type=_positive_int,
        metavar="K",
        help="the k of pass^k in the boundary-and-reliability table (default min(8, n))",
    )
    p.add_argument(
        "--allow-different-envs",
        action="store_true",
        help="compare runs made with different env ids or env kwargs (refused by default)",
    )
    _add_stats_options(p)
    p.set_defaults(func=_cmd_compare)
