"""The base-strength sweep: does "RL sharpens, does not widen" depend on how strong the base is?

Each point is one finished study folder (``passkt study run``), all with the same SFT / RL / RFT
recipe and one base each: a size, a pretraining length, a pretraining seed. This script reads
their ``compare`` metrics and plots, per category, the boundary change and the pass@1 change of
every trained kind (trained minus base, mean and range over training seeds) against the base's
pass@1, each beside its noise floor (the largest base-vs-base swap count and |gap@1| of that
study's base evaluations)::

    passkt study sweep runs/nano runs/micro runs/micro-long --out runs/sweep

A study with ``eval.floor_pretrain_seeds`` has the base recipe's other pretraining seeds in its
floor, so its grey bar is the larger of the two noises (evaluation and pretraining seed). Writes
``OUT/sweep.md`` (the table, the per-stage cost of every study) and ``OUT/sweep_<cat>.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from passkt.study.report import markdown_table, read_timings, stage_order

TRAINED = ("SFT", "RL", "RFT")
COLORS = {"SFT": "#3182bd", "RL": "#e6550d", "RFT": "#31a354"}


class SweepError(Exception):
    """A folder that is not a finished study: the message names it and what is missing."""


@dataclass(frozen=True)
class Point:
    """One study's result for one category."""

    study: str
    label: str
    category: str
    base_pass1: float
    base_passn: float
    base_boundary: int
    floor: int | None
    """Largest base-vs-base swap count (None: the study evaluated its base once), pretraining
    seeds of the floor included."""
    floor_gap1: float | None
    """Largest base-vs-base |gap| at k = 1 (None: no floor)."""
    changes: dict[str, list[int]]
    """Trained kind -> boundary change (trained - base) per training seed."""
    pass1_changes: dict[str, list[float]]
    """Trained kind -> pass@1 change (trained - base) per training seed: sharpening's side."""
    seeds: list[int] = field(default_factory=list)
    """The training seeds, in the order of the per-seed lists."""
    floor_from: str = "-"
    """What the floor is made of: base evaluations and pretraining seeds."""
    boundary_cis: dict[str, list[tuple[float, float] | None]] = field(default_factory=dict)
    """Trained kind -> 95% CI of the boundary difference per training seed (compare stage)."""
    findings: dict[str, int] = field(default_factory=dict)
    """Trained kind -> training seeds whose boundary gain or loss is a finding (beyond the floor,
    CI excluding 0)."""


def _label(profile: dict) -> str:
    pre = profile.get("base", {}).get("pretrain")
    if pre is None:  # an existing model, e.g. a checkpoint of another study's pretraining
        model = profile.get("base", {}).get("model")
        name = profile.get("name")
        return f"{name}: {model}" if model and name else str(model or name)
    return (
        f"{pre.get('size', 'nano')} {pre.get('max_steps', 3000)} steps, seed {pre.get('seed', 0)}"
    )


def read_study(folder: Path) -> list[Point]:
    """The points of one finished study folder (one per category)."""
    stored = folder / "profile.json"
    if not stored.is_file():
        raise SweepError(f"{folder}: no profile.json; give folders made by `passkt study run`")
    profile = json.loads(stored.read_text(encoding="utf-8"))["profile"]
    by_cat: dict[str, list[dict]] = defaultdict(list)
    for path in sorted(folder.glob("compare/*/seed*/metrics.json")):
        by_cat[path.parent.parent.name].append(json.loads(path.read_text(encoding="utf-8")))
    if not by_cat:
        raise SweepError(f"{folder}: no compare/*/seed*/metrics.json; run its compare stage")
    points = []
    for cat, seeds in sorted(by_cat.items()):
        base = seeds[0]["runs"]["base"]
        floors = [m["noise_floor"]["max_swap"] for m in seeds if m.get("noise_floor")]
        gap1 = [m["noise_floor"]["max_abs_gap@1"] for m in seeds if m.get("noise_floor")]
        changes = {
            role: [m["runs"][role]["boundary"] - m["runs"]["base"]["boundary"] for m in seeds]
            for role in TRAINED
            if all(role in m["runs"] for m in seeds)
        }
        pass1 = {
            role: [m["runs"][role]["pass@1"] - m["runs"]["base"]["pass@1"] for m in seeds]
            for role in changes
        }
        vs = {role: [m.get("vs_base", {}).get(role, {}) for m in seeds] for role in changes}
        cis = {
            role: [tuple(v["boundary_difference_ci"]) if "boundary_difference_ci" in v else None
                   for v in per_seed]
            for role, per_seed in vs.items()
        }  # fmt: skip
        findings = {
            role: sum(bool(v.get("finding_boundary") or v.get("finding_boundary_loss"))
                      for v in per_seed)
            for role, per_seed in vs.items()
        }  # fmt: skip
        points.append(
            Point(
                study=str(folder),
                label=_label(profile),
                category=cat,
                base_pass1=base["pass@1"],
                base_passn=base["pass@n"],
                base_boundary=base["boundary"],
                floor=max(floors) if floors else None,
                floor_gap1=max(gap1) if gap1 else None,
                changes=changes,
                pass1_changes=pass1,
                seeds=[int(m.get("seed", i)) for i, m in enumerate(seeds)],
                floor_from=_floor_from(seeds[0].get("noise_floor")),
                boundary_cis=cis,
                findings=findings,
            )
        )
    return points


