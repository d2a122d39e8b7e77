"""Coverage and A/A false-positive rates of passkt's intervals, old method vs new, by simulation.

    python benchmarks/calibration.py                 (the table in benchmarks/README.md)
    python benchmarks/calibration.py --runs 5000 --seed 3

For each regime of ``passkt.eval.calibration.REGIMES`` it simulates ``--runs`` studies (100
problems, n = 16, k in 1, 2, 4, 8, 16) and applies both the old method (percentile bootstrap over
problems, 1000 resamples, every cell read at 5%) and the new one (``score``: problems and
samples, Holm over the grid). Prints a Markdown table: coverage of nominal 95% intervals, and the
share of A/A comparisons (two evaluations of the same policy) that call a difference.
"""

from __future__ import annotations

import argparse
import time

from passkt.eval.calibration import REGIMES, calibrate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="simulated studies per regime")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cpu, wall = time.process_time(), time.perf_counter()
    results = {
        (regime, method): {
            (r.target, r.k): r.rate
            for r in calibrate(regime, method, runs=args.runs, seed=args.seed)
        }
        for regime in REGIMES
        for method in ("bootstrap", "score")
    }
    columns = [
        ("pass@1", ("coverage pass@k", 1)),
        ("pass@4", ("coverage pass@k", 4)),
        ("pass@16", ("coverage pass@k", 16)),
        ("gap@1", ("coverage gap@k", 1)),
        ("gap@4", ("coverage gap@k", 4)),
        ("boundary diff", ("coverage boundary difference", 16)),
        ("A/A headline", ("A/A headline (widening)", None)),
        ("A/A k=16 cell", ("A/A cell k=n", 16)),
        ("A/A any cell (old: raw, new: Holm)", None),
    ]
    print(f"{args.runs} simulated studies per regime, 100 problems, n = 16, seed {args.seed}")
    print(
        "coverage of nominal 95% intervals (target 0.95); "
        "A/A: share calling a difference (target <= 0.05)\n"
    )
    print("| regime | method | " + " | ".join(name for name, _ in columns) + " |")
    print("|:---|:---|" + "---:|" * len(columns))
    for regime in REGIMES:
        for method, label in (
            ("bootstrap", "old: bootstrap over problems"),
            ("score", "new: score, Holm"),
        ):
            rates = results[regime, method]
            cells = []
            for _, key in columns:
                if key is None:
                    key = (
                        "A/A any cell, uncorrected"
                        if method == "bootstrap"
                        else "A/A any cell, Holm",
                        None,
                    )
                cells.append(f"{rates[key]:.3f}")
            print(f"| {regime} | {label} | " + " | ".join(cells) + " |")
    print(f"\n{time.process_time() - cpu:.1f} s CPU, {time.perf_counter() - wall:.1f} s wall")


if __name__ == "__main__":
    main()
