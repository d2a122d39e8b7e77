"""The ``report`` stage: one Markdown file with the tables and figures of the whole study.

``OUT/report/report.md`` (figures copied to ``OUT/report/figures/``, linked relatively): an
overview, the seed-aggregate tables (mean, standard deviation and range over training seeds), a
section per category with each seed's surfaces, gaps, boundary sets, diversity and perplexity, the
cost of every stage (``timings.jsonl``) and the profile. Everything in it was computed by the
``compare`` and ``analyze`` stages with ``passkt.eval``; this module only lays it out.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from passkt.eval.estimator import surface
from passkt.eval.evaluate import env_info
from passkt.eval.stats import bootstrap_surface, surface_interval
from passkt.eval.store import load_run, read_run
from passkt.study.cost import cost_markdown, profile_markdown, read_timings
from passkt.study.counts import (
    DATA_DIR,
    SHARED,
    RunCounts,
    StudyData,
    episode_counts,
    read_data,
    write_data,
)
from passkt.study.facts import overlap
from passkt.study.report_format import compact_png, copy_figure, markdown_table, num, spread
from passkt.study.stages import ROLES, Study, floor_names, read_done, run_name
from passkt.study.summary import SUMMARY_FILE, make_summary
from passkt.study.testbed.corpus import episode_tasks
from passkt.study.testbed.pretrain import PretrainConfig


def make_report(study: Study) -> dict[str, Any]:
    out = study.report_dir
    if (out / "figures").exists():
        shutil.rmtree(out / "figures")
    out.mkdir(parents=True, exist_ok=True)
    metrics = {(c, s): _json(study.compare_dir(c, s) / "metrics.json") for c, s in _units(study)}
    analyses = {(c, s): _json(study.analysis_dir(c, s) / "analysis.json") for c, s in _units(study)}
    data = write_data(out / DATA_DIR, study_data(study))
    summary = make_summary(read_data(data), out)  # from the written copy: what a clone remakes
    parts = [_overview(study), _verdicts(summary), _targets(study), _lr_trials(study)]
    parts += ["## Seed aggregate\n", _aggregate_intro(study)]
    for cat in study.categories:
        rows = [(metrics[cat, s], analyses[cat, s]) for s in study.seeds]
        parts.append(_aggregate(study, cat, rows))
    for cat in study.categories:
        parts.append(_category(study, cat, metrics, analyses))
    parts += [cost_markdown(study.out), profile_markdown(study.out)]
    report = out / "report.md"
    report.write_text("\n".join(parts), encoding="utf-8")
    for png in (out / "figures").rglob("*.png"):
        compact_png(png)
    figures = sorted(str(p.relative_to(out)) for p in (out / "figures").rglob("*.png"))
    floor = {c: floor_names(study, c) for c in study.categories}
    return {"report": str(report), "figures": figures, "categories": study.categories,
            "seeds": study.seeds, "floor": floor}  # fmt: skip


def study_data(study: Study, *, finished_only: bool = False) -> StudyData:
    """The compact counts the summary is made from (see :mod:`passkt.study.summary`).

    ``finished_only``: leave out evaluations that have not finished (a study run in pieces)."""
    categories = {}
    for cat in study.categories:
        ids, budgets, n = study.task_ids(cat, "eval"), study.budgets(cat), study.n(cat)
        shared = not study.per_seed
        wanted = [
            (study.base_eval_dirs(cat, study.base_of(s))[0], "base", SHARED if shared else s)
            for s in (study.seeds[:1] if shared else study.seeds)
        ]
        wanted += [
            (study.eval_dir(cat, role.lower(), s), role, s)
            for role in study.trained_roles()
            for s in study.seeds
        ]
        runs = [
            _counts(folder, role, seed, ids, budgets, n)
            for folder, role, seed in wanted
            if not finished_only or (folder / "done.json").is_file()
        ]
        categories[cat] = {
            "env_id": study.env(cat)[0],
            "env_kwargs": study.env(cat)[1],
            "task_ids": ids,
            "budgets": budgets,
            "runs": runs,
            "overlap": _overlap(study, cat),
            "targets": study.profile.get("targets", {}).get(cat),
            **_design(study, cat, finished_only),
        }
    return StudyData(
        study.profile["name"],
        study.per_seed,
        float(study.profile["stats"]["level"]),
        categories,
        read_timings(study.out),
        study.profile["stats"].get("margin") or None,
        len(study.profile["seeds"]),
    )


def _design(study: Study, cat: str, finished_only: bool) -> dict[str, Any]:
    """What the summary's design table and regime table are made from: each trained policy's
    resolved config (``configs``, from its training's done.json), the training problems, the
    base each replicate's calibration chose (``calibration``) and the choices the profile lists
    as made after reading data (``post_hoc``)."""
    out: dict[str, Any] = {"train_ids": study.task_ids(cat, "train")}
    configs = {}
    for method in study.profile["methods"]:
        for seed in study.seeds:
            done = study.train_dir(method, cat, seed) / "done.json"
            if done.is_file():
                record = json.loads(done.read_text(encoding="utf-8"))
                if "config" in record:
                    config = dict(record["config"])
                    same = config.pop("task_ids") == out["train_ids"]
                    config["task_ids"] = "splits train" if same else config["task_ids"]
                    configs[f"{ROLES[method]}-s{seed}"] = {**config, "steps_run": record["steps"]}
    if configs:
        out["configs"] = configs
    calibration = {}
    for seed in study.seeds[:1] if not study.per_seed else study.seeds:
        done = study.base_folder(study.base_of(seed)) / "done.json"
        if done.is_file():
            chosen = json.loads(done.read_text(encoding="utf-8")).get("calibrated", {}).get(cat)
            if chosen:
                key = str(SHARED if not study.per_seed else seed)
                calibration[key] = {k: v for k, v in chosen.items() if k != "model"}
                calibration[key]["problems"] = len(study.task_ids(cat, "calibration"))
    if calibration:
        out["calibration"] = calibration
    if study.profile.get("post_hoc"):
        out["post_hoc"] = list(study.profile["post_hoc"])
    return out


def _overlap(study: Study, cat: str) -> dict[str, dict[str, float]] | None:
    """How much the evaluation problems share with what the policies saw, at every level of
    ``passkt.study.facts.overlap`` (question entity, chain entity, asked fact, answer): with the
    fine-tuning problems (``eval_train``) and, per split, with the base's pretraining episodes
    (``eval``, ``train``; None for a base given as a model, whose pretraining is not known)."""
    env_id, kwargs = study.env(cat)
    parts = {}
    for part, split in (("eval", "test"), ("train", "train")):
        by_id = {t.task_id: t for t in env_info(env_id, kwargs, split).tasks}
        parts[part] = [by_id[i] for i in study.task_ids(cat, part) if i in by_id]
    if not parts["eval"] or not parts["train"]:
        return None
    out = {"eval_train": overlap(parts["eval"], parts["train"])}
    pretrain = study.profile["base"].get("pretrain")
    if pretrain is not None:
        config = PretrainConfig.from_dict({**pretrain, "output_dir": "base"}).corpus_config()
        practised = episode_tasks(config)
        for part, tasks in parts.items():
            out[part] = overlap(tasks, practised)
    return out


def _counts(
    folder: Path, role: str, seed: int, ids: list[str], budgets: list[int], n: int
) -> RunCounts:
    contents = read_run(folder)
    name = contents.manifest.get("name", folder.name)
    return RunCounts(name, role, seed, n, *episode_counts(contents.records, ids, budgets, n))


def _verdicts(summary: Path) -> str:
    """The summary's generated verdict sentences, quoted, with a link to its tables."""
    text = summary.read_text(encoding="utf-8")
    block = text.split("## Verdicts\n", 1)[1].split("\n## ", 1)[0].strip()
    return (
        "## Seed-level verdicts\n\nThe rule for a gain or a loss: the seed-level test, "
        f"tables and T explained in [{SUMMARY_FILE}]({SUMMARY_FILE}) (made from `{DATA_DIR}/`; "
        "the noise-floor rows below are descriptive).\n\n" + block + "\n"
    )


def _units(study: Study) -> list[tuple[str, int]]:
    return [(c, s) for c in study.categories for s in study.seeds]


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------- overview


def _k_grid(ks: tuple[int, ...]) -> str:
    """``1..64`` for every k up to n, else the list."""
    every = len(ks) > 2 and list(ks) == list(range(1, ks[-1] + 1))
    return f"1..{ks[-1]}" if every else str(list(ks))


def _kept_checkpoint(model: Path) -> tuple[int, dict[str, Any]] | None:
    """``(step, pretraining config)`` of a model folder that is a kept pretraining checkpoint
    (calibration_curve.py's snapshots: ``state.json`` and ``pretrain_config.json``), else None."""
    try:
        step = json.loads((model / "state.json").read_text(encoding="utf-8"))["step"]
        config = json.loads((model / "pretrain_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError):
        return None
    return step, config


def base_pretrain_seed(base: dict[str, Any]) -> int | str:
    """The base's pretraining seed: its recipe's, a kept checkpoint's, or '-' for a named model."""
    if "pretrain" in base:
        return base["pretrain"].get("seed", 0)
    kept = _kept_checkpoint(Path(base["model"]))
    return "-" if kept is None else kept[1].get("seed", 0)


def checkpoint_of(model: Path) -> str:
    """`` (the checkpoint at step S of a testbed `size` pretraining of N steps, pretraining seed
    X)`` for a kept pretraining checkpoint, else ''."""
    kept = _kept_checkpoint(model)
    if kept is None:
        return ""
    step, config = kept
    return (
        f" (the checkpoint at step {step} of a testbed `{config.get('size')}` pretraining of "
        f"{config.get('max_steps')} steps, pretraining seed {config.get('seed')})"
    )


def _overview(study: Study) -> str:
    p = study.profile
    ev = p["eval"]
    base = read_done(study.base_dir, "base")
    if "pretrain" in p["base"]:
        pre = p["base"]["pretrain"]
        loss = base.get("metrics", {}).get("eval/loss/assistant")
        what = f"testbed `{pre.get('size', 'nano')}` model pretrained for {base.get('steps')} steps"
        what += f" (held-out NLL of the agent's tokens {num(loss)})" if loss is not None else ""
    else:
        what = f"`{p['base']['model']}`" + checkpoint_of(Path(p["base"]["model"]))
    lines = [
        f"# Matched-data study: {p['name']}\n",
        p["description"].strip() + "\n" if p["description"].strip() else "",
        f"- Base policy: {what}; SFT (expert trajectories) and GRPO trained from it per category "
        f"and seed on the same {p['limit_train']} training problems"
        + (
            " (base.per_seed: seed s is the base recipe pretrained with seed s and the policies "
            "trained from it with training seed s, so every replicate has its own base)"
            if study.per_seed
            else ""
        )
        + (
            "; RFT (the on-policy control): SFT on the base's own rewarded samples of them."
            if "rft" in p["methods"]
            else "."
        ),
        f"- Evaluation: {p['limit_eval']} problems per category, n = {ev['n']} samples per "
        + (f"(n per category: {ev['n_per_category']}) " if ev["n_per_category"] else "")
        + f"(problem, T), T in {ev['budgets']} (math: T = 0 only), k in {_k_grid(study.ks())}, "
        f"temperature {ev['temperature']}, backend `{ev['backend']}`.",
        f"- Categories: {', '.join(f'{c} ({study.env(c)[0]})' for c in study.categories)}; "
        f"training seeds: {', '.join(map(str, study.seeds))}.",
        "- Boundary set: problems solved at least once among the n samples (pass@n > 0) at "
        "T_max, the largest T of the category.\n",
    ]
    return "\n".join(line for line in lines if line)


def _targets(study: Study) -> str:
    """Every evaluation of the base (and of the recipe's other pretraining seeds) against the
    regime the profile aims at (``[targets.CAT]``, stated before training): pass@1 and
    pass@(n, T_max) with their CIs (both variance sources), one row per evaluation."""

    targets, level = study.profile["targets"], study.profile["stats"]["level"]
    own_seed = base_pretrain_seed(study.profile["base"])
    rows = []
    for cat in study.categories:
        t_max, n = max(study.budgets(cat)), study.n(cat)
        goal = targets.get(cat, {})
        runs = [(p, f) for p in study.bases() for f in study.base_eval_dirs(cat, p)]
        for pretrain, folder in runs:
            manifest, table = load_run(folder)
            table = table.select_budgets([t_max])
            ci = surface_interval(surface(table, sorted({1, n})), table.counts(), level)
            cells = []
            for i, key in enumerate(("pass1", "pass_n")):
                value, low, high = ci.estimate[i, 0], ci.lower[i, 0], ci.upper[i, 0]
                lo, hi = goal.get(key, (None, None))
                inside = "" if lo is None else (" (in)" if lo <= value <= hi else " (OUT)")
                cells.append(f"{value:.3f} [{low:.2f}, {high:.2f}]{inside}")
            wanted = [
                f"{goal[k][0]}-{goal[k][1]}" if k in goal else "-" for k in ("pass1", "pass_n")
            ]
            rows.append(
                [cat, str(own_seed if pretrain is None else pretrain), str(manifest.get("seed")),
                 f"{n}, {t_max}",
                 *cells, *wanted]
            )  # fmt: skip
    header = ["category", "pretraining seed", "eval seed", "n, T_max", "pass@1"]
    header += ["pass@(n, T_max)", "target pass@1", "target pass@(n, T_max)"]
    others = study.floor_pretrain_seeds()
    intro = (
        "## Base against the target regime\n\nThe base's own metrics, per evaluation seed, against "
        "the ranges the profile states (`[targets]`, chosen before any training from the study's "
        "base figures); the base is calibrated on these alone, never on RL or SFT outcomes. "
        f"Brackets: {level:.0%} CIs over problems and samples.\n\n"
    )
    if others:
        intro += (
            f"Rows of pretraining seed {', '.join(map(str, others))}: the same base recipe "
            f"pretrained with another seed (`eval.floor_pretrain_seeds`); RL, SFT and RFT are "
            f"trained from the pretraining seed {own_seed} base only, the others' evaluations "
            "join the noise floor.\n\n"
        )
    return intro + markdown_table(header, rows)


def _lr_trials(study: Study) -> str:
    trials = study.profile["lr_trials"]
    if not trials:
        return "## Learning-rate trials\n\nNone recorded in the profile (`lr_trials`).\n"
    lines = "\n".join(f"- {trial}" for trial in trials)
    return (
        "## Learning-rate trials\n\nWhat was tried before the run, on which training signal "
        f"(never on the evaluation), as the profile records it (`lr_trials`):\n\n{lines}\n"
    )


# ---------------------------------------------------------------------- seed aggregate


def _aggregate_intro(study: Study) -> str:
    repeats = int(study.profile["eval"]["base_repeats"])
    first = study.profile["eval"]["seed"]
    others = study.floor_pretrain_seeds()
    peers = (
        f"; so is the same base recipe pretrained with seed(s) {', '.join(map(str, others))} "
        "(the floor then also holds how much equally made bases differ; the 'eval floor' row "
        "has the base's own evaluations alone)"
        if others
        else ""
    )
    floor = (
        f"The base policy is evaluated {repeats} times (evaluation seeds {first}.."
        f"{first + repeats - 1}){peers}; the differences between those evaluations are the "
        "noise floor. The floor is descriptive: the rows 'beyond the floor' count the seeds "
        "whose difference to base is significant after Holm's correction and larger than every "
        "base-vs-base difference (the earlier rule for a finding, kept for comparison); gains "
        "and losses are decided by the seed-level test (section 'Seed-level verdicts')."
        if repeats > 1 or others
        else "The base policy is evaluated once (eval.base_repeats = 1), so there is no noise "
        "floor; gains and losses are decided by the seed-level test (section 'Seed-level "
        "verdicts')."
    )
    return (
        f"Over the {len(study.seeds)} training seed(s): mean ± sample standard deviation "
        "[min, max]; differences to base also count the seeds where they are positive. A "
        "difference exceeds seed-to-seed variation when it keeps its sign on every seed and its "
        f"mean is large against its spread. {floor}\n"
    )


def _aggregate(study: Study, cat: str, rows: list[tuple[dict, dict]]) -> str:
    t_max = rows[0][0]["T_max"]
    n = rows[0][0]["n"]

    def runs(role: str, key: str) -> list[float]:
        return [m["runs"][role][key] for m, _ in rows]

    def pair(role: str, key: str) -> list[float | None]:
        return [m["vs_base"][role].get(key) for m, _ in rows]  # None: not in older metrics

    def diversity(role: str) -> list[float | None]:
        return [a.get("diversity", {}).get(role, {}).get("mean_unique") for _, a in rows]

    def jaccard(role: str) -> list[float | None]:
        return [a.get("overlap", {}).get(role, {}).get("mean_jaccard") for _, a in rows]

    def diff(role: str, values: Any, digits: int = 3) -> str:
        base = values("base")
        trained = values(role)
        pairs = zip(trained, base, strict=True)
        gaps = [None if t is None or b is None else t - b for t, b in pairs]
        return spread(gaps, digits, signs=True)

    trained = study.trained_roles()  # SFT, RL (and RFT, the on-policy control)
    roles = ("base", *trained)
    blank = [""] * len(trained)
    header = ["metric", *roles, *(f"{r} − base" for r in trained)]
    table = []
    for label, key, digits in (
        ("pass@1", "pass@1", 3),
        (f"pass@({n}, {t_max})", "pass@n", 3),
        ("boundary size", "boundary", 0),
    ):
        table.append(
            [label, *(spread(runs(r, key), digits) for r in roles)]
            + [diff(r, lambda role, key=key: runs(role, key), digits) for r in trained]
        )
    venn = [m["venn"] for m, _ in rows]
    table.append(
        ["only this run solves (3-way)"]
        + [spread([v.get(f"{r} only") for v in venn], 0) for r in roles]
        + blank
    )
    table.append(
        ["solves, base does not (pairwise)", "-"]
        + [spread(pair(r, "only_trained"), 0) for r in trained]
        + blank
    )
    table.append(
        ["base solves, it does not (pairwise)", "-"]
        + [spread(pair(r, "only_base"), 0) for r in trained]
        + blank
    )

    def per_seed(role: str, text: Any) -> str:
        """``text`` of each seed's comparison with base, joined ("-" where older metrics lack
        a key)."""
        try:
            return "; ".join(text(m["vs_base"][role]) for m, _ in rows)
        except KeyError:
            return "-"

    def ci(v: dict) -> str:
        return "[{:+.1f}, {:+.1f}]".format(*v["boundary_difference_ci"])

    def widening(v: dict) -> str:
        return "{:+.3f} [{:+.2f}, {:+.2f}]".format(v["widening"], *v["widening_ci"])

    for label, text in (
        ("boundary difference, CI per seed", ci),
        (f"gap@{n} − gap@1 (widening), per seed with CI", widening),
    ):
        table.append([label, "-", *(per_seed(r, text) for r in trained), *blank])
    floors = [m.get("noise_floor") for m, _ in rows]
    if all(floors):
        for key, label in (
            ("noise_floor", "noise floor (max over base-vs-base pairs)"),
            ("eval_floor", "eval floor (the base's own evaluations)"),
        ):
            values = [m.get(key) for m, _ in rows]
            if not all(values):
                continue  # eval_floor: only when other pretraining seeds are in the floor
            text = (
                f"|gap@1| {spread([f['max_abs_gap@1'] for f in values])}, "
                f"|gap@n| {spread([f['max_abs_gap@n'] for f in values])}, "
                f"swaps {spread([f['max_swap'] for f in values], 0)}"
            )
            if all("max_abs_widening" in f for f in values):
                text += f", |widening| {spread([f['max_abs_widening'] for f in values])}"
            table.append([label, *["-"] * len(roles), *[text] * len(trained)])
        for key, label in (
            ("gap@1", "pass@1 difference beyond the floor"),
            ("gap@n", "pass@n difference beyond the floor"),
            ("boundary", "boundary gain beyond the floor"),
            ("boundary_loss", "boundary loss beyond the floor"),
        ):
            counts = []
            for r in trained:
                hits = pair(r, f"finding_{key}")
                known = None not in hits
                counts.append(f"{sum(map(bool, hits))}/{len(hits)} seeds" if known else "-")
            table.append([label, *["-"] * len(roles), *counts])
    crossings = []
    for r in trained:
        ks = pair(r, "crossover_k")
        found = [k for k in ks if k is not None]
        crossings.append(f"{spread(found, 1)} ({len(found)}/{len(ks)} seeds cross)")
    table.append([f"crossover k vs base (T = {t_max})", "-", *crossings, *blank])
    if any(diversity("base")):
        table.append(
            ["unique query sequences", *(spread(diversity(r), 2) for r in roles)]
            + [diff(r, diversity, 2) for r in trained]
        )
        table.append(["Jaccard with base", "-", *(spread(jaccard(r)) for r in trained), *blank])
    text = f"### {cat}: {study.env(cat)[0]} (T_max = {t_max}, n = {n})\n\n" + markdown_table(
        header, table
    )
    return text + _perplexity_aggregate(study, rows)


def _perplexity_aggregate(study: Study, rows: list[tuple[dict, dict]]) -> str:
    roles = study.profile["analyze"]["perplexity_of"]
    segments = ("query", "reasoning", "answer", "all")
    table = []
    for segment in segments:
        cells = []
        for role in roles:
            values = []
            for _, a in rows:
                entry = a["perplexity"].get(role, {})
                values.append(entry.get("segments", {}).get(segment, {}).get("perplexity"))
            cells.append(spread(values, 2))
        table.append([segment, *cells])
    if all(c == "-" for row in table for c in row[1:]):
        return "\nSegment perplexity: no successful trajectories to score.\n"
    header = ["segment", *(f"{role}'s successes" for role in roles)]
    return "\nPerplexity of successful trajectories under the base model\n\n" + markdown_table(
        header, table
    )


# ---------------------------------------------------------------------- per category


def _category(study: Study, cat: str, metrics: dict, analyses: dict) -> str:
    env_id, kwargs = study.env(cat)
    splits = read_done(study.splits_dir(cat), "splits")
    lines = [
        f"## Category {cat}: {env_id}\n",
        f"env kwargs {kwargs or '{}'}; {splits['eval']} eval and {splits['train']} training "
        f"problems (`splits/{cat}/`); T grid {study.budgets(cat)}.\n",
        _training_table(study, cat),
        _seed_figure(study, cat),
    ]
    for seed in study.seeds:
        lines.append(_seed_section(study, cat, seed, metrics[cat, seed], analyses[cat, seed]))
    return "\n".join(lines)


def _training_table(study: Study, cat: str) -> str:
    rows = []
    for method in study.methods():
        for seed in study.seeds:
            done = read_done(study.train_dir(method, cat, seed), "train")
            last = done.get("last_metrics", {})
            keys = ("reward/mean", "loss/nll", "eval/pass@1")
            shown = ", ".join(f"{k} {last[k]:.3g}" for k in keys if k in last)
            rows.append([run_name(ROLES[method], seed), str(done.get("steps")), shown or "-"])
    return "Training runs\n\n" + markdown_table(["run", "steps", "last step"], rows)


def _seed_figure(study: Study, cat: str) -> str:
    """Pass curves at T_max of base and every seed's SFT and RL, with CI bands."""
    from passkt.eval.plots import (
        plot_pass_curves,  # start-up cost: matplotlib, 0.35 s, for figures only
    )

    t_max = max(study.budgets(cat))
    bases = sorted({study.base_of(s) for s in study.seeds}, key=lambda p: -1 if p is None else p)
    folders = [study.base_eval_dirs(cat, p)[0] for p in bases]
    trained = [r.lower() for r in study.trained_roles()]
    folders += [study.eval_dir(cat, r, s) for r in ("rl", "sft", "rft") if r in trained
                for s in study.seeds]  # fmt: skip
    curves, colors = {}, {}
    shades = {"RL": ("#e6550d", "#fd8d3c", "#a63603"), "SFT": ("#3182bd", "#6baed6", "#08519c"),
              "RFT": ("#31a354", "#74c476", "#006d2c")}  # fmt: skip
    for folder in folders:
        _, table = load_run(folder)
        surf = surface(table.select_budgets([t_max]), study.ks(cat))
        ci = bootstrap_surface(surf, n_boot=study.profile["stats"]["n_boot"])
        curves[table.name] = (surf, ci)
        role, _, seed = table.name.partition(" s")
        colors[table.name] = (
            shades[role][int(seed) % 3] if role in shades and seed.isdigit() else "black"
        )
    target = study.report_dir / "figures" / cat / "seeds"
    plot_pass_curves(
        curves,
        target,
        title=f"pass@k at T = {t_max}: base, SFT (blues), RL (oranges), RFT (greens)",
        colors=colors,
    )
    link = Path("figures", cat, "seeds.png").as_posix()
    return f"\n![pass@k at T = {t_max}, every seed]({link})\n"


def _seed_section(study: Study, cat: str, seed: int, metrics: dict, analysis: dict) -> str:
    folder = study.compare_dir(cat, seed)
    figures = study.report_dir / "figures" / cat / f"seed{seed}"
    links = {}
    roles = ("base", *study.trained_roles())
    report = study.report_dir
    for png in sorted(folder.glob("*.png")):
        links[png.stem] = copy_figure(png, figures / png.name, report)
    for role in roles:
        heatmap = folder / f"surface_{role}" / "heatmap.png"
        links[f"heatmap_{role}"] = copy_figure(heatmap, figures / f"heatmap_{role}.png", report)
    text = [f"### {cat}, seed {seed}\n"]
    text.append(" ".join(f"![{role} surface]({links[f'heatmap_{role}']})" for role in roles))
    text.append("\n" + " ".join(f"![{stem}]({link})" for stem, link in links.items()
                                if not stem.startswith("heatmap")) + "\n")  # fmt: skip
    for role in roles:
        text.append((folder / f"surface_{role}" / "surface.md").read_text(encoding="utf-8"))
    text.append((folder / "report.md").read_text(encoding="utf-8"))
    analysis_dir = study.analysis_dir(cat, seed)
    for name in ("diversity.md", "perplexity.md"):
        if (analysis_dir / name).is_file():
            text.append((analysis_dir / name).read_text(encoding="utf-8"))
    return "\n".join(text) + "\n"
