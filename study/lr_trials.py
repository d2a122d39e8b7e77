"""Learning-rate trials of one study's trainer, on its training signal only.

A study's report records which learning rates were tried and on which training signal, never
on the evaluation. This script takes a study folder whose ``base`` stage is done, builds
exactly the trainer config that ``passkt study run --stage train`` would (same base, same
training split, same fields), changes only the learning rate and the number of steps, and
trains one short run per rate. It then reads each run's ``metrics.jsonl`` (GRPO: the mean
rollout reward; SFT and RFT: the training NLL) and writes ``OUT/trials.md`` (first and last
steps of the signal per rate), ``OUT/trials.jsonl`` and ``OUT/trials.png`` (the signal against
steps, one line per rate). Each run resumes from its last checkpoint if the script is stopped::

    python -m passkt.study.lr_trials runs/regime-s0 --method grpo --category C \\
        --lrs 3e-5,1e-4,3e-4 --max-steps 30 --out runs/lr/grpo-C

The sentence to paste into the profile's ``lr_trials`` is printed at the end; choosing the rate
is left to the reader of the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from passkt.study import pipeline
from passkt.study.profile import StudyError, pin
from passkt.study.stages import Study, read_done, train_config

SIGNALS = {"grpo": ("reward/mean", "rollout reward"), "sft": ("loss/nll", "training NLL")}
SIGNALS["rft"] = SIGNALS["sft"]


def _rates(text: str) -> list[float]:
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as e:
        raise StudyError(f"--lrs {text!r}: {e}; give rates such as 3e-5,1e-4") from e
    if not rates or any(r <= 0 for r in rates):
        raise StudyError(f"--lrs {text!r}: give one or more positive rates, e.g. 3e-5,1e-4")
    return rates


def run_dir(out: Path, rate: float) -> Path:
    return out / f"lr{rate:g}"


def signal(run: Path, key: str) -> list[tuple[int, float]]:
    """(step, value) of ``key`` from a trainer's ``metrics.jsonl``, last write of a step wins."""
    path = run / "metrics.jsonl"
    rows: dict[int, float] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if key in record:
            rows[int(record["step"])] = float(record[key])  # a resumed run may repeat a step
    return sorted(rows.items())


def summarize(values: Sequence[float], window: int) -> dict[str, float]:
    """Mean of the first and last ``window`` values (or of all, when fewer)."""
    head, tail = values[:window], values[-window:]
    return {"first": statistics.fmean(head), "last": statistics.fmean(tail), "steps": len(values)}


def train_one(study: Study, method: str, cat: str, seed: int, rate: float, args) -> Path:
    base = train_config(study, method, cat, seed)
    fields = base.to_dict()
    out = run_dir(args.out, rate)
    fields.update(
        learning_rate=rate, max_steps=args.max_steps, output_dir=str(out),
        save_every=args.save_every, save_total_limit=1, eval_every=0, progress=args.progress,
    )  # fmt: skip
    config = type(base).from_dict(fields)
    if method == "grpo":
        from passkt.agents.train.grpo import train_grpo as train  # start-up cost: torch, 1 s
    else:
        from passkt.agents.train.sft import train_sft as train  # start-up cost: torch, 1 s
    train(config, resume=True)
    return out


def table(rows: list[dict], label: str, window: int) -> str:
    lines = [
        f"| learning rate | steps | {label}, first {window} steps | last {window} steps | change |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['lr']:g} | {r['steps']} | {r['first']:.3f} | {r['last']:.3f} | "
            f"{r['last'] - r['first']:+.3f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], curves: dict[float, list[tuple[int, float]]], label: str, path: Path):
    import matplotlib  # start-up cost: matplotlib, 0.35 s, for figures only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up cost: matplotlib, 0.35 s, for figures only

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for r in rows:
        steps, values = zip(*curves[r["lr"]], strict=True)
        ax.plot(steps, values, marker=".", label=f"lr {r['lr']:g}")
    ax.set_xlabel("training step")
    ax.set_ylabel(label)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("study", type=Path, help="a study folder whose base stage is done")
    p.add_argument("--method", choices=sorted(SIGNALS), required=True)
    p.add_argument("--category", required=True, help="one of the profile's categories, e.g. C")
    p.add_argument("--lrs", required=True, help="comma-separated learning rates")
    p.add_argument("--max-steps", type=int, default=30, help="steps of each trial run")
    p.add_argument("--seed", type=int, default=0, help="training seed of every trial")
    p.add_argument("--window", type=int, default=5, help="steps averaged at each end")
    p.add_argument("--save-every", type=int, default=10, help="checkpoint period (resume)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        rates = _rates(args.lrs)
        if args.max_steps < 1 or args.window < 1:
            raise StudyError("--max-steps and --window must be >= 1")
        profile = pin(args.study, None, None)
        if args.method not in profile["methods"]:
            methods = profile["methods"]
            raise StudyError(f"--method {args.method}: not among {args.study}'s {methods}")
        if args.category not in profile["categories"]:
            raise StudyError(
                f"--category {args.category}: not among {args.study}'s {profile['categories']}"
            )
        study = Study(args.study, profile, [args.category], [args.seed])
        read_done(study.base_dir, "base")  # the base must exist: trials never pretrain
        if not (study.splits_dir(args.category) / "done.json").is_file():
            pipeline.run(["splits", "--out", str(args.study), "--categories", args.category])
    except StudyError as e:
        print(f"lr_trials: {e}", file=sys.stderr)
        return 2
    if args.threads is not None:
        import torch  # optional: the hf extra (torch, transformers)

        torch.set_num_threads(args.threads)
    key, label = SIGNALS[args.method]
    args.out.mkdir(parents=True, exist_ok=True)
    rows, curves = [], {}
    for rate in rates:
        run = train_one(study, args.method, args.category, args.seed, rate, args)
        curves[rate] = signal(run, key)
        if not curves[rate]:
            print(f"lr_trials: {run}/metrics.jsonl has no {key!r}", file=sys.stderr)
            return 1
        rows.append({"lr": rate, **summarize([v for _, v in curves[rate]], args.window)})
    with open(args.out / "trials.jsonl", "w", encoding="utf-8") as handle:
        for r in rows:
            handle.write(json.dumps({"method": args.method, "category": args.category, **r}) + "\n")
    what = (
        f"{args.method} on {args.category} ({args.study.name}, training split, seed {args.seed}), "
        f"{args.max_steps} steps per rate; signal: {label} (`{key}`)"
    )
    (args.out / "trials.md").write_text(
        f"# Learning-rate trials: {what}\n\n{table(rows, label, args.window)}\n", encoding="utf-8"
    )
    plot(rows, curves, label, args.out / "trials.png")
    print(table(rows, label, args.window))
    tried = ", ".join(f"{r['lr']:g} ({r['first']:.3f} -> {r['last']:.3f})" for r in rows)
    print(f"\nlr_trials sentence: {args.method} {args.category}: {label} over {args.max_steps} "
          f"steps, first -> last {args.window}: {tried}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
