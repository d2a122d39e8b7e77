"""Tests of the figures: content inspected before saving, then the PNG/SVG files checked."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from matplotlib.collections import PolyCollection

from passkt.eval.estimator import Surface, surface
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.plots import (
    figure_boundary_venn,
    figure_gap,
    figure_pass_curves,
    figure_surface_heatmap,
    plot_boundary_venn,
    plot_gap,
    plot_pass_curves,
    plot_surface_heatmap,
)
from passkt.eval.stats import SurfaceCI, bootstrap_surface, compare, venn

BUDGETS = (0, 1, 2, 3, 5)


def _run(name: str, probs: np.ndarray, seed: int, n: int = 16) -> OutcomeTable:
    rng = np.random.default_rng(seed)
    depth_gain = np.linspace(0.4, 1.0, len(BUDGETS))  # deeper budgets help
    p = probs[:, None, None] * depth_gain[None, None, :]
    correct = rng.random((len(probs), n, len(BUDGETS))) < p
    return OutcomeTable(tuple(f"t{i:02d}" for i in range(len(probs))), BUDGETS, correct, name=name)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[OutcomeTable, Surface, SurfaceCI]]:
    idx = np.arange(40)
    tables = [
        _run("base", np.where(idx < 16, 0.9, 0.0), 1),
        _run("rl", np.where(idx < 32, 0.2, 0.0), 2),
        _run("sft", np.where(idx < 12, 0.95, 0.0), 3),
    ]
    out = {}
    for t in tables:
        surf = surface(t)
        out[t.name] = (t, surf, bootstrap_surface(surf, n_boot=200))
    return out


def _check_files(paths: tuple[Path, Path]) -> None:
    png, svg = paths
    assert png.suffix == ".png" and svg.suffix == ".svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 5_000
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg")


def test_heatmap_annotations_equal_rounded_values(runs: dict) -> None:
    _, surf, _ = runs["base"]
    fig = figure_surface_heatmap(surf)
    ax, cbar_ax = fig.axes
    texts = [t.get_text() for t in ax.texts]
    expected = [
        f"{surf.values[i, j]:.2f}" for j in range(len(BUDGETS)) for i in range(len(surf.ks))
    ]
    assert texts == expected
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(k) for k in surf.ks]
    assert [t.get_text() for t in ax.get_yticklabels()] == [str(t) for t in BUDGETS]
    image = ax.images[0]
    assert image.get_clim() == (0.0, 1.0)  # fixed scale: two runs' heatmaps compare
    assert image.get_cmap().name == "viridis"
    assert "pass@k" in cbar_ax.get_ylabel()
    assert "base" in ax.get_title() and ax.get_xlabel().startswith("k")


def test_dense_heatmap_shows_powers_of_two(runs: dict) -> None:
    """k = 1..13 of n = 16: the columns are 1, 2, 4, 8 and 13, each annotated with its value."""
    table = runs["base"][0]
    dense = surface(table, tuple(range(1, 14)))
    ax = figure_surface_heatmap(dense).axes[0]
    shown = [1, 2, 4, 8, 13]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(k) for k in shown]
    expected = [f"{dense.value(k, t):.2f}" for t in BUDGETS for k in shown]
    assert [t.get_text() for t in ax.texts] == expected


def test_plot_heatmap_writes_png_and_svg(tmp_path: Path, runs: dict) -> None:
    paths = plot_surface_heatmap(runs["rl"][1], tmp_path / "figs" / "heatmap.png")
    assert paths == (tmp_path / "figs" / "heatmap.png", tmp_path / "figs" / "heatmap.svg")
    _check_files(paths)


def test_pass_curves_content_and_files(tmp_path: Path, runs: dict) -> None:
    selected = {name: (surf, ci) for name, (_, surf, ci) in runs.items()}
    fig = figure_pass_curves(selected)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"T = {t}" for t in BUDGETS]
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["base", "rl", "sft"]
    for ax in panels:
        assert len(ax.lines) == 3
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 3  # CI bands
        assert ax.get_xscale() == "log"
    np.testing.assert_allclose(panels[4].lines[1].get_ydata(), runs["rl"][1].values[:, 4])
    bottom = panels[-1]
    assert [t.get_text() for t in bottom.get_xticklabels()] == [str(k) for k in (1, 2, 4, 8, 16)]
    # T = 2 sits above an empty slot of the 2 x 3 grid: its k labels must still show.
    assert panels[2].xaxis.get_tick_params()["labelbottom"] and panels[2].get_xlabel()
    two = figure_pass_curves({"base": runs["base"][1]}, budgets=[1, 5])
    assert len([ax for ax in two.axes if ax.get_visible()]) == 2
    assert [t.get_text() for t in two.legends[0].get_texts()] == ["base"]
    _check_files(plot_pass_curves(selected, tmp_path / "curves", budgets=[0, 5]))
    with pytest.raises(ValueError, match=r"budgets \[4\] are not in any run"):
        figure_pass_curves(selected, budgets=[4])


def test_dense_k_grids_are_ticked_at_powers_of_two_without_markers(runs: dict) -> None:
    table = runs["base"][0]
    dense = surface(table, tuple(range(1, 17)))  # every k: 16 points per curve
    fig = figure_pass_curves({"base": dense}, budgets=[5])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4", "8", "16"]
    (line,) = ax.lines
    assert list(line.get_xdata()) == list(range(1, 17)) and line.get_marker() in (None, "None")
    colored = figure_pass_curves(
        {"base": dense, "rl": runs["rl"][1]}, budgets=[5], colors={"rl": "#e6550d"}
    )
    base_line, rl_line = next(a for a in colored.axes if a.get_visible()).lines
    assert matplotlib.colors.to_hex(rl_line.get_color()) == "#e6550d"  # as asked
    assert matplotlib.colors.to_hex(base_line.get_color()) != "#e6550d"  # the default cycle
    sparse = figure_pass_curves({"base": runs["base"][1]}, budgets=[5])
    assert next(a for a in sparse.axes if a.get_visible()).lines[0].get_marker() == "o"


def test_gap_plot_marks_zero_and_crossover(tmp_path: Path, runs: dict) -> None:
    cmp = compare(runs["base"][0], runs["rl"][0], n_boot=200)
    fig = figure_gap(cmp)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == len(BUDGETS)
    crossed = 0
    for ax, cross, widens in zip(panels, cmp.crossovers, cmp.widens, strict=True):
        assert any(tuple(line.get_ydata()) == (0, 0) for line in ax.lines)  # zero line
        vertical = [line for line in ax.lines if len(set(line.get_xdata())) == 1]
        if cross.k is None:
            assert not vertical
        else:
            crossed += 1
            assert vertical[0].get_xdata()[0] == pytest.approx(cross.k)
            label = next(t.get_text() for t in ax.texts if f"{cross.k:.1f}" in t.get_text())
            assert label.endswith("(n.s.)") != cross.significant
        assert ("does not widen" in ax.get_title()) != widens
    assert crossed >= 3  # the fixture is built to cross
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["95% paired CI", "gap", "crossover"]
    _check_files(plot_gap(cmp, tmp_path / "gap.svg"))


def test_boundary_bars(tmp_path: Path, runs: dict) -> None:
    tables = [runs[name][0] for name in ("base", "rl", "sft")]
    v = venn(tables, 5)
    fig = figure_boundary_venn(v)
    ax = fig.axes[0]
    heights = [int(p.get_width()) for p in ax.patches]
    assert heights == list(v.counts().values())
    assert [t.get_text() for t in ax.get_yticklabels()] == list(v.counts())  # top to bottom
    _check_files(plot_boundary_venn(v, tmp_path / "venn"))


def test_no_pyplot_state_leaks(tmp_path: Path, runs: dict) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plot_surface_heatmap(runs["base"][1], tmp_path / "h")
    figure_pass_curves({"base": runs["base"][1]})
    assert plt.get_fignums() == before
    assert matplotlib.get_backend()  # untouched; figures used their own Agg canvas
