"""The ``compare`` and ``analyze`` stages: base vs SFT vs RL of one category and training seed.

Both only call ``passkt.eval`` (reports, stats, boundary sets, analyses); what they add is the
choice of runs, the check that the runs are the matched ones (same eval problems as the splits),
and a small ``metrics.json`` / ``analysis.json`` that the report aggregates over seeds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from passkt.eval.analysis.common import load_records
from passkt.eval.analysis.diversity import diversity_markdown, query_overlap, run_diversity
from passkt.eval.analysis.perplexity import load_scorer, run_perplexity
from passkt.eval.boundary import boundary_comparison, boundary_difference, boundary_set, venn
from passkt.eval.estimator import surface
from passkt.eval.noise import findings, noise_floor
from passkt.eval.reports import write_comparison, write_report
from passkt.eval.stats import compare
from passkt.eval.store import load_run
from passkt.study.profile import StudyError
from passkt.study.stages import Study, floor_names, run_name


def _runs(study: Study, cat: str, seed: int) -> dict[str, Path]:
    """Role -> run directory: base, RL, SFT (the order of the comparison tables), then RFT (the
    on-policy control) when the profile runs it."""
    runs = {
        "base": study.base_eval_dirs(cat, study.base_of(seed))[0],
        "RL": study.eval_dir(cat, "rl", seed),
        "SFT": study.eval_dir(cat, "sft", seed),
    }
    if "RFT" in study.trained_roles():
        runs["RFT"] = study.eval_dir(cat, "rft", seed)
    return runs


def _load_tables(study: Study, cat: str, seed: int) -> dict[str, Any]:
    """The outcome tables, checked to be on exactly the category's eval split."""
    runs = _runs(study, cat, seed)
    return {role: _eval_table(study, cat, folder) for role, folder in runs.items()}


def _eval_table(study: Study, cat: str, folder: Path) -> Any:
    """One evaluation's outcome table, checked to be on exactly the category's eval split."""

    _, table = load_run(folder)
    if list(table.task_ids) != study.task_ids(cat, "eval"):
        raise StudyError(
            f"{folder}: the run's problems are not the eval split "
            f"{study.splits_dir(cat) / 'eval.txt'}; delete the run and rerun its stage"
        )
    return table


def make_comparison(study: Study, cat: str, seed: int) -> dict[str, Any]:
    """Gap tables and figures, Venn regions, surfaces of each run, and ``metrics.json``."""

    stats = study.profile["stats"]
    out = study.compare_dir(cat, seed)
    runs = _runs(study, cat, seed)
    boot = {"n_boot": stats["n_boot"], "level": stats["level"], "seed": 0}
    own = study.base_of(seed)
    repeats = study.base_eval_dirs(cat, own)[1:]
    others = [p for p in study.bases() if p != own]
    peers = [d for p in others for d in study.base_eval_dirs(cat, p)]
    write_comparison(list(runs.values()), out, ks=study.ks(cat), repeats=repeats, peers=peers,
                     **boot)  # fmt: skip
    for role, folder in runs.items():
        write_report(folder, out / f"surface_{role}", ks=study.ks(cat), **boot)
    metrics = comparison_metrics(study, cat, seed)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return {
        "T_max": metrics["T_max"],
        "runs": {r: m["name"] for r, m in metrics["runs"].items()},
        "floor": floor_names(study, cat, seed),
    }


