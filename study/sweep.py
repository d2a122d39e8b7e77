"""The base-strength sweep: each study's seed-level verdicts beside its base's strength and room.

Each point is one finished study folder (``passkt study run``), all with the same SFT / RL / RFT
recipe and one base recipe each: a size, a pretraining length, a pretraining seed::

    passkt study sweep runs/nano runs/micro runs/micro-long --out runs/sweep

Per study, category and trained kind, the verdict at the boundary pass@(n, T_max) and at
pass@(1, T_max) is the seed-level test the study's own ``summary.md`` prints
(:func:`passkt.study.claim.verdicts`, from the study's ``report/data/`` when its report stage
ran, else from its evaluations): estimate [interval] and gain / loss / equivalent /
inconclusive / not replicated. When a study trains every replicate from one base, its
replicates are training seeds from that base, so its verdict speaks about that base only, not the
base recipe.

The sweep makes no claim that widening depends on base strength: along its x axis (the base's
pass@1) the room left at k = n changes too (the problems the base does not yet solve at
pass@(n, T_max), P - base boundary, shown as a column), so its points are not comparable as a
strength-vs-widening curve. Beside the verdicts it shows, descriptively, each training seed's
boundary and pass@1 change (``compare/*/seed*/metrics.json``) and the study's base-vs-base noise
floor (the largest swap count and |gap@1| of its base evaluations; with
``eval.floor_pretrain_seeds`` also of the base recipe's other pretraining seeds): noise seen
between equally made bases, not the rule for a gain or a loss. Writes ``OUT/sweep.md`` (the
tables, the per-stage cost of every study) and ``OUT/sweep_<cat>.png``.
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

from passkt.eval.seeds import MIN_SEEDS
from passkt.study import pipeline
from passkt.study.claim import Verdict, verdicts
from passkt.study.cost import read_timings, stage_order
from passkt.study.profile import StudyError
from passkt.study.report import study_data
from passkt.study.report_format import markdown_table
from passkt.study.summary import DATA_DIR, DataError, StudyData, read_data

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
    seeds of the floor included: descriptive, not the rule for a gain or a loss."""
    floor_gap1: float | None
    """Largest base-vs-base |gap| at k = 1 (None: no floor); descriptive."""
    changes: dict[str, list[int]]
    """Trained kind -> boundary change (trained - base) per training seed."""
    pass1_changes: dict[str, list[float]]
    """Trained kind -> pass@1 change (trained - base) per training seed: sharpening's side."""
    seeds: list[int] = field(default_factory=list)
    """The training seeds, in the order of the per-seed lists."""
    floor_from: str = "-"
    """What the floor is made of: base evaluations and pretraining seeds."""
    boundary_cis: dict[str, list[tuple[float, float] | None]] = field(default_factory=dict)
    """Trained kind -> 95% CI of the boundary difference per training seed (compare stage: one
    policy against its base, evaluation noise only; descriptive)."""
    verdicts: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    """Trained kind -> ``{"boundary": ..., "pass@1": ...}``: the seed-level verdicts of
    :func:`passkt.study.claim.verdicts` at pass@(n, T_max) and pass@(1, T_max)."""
    problems: int | None = None
    """P: the category's evaluation problems (None: not in the study's data)."""
    room: float | None = None
    """Problems the base does not solve at pass@(n, T_max): P - base boundary (mean over the
    base replicates of the study's data; None: not in its data)."""
    per_seed: bool = False
    """``base.per_seed``: each replicate is its own pretraining of the base recipe; otherwise
    every replicate is a training seed from one base and the verdicts speak about that base."""


def _label(profile: dict) -> str:
    pre = profile.get("base", {}).get("pretrain")
    if pre is None:  # an existing model, e.g. a checkpoint of another study's pretraining
        model = profile.get("base", {}).get("model")
        name = profile.get("name")
        return f"{name}: {model}" if model and name else str(model or name)
    return (
        f"{pre.get('size', 'nano')} {pre.get('max_steps', 3000)} steps, seed {pre.get('seed', 0)}"
    )


