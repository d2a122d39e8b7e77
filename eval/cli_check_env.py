"""``passkt check-env``: vet a new env before any run.

It runs the inspection every command runs (``passkt.envs.contract.inspect_env``: which
capabilities the env has, which fallbacks passkt takes, a reset and a probe step), then steps the
env with hostile text in an env worker (``passkt.agents.env_probe``) and prints what raised,
crashed or hung. Exit 0 when the env survived everything, 1 when it did not (each failure would
end an episode of a run as an env failure, or end the run without env workers).

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`.
"""

from __future__ import annotations

import argparse
from typing import Any

from passkt.agents.env_probe import probe_env
from passkt.agents.preflight import add_env_arguments
from passkt.agents.specs import parse_env_kwargs
from passkt.envs.contract import import_modules
from passkt.eval.cli import _positive_float
from passkt.eval.evaluate import env_info

__all__ = ["add_parser"]

EXAMPLES = """\
examples:
  passkt check-env BridgeQA-v0
  passkt check-env my_envs:TextGame-v0 --env-kwargs level=2 --timeout 5
"""


def add_parser(subparsers: Any) -> None:
    """Add ``check-env`` to the ``passkt`` command line."""
    p = subparsers.add_parser(
        "check-env",
        help="inspect an env and step it with hostile text (crashes, hangs, exceptions)",
        description="Inspect an env as every passkt command does, then step a fresh episode of "
        "its first task with each of ~40 hostile texts (control characters, NUL, lone "
        "surrogates, 100 kB, each action tag malformed) in a worker process, and report what "
        "raised, crashed or hung. Exit 1 if anything did.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_env_arguments(p)
    p.add_argument("--split", default="test", choices=("test", "train"))
    p.add_argument(
        "--timeout",
        type=_positive_float,
        default=10.0,
        help="seconds a step may take before it counts as hung (default %(default)s)",
    )
    p.set_defaults(func=run_check)


def _shown(text: str) -> str:
    shown = ascii(text[:40])
    return shown + (f" ... ({len(text):,} characters)" if len(text) > 40 else "")


def run_check(args: argparse.Namespace) -> int:
    import_modules(args.imports or ())
    kwargs = parse_env_kwargs(args.env_kwargs)
    info = env_info(args.env, kwargs, args.split)
    contract = info.contract
    assert contract is not None
    print(f"{args.env}: protocol {contract.protocol.name!r}, stop {list(contract.protocol.stop)}")
    print(
        f"  tasks: {len(contract.task_ids) if contract.task_ids else 'seeds'}; budget: "
        f"{'max_tool_calls' if contract.takes_budget else 'passkt wrapper'}; branches: "
        f"{'fork' if contract.forkable else 'replay'}; split: "
        f"{'split=' if contract.takes_split else 'seeds'}"
    )
    for fallback in contract.fallbacks:
        print(f"  fallback: {fallback}")
    results = probe_env(args.env, kwargs, contract, split=args.split, timeout=args.timeout)
    bad = [r for r in results if r.outcome != "ok"]
    print("\n| action | outcome | detail |\n|---|---|---|")
    for result in results:
        detail = result.detail.replace("|", "\\|")
        print(f"| {result.label}: `{_shown(result.text)}` | {result.outcome} | {detail} |")
    print(
        f"\n{args.env}: {len(results) - len(bad)} of {len(results)} hostile actions answered"
        + (
            f"; {len(bad)} failed ({', '.join(sorted({r.outcome for r in bad}))}): run it with "
            "env workers (the default for envs that are not passkt's own) so that each such "
            "action ends one episode, not the run"
            if bad
            else ""
        )
    )
    return 1 if bad else 0
