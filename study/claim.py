"""The study's verdicts and its claim, from compact data: the seed-level test per trained kind.

Every sentence that calls something a gain, a loss, equivalent or inconclusive is written here,
from the :func:`passkt.eval.seeds.seed_level_counts` test printed beside it; ``summary.md``
(:mod:`passkt.study.summary`) lays them out with the tables they come from. The claim — RL widens
the boundary on bridge but not on math — is decided by :func:`claim_sentence` from
:func:`claim_tests`; of the trained − base tests of :func:`verdicts`, RL's boundary on bridge and
on math are the claim's own (primary, read at the level as they are), every other is secondary,
Holm-adjusted over the secondary ones.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from passkt.eval.estimator import Metric
from passkt.eval.intervals import holm
from passkt.eval.power import seed_level_power, seeds_needed, seeds_needed_t, smoothed_rates
from passkt.eval.seeds import MIN_SEEDS, SeedTest, interaction_counts, seed_level_counts
from passkt.study.counts import SHARED, RunCounts, StudyData

POWER_DELTA = 0.04
"""The change the power line asks about: the study's headline boundary change (0.77 -> 0.81)."""
POWER_SIMS = 400
"""Simulated studies per power point in the summary (standard error <= 0.025; seconds)."""
KIND_ORDER = ("SFT", "RL", "RFT")


@dataclass(frozen=True)
class Verdict:
    """One seed-level test and the sentence it decides."""

    cat: str
    kind: str
    metric: str
    test: SeedTest
    margin: float | None = None
    """The pre-registered equivalence margin (``StudyData.margin``)."""
    holm_p: float | None = None
    """The Holm-adjusted p-value over the summary's secondary tests (set by :func:`verdicts`)."""
    primary: bool = False
    """One of the claim's own tests (RL's boundary on bridge or math): not Holm-adjusted."""

    @property
    def word(self) -> str:
        """``gain``, ``loss``, ``equivalent`` or ``inconclusive`` (``SeedTest.verdict``); a gain
        or loss whose Holm-adjusted p is not below ``1 - level`` is ``inconclusive`` (a
        secondary test survives the correction or is no finding); ``not replicated`` with fewer
        than ``MIN_SEEDS`` bases."""
        if not self.test.replicated:
            return "not replicated"
        word = self.test.verdict(self.margin)
        if word in ("gain", "loss") and not self.survives:
            return "inconclusive"
        return word

    @property
    def survives(self) -> bool:
        """Whether the Holm-adjusted p-value (when there is one) is below ``1 - level``."""
        return self.holm_p is None or self.holm_p < 1 - self.test.level

    def sentence(self, env_id: str) -> str:
        t = self.test
        where = f"{self.cat} ({env_id})"
        numbers = (
            f"{t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}] over {t.seeds} base(s) and "
            f"{t.problems} problems"
        )
        if not t.replicated:
            return (
                f"On {where}, {self.kind} − base at {self.metric} is {numbers}; with fewer than "
                f"{MIN_SEEDS} bases the recipe is not replicated, so this is no verdict."
            )
        secondary = (
            "; the claim's own test, primary, so not Holm-adjusted"
            if self.primary
            else ""
            if self.holm_p is None
            else f"; secondary, Holm-adjusted over the summary's secondary tests p = "
            f"{self.holm_p:.2g}"
        )
        word = self.word
        if word == "equivalent":
            why = f"the interval lies inside the pre-registered ±{self.margin:g}"
        elif word == "inconclusive" and self.test.verdict(self.margin) in ("gain", "loss"):
            why = (
                f"the interval excludes 0 at level {t.level:g} alone, but not after Holm's "
                "correction over the secondary tests"
            )
        elif word == "inconclusive":
            margin = (
                "no equivalence margin was pre-registered"
                if self.margin is None
                else f"it reaches past the pre-registered ±{self.margin:g}"
            )
            why = f"the interval includes 0 and {margin}"
        else:
            why = "the interval excludes 0"
        phrase = {"gain": "a gain", "loss": "a loss", "equivalent": "equivalent to none"}.get(
            word, word
        )
        return (
            f"On {where}, {self.kind} − base at {self.metric} is {numbers}: {phrase} "
            f"({why}, p = {t.p_value:.2g}{secondary})."
        )