def verdict_data(folder: Path) -> StudyData:
    """The counts a study's seed-level verdicts are made from, as ``passkt study report`` uses
    them: its report's ``data/`` when the report stage ran, else read from its evaluations.

    Raises:
        SweepError: neither is there (or readable), naming the folder.
    """
    kept = folder / "report" / DATA_DIR
    if (kept / "study.json").is_file():
        try:
            return read_data(kept)
        except DataError as e:
            raise SweepError(f"{folder}: {e}") from e
    try:
        return study_data(pipeline.study_at(folder))
    except (StudyError, OSError, ValueError) as e:
        raise SweepError(
            f"{folder}: no report/{DATA_DIR}/study.json and its evaluations cannot be read ({e}); "
            f"finish its eval stages and run `passkt study report {folder}`"
        ) from e


def _by_kind(data: StudyData) -> dict[str, dict[str, dict[str, Verdict]]]:
    """``cat -> kind -> {"pass@1": v, "boundary": v}`` from :func:`claim.verdicts`."""
    out: dict[str, dict[str, dict[str, Verdict]]] = defaultdict(lambda: defaultdict(dict))
    for v in verdicts(data):
        out[v.cat][v.kind]["pass@1" if v.metric.startswith("pass@(1,") else "boundary"] = v
    return {cat: dict(kinds) for cat, kinds in out.items()}


def _room(spec: dict[str, Any]) -> tuple[int, float] | None:
    """P and the problems the base does not solve at pass@(n, T_max), mean over its replicates."""
    j = list(spec["budgets"]).index(max(spec["budgets"]))
    bases = [r for r in spec["runs"] if r.role == "base"]
    if not bases:
        return None
    problems = len(spec["task_ids"])
    return problems, statistics.fmean(problems - int((r.correct[:, j] > 0).sum()) for r in bases)


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
    data = verdict_data(folder)
    tests = _by_kind(data)
    points = []
    for cat, seeds in sorted(by_cat.items()):
        spec = data.categories.get(cat)
        room = None if spec is None else _room(spec)
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
                verdicts=tests.get(cat, {}),
                problems=None if room is None else room[0],
                room=None if room is None else room[1],
                per_seed=data.per_seed,
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


def _room_cell(p: Point) -> str:
    if p.room is None:
        return "-"
    room = f"{p.room:g}" if float(p.room).is_integer() else f"{p.room:.1f}"
    return f"{room} of {p.problems}"


def _verdict_cell(v: Verdict | None) -> str:
    """``+0.040 [+0.010, +0.070] gain``: the seed-level estimate, its interval and its word."""
    if v is None:
        return "-"
    t = v.test
    return f"{t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}] {v.word}"


def _replicates(p: Point) -> str:
    if p.per_seed:
        return f"{len(p.seeds)} per-seed bases"
    return f"{len(p.seeds)} training seeds of one base"


def verdict_table(points: Sequence[Point]) -> str:
    """Per (category, study), weakest base first: the room left at k = n and each trained kind's
    seed-level verdict at pass@(n, T_max) and pass@(1, T_max) (the study summary's)."""
    header = ["category", "base", "base pass@1", "room at k = n (unsolved of P)", "replicates"]
    header += [f"{r} − base pass@(n, T_max)" for r in TRAINED]
    header += [f"{r} − base pass@(1, T_max)" for r in TRAINED]
    rows = []
    for p in sorted(points, key=lambda p: (p.category, p.base_pass1)):
        cells = [p.category, p.label, f"{p.base_pass1:.3f}", _room_cell(p), _replicates(p)]
        cells += [_verdict_cell(p.verdicts.get(r, {}).get("boundary")) for r in TRAINED]
        cells += [_verdict_cell(p.verdicts.get(r, {}).get("pass@1")) for r in TRAINED]
        rows.append(cells)
    return markdown_table(header, rows)


def sweep_table(points: Sequence[Point]) -> str:
    """Per (category, study), weakest base first: the base, its room, the descriptive noise floor
    and each kind's change per training seed (mean [min, max])."""
    header = ["category", "base", "base pass@1", "base pass@n", "base boundary"]
    header += ["room at k = n", "training seeds", "floor from", "noise floor (descriptive)"]
    header += [f"{r} − base boundary" for r in TRAINED]
    header += [f"{r} − base pass@1" for r in TRAINED]
    rows = []
    for p in sorted(points, key=lambda p: (p.category, p.base_pass1)):
        floor = "-" if p.floor is None else f"±{p.floor}"
        cells = [p.category, p.label, f"{p.base_pass1:.3f}", f"{p.base_passn:.3f}"]
        cells += [str(p.base_boundary), _room_cell(p), str(len(p.seeds)), p.floor_from, floor]
        cells += [_spread(p.changes.get(r, [])) for r in TRAINED]
        cells += [_spread_rate(p.pass1_changes.get(r, [])) for r in TRAINED]
        rows.append(cells)
    return markdown_table(header, rows)


