"""The ``passkt`` command line: ``eval``, ``report``, ``compare`` (and ``train``, ``analyze``).

This is the only module of passkt that prints. User errors (a bad flag value, an unknown env id, a
run directory that does not fit the request) end in one line ``passkt: error: ...`` and exit
code 2, without a traceback (``--traceback`` shows it). Results go to stdout, progress and notes to
stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from passkt.agents.env_workers import DEFAULT_STEP_TIMEOUT
from passkt.agents.folders import claim_folder
from passkt.agents.policy import SamplingParams
from passkt.agents.preflight import (
    MAX_BUDGET,
    MAX_RESAMPLES,
    MAX_THREADS,
    add_env_arguments,
    check_resume,
    finite_float,
    parse_grid,
    positive_float,
    resamples,
    seed_int,
    threads_count,
    unit_float,
)
from passkt.agents.redact import RedactingFilter, redact
from passkt.agents.rollout import MAX_ENV_WORKERS
from passkt.agents.specs import parse_env_kwargs, parse_spec
from passkt.agents.threads import apply_threads
from passkt.envs.contract import import_modules
from passkt.envs.errors import PassktError
from passkt.eval.env_failures import ENV_FAILURE_RULES
from passkt.eval.estimator import reliability_surface
from passkt.eval.evaluate import DEFAULT_BUDGETS, env_info, evaluate
from passkt.eval.manifest import MANIFEST_FILE
from passkt.eval.reports import Report, write_comparison, write_report
from passkt.eval.store import read_env_failures
from passkt.eval.tables import surface_markdown

__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_LIMIT",
    "DEFAULT_POLICY",
    "Report",
    "build_parser",
    "default_out_dir",
    "main",
    "parse_env_kwargs",
    "parse_int_list",
    "write_comparison",
    "write_report",
]

DEFAULT_ENV = "BridgeQA-v0"
DEFAULT_POLICY = "scripted:heuristic"
DEFAULT_N = 16
DEFAULT_LIMIT = 100
"""Tasks evaluated when ``--limit`` is not given (the first 100 of the split)."""

_PLUGINS: dict[str, tuple[str, str]] = {
    "compare": ("passkt.eval.cli_compare", "paired comparison of two or more runs"),
    "train": ("passkt.agents.train.cli", "train a policy with GRPO or SFT on any registered env"),
    "analyze": ("passkt.eval.analysis.cli", "segment perplexity and strategy diversity of runs"),
    "power": ("passkt.eval.cli_power", "problems (or the smallest change) a comparison needs"),
    "check-env": (
        "passkt.eval.cli_check_env",
        "inspect an env and step it with hostile text (crashes, hangs, exceptions)",
    ),
    "serve": ("passkt.eval.cli_serve", "serve an env to OpenEnv's clients (HTTP and WebSocket)"),
}
"""Subcommands that live in other modules: name -> (module with ``add_parser(subparsers)``, help).
A module is imported only when its command runs, so the CLI starts fast and works without it."""


def register_command(name: str, module: str, help_text: str) -> None:
    """Add ``passkt NAME``, served by ``module``'s ``add_parser(subparsers)`` (loaded on use).

    The packages above ``passkt.eval`` (``passkt.study``) register their commands so (see
    ``passkt.cli``), which keeps this module free of imports from them.
    """
    _PLUGINS[name] = (module, help_text)


EVAL_EXAMPLES = """\
examples:
  passkt eval
      the embedded default: synthetic BridgeQA-v0, scripted:heuristic, 100 test tasks, n = 16,
      T in 0,1,2,3,5; prints the surface and writes runs/<env>-<policy>-<time>/report/
  passkt eval --env ComparisonQA-v0 --policy scripted:oracle --n 4 --limit 20
  passkt eval --env BridgeQA-v0 --env-kwargs hops=3,reveal_budget=true --budgets 0,1,2,3,5
  passkt eval --env BridgeQA-v0 --env-kwargs source=hotpotqa,path=data/hotpot_dev.json \\
      --policy hf:Qwen/Qwen2.5-7B-Instruct --device cuda --dtype bfloat16 --n 64
  passkt eval --env Math-v0 --env-kwargs source=math500,path=data/math500.jsonl \\
      --policy vllm:Qwen/Qwen2.5-7B-Instruct --n 64      (math: T = 0 only)
  passkt eval --policy openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct --out runs/base
  passkt eval --out runs/base --resume      (continue a crashed run; repeat its arguments)
  passkt eval --env my_envs:KVLookup-v0 --policy py:my_agents:make_policy --n 4 --budgets 0,1,2
      --policy-options lookups=2
      (your own env and agent, its factory called with lookups=2: see docs/env-contract.md)
