"""Tables of surfaces, comparisons and boundary sets as Markdown, CSV and JSON.

Surface and gap tables have one row per budget T and one column per k (the orientation of the
study's tables). Markdown cells carry the CI as ``0.412 [0.37, 0.45]``; CSV files put the bounds
in their own columns (``pass@4``, ``pass@4_lower``, ``pass@4_upper``) so spreadsheets can read
them; JSON is the result objects' ``to_dict()``.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from passkt.eval.estimator import Surface
from passkt.eval.stats import (
    METHOD_TEXT,
    BoundaryComparison,
    BoundaryDifference,
    Comparison,
    SurfaceCI,
    Venn,
)

__all__ = [
    "boundary_difference_markdown",
    "boundary_markdown",
    "comparison_csv",
    "comparison_json",
    "comparison_markdown",
    "reliability_gap_markdown",
    "surface_csv",
    "surface_json",
    "surface_markdown",
    "venn_csv",
    "venn_markdown",
    "write_surface_tables",
]


def _check_ci(surf: Surface, ci: SurfaceCI | None) -> None:
    if ci is not None and (ci.ks != surf.ks or ci.budgets != surf.budgets):
        raise ValueError(
            f"CI grid (ks={ci.ks}, budgets={ci.budgets}) does not match the surface "
            f"(ks={surf.ks}, budgets={surf.budgets}); bootstrap this surface"
        )


UNDEFINED = "undefined"
"""What a cell whose estimate is undefined (NaN) shows instead of a number."""


def _cell(value: float, lower: float | None, upper: float | None, digits: int, sign: bool) -> str:
    if not math.isfinite(value):
        return UNDEFINED
    fmt = f"{{:{'+' if sign else ''}.{digits}f}}"
    text = fmt.format(value)
    if lower is not None and upper is not None:
        text += f" [{lower:.{max(digits - 1, 1)}f}, {upper:.{max(digits - 1, 1)}f}]"
    return text


def _markdown(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A Markdown table; ``align`` holds one ``l``/``r`` per column (default all right)."""
    align = align or "r" * len(header)
    rule = "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _csv(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buffer.getvalue()


MAX_MARKDOWN_KS = 12
"""Markdown tables show at most about this many k columns; CSV and JSON keep every k."""


def markdown_k_columns(ks: Sequence[int]) -> list[int]:
    """Indices of the k columns a Markdown table shows: all of a short grid; of a dense one
    (e.g. k = 1..64) the powers of two and the last k, so the table stays readable."""
    if len(ks) <= MAX_MARKDOWN_KS:
        return list(range(len(ks)))
    return [i for i, k in enumerate(ks) if k & (k - 1) == 0 or i == len(ks) - 1]


def _grid_markdown(
    ks: Sequence[int],
    budgets: Sequence[int],
    values: np.ndarray,
    lower: np.ndarray | None,
    upper: np.ndarray | None,
    digits: int,
    sign: bool = False,
    marks: np.ndarray | None = None,
) -> str:
    shown = markdown_k_columns(ks)
    header = ["T \\ k", *(str(ks[i]) for i in shown)]
    rows = []
    for j, t in enumerate(budgets):
        cells = [
            _cell(
                float(values[i, j]),
                None if lower is None else float(lower[i, j]),
                None if upper is None else float(upper[i, j]),
                digits,
                sign,
            )
            + ("*" if marks is not None and marks[i, j] else "")
            for i in shown
        ]
        rows.append([str(t), *cells])
    return _markdown(header, rows)


# ---------------------------------------------------------------------- surface


def _method_text(method: str, n_boot: int) -> str:
    return METHOD_TEXT[method] + (f", {n_boot} resamples" if method == "bootstrap" else "")


def surface_markdown(surf: Surface, ci: SurfaceCI | None = None, digits: int = 3) -> str:
    """PASS@(k,T) (or pass^k(T)) as a Markdown table: rows T, columns k, cells
    ``0.412 [0.37, 0.45]``; a cell whose estimate is undefined says so."""
    _check_ci(surf, ci)
    caption = (
        f"{surf.title} of **{surf.name}**: {surf.num_tasks} problems, n = {surf.n}"
        + ("" if ci is None else f", {ci.level:.0%} CI: {_method_text(ci.method, ci.n_boot)}")
        + "\n\n"
    )
    return caption + _grid_markdown(
        surf.ks,
        surf.budgets,
        surf.values,
        None if ci is None else ci.lower,
        None if ci is None else ci.upper,
        digits,
    )


def surface_csv(surf: Surface, ci: SurfaceCI | None = None) -> str:
    """PASS@(k,T) as CSV: a row per T; ``pass@k`` columns (with ``_lower``/``_upper`` if CI);
    ``pass^k`` columns for a pass^k surface."""
    _check_ci(surf, ci)
    header = ["T"]
    stem = surf.metric[:-1]  # "pass@" or "pass^"
    for k in surf.ks:
        header += [f"{stem}{k}"] + ([] if ci is None else [f"{stem}{k}_lower", f"{stem}{k}_upper"])
    rows = []
    for j, t in enumerate(surf.budgets):
        row: list[object] = [t]
        for i in range(len(surf.ks)):
            row.append(repr(float(surf.values[i, j])))
            if ci is not None:
                row += [repr(float(ci.lower[i, j])), repr(float(ci.upper[i, j]))]
        rows.append(row)
    return _csv(header, rows)