def replicates(runs: list[RunCounts]) -> dict[str, dict[int, RunCounts]]:
    by_role: dict[str, dict[int, RunCounts]] = defaultdict(dict)
    for run in runs:
        by_role[run.role][run.seed] = run
    return by_role


def seed_test(
    spec: dict[str, Any],
    kind: str,
    k: int | None,
    budget: int,
    level: float,
    metric: Metric = "pass@k",
) -> SeedTest | None:
    """The seed-level test of ``kind - base`` at pass@k (None: k = n, the boundary) and T, or
    at pass^k with ``metric="pass^k"``."""
    by_role = replicates(spec["runs"])
    j = list(spec["budgets"]).index(budget)
    pairs = []
    for seed, trained in sorted(by_role.get(kind, {}).items()):
        base = by_role["base"].get(seed, by_role["base"].get(SHARED))
        if base is None:
            continue
        pairs.append(((base.correct[:, j], base.n), [(trained.correct[:, j], trained.n)]))
    if not pairs:
        return None
    kk = min(r.n for r in spec["runs"]) if k is None else k
    return seed_level_counts(pairs, k=kk, budget=budget, level=level, metric=metric)


def verdicts(data: StudyData) -> list[Verdict]:
    """Every trained kind against its base at pass@1 and pass@(n, T_max), per category.

    RL's boundary tests on bridge (C) and math (A) are the claim's own (:func:`claim_tests`),
    marked primary when the study has both; every other is a secondary test and carries its
    Holm-adjusted p-value over the secondary ones."""
    out = []
    claimed = _rl_pairs(data) is not None
    for cat, spec in data.categories.items():
        t_max, n = max(spec["budgets"]), min(r.n for r in spec["runs"])
        for kind in trained_kinds(spec):
            for k, metric in ((1, f"pass@(1, {t_max})"), (None, f"pass@({n}, {t_max})")):
                test = seed_test(spec, kind, k, t_max, data.level)
                if test is not None:
                    primary = claimed and kind == "RL" and k is None and cat in ("A", "C")
                    out.append(Verdict(cat, kind, metric, test, data.margin, primary=primary))
    tested = [i for i, v in enumerate(out) if v.test.replicated and not v.primary]
    if len(tested) > 1:
        adjusted = holm(np.array([out[i].test.p_value for i in tested]))
        for i, p in zip(tested, adjusted, strict=True):
            out[i] = replace(out[i], holm_p=float(p))
    return out


def seed_pairs(spec: dict[str, Any], kind: str, against: str = "base") -> dict[int, Any]:
    """Per replicate seed, ``((counts of against, n), [(counts of kind, n)])`` at T_max: the
    pairs of the seed-level test of ``kind - against``."""
    by_role = replicates(spec["runs"])
    j = len(spec["budgets"]) - 1
    pairs = {}
    for seed, trained in sorted(by_role.get(kind, {}).items()):
        other = by_role.get(against, {})
        reference = other.get(seed, other.get(SHARED))
        if reference is not None:
            pairs[seed] = (
                (reference.correct[:, j], reference.n),
                [(trained.correct[:, j], trained.n)],
            )
    return pairs


def trained_kinds(spec: dict[str, Any]) -> list[str]:
    roles = {r.role for r in spec["runs"]}
    return [k for k in KIND_ORDER if k in roles]


def _interval(t: SeedTest) -> str:
    return f"{t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}]"


def _rl_pairs(data: StudyData) -> tuple[dict, dict] | None:
    """RL's paired runs per seed on bridge (C) and math (A); ``None`` without RL on both."""
    cats = data.categories
    if "C" not in cats or "A" not in cats:
        return None
    rl_c, rl_a = seed_pairs(cats["C"], "RL"), seed_pairs(cats["A"], "RL")
    return (rl_c, rl_a) if rl_c and rl_a else None


