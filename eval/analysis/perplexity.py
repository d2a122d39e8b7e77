"""Segment perplexity: how surprising each part of a trajectory is to a scoring model.

The study scores the RL policy's successful trajectories under the base model and finds search
queries far less surprising than reasoning (perplexity 2.07 vs 3.08): RL re-weights strategies the
base model already had rather than inventing new text. This module reproduces that measurement for
any Hugging Face causal LM and any run directory.

Only assistant tokens are scored: the NLL of token i given tokens < i, from one batched, right-
padded forward pass per ``batch_size`` trajectories, without gradients, log-softmax in float32.
Prompts and observations are context. How trajectories become tokens, and how each assistant token
gets its segment (``query``, ``answer``, ``reasoning``, ``tag``), is in
:mod:`passkt.eval.analysis.segments`.

Aggregates. Per segment: tokens, mean NLL per token (total NLL / total tokens), perplexity
``exp(mean NLL)`` and a percentile bootstrap CI of both, resampling problems (default: samples of
one problem are correlated, and every other CI of the evaluator is over problems) or trajectories.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from passkt.agents.hf import HFPolicy
from passkt.eval.analysis.common import (
    as_record,
    bootstrap_ratio,
    fmt,
    load_records,
    markdown_table,
)
from passkt.eval.analysis.segments import ALL, SEGMENTS, TrajectoryTokens, trajectory_tokens
from passkt.eval.outcomes import Record

__all__ = [
    "ALL",
    "SEGMENTS",
    "SegmentPerplexity",
    "SegmentStats",
    "TrajectoryScore",
    "load_scorer",
    "run_perplexity",
    "score_trajectories",
    "segment_perplexity",
    "summarize_scores",
]

logger = logging.getLogger(__name__)

CiUnit = Literal["problem", "trajectory"]
"""What the bootstrap resamples."""


# ---------------------------------------------------------------------- scoring


@dataclass(frozen=True)
class TrajectoryScore(Record):
    """Per-token NLL of one trajectory's assistant tokens under a scoring model.

    Attributes:
        task_id: The problem (``trajectory-<i>`` when the record has none).
        sample: Sample index (-1 when unknown).
        budget: The T it ran under (-1 when unknown).
        correct: Whether it succeeded (None when unknown).
        token_nll: ``-log p(token | prefix)`` of every assistant token, in order (nats).
        token_segments: The segment of each of those tokens.
    """

    task_id: str
    sample: int
    budget: int
    correct: bool | None
    token_nll: tuple[float, ...]
    token_segments: tuple[str, ...]

    def totals(self) -> dict[str, tuple[float, int]]:
        """Segment (and ``all``) -> (total NLL, tokens)."""
        out = {segment: (0.0, 0) for segment in (*SEGMENTS, ALL)}
        for nll, segment in zip(self.token_nll, self.token_segments, strict=True):
            for key in (segment, ALL):
                total, count = out[key]
                out[key] = (total + nll, count + 1)
        return out


def _forward_options(model: Any) -> bool:
    """Whether the model's forward accepts ``logits_to_keep`` (skips logits of the prompt)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def _score_batch(
    model: Any, batch: Sequence[TrajectoryTokens], pad_id: int, keep_arg: bool
) -> list[list[float]]:
    """NLL of the scored tokens of each trajectory in one right-padded forward pass."""
    import torch  # optional: the hf extra (torch, transformers)

    device = next(model.parameters()).device
    width = max(len(t.token_ids) for t in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, tokens in enumerate(batch):
        input_ids[row, : len(tokens.token_ids)] = torch.tensor(tokens.token_ids)
        mask[row, : len(tokens.token_ids)] = 1
    positions = [t.scored_positions for t in batch]
    first = min((p[0] for p in positions if p), default=width)
    if first < 1:
        raise ValueError("a scored token sits at position 0: the transcript has no prompt")
    kwargs = {"logits_to_keep": width - (first - 1)} if keep_arg else {}
    logits = model(input_ids=input_ids.to(device), attention_mask=mask.to(device), **kwargs).logits
    offset = width - logits.shape[1]  # logits[:, j] predicts the token at offset + j + 1
    out = []
    for row, scored in enumerate(positions):
        if not scored:
            out.append([])
            continue
        index = torch.tensor(scored, device=logits.device)
        row_logits = logits[row, index - 1 - offset].float()  # (S, V)
        logprobs = torch.log_softmax(row_logits, dim=-1)
        targets = input_ids[row, index.cpu()].to(logits.device)  # (S,)
        out.append((-logprobs.gather(-1, targets[:, None]).squeeze(-1)).cpu().tolist())
    return out


def score_trajectories(
    model: Any, tokenizer: Any, trajectories: Sequence[Any], batch_size: int = 8
) -> list[TrajectoryScore]:
    """Per-token NLL of the assistant tokens of each trajectory under ``model``.

    Args:
        model: A causal LM (``PreTrainedModel`` or a peft wrapper) on any device.
        tokenizer: Its fast tokenizer, with a chat template.
        trajectories: Result records (dicts with ``messages``) or ``Episode`` objects.
        batch_size: Trajectories per forward pass (sorted by length to limit padding).

    Returns:
        One :class:`TrajectoryScore` per trajectory, in input order.
    """
    import torch  # optional: the hf extra (torch, transformers)

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    records = [as_record(t, i) for i, t in enumerate(trajectories)]
    tokens = [trajectory_tokens(tokenizer, r["messages"]) for r in records]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    keep_arg = _forward_options(model)
    order = sorted(range(len(tokens)), key=lambda i: len(tokens[i].token_ids))
    nll: dict[int, list[float]] = {}
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                values = _score_batch(model, [tokens[i] for i in chunk], pad_id, keep_arg)
                nll.update(zip(chunk, values, strict=True))
    finally:
        model.train(was_training)
    return [
        TrajectoryScore(
            task_id=str(record.get("task_id", f"trajectory-{i}")),
            sample=int(record.get("sample", -1)),
            budget=int(record.get("budget", -1)),
            correct=None if record.get("correct") is None else bool(record["correct"]),
            token_nll=tuple(nll[i]),
            token_segments=tuple(s for s in tokens[i].segments if s is not None),
        )
        for i, record in enumerate(records)
    ]


# ---------------------------------------------------------------------- aggregation


@dataclass(frozen=True)
class SegmentStats(Record):
    """Aggregate NLL of one segment over a set of trajectories.

    Attributes:
        segment: Segment name (or ``all``).
        tokens: Scored tokens of this segment.
        trajectories: Trajectories with at least one such token.
        mean_nll: Total NLL / tokens (nats per token); None without tokens.
        perplexity: ``exp(mean_nll)``.
        nll_lower: Lower bootstrap bound of ``mean_nll``.
        nll_upper: Upper bootstrap bound of ``mean_nll``.
        ppl_lower: ``exp(nll_lower)``.
        ppl_upper: ``exp(nll_upper)``.
    """

    segment: str
    tokens: int
    trajectories: int
    mean_nll: float | None
    perplexity: float | None
    nll_lower: float | None
    nll_upper: float | None
    ppl_lower: float | None
    ppl_upper: float | None


@dataclass(frozen=True)
class SegmentPerplexity(Record):
    """Segment perplexities of a set of trajectories under one scoring model.

    Attributes:
        segments: One entry per segment of :data:`SEGMENTS`, then ``all``.
        num_trajectories: Trajectories scored.
        num_problems: Distinct task ids among them.
        ci_unit: What the bootstrap resampled: ``problem`` or ``trajectory``.
        level: Confidence level.
        n_boot: Bootstrap resamples.
        seed: Seed of the resampling.
        scorer: The scoring model (its name or path).
        run: Run name, when read from a run directory.
        budget: The T of the trajectories, when read from a run directory.
        only_correct: Whether only successful trajectories were scored (None when not known).
    """

    segments: tuple[SegmentStats, ...]
    num_trajectories: int
    num_problems: int
    ci_unit: str
    level: float
    n_boot: int
    seed: int | None
    scorer: str = ""
    run: str | None = None
    budget: int | None = None
    only_correct: bool | None = None

    def segment(self, name: str) -> SegmentStats:
        """The stats of segment ``name`` (one of :data:`SEGMENTS` or ``all``)."""
        for stats in self.segments:
            if stats.segment == name:
                return stats
        raise ValueError(f"no segment {name!r}; segments are {[s.segment for s in self.segments]}")

    def to_markdown(self) -> str:
        """A Markdown table with one row per segment and a line saying what was scored."""
        level = round(100 * self.level)
        rows = [
            [
                s.segment,
                str(s.tokens),
                str(s.trajectories),
                fmt(s.mean_nll, 3),
                fmt(s.perplexity, 2),
                f"[{fmt(s.ppl_lower)}, {fmt(s.ppl_upper)}]",
            ]
            for s in self.segments
        ]
        header = ["segment", "tokens", "trajectories", "mean NLL", "perplexity", f"{level}% CI"]
        which = "successful " if self.only_correct else ""
        outcomes = " (successful and failed)" if self.only_correct is False else ""
        source = f" of run **{self.run}**" if self.run else ""
        at = f" at T = {self.budget}" if self.budget is not None else ""
        intro = (
            f"Segment perplexity under `{self.scorer or 'the scoring model'}` of "
            f"{self.num_trajectories} {which}trajectories{outcomes}{source}{at} "
            f"({self.num_problems} problems; CI: bootstrap over {self.ci_unit}s, "
            f"{self.n_boot} resamples)\n\n"
        )
        return intro + markdown_table(header, rows)


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else float(value)


def summarize_scores(
    scores: Sequence[TrajectoryScore],
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    ci_unit: CiUnit = "problem",
    scorer: str = "",
) -> SegmentPerplexity:
    """Aggregate per-token scores into per-segment mean NLL, perplexity and bootstrap CIs.

    Args:
        scores: From :func:`score_trajectories`.
        n_boot: Bootstrap resamples.
        level: Confidence level of the intervals.
        seed: Seed of the resampling.
        ci_unit: Resample ``problem`` s (task ids, with all their trajectories) or
            ``trajectory`` s.
        scorer: Name of the scoring model, for the report.

    Raises:
        ValueError: for no scores or a bad ``ci_unit``.
    """
    if ci_unit not in ("problem", "trajectory"):
        raise ValueError(f"ci_unit must be 'problem' or 'trajectory', got {ci_unit!r}")
    if not scores:
        raise ValueError("no trajectories to summarize (did the run have any successes at T?)")
    names = (*SEGMENTS, ALL)
    units: dict[Any, int] = {}
    sums = defaultdict(lambda: np.zeros(len(names)))
    counts = defaultdict(lambda: np.zeros(len(names)))
    present = np.zeros(len(names), dtype=np.int64)
    for i, score in enumerate(scores):
        key = score.task_id if ci_unit == "problem" else i
        unit = units.setdefault(key, len(units))
        for g, (total, tokens) in enumerate(score.totals()[name] for name in names):
            sums[unit][g] += total
            counts[unit][g] += tokens
            present[g] += tokens > 0
    numerators = np.stack([sums[u] for u in range(len(units))])  # (U, G)
    denominators = np.stack([counts[u] for u in range(len(units))])  # (U, G)
    lower, upper = bootstrap_ratio(numerators, denominators, n_boot=n_boot, level=level, seed=seed)
    total_nll, total_tokens = numerators.sum(axis=0), denominators.sum(axis=0)
    stats = []
    for g, name in enumerate(names):
        mean = total_nll[g] / total_tokens[g] if total_tokens[g] else math.nan
        stats.append(
            SegmentStats(
                segment=name,
                tokens=int(total_tokens[g]),
                trajectories=int(present[g]),
                mean_nll=_optional(mean),
                perplexity=_optional(math.exp(mean)),
                nll_lower=_optional(lower[g]),
                nll_upper=_optional(upper[g]),
                ppl_lower=_optional(math.exp(lower[g])),
                ppl_upper=_optional(math.exp(upper[g])),
            )
        )
    return SegmentPerplexity(
        segments=tuple(stats),
        num_trajectories=len(scores),
        num_problems=len({s.task_id for s in scores}),
        ci_unit=ci_unit,
        level=float(level),
        n_boot=int(n_boot),
        seed=seed,
        scorer=scorer,
    )


def _scorer_name(model: Any) -> str:
    return str(getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)


def segment_perplexity(
    model: Any,
    tokenizer: Any,
    trajectories: Sequence[Any],
    batch_size: int = 8,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    ci_unit: CiUnit = "problem",
) -> SegmentPerplexity:
    """Score trajectories under ``model`` and split NLL and perplexity by segment.

    Args:
        model: A causal LM (``HFPolicy(...).model``, a peft model, ...).
        tokenizer: Its fast tokenizer with a chat template (``HFPolicy(...).tokenizer``).
        trajectories: Result records (dicts with ``messages``) or ``Episode`` objects; all of
            them are scored (filter successful ones first, or use :func:`run_perplexity`).
        batch_size: Trajectories per forward pass.
        n_boot: Bootstrap resamples.
        level: Confidence level.
        seed: Seed of the resampling.
        ci_unit: Resample ``problem`` s (default) or ``trajectory`` s.

    Returns:
        A :class:`SegmentPerplexity`.
    """
    scores = score_trajectories(model, tokenizer, trajectories, batch_size)
    return summarize_scores(
        scores, n_boot=n_boot, level=level, seed=seed, ci_unit=ci_unit, scorer=_scorer_name(model)
    )


def load_scorer(
    model: Any, tokenizer: Any = None, *, device: str | None = None, dtype: str = "float32"
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a spec, a path, a ``TokenPolicy`` or a loaded model.

    Args:
        model: ``hf:PATH_OR_ID`` (or a bare path / id / the ``smollm2-135m-instruct`` alias),
            an ``HFPolicy`` or any object with ``.model`` and ``.tokenizer``, or a loaded model
            (then ``tokenizer`` is required).
        tokenizer: A tokenizer (or its folder) replacing the model's own.
        device: Where to load a model given by name (default ``cpu``).
        dtype: Weights' dtype for a model given by name (default ``float32``).
    """

    if isinstance(model, (str, Path)):
        text = str(model)
        if ":" in text.split("/")[0] and not text.startswith("hf:"):
            raise ValueError(
                f"scoring model {text!r}: give hf:PATH_OR_ID (a transformers model), "
                "e.g. --model hf:runs/grpo/final"
            )
        policy = HFPolicy(text.removeprefix("hf:"), tokenizer, device=device, dtype=dtype)
        return policy.model, policy.tokenizer
    if hasattr(model, "model") and hasattr(model, "tokenizer"):
        return model.model, model.tokenizer if tokenizer is None else tokenizer
    if tokenizer is None:
        raise ValueError("a loaded model needs tokenizer=...: pass the model's tokenizer")
    return model, tokenizer


def run_perplexity(
    run_dir: str | Path,
    model: Any,
    tokenizer: Any = None,
    *,
    budget: int | None = None,
    only_correct: bool = True,
    limit: int | None = None,
    batch_size: int = 8,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int | None = 0,
    ci_unit: CiUnit = "problem",
    partial: bool = False,
    device: str | None = None,
    dtype: str = "float32",
) -> SegmentPerplexity:
    """Segment perplexity of a run's trajectories at one budget.

    Args:
        run_dir: A run directory (``passkt eval --out``).
        model: Anything :func:`load_scorer` accepts (``hf:PATH``, a policy, a loaded model).
        tokenizer: The tokenizer, when ``model`` is a loaded model.
        budget: The T whose trajectories are scored (default: the run's largest).
        only_correct: Score only successful trajectories (the study's setting).
        limit: Score at most this many trajectories (the first in file order).
        batch_size: Trajectories per forward pass.
        n_boot: Bootstrap resamples.
        level: Confidence level.
        seed: Seed of the resampling.
        ci_unit: Resample ``problem`` s (default) or ``trajectory`` s.
        partial: Accept an unfinished run.
        device: Where to load a model given by name (default ``cpu``).
        dtype: Weights' dtype for a model given by name (default ``float32``).

    Raises:
        passkt.eval.store.RunDirError: for an unusable run directory or budget.
        ValueError: when no trajectory is left to score.
    """
    run = load_records(run_dir, budget, partial=partial)
    records = [r for r in run.records if r.get("correct") or not only_correct]
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        records = records[:limit]
    if not records:
        raise ValueError(
            f"{run.run_dir}: no {'successful ' if only_correct else ''}trajectories at "
            f"T={run.budget}; try another --budget{' or --all' if only_correct else ''}"
        )
    scoring_model, scoring_tokenizer = load_scorer(model, tokenizer, device=device, dtype=dtype)
    scores = score_trajectories(scoring_model, scoring_tokenizer, records, batch_size)
    scorer = model if isinstance(model, (str, Path)) else _scorer_name(scoring_model)
    result = summarize_scores(
        scores, n_boot=n_boot, level=level, seed=seed, ci_unit=ci_unit, scorer=str(scorer)
    )
    return dataclasses.replace(result, run=run.name, budget=run.budget, only_correct=only_correct)
