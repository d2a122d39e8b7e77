"""Strategy diversity: how many different search strategies a policy samples for one problem.

A trajectory's strategy is its **query sequence**: the queries of its search actions, in order,
each normalized by :func:`normalize_query`. A trajectory that answers without searching has the
empty sequence, which counts as one strategy. Queries are read from the stored transcript with the
env's own parser (:func:`passkt.envs.protocol.parse_action`), so invalid turns are not searches.

- **Diversity** of a run at budget T: for each problem, the number of distinct query sequences
  among its n samples; averaged over problems (the study: base 40.1, RL 45.5, SFT 14.7 of
  n = 64), with a bootstrap CI over problems and the per-problem distribution.
- **Overlap** of two runs on their shared problems: the Jaccard index of the two sets of query
  sequences of each problem, averaged over problems; and the share of run B's samples whose query
  sequence also occurs among run A's samples of the same problem (and the reverse).

Query normalization (:func:`normalize_query`): Unicode NFKC, case folding, every punctuation
character (Unicode category P*) replaced by a space, whitespace collapsed. Unlike HotpotQA's
``normalize_answer`` it keeps articles: ``the founder of X`` and ``founder of X`` are different
queries (BM25 sees different text), while ``Alder-Vale founder`` and ``alder vale  founder`` are
the same.
"""

from __future__ import annotations

import unicodedata
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from passkt.envs.protocol import parse_action
from passkt.eval.analysis.common import (
    as_record,
    bootstrap_ratio,
    fmt,
    load_records,
    markdown_table,
)
from passkt.eval.outcomes import Record

__all__ = [
    "Diversity",
    "QueryOverlap",
    "diversity_markdown",
    "normalize_query",
    "query_overlap",
    "query_sequence",
    "query_sequences",
    "run_diversity",
    "strategy_diversity",
]

QuerySequence = tuple[str, ...]


def normalize_query(text: str) -> str:
    """NFKC, case-folded, punctuation replaced by spaces, whitespace collapsed.

    Example: ``normalize_query("  Alder-Vale   FOUNDER? ")`` is ``"alder vale founder"``.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch).startswith("P") else ch for ch in text)
    return " ".join(text.split())


def query_sequence(messages: Sequence[Mapping[str, str]]) -> QuerySequence:
    """The normalized queries of a transcript's search actions, in order."""
    queries = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        action = parse_action(message.get("content", ""))
        if action.kind == "search":
            queries.append(normalize_query(action.content))
    return tuple(queries)


def query_sequences(
    trajectories: Sequence[Any], budget: int | None = None
) -> dict[str, list[QuerySequence]]:
    """Task id -> the query sequences of its trajectories (in input order).

    Args:
        trajectories: Result records (dicts with ``task_id`` and ``messages``) or ``Episode`` s.
        budget: Keep only trajectories run under this T. Without it, all trajectories must share
            one T (mixing budgets would count a sample several times).

    Raises:
        ValueError: for records without ``task_id``, mixed budgets, or nothing left.
    """
    records = [as_record(t, i) for i, t in enumerate(trajectories)]
    if budget is not None:
        records = [r for r in records if r.get("budget") == budget]
    else:
        budgets = sorted({r.get("budget") for r in records}, key=str)
        if len(budgets) > 1:
            raise ValueError(
                f"the trajectories were run under several budgets {budgets}; pass budget=T "
                "to count each sample once"
            )
    if not records:
        raise ValueError(f"no trajectories{f' at T={budget}' if budget is not None else ''}")
    out: dict[str, list[QuerySequence]] = defaultdict(list)
    for i, record in enumerate(records):
        if "task_id" not in record:
            raise ValueError(f"trajectory {i}: no 'task_id'; diversity is counted per problem")
        out[str(record["task_id"])].append(query_sequence(record["messages"]))
    return dict(out)


# ---------------------------------------------------------------------- diversity of one run


