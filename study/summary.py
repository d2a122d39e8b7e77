"""The study's verdicts from compact data: the seed-level test per trained kind, T explained.

The ``report`` stage exports what its verdicts are computed from into ``OUT/report/data/`` —
kilobytes, not transcripts: per run, per problem and T, the correct count among the n samples and
how many of those episodes ended by the agent's own answer before the budget ran out, and how
many were cut off. :func:`make_summary` turns that folder alone into ``summary.md`` and its
figures, so a copy of ``data/`` committed beside a report remakes every number, sentence and
figure of the summary (``passkt study report DIR`` on a folder holding only ``data/``).

The verdict sentences come from :mod:`passkt.study.claim`; this module lays them out beside
the tables and figures they are read from. The unit of replication is the independently made
(base, trained) pair: with ``base.per_seed`` each seed has its own pretraining, otherwise every
training seed starts from one base and the test's between-seed part holds training noise only
(the summary says so). Fewer than ``MIN_SEEDS`` pairs give estimates and no verdict.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from passkt.eval.change import reading, reliability_k
from passkt.eval.estimator import pass_at_k_array
from passkt.eval.power import (
    required_problems,
    seed_level_power,
    smallest_change,
    smoothed_rates,
    true_pass_at_k,
)
from passkt.eval.seeds import MIN_SEEDS, SeedTest
from passkt.study.claim import (
    POWER_DELTA,
    POWER_SIMS,
    RealisticPower,
    claim_sentence,
    interim,
    realistic_power,
    reference_sentence,
    replicates,
    seed_test,
    trained_kinds,
    verdicts,
)
from passkt.study.counts import (
    DATA_DIR,
    SHARED,
    DataError,
    RunCounts,
    StudyData,
    read_data,
    write_data,
)
from passkt.study.design import calibration_figure, design_section, regime_section

__all__ = [
    "DATA_DIR",
    "SUMMARY_FILE",
    "DataError",
    "RunCounts",
    "StudyData",
    "make_summary",
    "read_data",
    "write_data",
]

SUMMARY_FILE = "summary.md"


def cost_rows(timings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per stage: units, attempts, their seconds summed, the stage's wall seconds.

    Every line of ``timings.jsonl`` counts: a unit interrupted and resumed, or run
    again on a fresh checkout, adds an attempt and its seconds (what the study cost, not what
    one uninterrupted pass would). An interrupted stage wrote no stage line, so its
    wall time is missing from ``wall_seconds``; the unit seconds still hold it.
    """
    units: dict[str, set] = defaultdict(set)
    attempts: dict[str, int] = defaultdict(int)
    unit_seconds: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for line in timings:
        if line["status"] == "stage":
            wall[line["stage"]] += line["seconds"]
        else:
            units[line["stage"]].add(line["unit"])
            attempts[line["stage"]] += 1
            unit_seconds[line["stage"]] += line["seconds"]
    order = ("splits", "base", "eval-base", "train", "eval-trained", "compare", "analyze")
    return [
        {
            "stage": stage,
            "units": len(units[stage]),
            "attempts": attempts[stage],
            "unit_seconds": unit_seconds[stage],
            "wall_seconds": wall.get(stage, 0.0),
        }
        for stage in sorted(set(units) | set(wall), key=lambda s: (*order, s).index(s))
        if stage != "report"  # the report's own time is recorded after it is written
    ]


# ---------------------------------------------------------------------- the summary


def _fmt_test(t: SeedTest | None) -> str:
    if t is None:
        return "-"
    mark = "" if not t.replicated else {"gain": " gain", "loss": " loss"}.get(t.verdict(), "")
    return f"{t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}]{mark}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


