"""The summary's design sections, generated from ``data/``: bases against the regime on the
calibration and the evaluation split, what each trained policy was trained with, and the
choices made after reading data.

Every row comes from what the study recorded: the calibration rows and the rule's choice per
base (``calibration``; ``passkt.study.calibrate``), each trained policy's resolved config
(``configs``; from its training's ``done.json``) and the profile's ``post_hoc`` list.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from passkt.eval.estimator import pass_at_k_array
from passkt.study.counts import SHARED, RunCounts, StudyData

__all__ = ["calibration_figure", "design_section", "regime_section"]

DESIGN_FIELDS = (
    ("finetune", "fine-tuning"),
    ("learning_rate", "learning rate"),
    ("epochs", "epochs"),
    ("max_steps", "max steps"),
    ("steps_run", "steps run"),
    ("seed", "seed"),
    ("expert", "data"),
    ("policy", "trained from"),
    ("task_ids", "training problems"),
)


def _table(header: Sequence[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def _against(value: float, bounds: Sequence[float] | None) -> str:
    if bounds is None:
        return f"{value:.3f}"
    low, high = bounds
    where = "inside" if low <= value <= high else ("below" if value < low else "above")
    return f"{value:.3f} ({where})"


def _eval_rates(run: RunCounts, j: int) -> tuple[float, float]:
    return float(pass_at_k_array(run.n, run.correct[:, j], 1).mean()), float(
        (run.correct[:, j] > 0).mean()
    )


def regime_section(spec: dict[str, Any], figure: str | None = None) -> str:
    """Each base against the targets on the calibration split (the rule's choice) and on the
    evaluation split (the same model, the study's problems and n); "" without calibration."""
    calibration = spec.get("calibration")
    if not calibration:
        return ""
    targets = spec.get("targets") or {}
    t_max, j = max(spec["budgets"]), len(spec["budgets"]) - 1
    bases = {r.seed: r for r in spec["runs"] if r.role == "base"}
    rows, misses = [], []
    for key in sorted(calibration, key=int):
        c, seed = calibration[key], int(key)
        name = "the base" if seed == SHARED else f"base seed {seed}"
        point = next((p for p in c["points"] if p[0] == c["step"]), None)
        cal = (
            [_against(point[1], targets.get("pass1")), _against(point[2], targets.get("pass_n"))]
            if point
            else ["-", "-"]
        )
        run = bases.get(seed)
        ev = ["not yet evaluated"] * 2
        if run is not None:
            pass1, pass_n = _eval_rates(run, j)
            ev = [_against(pass1, targets.get("pass1")), _against(pass_n, targets.get("pass_n"))]
        if any("(below)" in x or "(above)" in x for x in cal + ev):
            misses.append(name)
        steps = ", ".join(str(p[0]) for p in c["points"])
        rows.append([name, str(c["step"]), c["reason"], *cal, *ev, steps])
    n_cal = next(iter(calibration.values()))["n"]
    problems = next(iter(calibration.values())).get("problems", "?")
    eval_n = next((r.n for r in bases.values()), None)
    header = [
        "base",
        "chosen step",
        "the rule's reason",
        f"calibration pass@1 (n = {n_cal})",
        f"calibration pass@({n_cal}, {t_max})",
        "evaluation pass@1",
        f"evaluation pass@({eval_n or 'n'}, {t_max})",
        "kept steps evaluated",
    ]
    stated = ", ".join(
        f"{label} {targets[key][0]:.2f}-{targets[key][1]:.2f}"
        for key, label in (("pass1", "pass@1"), ("pass_n", "boundary"))
        if key in targets
    )
    lines = [
        f"**Bases against the regime** (T = {t_max}; targets: {stated or 'none'}). Each base is "
        "the kept pretraining step the profile's rule chose on the calibration "
        f"split ({problems} problems disjoint from the evaluation and fine-tuning problems; "
        "`passkt.study.calibrate`), before any trained evaluation; the evaluation columns read "
        "the same model on the study's problems.\n",
        _table(header, rows),
    ]
    if misses:
        lines.append(
            "Outside a target on at least one split: " + ", ".join(misses) + " (used as the rule "
            "chose them; never dropped).\n"
        )
    elif all(int(k) in bases for k in calibration):
        lines.append("Every base is inside every target on both splits.\n")
    else:
        lines.append(
            "Every base is inside every target on the calibration split; the evaluation split "
            "is read when the base evaluations finish.\n"
        )
    if figure:
        lines.append(f"![calibration curves]({figure})\n")
    return "\n".join(lines)


def calibration_figure(spec: dict[str, Any], path: Path) -> Path | None:
    """pass@1 against the boundary at every kept step each base's calibration evaluated, with
    the target box: the calibration curve of the settings tried."""
    calibration = spec.get("calibration")
    if not calibration:
        return None
    import matplotlib  # start-up cost: matplotlib, 0.35 s, for figures only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # start-up cost: matplotlib, as above

    targets = spec.get("targets") or {}
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    lo1, hi1 = targets.get("pass1", (0.0, 1.0))
    lon, hin = targets.get("pass_n", (0.0, 1.0))
    ax.add_patch(plt.Rectangle((lon, lo1), hin - lon, hi1 - lo1, color="#cccccc", alpha=0.5))
    colors = plt.get_cmap("tab10")
    for i, key in enumerate(sorted(calibration, key=int)):
        c = calibration[key]
        pts = np.asarray(c["points"], dtype=float)
        label = "base" if int(key) == SHARED else f"seed {key}"
        ax.plot(pts[:, 2], pts[:, 1], "-o", ms=3, color=colors(i % 10), label=label)
        chosen = pts[pts[:, 0] == c["step"]]
        if len(chosen):
            ax.plot(chosen[:, 2], chosen[:, 1], "*", ms=12, color=colors(i % 10))
    ax.set_xlabel(f"boundary pass@(n, {max(spec['budgets'])}) on the calibration split")
    ax.set_ylabel("pass@1 on the calibration split")
    ax.set_title(f"{spec['env_id']}: kept pretraining steps (star: chosen)", fontsize=9)
    ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _value(config: dict[str, Any], key: str) -> str:
    value = config.get(key)
    if value is None:
        return "-"
    if key == "learning_rate":
        return f"{float(value):g}"
    return str(value)


def design_section(data: StudyData) -> str:
    """What every trained policy was trained with (its recorded config), per category, and the
    choices the plan lists as made after reading data; "" when no config was recorded."""
    parts = []
    for cat, spec in data.categories.items():
        configs = spec.get("configs")
        if not configs:
            continue
        rows = []
        for name in sorted(configs, key=lambda k: (k.split("-s")[0], int(k.split("-s")[1]))):
            config = configs[name]
            role = name.split("-s")[0]
            data_of = "rollouts" if role == "RL" else _value(config, "expert")
            cells = [_value(config, key) for key, _ in DESIGN_FIELDS]
            cells[[k for k, _ in DESIGN_FIELDS].index("expert")] = data_of
            rows.append([name, *cells])
        count = len(spec.get("train_ids", ()))
        parts.append(
            f"**{cat} ({spec['env_id']}): what each trained policy was trained with** (the "
            f"trainer configs recorded when each run finished; `splits train` = the category's "
            f"{count} training problems, `data/study.json` `train_ids`):\n"
        )
        parts.append(_table(["policy", *(label for _, label in DESIGN_FIELDS)], rows))
    if not parts:
        return ""
    notes = next((s.get("post_hoc") for s in data.categories.values() if s.get("post_hoc")), [])
    listed = (
        "Choices made after reading data: " + "; ".join(notes) + "."
        if notes
        else "Choices made after reading data: none listed in the plan's profile (`post_hoc`)."
    )
    return "## Design\n\n" + "\n".join(parts) + "\n" + listed + "\n"
