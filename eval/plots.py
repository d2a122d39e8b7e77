"""Figures of PASS@(k,T) results: surface heatmap, pass-curves, gap curves, boundary-set bars.

Every figure is built as a standalone :class:`matplotlib.figure.Figure` on an Agg canvas, never
through ``pyplot``, so nothing leaks into (or depends on) global pyplot state and it works
headless. Each ``figure_*`` function returns the figure (for inspection or further styling);
each ``plot_*`` function builds it and writes PNG and SVG next to each other, returning both paths.

Colours are fixed so figures of different runs compare: the heatmap maps pass@k to ``viridis``
on [0, 1] always, and runs take the ``tab10`` colours in the order given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from passkt.eval.estimator import Surface
from passkt.eval.stats import BoundaryComparison, Comparison, SurfaceCI, Venn

__all__ = [
    "figure_boundary_venn",
    "figure_gap",
    "figure_pass_curves",
    "figure_surface_heatmap",
    "plot_boundary_venn",
    "plot_gap",
    "plot_pass_curves",
    "plot_surface_heatmap",
]

HEATMAP_CMAP = "viridis"
RUN_COLORS = colormaps["tab10"].colors
_DPI = 150
_IMAGE_SUFFIXES = (".png", ".svg", ".pdf", ".jpg")

RunInput = Surface | tuple[Surface, SurfaceCI | None]


def _output_paths(path: str | Path) -> tuple[Path, Path]:
    """``fig.png`` and ``fig.svg`` for ``fig``, ``fig.png`` or ``fig.svg``."""
    path = Path(path)
    base = path.with_suffix("") if path.suffix.lower() in _IMAGE_SUFFIXES else path
    return base.with_name(base.name + ".png"), base.with_name(base.name + ".svg")


def save_figure(fig: Figure, path: str | Path) -> tuple[Path, Path]:
    """Write ``fig`` as PNG and SVG (parents created); returns ``(png_path, svg_path)``."""
    png, svg = _output_paths(path)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(svg, bbox_inches="tight", metadata={"Date": None})
    return png, svg


def _new_figure(width: float, height: float, **kwargs: object) -> Figure:
    fig = Figure(figsize=(width, height), **kwargs)
    FigureCanvasAgg(fig)
    return fig


DENSE_KS = 12
"""A k grid with more points than this is drawn as a line without markers, ticked at powers of
two (e.g. k = 1..64)."""


def _marker(ks: Sequence[int]) -> str | None:
    return "o" if len(ks) <= DENSE_KS else None


def _log2_k_axis(ax, ks: Sequence[int]) -> None:
    ks = sorted(set(ks))
    lo, hi = ks[0], ks[-1]
    if len(ks) > DENSE_KS:
        ks = [k for k in ks if k & (k - 1) == 0 or k == hi]
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlim(lo / 1.25, hi * 1.25) if hi > lo else ax.set_xlim(lo / 2, lo * 2)
    if len(ks) > 8:
        ax.tick_params(axis="x", labelsize=7, labelrotation=45)


def _grid_shape(panels: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(panels, max_cols)
    return (panels + cols - 1) // cols, cols


def _label_panels(axes: Sequence, used: int, cols: int, ylabel: str) -> None:
    """Hide unused panels; y label on the left column; x ticks and label on every panel that
    has no panel below it (with shared x, matplotlib would hide them above an empty slot)."""
    for ax in axes[used:]:
        ax.set_visible(False)
    for i, ax in enumerate(axes[:used]):
        if i % cols == 0:
            ax.set_ylabel(ylabel)
        if i + cols >= used:
            ax.set_xlabel("k (log2 scale)")
            ax.xaxis.set_tick_params(labelbottom=True)


# ---------------------------------------------------------------------- heatmap


def figure_surface_heatmap(surf: Surface, digits: int = 2, title: str | None = None) -> Figure:
    """The PASS@(k,T) heatmap: k on x (1, 2, 4, ...), T on y, annotated cells, fixed [0, 1] scale.

    A dense k grid (more than :data:`DENSE_KS` points, e.g. k = 1..64) shows its powers of two
    and its largest k, as the Markdown tables do; the pass curves show every k.

    Args:
        surf: The surface to draw.
        digits: Decimals of the cell annotations.
        title: Figure title; default names the run, problems and n.
    """
    ks = list(surf.ks)
    columns = [
        i for i, k in enumerate(ks) if len(ks) <= DENSE_KS or k & (k - 1) == 0 or k == ks[-1]
    ]
    shown = [ks[i] for i in columns]
    num_k, num_t = len(shown), len(surf.budgets)
    fig = _new_figure(1.6 + 0.72 * num_k, 1.5 + 0.5 * max(num_t, 2), layout="constrained")
    ax = fig.add_subplot()
    cmap, norm = colormaps[HEATMAP_CMAP], Normalize(0.0, 1.0)
    data = surf.values[columns].T  # (T, K): rows are budgets
    image = ax.imshow(data, cmap=cmap, norm=norm, origin="lower", aspect="auto")
    fontsize = 9 if num_k <= 8 else 7
    for j in range(num_t):
        for i in range(num_k):
            value = float(data[j, i])
            r, g, b, _ = cmap(norm(value))
            luminance = 0.299 * r + 0.587 * g + 0.114 * b
            ax.text(
                i,
                j,
                f"{value:.{digits}f}",
                ha="center",
                va="center",
                fontsize=fontsize,
                color="black" if luminance > 0.5 else "white",
            )
    ax.set_xticks(range(num_k), [str(k) for k in shown])
    ax.set_yticks(range(num_t), [str(t) for t in surf.budgets])
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("T (max tool calls)")
    ax.set_title(
        title or f"{surf.title}: {surf.name}  ({surf.num_tasks} problems, n = {surf.n})",
        fontsize=10,
    )
    colorbar = fig.colorbar(image, ax=ax, fraction=0.06, pad=0.03)
    colorbar.set_label(f"{surf.metric} (mean over problems)")
    return fig


def plot_surface_heatmap(
    surf: Surface, path: str | Path, digits: int = 2, title: str | None = None
) -> tuple[Path, Path]:
    """Draw :func:`figure_surface_heatmap` and write it as PNG and SVG; returns both paths."""
    return save_figure(figure_surface_heatmap(surf, digits, title), path)


# ---------------------------------------------------------------------- pass curves


def _unpack_runs(runs: Mapping[str, RunInput]) -> list[tuple[str, Surface, SurfaceCI | None]]:
    if not runs:
        raise ValueError("plot_pass_curves needs at least one run")
    out = []
    for name, run in runs.items():
        surf, ci = (run, None) if isinstance(run, Surface) else run
        if ci is not None and (ci.ks != surf.ks or ci.budgets != surf.budgets):
            raise ValueError(f"run {name!r}: CI grid does not match its surface grid")
        out.append((str(name), surf, ci))
    return out


def figure_pass_curves(
    runs: Mapping[str, RunInput],
    budgets: Sequence[int] | None = None,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """pass@k (or pass^k) against k (log2 axis), one panel per T, one colour per run, CI bands
    shaded. Every run's surface holds the same metric.

    Args:
        runs: Run name -> ``(Surface, SurfaceCI or None)`` (or just a ``Surface``).
        budgets: Budgets to draw (one panel each); default every budget of any run.
        title: Figure title.
        colors: Run name -> a matplotlib colour (e.g. shades of one hue for the seeds of one
            method); runs not named get the default cycle.
    """
    unpacked = _unpack_runs(runs)
    metrics = {s.metric for _, s, _ in unpacked}
    if len(metrics) > 1:
        raise ValueError(f"the runs' surfaces hold different metrics {sorted(metrics)}; draw one")
    metric = metrics.pop()
    all_budgets = sorted({t for _, s, _ in unpacked for t in s.budgets})
    budgets = all_budgets if budgets is None else sorted(set(budgets))
    missing = [t for t in budgets if t not in all_budgets]
    if missing or not budgets:
        raise ValueError(f"budgets {missing or budgets} are not in any run ({all_budgets})")
    rows, cols = _grid_shape(len(budgets))
    fig = _new_figure(0.6 + 3.3 * cols, 0.9 + 2.8 * rows, layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    all_ks = sorted({k for _, s, _ in unpacked for k in s.ks})
    for ax, t in zip(axes, budgets, strict=False):
        for r, (name, surf, ci) in enumerate(unpacked):
            if t not in surf.budgets:
                continue
            j = surf.budgets.index(t)
            color = (colors or {}).get(name, RUN_COLORS[r % len(RUN_COLORS)])
            ax.plot(
                surf.ks, surf.values[:, j], marker=_marker(surf.ks), ms=3.5, color=color, label=name
            )
            if ci is not None:
                ax.fill_between(surf.ks, ci.lower[:, j], ci.upper[:, j], color=color, alpha=0.2)
        ax.set_title(f"T = {t}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0, 1.02)
        _log2_k_axis(ax, all_ks)
    _label_panels(axes, len(budgets), cols, metric)
    handles, labels = axes[0].get_legend_handles_labels()
    if not handles:  # the first panel's T may be missing from some runs
        handles, labels = _run_handles(axes, len(budgets))
    fig.legend(handles, labels, loc="outside lower center", ncols=min(len(labels), 6))
    levels = sorted({ci.level for _, _, ci in unpacked if ci is not None})
    shaded = f" (shaded: {'/'.join(f'{lv:.0%}' for lv in levels)} CI)" if levels else ""
    fig.suptitle(title or f"{metric} vs k per tool-call budget T{shaded}", fontsize=11)
    return fig


def _run_handles(axes: Sequence, count: int) -> tuple[list, list[str]]:
    seen: dict[str, object] = {}
    for ax in axes[:count]:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    return list(seen.values()), list(seen)


def plot_pass_curves(
    runs: Mapping[str, RunInput],
    path: str | Path,
    budgets: Sequence[int] | None = None,
    title: str | None = None,
    colors: Mapping[str, str] | None = None,
) -> tuple[Path, Path]:
    """Draw :func:`figure_pass_curves` and write it as PNG and SVG; returns both paths."""
    return save_figure(figure_pass_curves(runs, budgets, title, colors), path)


# ---------------------------------------------------------------------- gap curves


def figure_gap(
    cmp: Comparison, budgets: Sequence[int] | None = None, title: str | None = None
) -> Figure:
    """Gap ``pass@k(b) - pass@k(a)`` against k, one panel per T, CI band, zero line, crossover.

    Args:
        cmp: A :class:`Comparison` from :func:`passkt.eval.stats.compare`.
        budgets: Budgets to draw; default all compared budgets.
        title: Figure title.
    """
    budgets = list(cmp.budgets) if budgets is None else sorted(set(budgets))
    cols_idx = [cmp.budget_index(t) for t in budgets]
    rows, cols = _grid_shape(len(budgets))
    fig = _new_figure(0.6 + 3.3 * cols, 0.9 + 2.8 * rows, layout="constrained")
    axes = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False).ravel()
    bound = float(np.nanmax(np.abs([cmp.gap_lower[:, cols_idx], cmp.gap_upper[:, cols_idx]])))
    bound = max(bound * 1.15, 0.02)
    for ax, t, j in zip(axes, budgets, cols_idx, strict=False):
        ax.axhline(0.0, color="black", lw=0.8)
        ax.fill_between(
            cmp.ks,
            cmp.gap_lower[:, j],
            cmp.gap_upper[:, j],
            color="C0",
            alpha=0.25,
            label=f"{cmp.level:.0%} paired CI",
        )
        ax.plot(cmp.ks, cmp.gap[:, j], marker=_marker(cmp.ks), ms=3.5, color="C0", label="gap")
        cross = cmp.crossovers[j]
        if cross.k is not None:
            ax.axvline(cross.k, color="C3", ls="--", lw=1.0, label="crossover")
            # Label at the top of the panel, clear of the curve and its band.
            ax.annotate(
                f"k ≈ {cross.k:.1f}" + ("" if cross.significant else " (n.s.)"),
                (cross.k, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(4, -4),
                textcoords="offset points",
                ha="left",
                va="top",
                color="C3",
                fontsize=8,
                bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none"},
            )
        verdict = "widens" if cmp.widens[j] else "does not widen"
        ax.set_title(f"T = {t}  (gap {verdict})", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(-bound, bound)
        _log2_k_axis(ax, cmp.ks)
    _label_panels(axes, len(budgets), cols, f"pass@k({cmp.name_b}) − pass@k({cmp.name_a})")
    handles, labels = _run_handles(axes, len(budgets))
    fig.legend(handles, labels, loc="outside lower center", ncols=len(labels))
    fig.suptitle(
        title
        or f"Gap {cmp.name_b} − {cmp.name_a} on {len(cmp.task_ids)} shared problems "
        f"(above 0: {cmp.name_b} better)",
        fontsize=11,
    )
    return fig


def plot_gap(
    cmp: Comparison,
    path: str | Path,
    budgets: Sequence[int] | None = None,
    title: str | None = None,
) -> tuple[Path, Path]:
    """Draw :func:`figure_gap` and write it as PNG and SVG; returns both paths."""
    return save_figure(figure_gap(cmp, budgets, title), path)


# ---------------------------------------------------------------------- boundary sets


def _venn_of(bc: BoundaryComparison) -> Venn:
    regions = {
        (True, True): bc.both,
        (True, False): bc.only_a,
        (False, True): bc.only_b,
        (False, False): bc.neither,
    }
    universe = (*bc.both, *bc.only_a, *bc.only_b, *bc.neither)
    return Venn(bc.budget, (bc.name_a, bc.name_b), universe, regions)


def figure_boundary_venn(v: Venn | BoundaryComparison, title: str | None = None) -> Figure:
    """Horizontal bars of the boundary-set regions (e.g. base only / both / rl only / none).

    Single-run regions take that run's colour (the same as in the pass-curves); shared regions
    are grey, the "none" region light grey.
    """
    v = _venn_of(v) if isinstance(v, BoundaryComparison) else v
    patterns = list(v.regions)
    labels = [v.label(p) for p in patterns]
    counts = [len(v.regions[p]) for p in patterns]
    colors = []
    for p in patterns:
        if sum(p) == 1:
            colors.append(RUN_COLORS[p.index(True) % len(RUN_COLORS)])
        else:
            colors.append("0.55" if any(p) else "0.82")
    fig = _new_figure(6.0, 0.9 + 0.42 * len(patterns), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(patterns))[::-1]
    bars = ax.barh(y, counts, color=colors)
    ax.bar_label(bars, labels=[str(c) for c in counts], padding=3, fontsize=9)
    ax.set_yticks(y, labels)
    ax.set_xlim(0, max(max(counts), 1) * 1.15)
    ax.set_xlabel("problems")
    sizes = ", ".join(
        f"{name} {sum(len(ids) for p, ids in v.regions.items() if p[r])}"
        for r, name in enumerate(v.names)
    )
    ax.set_title(
        title or f"Boundary sets at T = {v.budget} ({len(v.task_ids)} problems; solved: {sizes})",
        fontsize=10,
    )
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def plot_boundary_venn(
    v: Venn | BoundaryComparison, path: str | Path, title: str | None = None
) -> tuple[Path, Path]:
    """Draw :func:`figure_boundary_venn` and write it as PNG and SVG; returns both paths."""
    return save_figure(figure_boundary_venn(v, title), path)