def surface_json(surf: Surface, ci: SurfaceCI | None = None) -> str:
    """PASS@(k,T) as JSON: the surface's ``to_dict()`` plus ``lower``/``upper`` and CI settings."""
    _check_ci(surf, ci)
    data = surf.to_dict()
    if ci is not None:
        data.update(
            lower=ci.lower.tolist(),
            upper=ci.upper.tolist(),
            method=ci.method,
            level=ci.level,
            n_boot=ci.n_boot,
            seed=ci.seed,
        )
    return json.dumps(data, indent=2) + "\n"


def write_surface_tables(
    surf: Surface, ci: SurfaceCI | None, directory: str | Path, stem: str = "surface"
) -> dict[str, Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.json`` into ``directory``.

    Returns:
        Mapping ``{"md": path, "csv": path, "json": path}``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    texts = {
        "md": surface_markdown(surf, ci),
        "csv": surface_csv(surf, ci),
        "json": surface_json(surf, ci),
    }
    paths = {}
    for ext, text in texts.items():
        paths[ext] = directory / f"{stem}.{ext}"
        paths[ext].write_text(text, encoding="utf-8", errors="backslashreplace")
    return paths


# ---------------------------------------------------------------------- comparison


def _fmt_k(k: float | None) -> str:
    if k is None:
        return "none"
    return f"{k:.1f}" if not math.isclose(k, round(k)) else str(round(k))


def _fmt_range(k_range: tuple[int | None, int | None] | None) -> str:
    """``4-16``; ``?`` for an end the grid does not resolve at the CI level."""
    if k_range is None:
        return "-"
    return "-".join("?" if k is None else str(k) for k in k_range)


def comparison_markdown(cmp: Comparison, digits: int = 3) -> str:
    """The gap table (rows T, columns k, ``+0.041 [0.01, 0.07]``), the headline test and a
    per-T summary; ``*`` marks cells significant after Holm's correction over the grid."""
    alpha = 1 - cmp.level
    title = (
        f"Gap PASS@(k,T) **{cmp.name_b} - {cmp.name_a}** on {len(cmp.task_ids)} shared problems "
        f"({cmp.level:.0%} paired CI: {_method_text(cmp.method, cmp.n_boot)}). "
        f"`*`: significant after Holm's correction over all {cmp.gap.size} (k, T) cells "
        f"(family-wise level {alpha:.2g}); "
        f"{int(cmp.significant.sum())} of {cmp.gap.size} cells are.\n\n"
    )
    gap_table = _grid_markdown(
        cmp.ks, cmp.budgets, cmp.gap, cmp.gap_lower, cmp.gap_upper, digits, True, cmp.significant
    )
    head = cmp.headline
    headline = (
        f"\n**Headline test** (declared before the data, one test, level {alpha:.2g}): "
        f"{head.label} = "
        f"{_cell(head.estimate, head.lower, head.upper, digits, sign=True)}, p = {head.p_value:.3g}"
        f" -> {'significant' if head.significant else 'not significant'}.\n\n"
    )
    k_lo, k_hi = cmp.ks[0], cmp.ks[-1]
    header = [
        "T",
        "crossover k",
        "bracket",
        f"k range ({cmp.level:.0%})",
        "crossing significant",
        f"gap k={k_lo}",
        f"gap k={k_hi}",
        f"widening (k={k_hi} - k={k_lo}), `*` Holm over T",
        "widens",
    ]
    rows = []
    for j, t in enumerate(cmp.budgets):
        cross = cmp.crossovers[j]
        rows.append(
            [
                str(t),
                _fmt_k(cross.k),
                "-" if cross.bracket is None else f"{cross.bracket[0]}-{cross.bracket[1]}",
                _fmt_range(cross.k_range),
                "-" if cross.bracket is None else ("yes" if cross.significant else "no"),
                f"{cmp.gap[0, j]:+.{digits}f}",
                f"{cmp.gap[-1, j]:+.{digits}f}",
                _cell(
                    float(cmp.widening[j]),
                    float(cmp.widening_lower[j]),
                    float(cmp.widening_upper[j]),
                    digits,
                    sign=True,
                )
                + ("*" if cmp.widening_p_holm[j] < alpha else ""),
                "yes" if cmp.widens[j] else "no",
            ]
        )
    note = (
        f"\nk range: the grid k's between which the crossover lies at the {cmp.level:.0%} level "
        "(`?`: not resolved on the grid).\n"
    )
    return title + gap_table + headline + _markdown(header, rows) + note


def reliability_gap_markdown(cmp: Comparison, digits: int = 3) -> str:
    """The pass^k gap table of a ``compare(..., metric="pass^k")``: rows T, columns k, ``*``
    for cells significant after Holm's correction over the grid (as the pass@k gap table)."""
    alpha = 1 - cmp.level
    title = (
        f"Gap pass^k(T) **{cmp.name_b} - {cmp.name_a}** (all k episodes succeed) on "
        f"{len(cmp.task_ids)} shared problems ({cmp.level:.0%} paired CI: "
        f"{_method_text(cmp.method, cmp.n_boot)}; for pass^k also at least the MOVER interval "
        f"of the two cells). `*`: significant after Holm's correction over all {cmp.gap.size} "
        f"(k, T) cells (family-wise level {alpha:.2g}); {int(cmp.significant.sum())} of "
        f"{cmp.gap.size} cells are.\n\n"
    )
    return title + _grid_markdown(
        cmp.ks, cmp.budgets, cmp.gap, cmp.gap_lower, cmp.gap_upper, digits, True, cmp.significant
    )


def comparison_csv(cmp: Comparison) -> str:
    """The gap in long form: one row per (T, k) with the CI, both surfaces and the crossover."""
    header = ["T", "k", "pass_a", "pass_b", "gap", "gap_lower", "gap_upper", "p", "p_holm"]
    rows = []
    for j, t in enumerate(cmp.budgets):
        for i, k in enumerate(cmp.ks):
            rows.append(
                [
                    t,
                    k,
                    repr(float(cmp.surface_a[i, j])),
                    repr(float(cmp.surface_b[i, j])),
                    repr(float(cmp.gap[i, j])),
                    repr(float(cmp.gap_lower[i, j])),
                    repr(float(cmp.gap_upper[i, j])),
                    repr(float(cmp.gap_p[i, j])),
                    repr(float(cmp.gap_p_holm[i, j])),
                ]
            )
    return _csv(header, rows)


def comparison_json(cmp: Comparison) -> str:
    """The comparison's ``to_dict()`` as indented JSON."""
    return json.dumps(cmp.to_dict(), indent=2) + "\n"


# ---------------------------------------------------------------------- boundary sets


def _id_list(ids: Sequence[str], max_ids: int) -> str:
    shown = ", ".join(ids[:max_ids])
    return shown + (f", ... (+{len(ids) - max_ids})" if len(ids) > max_ids else "")


def boundary_markdown(bc: BoundaryComparison, max_ids: int = 20) -> str:
    """Boundary sets of two runs at one T: sizes, region counts and the tasks only one solves."""
    header = ["region", "problems", "tasks"]
    rows = [
        [f"{bc.name_a} only", str(len(bc.only_a)), _id_list(bc.only_a, max_ids)],
        [f"{bc.name_b} only", str(len(bc.only_b)), _id_list(bc.only_b, max_ids)],
        ["both", str(len(bc.both)), ""],
        ["neither", str(len(bc.neither)), ""],
    ]
    intro = (
        f"Boundary sets at T = {bc.budget} (solved at least once in n samples): "
        f"**{bc.name_a}** {bc.size_a}, **{bc.name_b}** {bc.size_b}"
        + (f"; {len(bc.excluded)} unshared task(s) left out" if bc.excluded else "")
        + "\n\n"
    )
    return intro + _markdown(header, rows, align="lrl")


def boundary_difference_markdown(bd: BoundaryDifference) -> str:
    """One line: both boundary sizes and their difference, each with its CI."""

    def sized(value: float, lower: float, upper: float, sign: bool = False) -> str:
        return f"{value:{'+' if sign else ''}d} [{lower:.1f}, {upper:.1f}]"

    return (
        f"Boundary sizes at T = {bd.budget} ({bd.level:.0%} CI over problems and samples, of "
        f"{bd.num_tasks}): **{bd.name_a}** {sized(bd.size_a, bd.size_a_lower, bd.size_a_upper)}, "
        f"**{bd.name_b}** {sized(bd.size_b, bd.size_b_lower, bd.size_b_upper)}; difference "
        f"{sized(bd.difference, bd.difference_lower, bd.difference_upper, True)}, "
        f"p = {bd.p_value:.3g}\n"
    )


def venn_markdown(v: Venn, max_ids: int = 20) -> str:
    """Venn regions of 2 or 3 runs at one T; task lists for the single-run regions."""
    rows = []
    for pattern, ids in v.regions.items():
        listed = _id_list(ids, max_ids) if sum(pattern) == 1 else ""
        rows.append([v.label(pattern), str(len(ids)), listed])
    intro = f"Boundary-set regions at T = {v.budget} on {len(v.task_ids)} shared problems\n\n"
    return intro + _markdown(["region", "problems", "tasks"], rows, align="lrl")


def venn_csv(v: Venn) -> str:
    """Venn regions as CSV: region label, one 0/1 column per run, count, task ids (``;``)."""
    header = ["region", *v.names, "count", "task_ids"]
    rows = [
        [v.label(p), *(int(x) for x in p), len(ids), ";".join(ids)] for p, ids in v.regions.items()
    ]
    return _csv(header, rows)
