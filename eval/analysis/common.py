"""Helpers the analyses share: the trajectories of a run at one budget, Markdown tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from passkt.eval.stats import bootstrap_means
from passkt.eval.store import RunDirError, read_run
from passkt.eval.transcripts import attach_transcripts

__all__ = [
    "RunRecords",
    "as_record",
    "bootstrap_ratio",
    "fmt",
    "load_records",
    "load_runs",
    "markdown_table",
]


@dataclass(frozen=True)
class RunRecords:
    """The result records of one run at one budget T.

    Attributes:
        run_dir: The run directory.
        name: Run name (the manifest's ``name``, else the directory name).
        manifest: The run's manifest.
        budget: The T the records were run under.
        records: One record per (task, sample) at ``budget``, in file order.
    """

    run_dir: Path
    name: str
    manifest: Mapping[str, Any]
    budget: int
    records: tuple[dict[str, Any], ...]


def load_records(
    run_dir: str | Path, budget: int | None = None, *, partial: bool = False
) -> RunRecords:
    """The records of ``run_dir`` at budget ``budget`` (default: the largest evaluated T).

    Args:
        run_dir: A run directory written by ``passkt eval`` / ``evaluate(out_dir=...)``.
        budget: The T to read; must be one of the run's budgets.
        partial: Accept an unfinished run and read its finished chunks.

    Raises:
        RunDirError: for a missing, corrupt or (without ``partial``) unfinished run, or a budget
            the run did not evaluate.
    """
    return load_runs([run_dir], budget, partial=partial)[0]


def load_runs(
    run_dirs: Sequence[str | Path], budget: int | None = None, *, partial: bool = False
) -> list[RunRecords]:
    """The records of several runs at one budget (default: the largest T they all evaluated).

    Raises:
        RunDirError: as :func:`load_records`, or when the runs share no budget.
    """
    if not run_dirs:
        raise ValueError("no run directories given")
    contents = []
    for run_dir in run_dirs:
        directory = Path(run_dir)
        content = read_run(directory)
        manifest = content.manifest
        if not content.complete and not partial:
            raise RunDirError(
                f"{directory}: the run is unfinished ({len(content.finished_chunks)} of "
                f"{manifest['num_chunks']} chunks); finish it with `passkt eval --resume`, or "
                "analyze the finished part with partial=True (--partial)"
            )
        contents.append((directory, content))
    grids = [{int(b) for b in c.manifest["budgets"]} for _, c in contents]
    shared = sorted(set.intersection(*grids))
    if budget is None and not shared:
        listed = {str(d): sorted(g) for (d, _), g in zip(contents, grids, strict=True)}
        raise RunDirError(f"the runs share no budget T: {listed}")
    chosen = shared[-1] if budget is None else int(budget)
    out = []
    for (directory, content), grid in zip(contents, grids, strict=True):
        if chosen not in grid:
            hint = f"budgets all runs share: {shared}" if len(contents) > 1 else "pass one of them"
            raise RunDirError(
                f"{directory}: the run has no budget T={chosen}; evaluated budgets: "
                f"{sorted(grid)} ({hint} with --budget)"
            )
        records = tuple(r for r in content.records if int(r["budget"]) == chosen)
        records = attach_transcripts(directory, records)  # messages live in their own file
        if not records:
            raise RunDirError(f"{directory}: no finished records at T={chosen}; nothing to analyze")
        name = str(content.manifest.get("name") or directory.resolve().name)
        out.append(RunRecords(directory, name, content.manifest, chosen, records))
    return out


def as_record(trajectory: Any, index: int) -> Mapping[str, Any]:
    """A result record (dict with ``messages``) from a record or an ``Episode``.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(trajectory, Mapping):
        record = trajectory
    elif hasattr(trajectory, "to_record"):
        record = trajectory.to_record()
    else:
        raise TypeError(
            f"trajectory {index}: expected a result record (dict with 'messages') or an Episode, "
            f"got {type(trajectory).__name__}"
        )
    if not isinstance(record.get("messages"), list):
        raise ValueError(
            f"trajectory {index} (task_id={record.get('task_id')!r}): no 'messages' list; "
            "analyses need the transcript that result files store"
        )
    return record


def bootstrap_ratio(
    numerators: np.ndarray,
    denominators: np.ndarray,
    *,
    n_boot: int,
    level: float,
    seed: int | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of ``sum(numerators) / sum(denominators)`` over resampled units.

    Args:
        numerators: ``(U, G)``: per unit (problem or trajectory), per statistic.
        denominators: ``(U, G)``: the matching weights (e.g. token counts).
        n_boot: Resamples.
        level: Confidence level in (0, 1).
        seed: Seed of the resampling.

    Returns:
        ``(lower, upper)``, each ``(G,)``; NaN where no resample has a positive denominator.
    """

    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), e.g. 0.95; got {level!r}")
    groups = numerators.shape[1]
    # The same resampled units for numerator and denominator: one call on the stacked columns.
    means = bootstrap_means(np.concatenate([numerators, denominators], axis=1), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = means[:, :groups] / means[:, groups:]  # (B, G)
    ratios[~np.isfinite(ratios)] = np.nan
    alpha = 1.0 - level
    lower = np.full(groups, np.nan)
    upper = np.full(groups, np.nan)
    for g in range(groups):
        column = ratios[:, g][~np.isnan(ratios[:, g])]
        if column.size:
            lower[g], upper[g] = np.quantile(column, [alpha / 2, 1 - alpha / 2])
    return lower, upper


def fmt(value: float | None, digits: int = 2) -> str:
    """A number for a table; ``-`` for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    """A Markdown table; ``align`` holds one ``l``/``r`` per column (default: first left)."""
    align = align or "l" + "r" * (len(header) - 1)
    rule = "|" + "|".join(":---" if a == "l" else "---:" for a in align) + "|"
    lines = ["| " + " | ".join(header) + " |", rule]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