def comparison_metrics(study: Study, cat: str, seed: int) -> dict[str, Any]:
    """The numbers the seed-aggregate table needs, at (k = 1 and k = n, T_max), with the noise
    floor of the repeated base evaluations and which differences lie outside it."""

    tables = _load_tables(study, cat, seed)
    t_max = max(set.intersection(*(set(t.budgets) for t in tables.values())))
    n = min(t.n for t in tables.values())
    runs = {}
    for role, table in tables.items():
        surf = surface(table.select_budgets([t_max]), sorted({1, n}))
        runs[role] = {
            "name": table.name,
            "n": table.n,
            "tasks": table.num_tasks,
            "pass@1": surf.value(1, t_max),
            "pass@n": surf.value(n, t_max),
            "boundary": len(boundary_set(table, t_max)),
        }
    regions = venn([tables["base"], tables["RL"], tables["SFT"]], t_max)
    names = {role: tables[role].name for role in ("base", "RL", "SFT")}  # the study's 3-way
    three_way = {f"{role} only": len(regions.ids(names[role])) for role in names}
    three_way["all"] = len(regions.ids(*names.values()))
    three_way["none"] = len(regions.ids())
    level = study.profile["stats"]["level"]
    # The floor: every evaluation of the base and, with eval.floor_pretrain_seeds, of the same
    # recipe pretrained with other seeds; the base's own repeats alone give the eval floor.
    repeats = [tables["base"]] + [
        _eval_table(study, cat, folder).with_name(name)
        for folder, name in study.floor_runs(cat, seed)[1:]
    ]
    own = len(study.base_eval_dirs(cat, study.base_of(seed)))
    ks = study.ks(cat)
    pairs = {}
    floor = eval_floor = None
    for role in study.trained_roles():
        cmp = compare(tables["base"], tables[role], ks=ks, budgets=[t_max], level=level)
        if floor is None and len(repeats) > 1:
            floor = noise_floor(repeats, cmp.ks, [t_max], t_max)
            if own > 1 and len(repeats) > own:
                eval_floor = noise_floor(repeats[:own], cmp.ks, [t_max], t_max)
        cross = cmp.crossover_at(t_max)
        regions2 = boundary_comparison(tables["base"], tables[role], t_max)
        bd = boundary_difference(tables["base"], tables[role], t_max, level)
        found = (
            None
            if floor is None
            else findings(cmp, floor, bd, len(regions2.only_b), len(regions2.only_a))
        )
        pairs[role] = {
            "gap@1_significant": bool(cmp.significant[0, 0]),
            "gap@n_significant": bool(cmp.significant[-1, 0]),
            "boundary_difference_ci": [bd.difference_lower, bd.difference_upper],
            "finding_gap@1": None if found is None else (cmp.ks[0], t_max) in found.cells,
            "finding_gap@n": None if found is None else (cmp.ks[-1], t_max) in found.cells,
            "finding_boundary": None if found is None else found.boundary,
            "finding_boundary_loss": None if found is None else found.loss,
            "gap@1": runs[role]["pass@1"] - runs["base"]["pass@1"],
            "gap@n": runs[role]["pass@n"] - runs["base"]["pass@n"],
            "widening": float(cmp.widening[0]),
            "widening_ci": [float(cmp.widening_lower[0]), float(cmp.widening_upper[0])],
            "crossover_k": cross.k,
            "crossover_significant": cross.significant,
            "sign_at_k1": cross.sign_at_k_min,
            "widens": bool(cmp.widens[0]),
            "only_trained": len(regions2.only_b),
            "only_base": len(regions2.only_a),
        }
    return {
        "category": cat,
        "seed": seed,
        "T_max": t_max,
        "n": n,
        "runs": runs,
        "venn": three_way,
        "vs_base": pairs,
        "noise_floor": _floor_summary(floor),
        "eval_floor": _floor_summary(eval_floor),
    }


def _floor_summary(floor: Any) -> dict[str, Any] | None:
    """What the report needs of a noise floor: its runs, the largest |gap| at k = 1 and k = n,
    and the swap counts of every pair."""
    if floor is None:
        return None
    return {
        "evaluations": len(floor.names),
        "names": list(floor.names),
        "max_abs_gap@1": float(floor.max_abs_gap[0, 0]),
        "max_abs_gap@n": float(floor.max_abs_gap[-1, 0]),
        "max_abs_widening": float(np.abs(floor.gaps[:, -1, 0] - floor.gaps[:, 0, 0]).max()),
        "max_swap": floor.max_swap,
        "swaps": [
            [a, b, sa, sb] for (a, b), (sa, sb) in zip(floor.pairs, floor.swaps, strict=True)
        ],
    }