def _t_section(data: StudyData, cat: str, spec: dict[str, Any]) -> str:
    """Boundary at every T per kind (mean over replicates), the share of episodes that ended by
    the agent's own answer and by the cut-off, and the seed-level boundary change at every T."""
    budgets, runs = list(spec["budgets"]), spec["runs"]
    n = min(r.n for r in runs)
    P = len(spec["task_ids"])
    policies = ["base", *trained_kinds(spec)]
    by_role = replicates(runs)
    seeds = _complete_seeds(by_role, trained_kinds(spec))
    rows = []
    for kind in policies:
        reps = [
            run
            for seed, run in sorted(by_role[kind].items())
            if seed in seeds or (kind == "base" and seed == SHARED)
        ]
        for label, value in (
            ("boundary (problems)", lambda r, j: float((r.correct[:, j] > 0).sum())),
            ("pass@1", lambda r, j: float(pass_at_k_array(r.n, r.correct[:, j], 1).mean())),
            (
                "answered before the final notice",
                lambda r, j: float(r.answered[:, j].sum()) / (P * r.n),
            ),
            ("cut off at the budget", lambda r, j: float(r.cut[:, j].sum()) / (P * r.n)),
        ):
            digits = 1 if label.startswith("boundary") else 3
            cells = [
                f"{_mean([value(r, j) for r in reps]):.{digits}f}" for j in range(len(budgets))
            ]
            rows.append([kind, label, *cells])
    for kind in trained_kinds(spec):
        cells = [_fmt_test(seed_test(spec, kind, None, t, data.level)) for t in budgets]
        rows.append([f"{kind} − base", f"pass@({n}, T), seed-level", *cells])
    header = ["policy", "per T (mean over replicates)", *(f"T = {t}" for t in budgets)]
    which = ", ".join(str(s) for s in sorted(seeds))
    return (
        f"Per T, {P} problems, n = {n}; the policy rows are means over the replicates that hold "
        f"the base and every trained policy (seeds {which or 'none'}), so a row's difference "
        "from the base's is a paired one. PASS@(k, T) need not rise with T: an episode with a "
        "larger budget may search where a smaller one was made to answer, and a search can lead "
        "away from the answer; a trained policy that answers before the cut-off gains at T_max "
        "without new capability. Read a T_max change against the same change at smaller T and "
        "against the share of episodes answered before the final notice (the agent chose to "
        "stop; never at T = 0, where the notice comes first) and cut off at the budget (no "
        "answer after it: reward 0).\n\n" + _table(header, rows)
    )


def _changes(
    data: StudyData, spec: dict[str, Any], kind: str
) -> list[tuple[int, list[SeedTest | None]]]:
    """Per T: the seed-level change of ``kind - base`` in the boundary, pass@1 and pass^k."""
    n = min(r.n for r in spec["runs"])
    k = reliability_k(n)
    return [
        (
            t,
            [
                seed_test(spec, kind, None, t, data.level),
                seed_test(spec, kind, 1, t, data.level),
                seed_test(spec, kind, k, t, data.level, metric="pass^k"),
            ],
        )
        for t in spec["budgets"]
    ]


def _reading(tests: Sequence[SeedTest | None], margin: float | None = None) -> str:
    """Boundary and reliability in words, from the seed-level verdicts (none when unreplicated)."""
    boundary, reliable = tests[0], tests[2]
    if boundary is None or reliable is None or not (boundary.replicated and reliable.replicated):
        return "no verdict (not replicated)"
    return reading(boundary.verdict(margin), reliable.verdict(margin))


def change_sentences(data: StudyData) -> list[str]:
    """One sentence per category and trained kind: boundary, pass@1 and pass^k at T_max."""
    out = []
    for cat, spec in data.categories.items():
        n = min(r.n for r in spec["runs"])
        k, t_max = reliability_k(n), max(spec["budgets"])
        for kind in trained_kinds(spec):
            tests = dict(_changes(data, spec, kind))[t_max]
            if any(t is None for t in tests):
                continue
            labels = (f"boundary pass@{n}", "pass@1", f"pass^{k}")
            parts = [
                f"{label} {t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}]"
                + (f" ({t.verdict(data.margin)})" if t.replicated else "")
                for label, t in zip(labels, tests, strict=True)
            ]
            out.append(
                f"Secondary, uncorrected: on {cat} ({spec['env_id']}) at T = {t_max}, {kind} − "
                f"base: {'; '.join(parts)}: "
                f"{_reading(tests, data.margin)}."
            )
    return out