def claim_tests(data: StudyData) -> dict[str, SeedTest] | None:
    """The claim's tests at the boundary pass@(n, T_max): RL − base on bridge (C) and on math
    (A); the interaction, RL's change on bridge minus its change on math over the bases that
    have both; and RL − SFT on bridge. ``None`` when the study lacks RL on C or A."""
    pairs = _rl_pairs(data)
    if pairs is None:
        return None
    cats, (rl_c, rl_a) = data.categories, pairs
    n_c = min(r.n for r in cats["C"]["runs"])
    n_a = min(r.n for r in cats["A"]["runs"])
    seeds = sorted(set(rl_c) & set(rl_a))
    tests = {
        "C": seed_level_counts(list(rl_c.values()), k=n_c, budget=0, level=data.level),
        "A": seed_level_counts(list(rl_a.values()), k=n_a, budget=0, level=data.level),
    }
    if seeds:
        tests["C - A"] = interaction_counts(
            [rl_c[s] for s in seeds], [rl_a[s] for s in seeds], k_first=n_c, k_second=n_a,
            level=data.level,
        )  # fmt: skip
    against_sft = seed_pairs(cats["C"], "RL", against="SFT")
    if against_sft:
        tests["RL - SFT"] = seed_level_counts(
            list(against_sft.values()), k=n_c, budget=0, level=data.level
        )
    return tests


def _room(spec: dict[str, Any]) -> list[tuple[int, float]]:
    """Per base seed, the room above its observed boundary at T_max: 1 - pass@(n, T_max)."""
    j = len(spec["budgets"]) - 1
    bases = sorted(replicates(spec["runs"])["base"].items())
    return [(seed, 1.0 - float((run.correct[:, j] > 0).mean())) for seed, run in bases]


def interim(data: StudyData, seeds: int) -> bool:
    """Whether a look at ``seeds`` replicates comes before the plan's end (``planned_seeds``)."""
    return data.planned_seeds is not None and seeds < data.planned_seeds


def _noise_reasons(data: StudyData, rl_c: SeedTest, realistic: RealisticPower | None) -> list[str]:
    """What the noise allows on bridge: the between-base share of the standard error, any base
    with less room than the powered change, and the realistic power with its bases needed."""
    reasons = []
    if rl_c.seeds > 1 and rl_c.se_seed > rl_c.se_eval:
        reasons.append(
            f"the between-base part of its standard error ({rl_c.se_seed:.3f}) is "
            f"{rl_c.se_seed / max(rl_c.se_eval, 1e-12):.1f} times the evaluation's "
            f"({rl_c.se_eval:.3f}) with {rl_c.seeds} bases, so more bases, not more "
            "problems, would narrow it"
        )
    tight = [(s, r) for s, r in _room(data.categories["C"]) if r < POWER_DELTA]
    if tight:
        reasons.append(
            "; ".join(
                f"base seed {s} leaves {r:.3f} of room above its bridge boundary, less than "
                f"the {POWER_DELTA:+.2f} change the study is powered for"
                for s, r in tight
            )
        )
    if realistic is None:
        realistic = realistic_power(data, "C", data.categories["C"])
    if realistic is None and rl_c.seeds < 2:
        reasons.append("one base shows no spread between bases yet")
    if realistic is not None:
        reasons.append(
            f"with the spread RL's bridge changes showed (sd {realistic.spread:.3f}) the "
            f"test's realistic power for a {POWER_DELTA:+.2f} change is {realistic.gain:.2f} "
            f"with {realistic.seeds} bases"
            + (
                f", and {realistic.needed_gain} bases would reach 0.8"
                if realistic.needed_gain is not None
                else f", and {SEEDS_SEARCHED} bases would not reach 0.8"
                + (
                    ""
                    if realistic.approx is None
                    else f", where a t-test on the replicates' changes asks for about "
                    f"{realistic.approx}"
                )
            )
        )
    return reasons


