"""Reports of finished runs: ``passkt report`` (one run) and ``passkt compare`` (several).

Both write Markdown, CSV and JSON tables and PNG/SVG plots into a folder and return a ``Report``;
the CLI prints its Markdown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passkt.agents.folders import claim_folder, mark_folder
from passkt.eval.analysis.boundary_report import boundary_summary
from passkt.eval.boundary import boundary_size_interval
from passkt.eval.chance import ChanceFloor, answer_set_sizes, chance_floor
from passkt.eval.change import change
from passkt.eval.change import reliability_k as check_reliability_k
from passkt.eval.estimator import check_ks, default_ks, reliability_surface, surface
from passkt.eval.noise import findings, noise_floor
from passkt.eval.stats import (
    bootstrap_surface,
    boundary_comparison,
    boundary_difference,
    compare,
    surface_interval,
    venn,
)
from passkt.eval.store import escape_surrogates, load_run, read_env_failures
from passkt.eval.tables import (
    boundary_difference_markdown,
    boundary_markdown,
    comparison_csv,
    comparison_json,
    comparison_markdown,
    reliability_gap_markdown,
    surface_markdown,
    venn_csv,
    venn_markdown,
    write_surface_tables,
)

__all__ = ["METHOD_NOTE", "Report", "write_comparison", "write_report"]

METHOD_NOTE = (
    "How the intervals are made: the estimate varies with the problems drawn and with the n "
    "samples drawn per problem. Its variance is taken as the larger of the spread of the "
    "per-problem estimates over problems (which holds both parts) and the mean within-problem "
    "sampling variance (a floor that matters when few problems are ever solved). pass@k cells "
    "get a Wilson score interval at that variance's effective sample size (right near 0 and "
    "1); gaps, widenings and boundary differences a Student-t interval and test. Gap cells "
    "are read after Holm's correction over the (k, T) grid; one pre-declared headline test "
    "is read alone. pass^k (all k episodes succeed) gets the same intervals, its Wilson form "
    "capped at the P n / k disjoint groups of k samples and its gaps at least the MOVER interval "
    "of the two cells (conservative where pass^k is a mean of tiny values). Assumed: "
    "problems are independent draws and samples are independent given the problem. Compared "
    "runs evaluate the same problems; with the same evaluation seed they share random numbers "
    "per sample, which the paired spread sees and the sampling floor ignores (conservative), "
    "so the intervals hold with and without that correlation. Calibration by simulation: "
    "benchmarks/README.md (coverage and A/A false-positive rates).\n"
)
"""The method paragraph every report ends with (README: 'Statistics')."""


@dataclass(frozen=True)
class Report:
    """What ``write_report`` / ``write_comparison`` produced: a Markdown summary and its files."""

    markdown: str
    out_dir: Path
    files: tuple[Path, ...]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def _boundary_markdown(table: Any, level: float = 0.95) -> str:

    header = "| T | " + " | ".join(str(t) for t in table.budgets) + " |"
    rule = "|---:|" + "|".join("---:" for _ in table.budgets) + "|"
    sizes = []
    for t in table.budgets:
        size, lower, upper = boundary_size_interval(table, t, level)
        sizes.append(f"{size} [{lower:.1f}, {upper:.1f}]")
    return (
        f"Boundary set (problems solved at least once in n = {table.n}) of "
        f"{table.num_tasks} problems, with its {level:.0%} CI over problems and samples\n\n"
        f"{header}\n{rule}\n| solved | " + " | ".join(sizes) + " |\n"
    )


def write_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    ks: Sequence[int] | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    partial: bool = False,
    method: str = "score",
) -> Report:
    """Surface tables (Markdown, CSV, JSON) with CIs and plots of one run.

    Writes ``surface.{md,csv,json}`` (PASS@(k,T)), ``reliability.{md,csv,json}`` (pass^k(T)),
    ``boundary.md``, ``heatmap.{png,svg}``, ``heatmap_reliability.{png,svg}``,
    ``pass_curves.{png,svg}``, ``reliability_curves.{png,svg}`` and ``report.md`` into
    ``out_dir`` (default ``RUN_DIR/report``); for an env that declares closed answer sets
    (``info["choices"]``) also ``chance.{md,json}``, the chance floors.
    """
    from passkt.eval.plots import (  # start-up cost: matplotlib, 0.35 s, for figures only
        plot_pass_curves,
        plot_surface_heatmap,
    )

    out = Path(out_dir) if out_dir is not None else Path(run_dir) / "report"
    claim_folder(out, "report")
    manifest, table = load_run(run_dir, partial=partial)
    surf = surface(table, ks)
    ci = _surface_ci(surf, table, method, n_boot, level, seed)
    rel = reliability_surface(table, surf.ks)
    rel_ci = _surface_ci(rel, table, method, n_boot, level, seed)
    out.mkdir(parents=True, exist_ok=True)
    mark_folder(out, "report")
    files = list(write_surface_tables(surf, ci, out, "surface").values())
    files += write_surface_tables(rel, rel_ci, out, "reliability").values()
    boundary = _boundary_markdown(table, level)
    (out / "boundary.md").write_text(boundary, encoding="utf-8", errors="backslashreplace")
    files.append(out / "boundary.md")
    floor = run_chance_floor(manifest, table, surf.ks, level)
    chance = ""
    if floor is not None:
        chance = floor.to_markdown() + "\n"
        files += _write_chance(floor, out)
    files += plot_surface_heatmap(surf, out / "heatmap")
    files += plot_surface_heatmap(rel, out / "heatmap_reliability")
    files += plot_pass_curves({table.name: (surf, ci)}, out / "pass_curves")
    files += plot_pass_curves({table.name: (rel, rel_ci)}, out / "reliability_curves")
    kwargs = ", ".join(f"{k}={v}" for k, v in manifest["env_kwargs"].items()) or "defaults"
    failures = read_env_failures(run_dir).line(f"**Env failures** of {table.name}")
    chance += f"{failures}\n\n" if failures else ""
    markdown = (
        f"{surface_markdown(surf, ci)}\n{surface_markdown(rel, rel_ci)}\n{boundary}\n{chance}"
        f"env {manifest['env_id']} ({kwargs}, split {manifest['split']}), "
        f"policy {manifest['policy']}, seed {manifest['seed']}\n\n{METHOD_NOTE}"
    )
    summary = markdown + (
        "\n![PASS@(k,T) heatmap](heatmap.png)\n\n![pass^k(T) heatmap](heatmap_reliability.png)\n"
        "\n![pass curves](pass_curves.png)\n\n![pass^k curves](reliability_curves.png)\n"
    )
    (out / "report.md").write_text(summary, encoding="utf-8", errors="backslashreplace")
    files.append(out / "report.md")
    return Report(markdown, out, tuple(files))


def run_chance_floor(
    manifest: dict, table: Any, ks: Sequence[int], level: float = 0.95
) -> ChanceFloor | None:
    """The chance floors of a run whose env declares closed answer sets (``None`` otherwise)."""
    sizes = answer_set_sizes(
        manifest["env_id"], manifest.get("env_kwargs") or {}, manifest["split"], table.task_ids
    )
    return chance_floor(table, sizes, ks, level=level) if sizes else None


def _write_chance(floor: ChanceFloor, out: Path, stem: str = "chance") -> list[Path]:
    paths = [out / f"{stem}.md", out / f"{stem}.json"]
    paths[0].write_text(floor.to_markdown(), encoding="utf-8", errors="backslashreplace")
    data = json.dumps(floor.to_dict(), indent=2).replace("NaN", "null")
    paths[1].write_text(data + "\n", encoding="utf-8")
    return paths


def _surface_ci(surf: Any, table: Any, method: str, n_boot: int, level: float, seed: int) -> Any:

    if method == "bootstrap":
        return bootstrap_surface(surf, n_boot=n_boot, level=level, seed=seed)
    if method != "score":
        raise ValueError(f"method must be 'score' or 'bootstrap', got {method!r}")
    return surface_interval(surf, table.select_budgets(surf.budgets).counts(), level)


_SAME_POLICY = ("env_id", "env_kwargs", "split", "policy", "policy_options", "sampling", "n")
"""Manifest fields a repeated evaluation must share with the reference run."""


def _floor(
    ref_dir: Path,
    ref: tuple[dict, Any],
    ref_table: Any,
    repeats: Sequence[str | Path],
    ks: Sequence[int],
    budgets: Sequence[int],
    budget: int,
    peers: Sequence[str | Path] = (),
) -> Any:
    """The noise floor of the reference, its repeats and its peers (``None`` without either)."""

    if not repeats and not peers:
        return None
    manifest = ref[0]
    tables, used = [ref_table], {(manifest.get("policy"), manifest["seed"])}
    names = {ref_table.name}
    for flag, group in (("--repeats", repeats), ("--peers", peers)):
        for directory in map(Path, group):
            other, table = load_run(directory)
            for key in _SAME_POLICY:
                if key == "policy" and flag == "--peers":
                    continue
                if other.get(key) != manifest.get(key):
                    need = (
                        "a repeat must evaluate the same policy the same way"
                        if flag == "--repeats"
                        else "a peer is another policy evaluated the same way"
                    )
                    raise ValueError(
                        f"{flag} {directory}: {key} is {other.get(key)!r} but {ref_dir} has "
                        f"{manifest.get(key)!r}; {need}"
                    )
            if flag == "--peers" and other.get("policy") == manifest.get("policy"):
                raise ValueError(
                    f"--peers {directory}: it evaluates {ref_dir}'s own policy; give it as "
                    "--repeats (peers are other policies of the same recipe)"
                )
            if (other.get("policy"), other["seed"]) in used:
                raise ValueError(
                    f"{flag} {directory}: evaluation seed {other['seed']} was already used for "
                    f"this policy ({ref_dir} and repeats must differ); rerun `passkt eval` with "
                    "another --seed"
                )
            used.add((other.get("policy"), other["seed"]))
            if flag == "--repeats":
                name = f"{ref_table.name} (seed {other['seed']})"
            else:
                name = str(other.get("name") or directory.name)
                name = name if name not in names else f"{name} ({directory})"
            names.add(name)
            tables.append(table.with_name(name))
    of = "the same policy and of others made the same way" if peers else "the same policy"
    return noise_floor(tables, ks, budgets, budget, of)


def _run_names(run_dirs: Sequence[Path], manifests: Sequence[dict], names: Sequence[str] | None):
    if names is not None:
        if len(names) != len(run_dirs):
            raise ValueError(f"--names gives {len(names)} names for {len(run_dirs)} runs")
        chosen = list(names)
    else:
        chosen = [str(m.get("name") or d.name) for d, m in zip(run_dirs, manifests, strict=True)]
        if len(set(chosen)) != len(chosen):
            chosen = [d.resolve().name for d in run_dirs]
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"runs need distinct names, got {chosen}; pass --names a,b,...")

    return [escape_surrogates(name) for name in chosen]


def write_comparison(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    names: Sequence[str] | None = None,
    ks: Sequence[int] | None = None,
    budget: int | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    method: str = "score",
    headline: str | None = None,
    repeats: Sequence[str | Path] = (),
    peers: Sequence[str | Path] = (),
    reliability_k: int | None = None,
) -> Report:
    """Paired comparison of runs 2.. against run 1: gap tables and plots, boundary sets, Venn.

    ``repeats`` are more evaluations of run 1's policy with other evaluation seeds (everything
    else equal): they make the noise floor (``noise_floor.{md,json}``), and each comparison then
    says which of its differences lie beyond it (:mod:`passkt.eval.noise`; descriptive, one
    trained policy against its base: a claim about a recipe needs the seed-level test of
    :mod:`passkt.eval.seeds`). ``peers`` are evaluations of other policies made by the same
    recipe as run 1's (the base pretrained with another seed), evaluated the same way: they join
    the floor, which then also holds the variation between equally made policies. Without either
    no difference is marked beyond the floor.

    For every later run ``b``: ``gap_<b>_vs_<a>.{md,csv,json,png,svg}`` (gap per (k, T) with a
    paired CI, crossover k, whether the gap widens), ``reliability_<b>_vs_<a>.{md,csv,json}``
    (the pass^k gaps, same intervals and Holm correction), ``change_<b>_vs_<a>.{md,json}`` (per
    T the change in the boundary, pass@1 and pass^k at ``reliability_k``, default min(8, n))
    and ``boundary_<b>_vs_<a>.md``; for all runs: ``pass_curves.{png,svg}``,
    ``reliability_curves.{png,svg}``, for 2 or 3 runs ``venn.{md,csv,png,svg}``, and for runs
    whose env declares closed answer sets ``chance_<run>.{md,json}``.
    """
    # start-up cost: matplotlib, 0.35 s, for figures only
    from passkt.eval.plots import plot_boundary_venn, plot_gap, plot_pass_curves

    claim_folder(out_dir, "comparison")
    dirs = [Path(d) for d in run_dirs]
    if len(dirs) < 2:
        raise ValueError("compare needs at least two run directories")
    loaded = [load_run(d) for d in dirs]
    labels = _run_names(dirs, [m for m, _ in loaded], names)
    tables = [t.with_name(name) for (_, t), name in zip(loaded, labels, strict=True)]
    shared_t = sorted(set.intersection(*(set(t.budgets) for t in tables)))
    if not shared_t:
        raise ValueError(f"the runs share no budget T: {[t.budgets for t in tables]}")
    t_bound = shared_t[-1] if budget is None else budget
    if t_bound not in shared_t:
        raise ValueError(f"--budget {budget} was not evaluated by every run; shared: {shared_t}")
    n_min = min(t.n for t in tables)
    ks = check_ks(ks, n_min) if ks is not None else default_ks(n_min)
    reliability_k = check_reliability_k(n_min, reliability_k)  # before anything is written
    floor = _floor(dirs[0], loaded[0], tables[0], repeats, ks, shared_t, t_bound, peers)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mark_folder(out, "comparison")
    files: list[Path] = []
    parts: list[str] = [
        line
        for d, t in zip(dirs, tables, strict=True)
        if (line := read_env_failures(d).line(f"**Env failures** of {t.name}")) is not None
    ]

    def write(name: str, text: str) -> None:
        (out / name).write_text(text, encoding="utf-8", errors="backslashreplace")
        files.append(out / name)

    if floor is not None:
        parts.append(floor.to_markdown())
        write("noise_floor.md", parts[-1])
        write("noise_floor.json", json.dumps(floor.to_dict(), indent=2) + "\n")
    else:
        parts.append(
            "No noise floor: without repeated evaluations of the reference (`--repeats`, "
            "`--peers`), no difference below is marked beyond the noise floor. Either way, a "
            "claim about a recipe needs the seed-level test (`passkt.eval.seeds`, several "
            "independently trained policies).\n"
        )
    a = tables[0]
    for b in tables[1:]:
        stem = f"{_slug(b.name)}_vs_{_slug(a.name)}"
        cmp = compare(a, b, ks, shared_t, n_boot, seed, level, method, headline)  # type: ignore[arg-type]
        rel = compare(a, b, ks, shared_t, n_boot, seed, level, method, metric="pass^k")  # type: ignore[arg-type]
        three = change(
            a, b, k=reliability_k, budgets=shared_t, level=level, method=method, n_boot=n_boot,
            seed=seed,
        )  # fmt: skip
        bc = boundary_comparison(a, b, t_bound)
        bd = boundary_difference(a, b, t_bound, level)
        boundary = boundary_difference_markdown(bd) + "\n" + boundary_markdown(bc)
        if floor is not None:
            found = findings(cmp, floor, bd, len(bc.only_b), len(bc.only_a))
            boundary += "\n" + found.to_markdown(b.name, a.name)
        parts += [
            comparison_markdown(cmp),
            reliability_gap_markdown(rel),
            three.to_markdown(),
            boundary,
        ]
        write(f"gap_{stem}.md", parts[-4])
        write(f"gap_{stem}.csv", comparison_csv(cmp))
        write(f"gap_{stem}.json", comparison_json(cmp))
        write(f"reliability_{stem}.md", parts[-3])
        write(f"reliability_{stem}.csv", comparison_csv(rel))
        write(f"reliability_{stem}.json", comparison_json(rel))
        write(f"change_{stem}.md", parts[-2])
        write(f"change_{stem}.json", json.dumps(three.to_dict(), indent=2) + "\n")
        write(f"boundary_{stem}.md", parts[-1])
        files += plot_gap(cmp, out / f"gap_{stem}")
    curves, rel_curves = {}, {}
    for (manifest, _), t in zip(loaded, tables, strict=True):
        sub = t.select_budgets(shared_t)
        surf, rel_surf = surface(sub, ks), reliability_surface(sub, ks)
        curves[t.name] = (surf, _surface_ci(surf, t, method, n_boot, level, seed))
        rel_curves[t.name] = (rel_surf, _surface_ci(rel_surf, t, method, n_boot, level, seed))
        floor = run_chance_floor(manifest, sub, ks, level)
        if floor is not None:
            parts.append(floor.to_markdown())
            files += _write_chance(floor, out, f"chance_{_slug(t.name)}")
    files += plot_pass_curves(curves, out / "pass_curves")
    files += plot_pass_curves(rel_curves, out / "reliability_curves")
    if len(tables) <= 3:
        v = venn(tables, t_bound)
        write("venn.md", venn_markdown(v))
        if len(tables) == 3:  # with two, the boundary table above already lists these regions
            parts.append(venn_markdown(v))
        write("venn.csv", venn_csv(v))
        files += plot_boundary_venn(v, out / "venn")
    summary = boundary_summary(tables, budget=t_bound)
    parts.append(summary.to_markdown(only_one_lists=len(tables) > 3))
    write("boundary_summary.md", parts[-1])
    write("boundary_summary.json", json.dumps(summary.to_dict(), indent=2) + "\n")
    parts.append(METHOD_NOTE)
    markdown = "\n".join(parts)
    write("report.md", markdown)
    return Report(markdown, out, tuple(files))
