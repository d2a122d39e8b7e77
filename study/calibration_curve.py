"""Profile a testbed base while it pretrains: pass@1 and pass@n against pretraining steps.

A base is calibrated on its own metrics only. ``passkt testbed pretrain`` keeps just its
latest checkpoint, so this script watches a pretraining folder, copies each checkpoint whose step
is a multiple of ``--every`` as it appears, evaluates the copy (``passkt eval`` with the lean
loop, one thread, the category's env at T = ``--budget``) and appends one row per (step,
category) to ``OUT/curve.md`` and ``OUT/curve.jsonl``. It stops when the pretraining folder has its
final ``model/`` and that has been evaluated too. Run it beside the pretraining (it costs about a
minute of one core per point at the defaults) or after it, on the final model alone::

    python -m passkt.study.calibration_curve runs/regime-s0/base --out runs/cal/s0 \\
        --every 750 --categories C --n 16 --limit 100
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

CATEGORIES = {  # env id, env kwargs, budget (T) the targets are read at
    "A": ("Math-v0", "", 0),
    "B": ("ComparisonQA-v0", "", 5),
    "C": ("BridgeQA-v0", "hops=[2]", 5),
}


def evaluate(model: Path, cat: str, args: argparse.Namespace, out: Path) -> dict:
    """One ``passkt eval`` of ``model`` on ``cat``; its pass@1, pass@n and boundary with CIs."""
    env, kwargs, budget = CATEGORIES[cat]
    command = [
        sys.executable, "-m", "passkt", "--threads", str(args.threads), "eval",
        "--env", env, "--policy", f"lean:{model}", "--n", str(args.n),
        "--budgets", str(budget), "--ks", f"1,{args.n}", "--limit", str(args.limit),
        "--max-new-tokens", "48", "--seed", str(args.seed), "--no-progress", "--out", str(out),
    ]  # fmt: skip
    if kwargs:
        command[command.index("--policy") : command.index("--policy")] = ["--env-kwargs", kwargs]
    started = time.process_time(), time.time()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    surface = json.loads((out / "report" / "surface.json").read_text(encoding="utf-8"))
    cell = {k: surface[k] for k in ("values", "lower", "upper")}
    return {
        "pass1": [cell[k][0][0] for k in ("values", "lower", "upper")],
        "pass_n": [cell[k][1][0] for k in ("values", "lower", "upper")],
        "wall_s": round(time.time() - started[1], 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("pretrain", type=Path, help="the pretraining folder (with checkpoint/)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--every", type=int, default=750, help="evaluate checkpoints at these steps")
    p.add_argument("--categories", default="C", help="e.g. A,B,C")
    p.add_argument("--n", type=int, default=16)
    p.add_argument("--limit", type=int, default=100, help="test problems")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--poll", type=float, default=20.0, help="seconds between looks")
    args = p.parse_args(argv)
    cats = args.categories.split(",")
    unknown = sorted(set(cats) - set(CATEGORIES))
    if unknown:
        p.error(f"--categories: unknown {unknown}; choose from {sorted(CATEGORIES)}")
    if not args.pretrain.is_dir():
        p.error(f"{args.pretrain} is not a pretraining folder (passkt testbed pretrain --out)")
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "curve.jsonl"
    done = set()
    if log.exists():
        done = {(r["step"], r["category"]) for r in map(json.loads, log.read_text().splitlines())}
    while True:
        final = args.pretrain / "model"
        state = args.pretrain / "checkpoint" / "state.json"
        source, step = None, None
        if (final / "config.json").exists():
            source, step = final, "final"
        elif state.exists():
            try:
                step = json.loads(state.read_text(encoding="utf-8"))["step"]
            except (ValueError, KeyError):
                step = None  # being written: look again
            if isinstance(step, int) and step % args.every == 0:
                source = args.pretrain / "checkpoint"
        todo = [c for c in cats if source is not None and (step, c) not in done]
        if todo:
            snapshot = args.out / f"model-{step}"
            if not _snapshot(source, snapshot, step, args.pretrain / "pretrain_config.json"):
                time.sleep(args.poll)
                continue
            for cat in todo:
                row = {"step": step, "category": cat, "n": args.n, "limit": args.limit}
                row |= evaluate(snapshot, cat, args, args.out / f"eval-{step}-{cat}")
                with log.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
                done.add((step, cat))
                print(json.dumps(row), flush=True)
            _table(log, args.out / "curve.md")
        if step == "final" and not todo:
            return 0
        time.sleep(args.poll)


def _snapshot(source: Path, snapshot: Path, step: int | str, config: Path | None = None) -> bool:
    """Copy the checkpoint (without its optimizer state) and the pretraining's ``config``, so the
    snapshot names its recipe and step; False if the checkpoint was replaced meanwhile (the
    pretraining renames a new checkpoint into place every ``save_every`` steps)."""
    if snapshot.exists():
        return True
    partial = snapshot.with_name(snapshot.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns("optimizer*"))
        if config is not None and config.is_file():
            shutil.copy2(config, partial / config.name)
        state = partial / "state.json"
        if step != "final" and json.loads(state.read_text(encoding="utf-8"))["step"] != step:
            raise FileNotFoundError("a newer checkpoint")
    except (OSError, shutil.Error, ValueError, KeyError):
        shutil.rmtree(partial, ignore_errors=True)
        return False
    partial.rename(snapshot)
    return True


def _table(log: Path, path: Path) -> None:
    rows = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    lines = [
        "| step | category | problems x n | pass@1 [95% CI] | pass@n [95% CI] | eval wall s |",
        "|---|---|---|---|---|---:|",
    ]
    for r in rows:
        cells = [f"{v:.3f} [{lo:.2f}, {hi:.2f}]" for v, lo, hi in (r["pass1"], r["pass_n"])]
        lines.append(
            f"| {r['step']} | {r['category']} | {r['limit']} x {r['n']} | {cells[0]} | "
            f"{cells[1]} | {r['wall_s']} |"
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