def claim_sentence(
    data: StudyData, found: list[Verdict], realistic: RealisticPower | None = None
) -> str | None:
    """The study's claim — RL widens the boundary on sequential retrieval (bridge, C) but not on
    math (A) — as one of three verdicts, whatever the data say:

    - *supported*: RL's bridge boundary change is a gain and exceeds its math change (the
      interaction's interval excludes 0 on the positive side);
    - *contradicted*: RL's bridge change is shown equivalent to none (inside the pre-registered
      margin) or a loss;
    - *inconclusive, because ...*: anything else, with the reasons the data give (an interval
      that includes 0, no pre-registered margin, the between-base spread, a base with no room,
      fewer than ``MIN_SEEDS`` bases so far — each with the number of bases that would decide).

    Every form carries what the noise allows on bridge (the between-base share of the standard
    error, a base without room, the realistic power), so a quoted verdict keeps its caveat.
    """
    tests = claim_tests(data)
    if tests is None:
        return None
    claim = "The study's claim (RL widens the boundary on bridge but not on math)"
    rl_c, rl_a = tests["C"], tests["A"]
    margin = data.margin
    replicated = rl_c.replicated and rl_a.replicated
    word = rl_c.verdict(margin) if replicated else "unreplicated"
    noise = _noise_reasons(data, rl_c, realistic)
    inter = tests.get("C - A")
    inter_word = inter.verdict() if inter is not None else "inconclusive"
    if word == "gain" and inter_word == "gain":
        status = (
            "is supported: RL's boundary gain on bridge is beyond the noise and beyond its "
            "change on math"
        )
    elif word == "equivalent":
        status = (
            "is contradicted: RL's boundary change on bridge is equivalent to none (inside the "
            f"pre-registered ±{margin:g})"
        )
    elif word == "loss":
        status = "is contradicted: RL narrows the boundary on bridge"
    else:
        reasons = []
        if not replicated:
            reasons.append(
                f"only {min(rl_c.seeds, rl_a.seeds)} independently made base(s) have RL on "
                f"both categories so far, and the seed-level test decides from {MIN_SEEDS}"
            )
        elif word == "gain":
            reasons.append(
                "RL widens bridge's boundary, but its change on bridge minus its change on math "
                "includes 0, so 'but not on math' is not shown"
            )
        else:
            reasons.append(
                f"RL's bridge change {_interval(rl_c)} includes 0 and "
                + (
                    "no equivalence margin was pre-registered"
                    if margin is None
                    else f"reaches past the pre-registered ±{margin:g}"
                )
            )
        reasons += noise
        status = "is inconclusive, because " + "; ".join(reasons)
    both = min(rl_c.seeds, rl_a.seeds)
    if replicated and interim(data, both):
        early = (
            f"is inconclusive so far, because only {both} of the plan's {data.planned_seeds} "
            f"bases have RL on both categories and the plan decides with all "
            f"{data.planned_seeds}; at this interim look, which its level does not correct for "
            "looking early, "
        )
        verdict, _, why = status.partition(": ")
        if verdict in ("is supported", "is contradicted"):
            status = early + f"the rule would call it {verdict[3:]}, as {why}; " + "; ".join(noise)
        else:
            status = early + status.replace("is inconclusive, because ", "it is inconclusive too: ")
    elif status.startswith(("is supported", "is contradicted")) and noise:
        status += "; what the noise allows: " + "; ".join(noise)
    numbers = [f"bridge {_interval(rl_c)}", f"math {_interval(rl_a)}"]
    if inter is not None:
        numbers.append(f"bridge − math {_interval(inter)} ({inter_word})")
    if "RL - SFT" in tests:
        versus = tests["RL - SFT"]
        numbers.append(f"RL − SFT on bridge {_interval(versus)} ({versus.verdict(margin)})")
    boundary = {
        (v.cat, v.kind): v
        for v in found
        if v.metric.startswith("pass@(") and not v.metric.startswith("pass@(1,")
    }
    others = [
        boundary[("C", kind)]
        for kind in KIND_ORDER
        if kind != "RL" and ("C", kind) in boundary and boundary[("C", kind)].test.replicated
    ]
    context = ""
    if others:
        words = "; ".join(f"{v.kind} − base {_interval(v.test)}, {v.word}" for v in others)
        gains = [v.kind for v in others if v.word == "gain"]
        if word == "gain" and gains:
            specific = f"not specific to RL ({' and '.join(gains)} gain too)"
            context = (
                f" The other recipes on bridge at the same cell: {words}; so a boundary gain on "
                f"bridge is {specific}."
            )
        else:
            context = f" The other recipes on bridge at the same cell, for comparison: {words}."
    return f"{claim} {status} ({'; '.join(numbers)})." + context