def _change_section(data: StudyData, spec: dict[str, Any]) -> str:
    """Per trained kind and T: the change in boundary, pass@1 and pass^k, and its reading."""
    n = min(r.n for r in spec["runs"])
    k = reliability_k(n)
    rows = []
    for kind in trained_kinds(spec):
        for t, tests in _changes(data, spec, kind):
            rows.append(
                [f"{kind} − base", str(t), *map(_fmt_test, tests), _reading(tests, data.margin)]
            )
    header = [
        "trained − base",
        "T",
        f"boundary pass@({n}, T)",
        "pass@(1, T)",
        f"pass^{k}(T)",
        "reading",
    ]
    return (
        "The same seed-level test at every T for three changes: the boundary (pass@n: solved at "
        f"all), pass@1 (the mean success rate) and pass^{k} (all of {k} independent episodes "
        'succeed: reliability). "More reliable; wider not shown" and "wider but less '
        'reliable" are read off one row; the reading uses the boundary and pass^k verdicts, '
        "and an inconclusive change is never read as none.\n\n" + _table(header, rows)
    )


def _complete_seeds(by_role: dict[str, dict[int, RunCounts]], kinds: Sequence[str]) -> set[int]:
    """Seeds with the base (their own or the shared one) and every trained kind."""
    seeds = set.intersection(*(set(by_role.get(k, {})) for k in kinds)) if kinds else set()
    if SHARED not in by_role.get("base", {}):
        seeds &= set(by_role.get("base", {}))
    return seeds


def _power_line(
    data: StudyData, cat: str, spec: dict[str, Any], realistic: RealisticPower | None
) -> str:
    """``passkt power``'s answer for each base, beside the P used (the CLI's own functions, on
    that base's counts at T_max: ``passkt power RUN --delta 0.04 --sims 400`` gives the same)."""
    bases = sorted(replicates(spec["runs"])["base"].items())
    if not bases:
        return ""
    j = len(spec["budgets"]) - 1
    P = len(spec["task_ids"])
    t_max = max(spec["budgets"])
    alpha = round(1 - data.level, 6)
    answers = []
    for seed, run in bases:
        rates = smoothed_rates(run.correct[:, j], run.n)
        common = dict(n=run.n, k=run.n, level=alpha, sims=POWER_SIMS)
        try:
            need = required_problems(rates, delta=POWER_DELTA, **common)
            needed = (
                f"needs {need.problems} problems (power {need.achieved:.2f}) for a "
                f"{POWER_DELTA:+.2f} change"
            )
        except ValueError as e:
            needed = f"has no room for a {POWER_DELTA:+.2f} change ({e})"
        detect = []
        for direction, word in ((1.0, "gain"), (-1.0, "loss")):
            try:
                least = smallest_change(rates, problems=P, direction=direction, **common)
                detect.append(f"a {word} of {least.delta:+.3f}")
            except ValueError as e:
                detect.append(f"no {word}: {e}")
        name = "the base" if seed == SHARED else f"base seed {seed}"
        answers.append(
            f"{name} (pass@({run.n}, {t_max}) {true_pass_at_k(rates, run.n):.3f} under its "
            f"smoothed rates, {float((run.correct[:, j] > 0).mean()):.3f} observed) "
            f"{needed}; the {P} problems used detect " + " and ".join(detect)
        )
    if len(bases) >= MIN_SEEDS:
        rates = [smoothed_rates(run.correct[:, j], run.n) for _, run in bases]
        n = min(run.n for _, run in bases)
        found = []
        for delta in (POWER_DELTA, -POWER_DELTA):
            try:
                power = seed_level_power(
                    rates, delta=delta, problems=P, n=n, k=n, level=alpha, sims=POWER_SIMS
                )
                found.append(f"a {delta:+.2f} change with power {power:.2f}")
            except ValueError:
                found.append(f"no {delta:+.2f} change (a base has no room for it)")
        seed_level = (
            f"The seed-level test over these {len(bases)} bases and {P} problems finds "
            + " and ".join(found)
            + " when every replicate changes by exactly that much (`passkt power` with the "
            f"{len(bases)} base runs); replicates whose changes differ lower it (S - 1 degrees "
            "of freedom for the between-replicate part), as the table's se eval / seed columns "
            "show: that is an upper bound."
        )
        if realistic is not None:
            seed_level += " " + realistic.sentence()
    else:
        seed_level = (
            "The seed-level test adds the between-replicate variance (S - 1 degrees of freedom "
            f"for S replicates) and gives a verdict only from {MIN_SEEDS} bases, so its power "
            "is lower wherever the replicates' changes differ; the table's se eval / seed "
            "columns show how much."
        )
    return (
        f"Power (`passkt power BASE --delta {POWER_DELTA} --sims {POWER_SIMS}` per base, from "
        f"its per-problem rates at T = {t_max} smoothed to (c + 1/2) / (n + 1), level {alpha}, "
        "power 0.8, one trained-vs-base comparison): " + "; ".join(answers) + ". The smoothing "
        "lets a never-solved problem be solved in the simulation, which puts the simulated "
        "boundary above the observed one and leaves less room for a gain. " + seed_level + "\n"
    )