def _floor_from(floor: dict | None) -> str:
    """``2 evals, 1 pretraining seed`` from a noise floor's base names ("base p1 (eval 1)")."""
    if not floor:
        return "-"
    names = floor.get("names", [])
    evals = floor.get("evaluations") or len(names)
    if not evals:
        return "-"
    pretrain = {name.split(" (")[0] for name in names} or {"base"}
    return f"{evals} evals, {len(pretrain)} pretraining seed{'s' * (len(pretrain) > 1)}"


def stage_seconds(folder: Path) -> dict[str, tuple[float, float]]:
    """Per stage of a study, from its ``timings.jsonl``: (unit seconds summed over every unit and
    attempt, the stage's wall seconds with its units run in parallel, summed over calls)."""
    units: dict[str, float] = defaultdict(float)
    walls: dict[str, float] = defaultdict(float)
    for record in read_timings(folder):
        totals = walls if record["status"] == "stage" else units
        totals[record["stage"]] += record["seconds"]
    return {stage: (units[stage], walls[stage]) for stage in units.keys() | walls.keys()}


def _spread(values: list[int]) -> str:
    if not values:
        return "-"
    mean = statistics.fmean(values)
    return f"{mean:+.1f} [{min(values):+d}, {max(values):+d}]"


def _spread_rate(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.fmean(values):+.3f} [{min(values):+.3f}, {max(values):+.3f}]"


def _minutes(unit: float, wall: float) -> str:
    return f"{unit / 60:.1f} / {wall / 60:.1f}"


def sweep_table(points: Sequence[Point]) -> str:
    """The sweep as Markdown: one row per (category, study), weakest base first."""
    header = ["category", "base", "base pass@1", "base pass@n", "base boundary", "training seeds"]
    header += ["floor from", "noise floor"]
    header += [f"{r} − base boundary" for r in TRAINED]
    header += [f"{r} − base pass@1" for r in TRAINED]
    rows = []
    for p in sorted(points, key=lambda p: (p.category, p.base_pass1)):
        floor = "-" if p.floor is None else f"±{p.floor}"
        cells = [p.category, p.label, f"{p.base_pass1:.3f}", f"{p.base_passn:.3f}"]
        cells += [str(p.base_boundary), str(len(p.seeds)), p.floor_from, floor]
        cells += [_spread(p.changes.get(r, [])) for r in TRAINED]
        cells += [_spread_rate(p.pass1_changes.get(r, [])) for r in TRAINED]
        rows.append(cells)
    return markdown_table(header, rows)


def ci_table(points: Sequence[Point]) -> str:
    """Per (category, study): each trained kind's boundary difference with its 95% CI per
    training seed, and on how many seeds it is a finding (beyond the floor, CI excluding 0)."""
    header = ["category", "base", "noise floor", *(f"{r} − base boundary [95% CI] per seed"
                                                   for r in TRAINED)]  # fmt: skip
    rows = []
    for p in sorted(points, key=lambda p: (p.category, p.base_pass1)):
        cells = [p.category, p.label, "-" if p.floor is None else f"±{p.floor}"]
        for role in TRAINED:
            changes, cis = p.changes.get(role, []), p.boundary_cis.get(role, [])
            if not changes:
                cells.append("-")
                continue
            parts = [
                f"s{seed}: {change:+d}" + ("" if ci is None else f" [{ci[0]:+.1f}, {ci[1]:+.1f}]")
                for seed, change, ci in zip(p.seeds, changes, cis or [None] * len(changes),
                                            strict=True)
            ]  # fmt: skip
            parts.append(f"finding on {p.findings.get(role, 0)}/{len(changes)}")
            cells.append("; ".join(parts))
        rows.append(cells)
    return markdown_table(header, rows)


def _ci_envelope(point: Point, role: str) -> tuple[float, float] | None:
    """Lowest lower and highest upper bound of a kind's per-seed boundary CIs (None: none)."""
    cis = [ci for ci in point.boundary_cis.get(role, []) if ci is not None]
    if not cis:
        return None
    return min(low for low, _ in cis), max(high for _, high in cis)