@dataclass(frozen=True)
class RealisticPower:
    """The seed-level test's power for ±``POWER_DELTA`` at the boundary when the replicates'
    true changes spread as RL's observed ones did (``passkt power ... --spread``)."""

    spread: float
    seeds: int
    gain: float
    loss: float
    needed_gain: int | None
    needed_loss: int | None
    approx: int | None = None
    """The bases a t-test on the replicates' changes needs for power 0.8 at ±``POWER_DELTA``
    (:func:`passkt.eval.power.seeds_needed_t`, sd = the spread and the evaluation's noise per
    replicate): the count beyond the simulated search."""

    def beyond(self) -> str:
        """`` (about N by a t-test on the replicates' changes)`` when the simulated search ended
        without reaching 0.8; empty otherwise."""
        searched = self.needed_gain is None or self.needed_loss is None
        if not searched or self.approx is None:
            return ""
        return f" (about {self.approx} by a t-test on the replicates' changes)"

    def sentence(self) -> str:
        def needed(count: int | None) -> str:
            return f"{count} bases" if count is not None else f"more than {SEEDS_SEARCHED} bases"

        return (
            f"With the spread RL's boundary changes showed between these replicates (sd "
            f"{self.spread:.3f}), each replicate's true change drawn around the target, its "
            f"power is {self.gain:.2f} for a {POWER_DELTA:+.2f} change and {self.loss:.2f} for "
            f"a {-POWER_DELTA:+.2f} change with {self.seeds} bases (realistic); power 0.8 needs "
            f"{needed(self.needed_gain)} for the gain and {needed(self.needed_loss)} for the "
            f"loss{self.beyond()}."
        )


SEEDS_SEARCHED = 12
SEEDS_SIMS = 100
"""Simulated studies per replicate count in the search for the bases power 0.8 needs (a planning
number: ``passkt power ... --spread SD --seeds-for 0.8`` searches with more)."""


def realistic_power(data: StudyData, cat: str, spec: dict[str, Any]) -> RealisticPower | None:
    """The realistic seed-level power at T_max's boundary, from RL's observed per-replicate
    changes (``None`` without two or more RL replicates)."""
    bases = sorted(replicates(spec["runs"])["base"].items())
    rl = seed_test(spec, "RL", None, max(spec["budgets"]), data.level)
    if rl is None or rl.seeds < 2 or len(bases) < 1:
        return None
    j = len(spec["budgets"]) - 1
    rates = [smoothed_rates(run.correct[:, j], run.n) for _, run in bases]
    n = min(run.n for _, run in bases)
    spread = float(np.std(rl.per_seed, ddof=1))
    alpha = round(1 - data.level, 6)
    study = dict(problems=len(spec["task_ids"]), n=n, k=n, level=alpha)
    power = {
        d: seed_level_power(
            rates, delta=d, spread=spread, replicates=rl.seeds, sims=POWER_SIMS, **study
        )
        for d in (POWER_DELTA, -POWER_DELTA)
    }
    needed = {
        d: seeds_needed(
            rates, delta=d, spread=spread, most=SEEDS_SEARCHED, sims=SEEDS_SIMS, **study
        )
        for d in (POWER_DELTA, -POWER_DELTA)
    }
    per_replicate = float(np.hypot(spread, rl.se_eval * np.sqrt(rl.seeds)))
    approx = seeds_needed_t(POWER_DELTA, per_replicate, power=0.8, level=alpha)
    return RealisticPower(
        spread, rl.seeds, power[POWER_DELTA], power[-POWER_DELTA], needed[POWER_DELTA],
        needed[-POWER_DELTA], approx,
    )  # fmt: skip


