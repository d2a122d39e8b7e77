"""``passkt analyze ppl|diversity``: the mechanism analyses on the command line.

``passkt`` (``passkt.eval.cli``) loads this module on demand through :func:`add_parser`. Each
command prints its Markdown table and writes it, with the JSON of the result, into ``--out``
(default ``RUN_DIR/analysis/``).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from passkt.agents.folders import claim_folder, mark_folder
from passkt.agents.preflight import check_device, check_dtype, int_in, resamples, unit_float
from passkt.envs.contract import import_modules
from passkt.eval.analysis.common import load_runs
from passkt.eval.analysis.diversity import diversity_markdown, query_overlap, strategy_diversity
from passkt.eval.analysis.perplexity import run_perplexity
from passkt.eval.cli import _positive_int

__all__ = ["add_parser"]

EXAMPLES = """\
examples:
  passkt analyze ppl runs/rl --model hf:Qwen/Qwen2.5-7B-Instruct --device cuda --dtype bfloat16
      perplexity of RL's successful trajectories (largest T) under the base model, by segment
  passkt analyze ppl runs/rl --model hf:runs/grpo/final --budget 3 --all --out runs/analysis
  passkt analyze diversity runs/base runs/rl runs/sft --names base,rl,sft --budget 5
      unique query sequences per problem; overlaps of rl and sft with base
"""


def _slug(text: str) -> str:
    tail = text.removeprefix("hf:").rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", tail).strip("-") or "model"


def _write(out: Path, stem: str, markdown: str, data: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    mark_folder(out, "analysis")
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    md.write_text(markdown, encoding="utf-8", errors="backslashreplace")
    text = json.dumps(data, indent=2, allow_nan=False) + "\n"
    js.write_text(text, encoding="utf-8", errors="backslashreplace")
    return [md, js]


def _cmd_ppl(args: argparse.Namespace) -> int:
    import_modules(args.imports or ())
    check_device(args.device, "--device")  # before the run is read or the model loaded
    check_dtype(args.dtype, "--dtype")
    claim_folder(Path(args.out) if args.out else Path(args.run_dir) / "analysis", "analysis")

    result = run_perplexity(
        args.run_dir,
        args.model,
        budget=args.budget,
        only_correct=args.only_correct,
        limit=args.limit,
        batch_size=args.batch_size,
        n_boot=args.n_boot,
        level=args.level,
        ci_unit=args.ci_unit,
        partial=args.partial,
        device=args.device,
        dtype=args.dtype,
    )
    out = Path(args.out) if args.out else Path(args.run_dir) / "analysis"
    claim_folder(out, "analysis")
    markdown = result.to_markdown()
    stem = f"perplexity-{_slug(args.model)}-T{result.budget}"
    files = _write(out, stem, markdown, result.to_dict())
    print(markdown)
    print(f"passkt: wrote {', '.join(map(str, files))}")
    return 0


def _cmd_diversity(args: argparse.Namespace) -> int:
    import_modules(args.imports or ())

    runs = load_runs(args.runs, args.budget, partial=args.partial)
    names = [n.strip() for n in args.names.split(",")] if args.names else [r.name for r in runs]
    if len(names) != len(runs):
        raise ValueError(f"--names gives {len(names)} names for {len(runs)} runs")
    if len(set(names)) != len(names):
        names = [r.run_dir.resolve().name for r in runs]
        if len(set(names)) != len(names):
            raise ValueError(f"runs need distinct names, got {names}; pass --names a,b,...")
    diversities = [
        strategy_diversity(r.records, name=name, n_boot=args.n_boot, level=args.level)
        for r, name in zip(runs, names, strict=True)
    ]
    overlaps = [
        query_overlap(
            runs[0].records, r.records, name_a=names[0], name_b=name, budget=runs[0].budget
        )
        for r, name in zip(runs[1:], names[1:], strict=True)
    ]
    markdown = diversity_markdown(diversities, overlaps)
    data = {
        "budget": runs[0].budget,
        "runs": [str(r.run_dir) for r in runs],
        "diversity": [d.to_dict() for d in diversities],
        "overlap": [o.to_dict() for o in overlaps],
    }
    out = Path(args.out) if args.out else Path(args.runs[0]) / "analysis"
    claim_folder(out, "analysis")
    files = _write(out, f"diversity-T{runs[0].budget}", markdown, data)
    print(markdown)
    print(f"passkt: wrote {', '.join(map(str, files))}")
    return 0


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--budget", type=int_in(0, 1000), metavar="T", help="the T to analyze (default: largest)"
    )
    p.add_argument("--out", metavar="DIR", help="output folder (default: RUN_DIR/analysis)")
    p.add_argument("--n-boot", type=resamples, default=1000, help="bootstrap resamples (to 1e6)")
    p.add_argument("--level", type=unit_float, default=0.95, help="confidence level, in (0, 1)")
    p.add_argument("--partial", action="store_true", help="analyze the finished part of a run")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (repeatable), e.g. the one that registers the runs' env",
    )


def add_parser(subparsers: Any) -> None:
    """Add ``analyze`` (with ``ppl`` and ``diversity``) to the ``passkt`` command line."""
    analyze = subparsers.add_parser(
        "analyze",
        help="segment perplexity and strategy diversity of runs",
        description="Mechanism analyses of evaluation runs (see `passkt analyze KIND --help`).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = analyze.add_subparsers(dest="analysis", metavar="KIND", required=True)
    ppl = kinds.add_parser(
        "ppl",
        help="token NLL and perplexity by segment (query, answer, reasoning, tag)",
        description="Score a run's trajectories under a model and split NLL and perplexity by "
        "segment: search queries, answers, reasoning (free text and <think>), tags.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ppl.add_argument("run_dir", metavar="RUN_DIR")
    ppl.add_argument("--model", required=True, metavar="hf:PATH_OR_ID", help="scoring model")
    which = ppl.add_mutually_exclusive_group()
    which.add_argument(
        "--only-correct",
        dest="only_correct",
        action="store_true",
        default=True,
        help="score only successful trajectories (default, as in the study)",
    )
    which.add_argument(
        "--all", dest="only_correct", action="store_false", help="score every trajectory"
    )
    ppl.add_argument("--limit", type=_positive_int, help="score at most N trajectories")
    ppl.add_argument("--batch-size", type=_positive_int, default=8, help="per forward pass")
    ppl.add_argument(
        "--ci-unit",
        choices=("problem", "trajectory"),
        default="problem",
        help="what the bootstrap resamples (default %(default)s)",
    )
    ppl.add_argument("--device", help="where to load the model: cpu, cuda, cuda:1 (default cpu)")
    ppl.add_argument("--dtype", default="float32", help="float32 (default), bfloat16, float16")
    _add_common(ppl)
    ppl.set_defaults(func=_cmd_ppl)

    diversity = kinds.add_parser(
        "diversity",
        help="unique search-query sequences per problem; overlap with the first run",
        description="Distinct (normalized) search-query sequences among the n samples of each "
        "problem, averaged over problems; for later runs, the overlap of their query sequences "
        "with the first run's.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    diversity.add_argument("runs", nargs="+", metavar="RUN_DIR", help="reference run first")
    diversity.add_argument("--names", metavar="A,B,...", help="run names (default: manifests)")
    _add_common(diversity)
    diversity.set_defaults(func=_cmd_diversity)