def ci_table(points: Sequence[Point]) -> str:
    """Per (category, study): each trained kind's boundary difference with its 95% CI per
    training seed (the compare stage's, one policy against its base: descriptive)."""
    header = ["category", "base", "noise floor (descriptive)",
              *(f"{r} − base boundary [95% CI] per seed" for r in TRAINED)]  # fmt: skip
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
    and pass@1 change (grey: ± the floor's largest |gap@1|); mean and seed range per kind. The
    grey band is descriptive (base-vs-base noise), and the x axis also moves the room left at
    k = n: the points are not a strength-vs-widening curve (the verdicts are in ``sweep.md``)."""
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
                    # max(0, ...): a mean of equal floats may fall a rounding step outside them
                    lows.append(max(0.0, mean - min(values)))
                    highs.append(max(0.0, max(values) - mean))
                    if attribute == "changes":  # the per-seed 95% CIs' envelope, where given
                        cis.append((len(xs) - 1, _ci_envelope(p, role)))
            if xs:  # points, not a line: studies differ in more than base strength
                ax.errorbar(xs, means, yerr=[lows, highs], fmt="o", color=COLORS[role],
                            label=role, capsize=3)  # fmt: skip
            cis = [(i, ci) for i, ci in cis if ci is not None]
            if cis:
                ax.errorbar([xs[i] for i, _ in cis], [means[i] for i, _ in cis],
                            yerr=[[max(0.0, means[i] - lo) for i, (lo, _) in cis],
                                  [max(0.0, hi - means[i]) for i, (_, hi) in cis]],
                            fmt="none", ecolor=COLORS[role], alpha=0.35, elinewidth=4,
                            label="_nolegend_")  # fmt: skip
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("base pass@1 at T_max")
        ax.set_ylabel(ylabel)
        ax.legend()
    fig.suptitle(
        f"{category}: change per study, by base pass@1 (which also sets the room at k = n)\n"
        "grey: ± base-vs-base noise floor (descriptive); capped bars: range over training seeds; "
        "wide pale bars: the seeds' 95% CIs (boundary)",
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
        "# Base-strength sweep\n\nOne row per (category, study), weakest base first.\n\n"
        "## Seed-level verdicts\n\nThe rule for a gain or a loss is the seed-level test "
        "(`passkt.eval.seeds`; docs/statistics.md), the one each study's `summary.md` prints: "
        "the mean over replicates of the paired trained − base difference at pass@(n, T_max) "
        "(the boundary) and at pass@(1, T_max), its interval (the study's level) carrying the "
        "between-replicate and the evaluation (problem and sample) variance; estimate [interval] "
        f"and its word. With fewer than {MIN_SEEDS} replicates it gives estimates and no verdict "
        "(not replicated). With `base.per_seed` each replicate is its own pretraining of the "
        "base recipe and the policies trained from it; otherwise every replicate trains from one "
        "base, so the between-seed part holds training noise only: a verdict is about this base, "
        "not the recipe.\n\n"
        + verdict_table(points)
        + "\nThe sweep makes no claim that the widening depends on base strength. Along the x "
        "axis (the base's pass@1) the room left at k = n changes too: the problems the base does "
        "not yet solve at pass@(n, T_max) (P − base boundary, the room column), the only ones a "
        "boundary gain can add. So the points are not comparable as a strength-vs-widening "
        "curve; read each verdict beside its own room.\n\n"
        "## Changes per training seed (descriptive)\n\nBoundary change (trained − base "
        "boundary size at T_max, problems) and pass@1 change: mean [min, max] over training "
        "seeds. Noise floor: base-vs-base noise, descriptive; not the rule: the largest number "
        "of problems two base evaluations swap (with pretraining seeds in the study's floor, "
        "also two equally made bases).\n\n"
        + sweep_table(points)
        + "\nThe boundary differences with the compare stage's 95% CIs (over problems and "
        "samples, per training seed): one trained policy against its base, evaluation noise "
        "only; what they say about the recipe is the seed-level verdict above.\n\n"
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