# ---------------------------------------------------------------------- against the reference

REFERENCE = "arXiv 2604.14877 (Qwen2.5-7B-Instruct, one base, n = 64, T_max = 5)"
"""The study this project reproduces; its figures are single runs, so only their direction is
compared."""
REFERENCE_CHANGES = (
    ("C", "RL", "boundary", 0.77, 0.81),
    ("C", "RL", "pass@1", 0.363, 0.335),
    ("C", "SFT", "boundary", 0.77, 0.73),
    ("A", "RL", "boundary", 0.84, 0.84),
)
"""``(category, kind, metric, base, trained)``: the reference study's figures at T_max, the
boundary being pass@(64, T_max)."""
CATEGORY_NAMES = {"A": "math", "B": "comparison", "C": "bridge"}


def reference_sentence(data: StudyData, found: Sequence[Verdict]) -> str | None:
    """Where this study's trained − base changes agree with the reference study's, differ from
    them, or are not decided, cell by cell (the verdicts of :func:`verdicts`, Holm-adjusted;
    RL's bridge boundary by the claim's primary test). ``None`` when no cell is in the data."""
    tests = claim_tests(data) or {}
    cells = {
        (v.cat, v.kind, "pass@1" if v.metric.startswith("pass@(1,") else "boundary"): v
        for v in found
    }
    differs, agrees, undecided = [], [], []
    for cat, kind, metric, before, after in REFERENCE_CHANGES:
        v = cells.get((cat, kind, metric))
        if v is None:
            continue
        test = v.test
        word = v.word
        if (cat, kind, metric) == ("C", "RL", "boundary") and "C" in tests:
            test = tests["C"]
            word = test.verdict(data.margin) if test.replicated else "not replicated"
        theirs = "raised" if after > before else "lowered" if after < before else "left"
        verb = {"raised": "raised it", "lowered": "lowered it", "left": "left it unchanged"}
        ref = f"the reference's {kind} {verb[theirs]} ({before:g} → {after:g})"
        ours = f"{kind} − base at {v.metric} is {_interval(test)}"
        where = f"on {CATEGORY_NAMES.get(cat, cat)}"
        expected = {"raised": "gain", "lowered": "loss", "left": "equivalent"}[theirs]
        if word == expected:
            agrees.append(f"{where}, {ours} ({word}), as {ref}")
        elif word in ("gain", "loss", "equivalent"):
            phrase = {"gain": "a gain", "loss": "a loss", "equivalent": "equivalent to none"}
            differs.append(f"{where}, {ours} ({phrase[word]}) where {ref}")
        else:
            if word == "inconclusive" and test.verdict(data.margin) in ("gain", "loss"):
                word = "inconclusive after Holm's correction"
            undecided.append(f"{where}, {ours} ({word}) beside {ref}")
    if not (differs or agrees or undecided):
        return None
    referenced = {(cat, kind, metric) for cat, kind, metric, *_ in REFERENCE_CHANGES}
    looked = [v.test.seeds for key, v in cells.items() if key in referenced]
    parts = []
    if looked and interim(data, min(looked)):
        parts.append(
            f"at this interim look ({min(looked)} of the plan's {data.planned_seeds} bases, so "
            "no cell is the plan's verdict yet)"
        )
    if differs:
        parts.append("this study's answer differs: " + "; ".join(differs))
    if agrees:
        parts.append("it agrees: " + "; ".join(agrees))
    if undecided:
        parts.append("this study does not decide: " + "; ".join(undecided))
    lead = f"Against the reference study, {REFERENCE}, "
    if parts[0].startswith("at this interim look"):
        lead, parts = lead + parts[0] + ", ", parts[1:]
    return lead + ". And ".join(parts) + "."