def _targets_line(spec: dict[str, Any]) -> str:
    """Each base against the profile's targets at T_max (descriptive: no base is dropped)."""
    targets = spec.get("targets")
    bases = list(replicates(spec["runs"])["base"].items())
    if not targets or not bases:
        return ""
    j = len(spec["budgets"]) - 1
    t_max = max(spec["budgets"])

    def against(value: float, bounds: Sequence[float]) -> str:
        lo, hi = bounds
        where = "inside" if lo <= value <= hi else ("below" if value < lo else "above")
        return f"{value:.3f} (target {lo:.2f}-{hi:.2f}: {where})"

    parts = []
    for seed, r in bases:
        name = "the base" if seed == SHARED else f"base seed {seed}"
        cells = []
        if "pass1" in targets:
            pass1 = float(pass_at_k_array(r.n, r.correct[:, j], 1).mean())
            cells.append(f"pass@1 {against(pass1, targets['pass1'])}")
        if "pass_n" in targets:
            passn = float((r.correct[:, j] > 0).mean())
            cells.append(f"pass@({r.n}, {t_max}) {against(passn, targets['pass_n'])}")
        parts.append(f"{name}: " + ", ".join(cells))
    return (
        f"The bases against the profile's targets at T = {t_max} (descriptive: every base is "
        "used whatever it scores): " + "; ".join(parts) + ".\n"
    )


def _overlap_line(spec: dict[str, Any]) -> str:
    """What the evaluation problems share with the fine-tuning problems and with the base's
    pretraining episodes, at every level measured (``passkt.study.facts``)."""
    overlap = spec.get("overlap")
    if not overlap:
        return ""
    names = {
        "question": "question entity",
        "chain": "any chain entity",
        "fact": "asked fact",
        "answer": "answer string",
    }

    def levels(shares: dict[str, float]) -> str:
        return ", ".join(f"{names[k]} {100 * shares[k]:.1f}%" for k in names if k in shares)

    lines = []
    if "eval_train" in overlap:
        lines.append(
            "Evaluation problems sharing with the fine-tuning problems: "
            + levels(overlap["eval_train"])
            + ("" if overlap["eval_train"].get("fact") else " (fact-disjoint splits)")
            + "."
        )
    else:
        lines.append(
            "Evaluation against fine-tuning problems: not measured in this study's data (its "
            "questions are disjoint; shared facts were not checked)."
        )
    pretraining = [
        f"{label} problems {levels(overlap[part])}"
        for part, label in (("eval", "evaluation"), ("train", "training"))
        if part in overlap
    ]
    if pretraining:
        lines.append(
            "Against the base's pretraining episodes: " + "; ".join(pretraining) + ". The "
            "world's paragraphs are all in the pretraining text, so every entity occurs there; "
            "the episodes are where the base practised questions about them."
        )
    return " ".join(lines) + "\n"