def figure_category(points: Sequence[Point], category: str) -> Any:
    """Two panels against base pass@1: boundary change (grey: ± the floor's largest swap count)
    and pass@1 change (grey: ± the floor's largest |gap@1|); mean and seed range per kind."""
    from matplotlib.figure import Figure  # start-up cost: matplotlib, 0.35 s, for figures only

    chosen = sorted((p for p in points if p.category == category), key=lambda p: p.base_pass1)
    fig = Figure(figsize=(11, 4), layout="constrained")
    panels = fig.subplots(1, 2)
    for ax, attribute, floor_of, ylabel in (
        (panels[0], "changes", "floor", "boundary change (trained − base), problems"),
        (panels[1], "pass1_changes", "floor_gap1", "pass@1 change (trained − base)"),
    ):
        for p in chosen:
            floor = getattr(p, floor_of)
            if floor is not None:
                ax.fill_between([p.base_pass1 - 0.005, p.base_pass1 + 0.005], -floor, floor,
                                color="0.85")  # fmt: skip
        for offset, role in zip((-0.003, 0.0, 0.003), TRAINED, strict=True):
            xs, means, lows, highs, cis = [], [], [], [], []
            for p in chosen:
                values = getattr(p, attribute).get(role)
                if values:
                    mean = statistics.fmean(values)
                    xs.append(p.base_pass1 + offset)
                    means.append(mean)
                    lows.append(mean - min(values))
                    highs.append(max(values) - mean)
                    if attribute == "changes":  # the per-seed 95% CIs' envelope, where given
                        cis.append((len(xs) - 1, _ci_envelope(p, role)))
            if xs:
                ax.errorbar(xs, means, yerr=[lows, highs], fmt="o-", color=COLORS[role],
                            label=role, capsize=3)  # fmt: skip
            cis = [(i, ci) for i, ci in cis if ci is not None]
            if cis:
                ax.errorbar([xs[i] for i, _ in cis], [means[i] for i, _ in cis],
                            yerr=[[means[i] - lo for i, (lo, _) in cis],
                                  [hi - means[i] for i, (_, hi) in cis]],
                            fmt="none", ecolor=COLORS[role], alpha=0.35, elinewidth=4,
                            label="_nolegend_")  # fmt: skip
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("base pass@1 at T_max")
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle(
        f"{category}: change vs base strength\ngrey: ± base-vs-base noise floor; capped bars: "
        "range over training seeds; wide pale bars: the seeds' 95% CIs (boundary)",
        fontsize="medium",
    )
    return fig


def plot_category(points: Sequence[Point], category: str, path: Path) -> Path:
    """:func:`figure_category` written as PNG."""
    # start-up cost: matplotlib, 0.35 s, for figures only
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = figure_category(points, category)
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def make_sweep(folders: Sequence[Path], out: Path) -> Path:
    """Read the studies, write ``sweep.md`` and one figure per category; returns the Markdown."""
    points = [p for folder in folders for p in read_study(folder)]
    out.mkdir(parents=True, exist_ok=True)
    figures = [
        plot_category(points, cat, out / f"sweep_{cat}.png")
        for cat in sorted({p.category for p in points})
    ]
    stages = sorted({s for folder in folders for s in stage_seconds(folder)}, key=stage_order)
    cost = ["| study | " + " | ".join(stages) + " | total |", "|---" * (len(stages) + 2) + "|"]
    for folder in folders:
        seconds = stage_seconds(folder)
        cells = [_minutes(*seconds.get(s, (0.0, 0.0))) for s in stages]
        total = _minutes(sum(u for u, _ in seconds.values()), sum(w for _, w in seconds.values()))
        cost.append(f"| {folder} | " + " | ".join(cells) + f" | {total} |")
    text = (
        "# Base-strength sweep\n\nBoundary change (trained − base boundary size at T_max) and "
        "pass@1 change: mean [min, max] over training seeds. Noise floor: the largest number of "
        "problems two base evaluations swap (with pretraining seeds in the study's floor, also "
        "two equally made bases); a boundary change inside ± that floor is not a finding.\n\n"
        + sweep_table(points)
        + "\nThe boundary differences with their 95% CIs (over problems and samples, per training "
        "seed); a finding: beyond every base-vs-base swap count of the study's floor, with a CI "
        "excluding 0 (the compare stage's rule).\n\n"
        + ci_table(points)
        + "\n"
        + "\n".join(f"![{f.stem}]({f.name})" for f in figures)
        + "\n\n## Cost\n\nMinutes per stage of each study, from its `timings.jsonl`: unit "
        "minutes (every unit and attempt, summed: the compute) / stage wall minutes (its units "
        "run in parallel, `--jobs`). A study that pretrained its own base counts that in `base`; "
        "one trained from a kept checkpoint shares its pretraining and counts 0 there.\n\n"
        + "\n".join(cost)
        + "\n"
    )
    path = out / "sweep.md"
    path.write_text(text, encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="passkt study sweep", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("studies", nargs="+", type=Path, help="finished study folders")
    parser.add_argument("--out", required=True, type=Path, help="where sweep.md goes")
    args = parser.parse_args(argv)
    try:
        path = make_sweep(args.studies, args.out)
    except SweepError as e:
        print(f"passkt study sweep: error: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