@dataclass(frozen=True)
class Diversity(Record):
    """Unique query sequences per problem of one run at one budget.

    Attributes:
        name: Run name.
        budget: The T (None when not known).
        task_ids: The problems.
        samples: Trajectories per problem (n).
        unique: Distinct query sequences per problem.
        mean_unique: ``unique`` averaged over problems.
        lower: Lower bootstrap bound of ``mean_unique`` (problems resampled).
        upper: Upper bootstrap bound.
        level: Confidence level.
        n_boot: Bootstrap resamples.
        mean_searches: Searches per trajectory, averaged over all trajectories.
    """

    name: str
    budget: int | None
    task_ids: tuple[str, ...]
    samples: tuple[int, ...]
    unique: tuple[int, ...]
    mean_unique: float
    lower: float
    upper: float
    level: float
    n_boot: int
    mean_searches: float

    @property
    def n(self) -> int:
        """The most samples any problem has (the run's n)."""
        return max(self.samples)

    def histogram(self) -> dict[int, int]:
        """Distinct sequences -> number of problems with that many, sorted."""
        return dict(sorted(Counter(self.unique).items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, with the histogram (keys as strings, JSON's only key type)."""
        histogram = {str(k): v for k, v in self.histogram().items()}
        return {**super().to_dict(), "n": self.n, "histogram": histogram}


def strategy_diversity(
    trajectories: Sequence[Any],
    *,
    name: str = "run",
    budget: int | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
) -> Diversity:
    """Distinct query sequences per problem, averaged over problems.

    Args:
        trajectories: Result records or ``Episode`` s (all samples, successful or not).
        name: Run name for reports.
        budget: Use only trajectories run under this T (see :func:`query_sequences`).
        n_boot: Bootstrap resamples over problems.
        level: Confidence level.
        seed: Seed of the resampling.
    """
    sequences = query_sequences(trajectories, budget)
    tasks = tuple(sequences)
    unique = np.array([len(set(sequences[t])) for t in tasks], dtype=np.float64)
    lower, upper = bootstrap_ratio(
        unique[:, None], np.ones((len(tasks), 1)), n_boot=n_boot, level=level, seed=seed
    )
    searches = [len(s) for t in tasks for s in sequences[t]]
    if budget is None:
        found = {as_record(t, i).get("budget") for i, t in enumerate(trajectories)}
        budget = next(iter(found)) if len(found) == 1 else None
    return Diversity(
        name=name,
        budget=None if budget is None else int(budget),
        task_ids=tasks,
        samples=tuple(len(sequences[t]) for t in tasks),
        unique=tuple(int(u) for u in unique),
        mean_unique=float(unique.mean()),
        lower=float(lower[0]),
        upper=float(upper[0]),
        level=float(level),
        n_boot=int(n_boot),
        mean_searches=float(np.mean(searches)),
    )


# ---------------------------------------------------------------------- overlap of two runs


@dataclass(frozen=True)
class QueryOverlap(Record):
    """How much two runs' query sequences overlap, problem by problem.

    Attributes:
        name_a: Reference run (e.g. the base model).
        name_b: The other run (e.g. RL).
        budget: The T (None when not known).
        task_ids: Problems both runs have.
        jaccard: Per problem, ``|A & B| / |A | B|`` of the two sets of query sequences.
        mean_jaccard: ``jaccard`` averaged over problems.
        share_b_in_a: Of all of B's samples, the fraction whose query sequence occurs among A's
            samples of the same problem.
        share_a_in_b: The same with A and B swapped.
        excluded: Problems only one of the runs has (left out).
    """

    name_a: str
    name_b: str
    budget: int | None
    task_ids: tuple[str, ...]
    jaccard: tuple[float, ...]
    mean_jaccard: float
    share_b_in_a: float
    share_a_in_b: float
    excluded: tuple[str, ...] = ()


def _covered(samples: Sequence[QuerySequence], reference: Sequence[QuerySequence]) -> int:
    known = set(reference)
    return sum(s in known for s in samples)


def query_overlap(
    a: Sequence[Any],
    b: Sequence[Any],
    *,
    name_a: str = "a",
    name_b: str = "b",
    budget: int | None = None,
) -> QueryOverlap:
    """Overlap of the query sequences of runs ``a`` (reference) and ``b`` on shared problems.

    Args:
        a: Trajectories (records or ``Episode`` s) of the reference run.
        b: Trajectories of the other run.
        name_a: Name of ``a``.
        name_b: Name of ``b``.
        budget: Use only trajectories run under this T.

    Raises:
        ValueError: when the runs share no problem.
    """
    seq_a, seq_b = query_sequences(a, budget), query_sequences(b, budget)
    shared = tuple(t for t in seq_a if t in seq_b)
    if not shared:
        raise ValueError(f"runs {name_a!r} and {name_b!r} share no task ids")
    excluded = tuple(t for t in (*seq_a, *seq_b) if t not in shared)
    jaccard = []
    for task in shared:
        set_a, set_b = set(seq_a[task]), set(seq_b[task])
        jaccard.append(len(set_a & set_b) / len(set_a | set_b))
    b_total = sum(len(seq_b[t]) for t in shared)
    a_total = sum(len(seq_a[t]) for t in shared)
    return QueryOverlap(
        name_a=name_a,
        name_b=name_b,
        budget=budget,
        task_ids=shared,
        jaccard=tuple(jaccard),
        mean_jaccard=float(np.mean(jaccard)),
        share_b_in_a=sum(_covered(seq_b[t], seq_a[t]) for t in shared) / b_total,
        share_a_in_b=sum(_covered(seq_a[t], seq_b[t]) for t in shared) / a_total,
        excluded=tuple(dict.fromkeys(excluded)),
    )


# ---------------------------------------------------------------------- report


def diversity_markdown(
    diversities: Sequence[Diversity], overlaps: Sequence[QueryOverlap] = ()
) -> str:
    """Markdown: one row per run (mean distinct sequences, CI, distribution), then overlaps."""
    if not diversities:
        raise ValueError("no diversity results to report")
    level = round(100 * diversities[0].level)
    rows = []
    for d in diversities:
        spread = np.percentile(d.unique, [0, 25, 50, 75, 100])
        rows.append(
            [
                d.name,
                "-" if d.budget is None else str(d.budget),
                str(len(d.task_ids)),
                str(d.n),
                fmt(d.mean_unique),
                f"[{fmt(d.lower)}, {fmt(d.upper)}]",
                " / ".join(f"{v:g}" for v in spread),
                fmt(d.mean_searches),
            ]
        )
    header = ["run", "T", "problems", "n", "unique sequences", f"{level}% CI"]
    header += ["min / q1 / median / q3 / max", "searches per sample"]
    text = (
        "Strategy diversity: distinct search-query sequences among the n samples of a problem, "
        "averaged over problems\n\n" + markdown_table(header, rows)
    )
    if overlaps:
        rows = [
            [
                f"{o.name_b} vs {o.name_a}",
                str(len(o.task_ids)),
                fmt(o.mean_jaccard, 3),
                fmt(o.share_b_in_a, 3),
                fmt(o.share_a_in_b, 3),
            ]
            for o in overlaps
        ]
        header = ["runs (B vs A)", "problems", "mean Jaccard", "B samples in A", "A samples in B"]
        text += (
            "\nOverlap of query sequences per problem (Jaccard of the sets; share of one run's "
            "samples whose sequence the other run also sampled)\n\n" + markdown_table(header, rows)
        )
    return text


def run_diversity(
    run_dir: str | Path,
    budget: int | None = None,
    *,
    name: str | None = None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    partial: bool = False,
) -> Diversity:
    """:func:`strategy_diversity` of a run directory at ``budget`` (default: its largest T)."""
    run = load_records(run_dir, budget, partial=partial)
    return strategy_diversity(
        run.records,
        name=name or run.name,
        budget=run.budget,
        n_boot=n_boot,
        level=level,
        seed=seed,
    )