"""

REPORT_EXAMPLES = """\
examples:
  passkt report runs/base                 tables and plots into runs/base/report/
  passkt report runs/base --ks 1,4,16 --n-boot 2000 --out /tmp/base-report
"""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``passkt: error: ...``, exit code 2."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("passkt").strip()
        hint = f" (see `passkt {command} --help`)" if command else " (see `passkt --help`)"
        _fail(message + hint)


def _fail(message: str) -> NoReturn:
    print(f"passkt: error: {redact(message)}", file=sys.stderr)
    raise SystemExit(2)


# ---------------------------------------------------------------------- value parsing


def parse_int_list(text: str, flag: str, *, maximum: int | None = None) -> tuple[int, ...]:
    """Parse ``0,1,2,3,5``: non-negative ints, strictly increasing as given (``5,3`` is an error,
    not sorted), at most ``maximum``; the error names ``flag`` (``passkt.agents.preflight``)."""
    return parse_grid(text, flag, maximum=maximum)


def _parse_task_ids(text: str | None) -> list[str] | None:
    if text is None:
        return None
    if text.startswith("@"):
        path = Path(text[1:])
        if not path.is_file():
            raise ValueError(f"--task-ids file {path} does not exist (give @FILE, one id a line)")
        ids = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    else:
        ids = [part.strip() for part in text.split(",")]
    ids = [i for i in ids if i]
    if not ids:
        raise ValueError("--task-ids is empty")
    return ids


def _parse_limit(text: str) -> int | None:
    if text.lower() in ("all", "none"):
        return None
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive int or 'all', got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int or 'all', got {text!r}")
    return value


_finite_float = finite_float  # the argparse types every command shares (passkt.agents.preflight)
_positive_float = positive_float


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def default_out_dir(env_id: str, policy: str, now: _dt.datetime | None = None) -> Path:
    """``runs/<env>-<policy>-<YYYYmmdd-HHMMSS>`` with the policy spec made path-safe."""
    now = now or _dt.datetime.now()
    kind, _, target = policy.partition(":")
    target = target.rsplit("#", 1)[-1].rstrip("/").rsplit("/", 1)[-1]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", f"{kind}-{target}").strip("-")
    base = Path("runs") / f"{env_id}-{slug}-{now:%Y%m%d-%H%M%S}"
    out, i = base, 2
    while out.exists():
        out, i = base.with_name(f"{base.name}-{i}"), i + 1
    return out


# ---------------------------------------------------------------------- commands


def _policy_options(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for flag in ("device", "dtype"):
        value = getattr(args, flag)
        if value is None:
            continue
        if kind not in ("hf", "lean", "vllm"):
            raise ValueError(
                f"--{flag} applies to hf:, lean: and vllm: policies, not {args.policy!r}"
            )
        options[flag] = value
    extra = parse_env_kwargs(getattr(args, "policy_options", None), flag="--policy-options")
    for key in sorted(set(extra) & set(options)):
        raise ValueError(f"--policy-options gives {key!r}, which --{key} gives too; give it once")
    return {**options, **extra}


def _announce(out: Path, finished: int, total: int) -> None:
    resumed = f" (resuming: {finished} of {total} chunks done)" if finished else ""
    print(redact(f"passkt: run directory {out}{resumed}"), file=sys.stderr)


def _absolute_paths(env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """``path=`` / ``corpus=`` that name local files, made absolute: the manifest then finds the
    data from any folder (a later ``--resume`` or ``passkt report``); hub names stay as given."""
    out = dict(env_kwargs)
    for key in ("path", "corpus"):
        value = out.get(key)
        if isinstance(value, str) and Path(value).exists():
            out[key] = str(Path(value).resolve())
    return out


def _cmd_eval(args: argparse.Namespace) -> int:

    import_modules(args.imports or ())
    kind, _ = parse_spec(args.policy)
    env_kwargs = _absolute_paths(parse_env_kwargs(args.env_kwargs))
    options = _policy_options(args, kind)
    task_ids = _parse_task_ids(args.task_ids)
    if args.resume and args.out is None:
        raise ValueError("--resume needs --out RUN_DIR: the run directory to continue")
    if args.out is not None:  # another command's folder is refused before anything else
        claim_folder(args.out, "eval-run")
    if args.resume:  # the library's resume=True also starts a run; the flag only continues one
        check_resume(args.out, lambda directory: (directory / MANIFEST_FILE).is_file())
    budgets = (
        parse_int_list(args.budgets, "--budgets", maximum=MAX_BUDGET)
        if args.budgets is not None
        else None
    )
    if budgets is None:
        info = env_info(args.env, env_kwargs, args.split)
        budgets = DEFAULT_BUDGETS if info.has_tools else (0,)
        if not info.has_tools:
            print(f"passkt: {args.env} has no tools: evaluating T = 0 only", file=sys.stderr)
    ks = parse_int_list(args.ks, "--ks") if args.ks is not None else None
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens
    )
    out = Path(args.out) if args.out is not None else default_out_dir(args.env, args.policy)
    started = time.perf_counter()
    run = evaluate(
        args.env,
        args.policy,
        env_kwargs=env_kwargs,
        n=args.n,
        budgets=budgets,
        ks=ks,
        split=args.split,
        task_ids=task_ids,
        limit=args.limit,
        out_dir=out,
        resume=args.resume,
        seed=args.seed,
        params=params,
        chunk_tasks=args.chunk_tasks,
        chunk_seconds=args.chunk_seconds,
        share_prefix=False if args.no_share_prefix else None,
        progress=not args.no_progress,
        policy_options=options,
        name=args.name,
        on_open=_announce,
        env_workers=args.env_workers,
        env_step_timeout=args.env_step_timeout,
        env_failures=args.env_failures,
    )
    seconds = time.perf_counter() - started
    stats = run.stats
    print(
        f"passkt: {run.outcomes.num_tasks} tasks x n = {run.outcomes.n} x T in "
        f"{list(run.outcomes.budgets)} in {seconds:.1f} s ({run.chunks_run} chunk(s) run, "
        f"{run.chunks_skipped} resumed; {stats.policy_calls} policy calls, "
        f"{stats.generated_tokens} generated tokens)",
        file=sys.stderr,
    )
    failures = read_env_failures(out).line(f"passkt: {out}")
    if failures is not None:
        print(failures, file=sys.stderr)
    if args.no_report:
        print(surface_markdown(run.surface))
        print(surface_markdown(reliability_surface(run.outcomes, run.surface.ks)))
        return 0
    report = write_report(out, ks=ks)
    print(report.markdown)
    print(f"passkt: report written to {report.out_dir}/ (report.md, heatmap.png, ...)")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    ks = parse_int_list(args.ks, "--ks") if args.ks is not None else None
    report = write_report(
        args.run_dir,
        args.out,
        ks=ks,
        n_boot=args.n_boot,
        level=args.level,
        partial=args.partial,
        method=args.method,
    )
    print(report.markdown)
    print(f"passkt: report written to {report.out_dir}/")
    return 0


# ---------------------------------------------------------------------- parser


def _add_eval(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "eval",
        help="evaluate a policy on an env over the PASS@(k,T) grid",
        description="Roll out a policy n times per task at every budget T, store every episode "
        "(crash-safe, resumable), and print the PASS@(k,T) surface. With no arguments: the "
        "embedded default job.",
        epilog=EVAL_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_arguments(p, default=DEFAULT_ENV)
    p.add_argument(
        "--policy",
        default=DEFAULT_POLICY,
        metavar="SPEC",
        help="hf:PATH_OR_ID | lean:PATH | vllm:ID | openai:URL#MODEL | scripted:oracle | "
        "scripted:heuristic | py:MODULE:FACTORY (your own agent) (default %(default)s)",
    )
    p.add_argument(
        "--policy-options",
        metavar="K=V,...",
        help="keyword arguments of the policy's constructor or py: factory, read like "
        "--env-kwargs (e.g. lookups=2,temperature_floor=0.1); recorded in the manifest",
    )
    p.add_argument(
        "--n",
        type=_positive_int,
        default=DEFAULT_N,
        help=f"samples per (task, T) (default {DEFAULT_N})",
    )
    p.add_argument(
        "--budgets",
        metavar="T,...",
        help=f"T grid, increasing, each at most {MAX_BUDGET} (default 0,1,2,3,5; 0 for math envs)",
    )
    p.add_argument("--ks", metavar="K,...", help="k grid (default powers of two up to n)")
    p.add_argument("--split", default="test", choices=("test", "train"), help="default: test")
    p.add_argument(
        "--limit",
        type=_parse_limit,
        default=DEFAULT_LIMIT,
        help="first N tasks of the split, or 'all' (default %(default)s, as in the study)",
    )
    p.add_argument("--task-ids", metavar="ID,...|@FILE", help="only these tasks, in this order")
    p.add_argument(
        "--temperature", type=_finite_float, default=1.0, help="0 = greedy (default 1.0)"
    )
    p.add_argument("--top-p", type=_finite_float, default=1.0)
    p.add_argument("--max-new-tokens", type=_positive_int, default=256, help="per turn")
    p.add_argument(
        "--seed",
        type=seed_int,
        default=0,
        help="run seed, >= 0 (each task's sample seeds derive from it)",
    )
    p.add_argument(
        "--device",
        help="hf: cpu, cuda, cuda:1 ... (default cpu); vllm: cuda only (CUDA_VISIBLE_DEVICES picks "
        "the GPUs)",
    )
    p.add_argument("--dtype", help="hf/vllm: float32, bfloat16, float16 or auto")
    p.add_argument(
        "--chunk-tasks",
        type=_positive_int,
        help="tasks per chunk, the unit of saving and resuming (default 1); also the batch of "
        "a policy whose draws depend on its batch (one without per-row seeds)",
    )
    p.add_argument(
        "--chunk-seconds",
        type=_positive_float,
        default=120.0,
        help="batch chunks so one batch takes about this long at the measured speed: the most "
        "work a crash can lose (default %(default)s)",
    )
    p.add_argument(
        "--no-share-prefix",
        action="store_true",
        help="run every T on its own instead of forking budgets from one rollout",
    )
    add_env_worker_flags(p)
    p.add_argument(
        "--env-failures",
        choices=ENV_FAILURE_RULES,
        default="count",
        help="how the surface counts an episode the env (not the agent) ended by raising, "
        "crashing or hanging: count it as a failure, or drop its task (default %(default)s; "
        "the report says how many either way)",
    )
    p.add_argument("--name", help="run name in tables and legends (default: the policy spec)")
    p.add_argument("--out", metavar="RUN_DIR", help="default runs/<env>-<policy>-<time>")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-report", action="store_true", help="skip the tables and plots")
    p.set_defaults(func=_cmd_eval)


def _env_workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 0 <= value <= MAX_ENV_WORKERS:
        raise argparse.ArgumentTypeError(f"expected 0..{MAX_ENV_WORKERS}, got {text!r}")
    return value


def add_env_worker_flags(p: argparse.ArgumentParser) -> None:
    """``--env-workers`` and ``--env-step-timeout`` (``passkt eval``; the trainers take the same
    names from their config fields)."""
    p.add_argument(
        "--env-workers",
        type=_env_workers,
        metavar="N",
        help="run the envs in N worker processes: a crash, hang or exception of the env ends "
        "one episode (recorded as an env failure) instead of the run, and slow envs step in "
        "parallel; 0 = in this process (default: 0 for passkt's own envs, else one per core "
        "up to 4)",
    )
    p.add_argument(
        "--env-step-timeout",
        type=_positive_float,
        default=DEFAULT_STEP_TIMEOUT,
        metavar="SECONDS",
        help="with env workers, an env step (or reset) that takes longer ends its episode as an "
        "env failure (default %(default)s)",
    )


def _add_stats_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ks", metavar="K,...", help="k grid (default powers of two up to n)")
    p.add_argument(
        "--method",
        choices=("score", "bootstrap"),
        default="score",
        help="intervals: score (problems and samples; default) or the older percentile "
        "bootstrap over problems",
    )
    p.add_argument(
        "--n-boot",
        type=resamples,
        default=1000,
        help=f"resamples of --method bootstrap (1 to {MAX_RESAMPLES:,})",
    )
    p.add_argument("--level", type=unit_float, default=0.95, help="confidence level, in (0, 1)")


def _add_report(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "report",
        help="tables and plots of one run",
        description="PASS@(k,T) and pass^k(T) tables (Markdown, CSV, JSON) with CIs over problems "
        "and samples, boundary sets, chance floors for envs that declare closed answer sets, "
        "heatmaps and pass curves (PNG, SVG).",
        epilog=REPORT_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--out", metavar="DIR", help="default RUN_DIR/report")
    p.add_argument("--partial", action="store_true", help="report the finished part of a run")
    _add_stats_options(p)
    p.set_defaults(func=_cmd_report)


def _load_plugin(name: str) -> Any | None:
    """The plugin module of command ``name``, or ``None`` when it is not installed."""
    module_name = _PLUGINS[name][0]
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is None or not module_name.startswith(e.name):
            raise  # the plugin exists but one of its own imports is missing
        return None


def _add_plugin(subparsers: Any, name: str, module: Any | None) -> None:
    if module is not None:
        module.add_parser(subparsers)
        return
    subparsers.add_parser(name, help=_PLUGINS[name][1], add_help=False)


def build_parser(plugin: str | None = None) -> argparse.ArgumentParser:
    """The ``passkt`` parser.

    Args:
        plugin: A plugin command (``train``, ``analyze``) to load for real; the others get a
            placeholder so ``passkt --help`` lists them without importing them.
    """
    parser = _Parser(
        prog="passkt",
        description="PASS@(k,T) evaluation of tool-use LLM agents (see `passkt COMMAND --help`).",
        epilog="Run `passkt eval` with no arguments for the embedded default job.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output")
    parser.add_argument("--traceback", action="store_true", help="show tracebacks of errors")
    parser.add_argument(
        "--threads",
        type=threads_count,
        help=f"torch threads, 1 to {MAX_THREADS} (default: the cores this process may use, from "
        "its CPU affinity and cgroup quota, divided among the torchrun ranks of this machine; "
        "or OMP_NUM_THREADS)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_eval(subparsers)
    _add_report(subparsers)
    for name in _PLUGINS:
        _add_plugin(subparsers, name, _load_plugin(name) if name == plugin else None)
    return parser


_VALUED_OPTIONS = ("--threads",)
"""The top-level options that take a value: what follows them is not the command."""


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand word of ``argv``: the first one that is neither an option nor the value of
    a top-level option (``passkt --threads 1 testbed pretrain`` -> ``testbed``)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``passkt`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command(argv)
    if command in _PLUGINS and _load_plugin(command) is None:
        _fail(f"`passkt {command}` is not available in this install ({_PLUGINS[command][0]})")
    parser = build_parser(plugin=command if command in _PLUGINS else None)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        # As `python -m` does: user modules named by --import, --env MODULE:ID or py:MODULE:F
        # may sit in the current directory.
        sys.path.insert(0, str(Path.cwd()))
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="passkt: %(levelname)s: %(message)s")
    for handler in logging.getLogger().handlers:  # no secret in any log line
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())

    try:
        # Inside: a subcommand's own --threads (testbed pretrain) lands in args.threads too.
        apply_threads(args.threads, jobs=int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        return int(args.func(args) or 0)
    except (PassktError, ValueError, FileNotFoundError, FileExistsError) as e:
        if args.traceback:
            raise
        _fail(str(e).splitlines()[0] if str(e) else type(e).__name__)
    except KeyboardInterrupt:
        print("passkt: interrupted; continue with --resume --out RUN_DIR", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
