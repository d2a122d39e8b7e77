"""Evaluation at scale with a scripted policy: episodes per CPU-second, bytes and peak memory.

For each size, one ``passkt eval`` job (``scripted:oracle`` on synthetic BridgeQA, T in 0,1,2,3,5,
up to 1,000 test tasks and n = size / (5 x tasks): a larger run is more samples of the same
problems, and a rollout batch holds at most ``ceil(256 / n)`` tasks) runs in its own process,
then ``passkt report`` on the run it wrote, and ``passkt report`` again on the same run rewritten
in the earlier layout (each result line carrying its transcript)
(each result line carrying its transcript), all in this one invocation. Each process reports
its CPU seconds and peak resident memory (GNU ``/usr/bin/time``).

    python benchmarks/store_scale.py --episodes 1000,10000,32000,100000,320000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from passkt.eval.store import MANIFEST_FILE, RESULTS_FILE
from passkt.eval.transcripts import TRANSCRIPTS_FILE

TASKS = 1000
BUDGETS = (0, 1, 2, 3, 5)


def _measured(command: list[str]) -> tuple[float, float]:
    """Run ``command`` under GNU time; its (CPU seconds, peak RSS in MB)."""
    with tempfile.NamedTemporaryFile("r") as usage:
        subprocess.run(
            ["/usr/bin/time", "-f", "%U %S %M", "-o", usage.name, *command],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        user, system, peak_kb = usage.read().split()[-3:]
    return float(user) + float(system), int(peak_kb) / 1024


def _old_layout(run: Path, out: Path) -> None:
    """The same run with each transcript back inside its result line (the layout before)."""
    out.mkdir()
    manifest = json.loads((run / MANIFEST_FILE).read_text(encoding="utf-8"))
    manifest.pop("integrity", None)  # that layout had no chunk digests either
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    with (
        (run / RESULTS_FILE).open(encoding="utf-8") as results,
        (run / TRANSCRIPTS_FILE).open(encoding="utf-8") as transcripts,
        (out / RESULTS_FILE).open("w", encoding="utf-8") as merged,
    ):
        for line, transcript in zip(results, transcripts, strict=True):
            record = json.loads(line)
            record.get("manifest_digest", {}).pop("integrity", None)
            record["messages"] = json.loads(transcript)["messages"]
            merged.write(json.dumps(record, ensure_ascii=False) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--episodes", default="1000,10000,32000,100000,320000")
    p.add_argument("--keep", help="keep the runs in this folder (default: a temporary one)")
    p.add_argument(
        "--old-up-to",
        type=int,
        default=320_000,
        help="report the old layout only up to this many episodes (it needs ~8 KB each)",
    )
    p.add_argument("--plot", help="also draw episodes/CPU-s and peak memory to this PNG")
    args = p.parse_args(argv)
    passkt = [sys.executable, "-m", "passkt.eval.cli", "--threads", "1"]
    root = Path(args.keep or tempfile.mkdtemp(prefix="passkt-scale-"))
    print(
        "| episodes | eval CPU s | episodes / CPU-s | eval peak MB | bytes / episode "
        "(results + transcripts) | report CPU s | report peak MB | report peak MB, old layout |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for episodes in (int(e) for e in args.episodes.split(",")):
        tasks = min(TASKS, max(1, episodes // len(BUDGETS)))
        n = max(1, episodes // (tasks * len(BUDGETS)))
        run = root / f"run-{episodes}"
        grid = ["--n", str(n), "--limit", str(tasks), "--budgets", ",".join(map(str, BUDGETS))]
        quiet = ["--no-progress", "--no-report", "--out", str(run)]
        eval_cpu, eval_peak = _measured(
            [*passkt, "eval", "--policy", "scripted:oracle", *grid, *quiet]
        )
        total = tasks * n * len(BUDGETS)
        sizes = [(run / name).stat().st_size for name in (RESULTS_FILE, TRANSCRIPTS_FILE)]
        report_cpu, report_peak = _measured([*passkt, "report", str(run), "--n-boot", "200"])
        old_peak = float("nan")
        if total <= args.old_up_to:
            _old_layout(run, root / f"old-{episodes}")
            old_report = [*passkt, "report", str(root / f"old-{episodes}"), "--n-boot", "200"]
            _, old_peak = _measured(old_report)
        print(
            f"| {total:,} | {eval_cpu:.1f} | {total / eval_cpu:,.0f} | {eval_peak:,.0f} | "
            f"{sum(sizes) / total:,.0f} ({sizes[0] / total:,.0f} + {sizes[1] / total:,.0f}) | "
            f"{report_cpu:.1f} | {report_peak:,.0f} | {old_peak:,.0f} |",
            flush=True,
        )
        rows.append((total, total / eval_cpu, eval_peak, report_peak, old_peak))
        if not args.keep:
            shutil.rmtree(run)
            shutil.rmtree(root / f"old-{episodes}", ignore_errors=True)
    if args.plot:
        _plot(rows, args.plot)
    return 0


def _plot(rows: list[tuple[float, ...]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    episodes, rate, eval_peak, report_peak, old_peak = zip(*rows, strict=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(episodes, rate, "o-")
    left.set(xscale="log", xlabel="episodes", ylabel="episodes per CPU-second", ylim=(0, None))
    right.plot(episodes, eval_peak, "o-", label="eval")
    right.plot(episodes, report_peak, "s-", label="report")
    right.plot(episodes, old_peak, "^--", label="report, layout before")
    right.set(xscale="log", xlabel="episodes", ylabel="peak RSS (MB)", ylim=(0, None))
    right.legend()
    fig.suptitle("passkt eval, scripted:oracle, synthetic BridgeQA (one thread)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    raise SystemExit(main())