def _figure(data: StudyData, cat: str, spec: dict[str, Any], path: Path) -> Path:
    """Seed-level change vs base at every T (pass@1 and the boundary), one line per kind."""
    import matplotlib  # start-up cost: 0.35 s, for figures only

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # start-up cost: with matplotlib above

    budgets = list(spec["budgets"])
    n = min(r.n for r in spec["runs"])
    colors = {"SFT": "#3182bd", "RL": "#e6550d", "RFT": "#31a354"}
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), dpi=100)
    for ax, (k, label) in zip(axes, ((1, "pass@1"), (None, f"pass@{n} (boundary)")), strict=True):
        for offset, kind in enumerate(trained_kinds(spec)):
            tests = [seed_test(spec, kind, k, t, data.level) for t in budgets]
            x = np.arange(len(budgets)) + (offset - 1) * 0.08
            est = np.array([t.estimate for t in tests])
            err = np.array(
                [[t.estimate - t.lower for t in tests], [t.upper - t.estimate for t in tests]]
            )
            ax.errorbar(x, est, yerr=err, fmt="o-", color=colors[kind], label=kind, capsize=3)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(budgets)), [str(t) for t in budgets])
        ax.set_xlabel("T (tool-call budget)")
        ax.set_title(f"{label}: trained − base")
    if trained_kinds(spec):
        axes[0].legend(frameon=False, fontsize=8)
    fig.suptitle(f"{cat}: seed-level change with {int(100 * data.level)}% intervals", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path


def _cost_section(data: StudyData) -> str:
    cost = cost_rows(data.timings)
    if not cost:
        return ""
    rows = [
        [
            c["stage"],
            str(c["units"]),
            str(c["attempts"]),
            f"{c['unit_seconds'] / 60:.1f}",
            f"{c['wall_seconds'] / 60:.1f}",
        ]
        for c in cost
    ]
    core = sum(c["unit_seconds"] for c in cost)
    wall = sum(c["wall_seconds"] for c in cost)
    return (
        "## Cost\n\nPer stage (`timings.jsonl`): units, attempts (a unit interrupted and resumed, "
        "or run again on a fresh checkout, counts each time), unit-minutes (every attempt's wall "
        "time summed) "
        "and the stage's recorded wall minutes (an interrupted stage records none). "
        f"In all {core / 3600:.1f} hours of unit time and {wall / 3600:.1f} hours of recorded "
        "stage wall time.\n\n"
        + _table(["stage", "units", "attempts", "unit-minutes", "wall minutes"], rows)
    )


def make_summary(data: StudyData, out: Path) -> Path:
    """Write ``out/summary.md`` and ``out/figures/summary-<cat>.png`` from ``data`` alone."""
    waiting = {cat: spec for cat, spec in data.categories.items() if not spec["runs"]}
    data = replace(data, categories={c: s for c, s in data.categories.items() if c not in waiting})
    found = verdicts(data)
    replicate = (
        "each replicate is its own pretraining of the base recipe and the policies trained from "
        "it (base.per_seed)"
        if data.per_seed
        else "every replicate trains from one base, so the between-seed part holds training "
        "noise only: a verdict is about this base, not the recipe"
    )
    parts = [
        f"# Seed-level verdicts: {data.name}\n",
        "Made by `passkt study report` from the counts in `data/` alone (per run, problem and "
        "T: successes, answers before the cut-off, cut-offs), so every number and sentence here "
        "can be remade from a copy of that folder. The rule for a gain or a loss is the "
        "seed-level test (`passkt.eval.seeds`; docs/statistics.md): the mean over replicates of "
        "the paired trained − base difference, its interval carrying the between-replicate and "
        f"the evaluation (problem and sample) variance, at level {data.level}; {replicate}. "
        f"With fewer than {MIN_SEEDS} replicates it gives estimates and no verdict.\n",
    ]
    realistic = {cat: realistic_power(data, cat, spec) for cat, spec in data.categories.items()}
    claim = claim_sentence(data, found, realistic.get("C"))
    parts.append("## Verdicts\n")
    bases = min((len(replicates(s["runs"])["base"]) for s in data.categories.values()), default=0)
    if data.per_seed and interim(data, bases):
        parts.append(
            f"An interim look: {bases} of the plan's {data.planned_seeds} bases are in. Each "
            "verdict below is the seed-level test at this look, whose level does not correct "
            "for looking before the plan's end; the plan's verdicts are the ones with all "
            f"{data.planned_seeds}.\n"
        )
    if claim:
        parts.append(f"- {claim}")
    against = reference_sentence(data, found)
    if against:
        parts.append(f"- {against}")
    parts += [f"- {v.sentence(data.categories[v.cat]['env_id'])}" for v in found]
    parts += [f"- {sentence}" for sentence in change_sentences(data)]
    if not claim and not found:
        parts.append("- No verdict yet: no trained policy has been evaluated against its base.")
    parts.append("")
    for cat, spec in data.categories.items():
        parts.append(f"## {cat}: {spec['env_id']}\n")
        rows = []
        t_max = max(spec["budgets"])
        for v in (v for v in found if v.cat == cat):
            t = v.test
            per = ", ".join(f"{d:+.3f}" for d in t.per_seed)
            rows.append(
                [
                    v.kind,
                    v.metric,
                    _fmt_test(t),
                    f"{t.p_value:.2g}",
                    per,
                    f"{t.se_eval:.3f} / " + (f"{t.se_seed:.3f}" if t.seeds > 1 else "n/a"),
                    v.word,
                ]
            )
        parts.append(
            _table(
                [
                    "trained − base",
                    "metric",
                    "estimate [interval]",
                    "p",
                    "per replicate",
                    "se eval / seed",
                    "verdict",
                ],
                rows,
            )
        )
        curve = calibration_figure(spec, out / "figures" / f"calibration-{cat}.png")
        regime = regime_section(spec, curve and curve.relative_to(out).as_posix())
        parts.append(regime or _targets_line(spec))
        parts.append(_power_line(data, cat, spec, realistic[cat]))
        parts.append(_overlap_line(spec))
        parts.append(f"### T explained (T_max = {t_max})\n")
        parts.append(_t_section(data, cat, spec))
        parts.append("### Boundary and reliability per T\n")
        parts.append(_change_section(data, spec))
        figure = _figure(data, cat, spec, out / "figures" / f"summary-{cat}.png")
        parts.append(f"![seed-level change vs T, {cat}]({figure.relative_to(out).as_posix()})\n")
    for cat, spec in waiting.items():  # a study in pieces: bases made, nothing evaluated yet
        parts.append(f"## {cat}: {spec['env_id']}\n")
        parts.append("No evaluation of this category has finished yet.\n")
        curve = calibration_figure(spec, out / "figures" / f"calibration-{cat}.png")
        parts.append(regime_section(spec, curve and curve.relative_to(out).as_posix()))
        parts.append(_overlap_line(spec))
    parts += [section for section in (design_section(data),) if section]
    parts.append(_cost_section(data))
    path = out / SUMMARY_FILE
    path.write_text("\n".join(parts), encoding="utf-8")
    return path