# ---------------------------------------------------------------------- analyses


def make_analysis(study: Study, cat: str, seed: int) -> dict[str, Any]:
    """Strategy diversity (tool categories) and the base model's segment perplexity."""
    out = study.analysis_dir(cat, seed)
    out.mkdir(parents=True, exist_ok=True)
    runs = _runs(study, cat, seed)
    _load_tables(study, cat, seed)  # the matched-data check
    t_max = max(study.budgets(cat))
    result: dict[str, Any] = {"category": cat, "seed": seed, "T_max": t_max}
    if study.has_tools(cat):
        text, result["diversity"], result["overlap"] = _diversity(study, runs, seed, t_max)
        (out / "diversity.md").write_text(text, encoding="utf-8")
    text, result["perplexity"] = _perplexity(study, runs, cat, seed, t_max)
    (out / "perplexity.md").write_text(text, encoding="utf-8")
    (out / "analysis.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return {"T_max": t_max, "perplexity_of": sorted(result["perplexity"])}


def _diversity(study: Study, runs: dict[str, Path], seed: int, t_max: int) -> tuple:

    stats = study.profile["stats"]
    diversities, overlaps, summary, overlap_summary = [], [], {}, {}
    base_records = load_records(runs["base"], t_max).records
    for role, folder in runs.items():
        name = run_name(role, None if role == "base" else seed)
        d = run_diversity(folder, t_max, name=name, n_boot=stats["n_boot"], level=stats["level"])
        diversities.append(d)
        summary[role] = {
            "mean_unique": d.mean_unique,
            "lower": d.lower,
            "upper": d.upper,
            "n": d.n,
            "mean_searches": d.mean_searches,
        }
        if role != "base":
            o = query_overlap(
                base_records,
                load_records(folder, t_max).records,
                name_a="base",
                name_b=name,
                budget=t_max,
            )
            overlaps.append(o)
            overlap_summary[role] = {
                "mean_jaccard": o.mean_jaccard,
                "share_in_base": o.share_b_in_a,
                "base_share_in": o.share_a_in_b,
            }
    return diversity_markdown(diversities, overlaps), summary, overlap_summary


def _perplexity(study: Study, runs: dict[str, Path], cat: str, seed: int, t_max: int) -> tuple:
    """The base model's perplexity of each chosen run's successful trajectories, by segment."""

    settings, stats = study.profile["analyze"], study.profile["stats"]
    scorer_spec = f"hf:{study.base_model(study.base_of(seed), cat)}"
    model = tokenizer = None
    parts, summary = [], {}
    for role in settings["perplexity_of"]:
        name = run_name(role, None if role == "base" else seed)
        if model is None:
            model, tokenizer = load_scorer(
                scorer_spec, device=settings["device"], dtype=settings["dtype"]
            )
        try:
            result = run_perplexity(
                runs[role],
                model,
                tokenizer,
                budget=t_max,
                only_correct=True,
                limit=settings["perplexity_limit"] or None,
                batch_size=settings["batch_size"],
                n_boot=stats["n_boot"],
                level=stats["level"],
            )
        except ValueError as e:  # no successful trajectory to score
            summary[role] = {"error": str(e)}
            parts.append(f"Segment perplexity of **{name}**: nothing to score ({e})\n")
            continue
        summary[role] = {
            "trajectories": result.num_trajectories,
            "segments": {
                s.segment: {
                    "tokens": s.tokens,
                    "perplexity": s.perplexity,
                    "ppl_lower": s.ppl_lower,
                    "ppl_upper": s.ppl_upper,
                }
                for s in result.segments
            },
        }
        parts.append(result.to_markdown().replace("`" + result.scorer + "`", "the base model"))
    return "\n".join(parts), summary
