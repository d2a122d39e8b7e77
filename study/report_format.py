"""How the study report writes cells and figures: Markdown tables, numbers, spreads over seeds,
and figures shrunk to commit."""

from __future__ import annotations

import math
import shutil
import statistics
from pathlib import Path

from PIL import Image

__all__ = ["REPORT_WIDTH", "compact_png", "copy_figure", "markdown_table", "num", "spread"]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of already formatted cells (the study report's and the sweep's)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def num(value: float | None, digits: int = 3) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def spread(values: list[float | None], digits: int = 3, signs: bool = False) -> str:
    """``mean ± sd [min, max]`` over seeds (the value itself for one seed).

    ``digits=0`` marks counts: a single value is printed as an integer, a mean with one digit.
    """
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "-"
    if len(values) == 1:
        text = num(values[0], digits)
    elif digits == 0:
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        text = f"{mean:.1f} ± {sd:.1f} [{min(values):g}, {max(values):g}]"
    else:
        mean, sd = statistics.fmean(values), statistics.stdev(values)
        text = f"{mean:.{digits}f} ± {sd:.{digits}f} [{min(values):.{digits}f}, "
        text += f"{max(values):.{digits}f}]"
    if signs:
        text += f" ({sum(v > 0 for v in values)}/{len(values)} > 0)"
    return text


REPORT_WIDTH = 1400
"""Widest figure in ``report/figures`` (pixels): the full-size ones stay in ``compare/``."""


def compact_png(path: Path, width: int = REPORT_WIDTH) -> None:
    """Shrink a figure in place to at most ``width`` pixels wide, with a 256-colour palette,
    so a report folder (75 figures for three categories and seeds) stays small enough to commit.
    """

    with Image.open(path) as image:
        image.load()
    if image.width > width:
        height = max(1, round(image.height * width / image.width))
        image = image.resize((width, height), Image.Resampling.LANCZOS)
    image = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    image.save(path, optimize=True)


def copy_figure(source: Path, target: Path, report_dir: Path) -> str:
    """Copy a figure into ``report/figures``; return its link relative to ``report.md``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target.relative_to(report_dir).as_posix()
