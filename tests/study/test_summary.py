"""The seed-level summary (passkt.study.summary): compact data, verdicts, T explained, remade.

Synthetic counts with a known effect: the sentences must follow the seed-level test printed
beside them, and the summary must be remade byte for byte from its data folder alone.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from passkt.study.claim import claim_sentence, claim_tests, reference_sentence, verdicts
from passkt.study.counts import (
    SHARED,
    DataError,
    RunCounts,
    StudyData,
    episode_counts,
    read_data,
    write_data,
)
from passkt.study.summary import make_summary

BUDGETS = [0, 1, 2, 3, 5]


def _run(role, seed, rates, n, rng, budgets=BUDGETS):
    """Counts drawn from per-problem rates (the same at every T), half the answers voluntary."""
    correct = rng.binomial(n, np.repeat(rates[:, None], len(budgets), axis=1))
    answered = np.minimum(n - correct, rng.binomial(n, 0.5, size=correct.shape))
    answered[:, 0] = 0  # at T = 0 the final notice comes first
    cut = (n - correct - answered) // 2
    return RunCounts(f"{role} s{seed}", role, seed, n, correct, answered, cut)


def _data(
    effects, seeds=3, problems=300, n=16, shared_base=False, seed=0, margin=None, planned=None
):
    """A study of categories A (T = 0) and C (every T) where kind K moves each problem's rate
    by ``effects[cat][K]`` on the logit scale."""
    rng = np.random.default_rng(seed)
    cats = {}
    for cat, budgets in (("A", [0]), ("C", BUDGETS)):
        logits = rng.normal(-1.0, 2.0, size=problems)
        runs = []
        for s in range(seeds):
            if shared_base and s:
                continue
            jitter = 0.0 if shared_base else rng.normal(0, 0.05)
            base_rates = 1 / (1 + np.exp(-(logits + jitter)))
            runs.append(_run("base", SHARED if shared_base else s, base_rates, n, rng, budgets))
        for kind, shift in effects.get(cat, {}).items():
            for s in range(seeds):
                rates = 1 / (1 + np.exp(-(logits + shift)))
                runs.append(_run(kind, s, rates, n, rng, budgets))
        ids = [f"{cat}-{i}" for i in range(problems)]
        env = {"A": "Math-v0", "C": "BridgeQA-v0"}[cat]
        cats[cat] = {
            "env_id": env,
            "env_kwargs": {},
            "task_ids": ids,
            "budgets": budgets,
            "runs": runs,
        }
    timings = [
        {"stage": "base", "unit": f"base-p{s}", "status": "done", "seconds": 600.0}
        for s in range(seeds)
    ]
    timings.append({"stage": "base", "unit": "*", "status": "stage", "seconds": 1200.0})
    return StudyData("synthetic", not shared_base, 0.95, cats, timings, margin, planned)


def test_episode_counts_split_answers_forced_answers_and_cut_offs():
    records = [
        {"task_id": "a", "budget": 2, "correct": True, "terminated": True, "tool_calls": 1},
        {"task_id": "a", "budget": 2, "correct": False, "terminated": True, "tool_calls": 2},
        {"task_id": "a", "budget": 2, "correct": False, "truncated": True, "tool_calls": 2},
        {"task_id": "b", "budget": 2, "correct": True, "terminated": True, "tool_calls": 0},
        {"task_id": "b", "budget": 2, "correct": True, "terminated": True, "tool_calls": 2},
        {"task_id": "b", "budget": 2, "correct": False, "terminated": True, "tool_calls": 0},
        {"task_id": "other", "budget": 2, "correct": True, "terminated": True, "tool_calls": 0},
    ]
    correct, answered, cut = episode_counts(records, ["a", "b"], [2], 3)
    assert correct.tolist() == [[1], [2]]
    assert answered.tolist() == [[1], [2]]  # fewer calls than the budget: the agent's choice
    assert cut.tolist() == [[1], [0]]
    with pytest.raises(DataError, match="episodes per"):
        episode_counts(records[:2], ["a", "b"], [2], 3)


def test_a_real_gain_is_a_gain_and_an_a_a_study_is_inconclusive_or_equivalent():
    data = _data({"A": {"RL": 0.0, "SFT": 0.0}, "C": {"RL": 1.0, "SFT": 0.0}})
    found = {(v.cat, v.kind, v.metric): v for v in verdicts(data)}
    rl_c = found["C", "RL", "pass@(1, 5)"]
    assert rl_c.word == "gain" and rl_c.test.lower > 0
    assert ": a gain (the interval excludes 0" in rl_c.sentence("BridgeQA-v0")
    assert f"{rl_c.test.estimate:+.3f} [{rl_c.test.lower:+.3f}" in rl_c.sentence("BridgeQA-v0")
    for key in (("C", "SFT", "pass@(1, 5)"), ("A", "RL", "pass@(1, 0)")):
        assert found[key].word == "inconclusive"
        assert ": inconclusive (the interval includes 0 and no equivalence margin" in found[
            key
        ].sentence("x")
    # with a margin fixed in advance, a null change whose interval lies inside it is equivalent
    margined = _data({"A": {"RL": 0.0}, "C": {"RL": 1.0, "SFT": 0.0}}, margin=0.1)
    within = {(v.cat, v.kind, v.metric): v for v in verdicts(margined)}
    for key in (("C", "SFT", "pass@(1, 5)"), ("A", "RL", "pass@(1, 0)")):
        test = within[key].test
        assert within[key].word == (
            "equivalent" if test.lower > -0.1 and test.upper < 0.1 else "inconclusive"
        )
    assert "equivalent" in {v.word for v in within.values()}
    assert "inside the pre-registered ±0.1" in within["A", "RL", "pass@(1, 0)"].sentence("x")
    loss = {(v.cat, v.kind, v.metric): v for v in verdicts(_data({"C": {"RL": -1.0}}))}
    assert loss["C", "RL", "pass@(1, 5)"].word == "loss"


def test_two_bases_give_estimates_and_no_verdict():
    data = _data({"C": {"RL": 1.5}}, seeds=2)
    (pass1, _) = [v for v in verdicts(data) if v.cat == "C"]
    assert pass1.test.lower > 0 and pass1.word == "not replicated"
    assert "so this is no verdict" in pass1.sentence("BridgeQA-v0")


def test_a_shared_base_pairs_with_every_training_seed():
    data = _data({"C": {"RL": 1.0}}, shared_base=True)
    bases = [r for r in data.categories["C"]["runs"] if r.role == "base"]
    assert len(bases) == 1
    (pass1, _) = [v for v in verdicts(data) if v.cat == "C"]
    assert pass1.test.seeds == 3 and pass1.word == "gain"


@pytest.mark.parametrize(
    ("effects", "margin", "words"),
    [
        ({"A": {"RL": 0.0}, "C": {"RL": 2.5}}, None, "is supported: RL's boundary gain"),
        ({"A": {"RL": 2.5}, "C": {"RL": 2.5}}, None, "is inconclusive, because RL widens bridge"),
        ({"A": {"RL": 0.0}, "C": {"RL": 0.0}}, None, "is inconclusive, because RL's bridge change"),
        ({"A": {"RL": 0.0}, "C": {"RL": 0.0}}, 0.08, "is contradicted: RL's boundary change on"),
        ({"A": {"RL": 0.0}, "C": {"RL": -2.5}}, None, "is contradicted: RL narrows the boundary"),
    ],
)
def test_the_claim_sentence_is_one_of_three_verdicts(effects, margin, words):
    from passkt.study.claim import claim_tests, realistic_power

    data = _data(effects, problems=400, n=8, margin=margin)
    sentence = claim_sentence(data, verdicts(data))
    assert words in sentence, sentence
    tests = claim_tests(data)
    assert ("is supported" in sentence) == (
        tests["C"].verdict(margin) == "gain" and tests["C - A"].verdict() == "gain"
    )
    assert ("is contradicted" in sentence) == (tests["C"].verdict(margin) in ("equivalent", "loss"))
    # every form keeps its caveat: the realistic power from the replicates' spread
    realistic = realistic_power(data, "C", data.categories["C"])
    assert f"realistic power for a +0.04 change is {realistic.gain:.2f}" in sentence, sentence
    inter = tests["C - A"]
    assert (
        f"bridge − math {inter.estimate:+.3f} [{inter.lower:+.3f}, {inter.upper:+.3f}]" in sentence
    )


@pytest.mark.parametrize("seeds", [1, 2])
def test_a_study_with_fewer_than_three_bases_is_inconclusive_and_says_how_many_it_needs(seeds):
    """A study stopped early still states the claim in one of its three forms: inconclusive,
    because too few bases, with the intervals so far and (from two bases) the realistic power."""
    from passkt.study.claim import claim_tests, realistic_power

    data = _data({"A": {"RL": 0.0, "SFT": 0.0}, "C": {"RL": 2.5, "SFT": 0.0}}, seeds=seeds, n=8)
    sentence = claim_sentence(data, verdicts(data))
    assert sentence.startswith("The study's claim (RL widens the boundary on bridge but not on")
    assert f"is inconclusive, because only {seeds} independently made base(s)" in sentence
    tests = claim_tests(data)
    for label, test in (
        ("bridge − math", tests["C - A"]),
        ("RL − SFT on bridge", tests["RL - SFT"]),
    ):
        assert f"{label} {test.estimate:+.3f} [{test.lower:+.3f}, {test.upper:+.3f}]" in sentence
    realistic = realistic_power(data, "C", data.categories["C"])
    assert (realistic is None) == (seeds == 1)
    if realistic is not None:
        needed = realistic.needed_gain
        assert (f"{needed} bases would reach 0.8" if needed else "would not reach 0.8") in sentence
    else:
        assert "no spread between bases yet" in sentence
    assert "supported" not in sentence and "contradicted" not in sentence


@pytest.mark.parametrize(
    ("effects", "margin"),
    [
        ({"A": {"RL": 0.0}, "C": {"RL": 2.5}}, None),
        ({"A": {"RL": 2.5}, "C": {"RL": 2.5}}, None),
        ({"A": {"RL": 0.0}, "C": {"RL": 0.0}}, 0.08),
        ({"A": {"RL": 0.0}, "C": {"RL": -2.5}}, None),
    ],
)
def test_a_look_before_the_plans_last_base_is_interim_whatever_the_rule_would_say(
    effects, margin, tmp_path
):
    """The plan decides with all its bases: an earlier look is "inconclusive so far" and says
    what the rule would call it, and a look with every planned base in reads as without a plan.
    The plan's number travels with the data."""
    from passkt.study.counts import read_data, write_data

    seeds = 4
    final = _data(effects, seeds=seeds, n=8, margin=margin)
    plain = claim_sentence(final, verdicts(final))
    for planned in (seeds, 8):
        data = _data(effects, seeds=seeds, n=8, margin=margin, planned=planned)
        write_data(tmp_path / str(planned), data)
        data = read_data(tmp_path / str(planned))
        assert data.planned_seeds == planned
        sentence = claim_sentence(data, verdicts(data))
        if planned == seeds:
            assert sentence == plain
            continue
        head = f"is inconclusive so far, because only {seeds} of the plan's {planned} bases"
        assert head in sentence, sentence
        assert "is supported" not in sentence and "is contradicted" not in sentence
        for word in ("supported", "contradicted"):
            assert (f"the rule would call it {word}, as" in sentence) == (f"is {word}:" in plain)
        if "is inconclusive, because" in plain:
            assert "it is inconclusive too: " + plain.split("because ", 1)[1] in sentence
        else:
            assert "realistic power" in sentence
        against = reference_sentence(data, verdicts(data))
        assert f"at this interim look ({seeds} of the plan's {planned} bases" in against


@pytest.mark.parametrize("planned", [None, 3, 5])
def test_the_summary_says_when_its_verdicts_are_an_interim_look(planned, tmp_path):
    data = _data({"A": {"RL": 0.0}, "C": {"RL": 2.5}}, n=8, problems=100, planned=planned)
    summary = make_summary(data, tmp_path).read_text()
    note = f"An interim look: 3 of the plan's {planned} bases are in."
    assert (note in summary) == (planned == 5)
    assert ("is inconclusive so far" in summary) == (planned == 5)


@pytest.mark.parametrize("rl_c", [-2.5, 0.0, 2.5])
@pytest.mark.parametrize("sft_c", [-2.5, 2.5])
def test_the_reference_sentence_sorts_every_cell_by_its_own_verdict(rl_c, sft_c):
    """Each of the reference study's four changes lands in exactly one of "differs", "agrees"
    and "does not decide", by the verdict this study's data give it."""
    from passkt.study.claim import REFERENCE_CHANGES, claim_tests, reference_sentence

    data = _data({"A": {"RL": 0.0}, "C": {"RL": rl_c, "SFT": sft_c}}, n=8, margin=0.08)
    found = verdicts(data)
    sentence = reference_sentence(data, found)
    phrases = {"differs": "answer differs: ", "agrees": "it agrees: ", "undecided": "not decide: "}
    groups = dict.fromkeys(phrases, "")
    for part in sentence.split(". And "):
        (key,) = [k for k, phrase in phrases.items() if phrase in part]
        groups[key] = part
    for cat, kind, metric, before, after in REFERENCE_CHANGES:
        v = next(
            v
            for v in found
            if (v.cat, v.kind) == (cat, kind)
            and v.metric.startswith("pass@(1,") == (metric == "pass@1")
        )
        test = claim_tests(data)["C"] if (cat, kind, metric) == ("C", "RL", "boundary") else v.test
        word = test.verdict(0.08) if (cat, kind, metric) == ("C", "RL", "boundary") else v.word
        cell = f"{kind} − base at {v.metric} is {test.estimate:+.3f} [{test.lower:+.3f}"
        expected = "gain" if after > before else "loss" if after < before else "equivalent"
        group = (
            "agrees" if word == expected else "differs" if word != "inconclusive" else "undecided"
        )
        assert [g for g, text in groups.items() if cell in text] == [group], (cell, sentence)


def test_t_explained_reports_boundary_answers_and_cut_offs_at_every_t(tmp_path):
    data = _data({"C": {"RL": 0.5}}, seeds=3, problems=50, n=4)
    summary = make_summary(data, tmp_path).read_text()
    section = summary.split("### T explained (T_max = 5)")[1]
    runs = [r for r in data.categories["C"]["runs"] if r.role == "RL"]
    cut = np.mean([r.cut[:, 3].sum() / (50 * 4) for r in runs])
    row = next(line for line in section.splitlines() if line.startswith("| RL | cut off"))
    assert row.split(" | ")[5] == f"{cut:.3f}"  # T = 3 is the fourth T column
    boundary = np.mean([(r.correct[:, 0] > 0).sum() for r in runs])
    row = next(line for line in section.splitlines() if line.startswith("| RL | boundary"))
    assert row.split(" | ")[2] == f"{boundary:.1f}"
    assert "need not rise with T" in section
    assert (tmp_path / "figures" / "summary-C.png").stat().st_size > 1000


def test_the_summary_is_remade_byte_for_byte_from_its_data_folder(tmp_path):
    data = _data({"A": {"RL": 0.0, "SFT": 0.3}, "C": {"RL": 0.8, "SFT": 0.3}}, problems=60)
    first = make_summary(data, tmp_path / "a")
    write_data(tmp_path / "b" / "data", data)
    files = [p for p in (tmp_path / "b" / "data").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) < 200_000
    cli = [sys.executable, "-m", "passkt", "study", "report", str(tmp_path / "b")]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "b" / "summary.md").read_bytes() == first.read_bytes()
    for cat in "AC":
        png = f"figures/summary-{cat}.png"
        assert (tmp_path / "b" / png).read_bytes() == (tmp_path / "a" / png).read_bytes()


def test_bad_data_is_one_line_naming_the_file(tmp_path):
    write_data(tmp_path / "data", _data({"C": {"RL": 0.5}}, problems=20))
    path = tmp_path / "data" / "runs" / "C-RL-s1.json"
    path.write_text(path.read_text().replace('"correct":[[', '"correct":[[99,', 1))
    with pytest.raises(DataError, match=r"C-RL-s1\.json"):
        read_data(tmp_path / "data")
    cli = [sys.executable, "-m", "passkt", "study", "report", str(tmp_path)]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "C-RL-s1.json" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "summary.md").exists()


def test_pieces_run_on_different_machines_merge_into_one_data_folder(tmp_path):
    """A study run in pieces: each piece exports the evaluations it holds; the merged folder is
    the whole study (same summary as exporting everything at once), and another study's
    problems are refused."""
    whole = _data({"C": {"RL": 0.5}}, problems=40)
    write_data(tmp_path / "all", whole)
    for seed in range(3):
        cats = {
            c: {**spec, "runs": [r for r in spec["runs"] if r.seed == seed]}
            for c, spec in whole.categories.items()
        }
        piece = StudyData(whole.name, True, 0.95, cats, whole.timings[seed : seed + 1])
        write_data(tmp_path / "merged", piece, merge=True)
    (tmp_path / "merged" / "timings.jsonl").write_text(
        (tmp_path / "all" / "timings.jsonl").read_text()
    )
    a, b = read_data(tmp_path / "all"), read_data(tmp_path / "merged")
    assert [r.name for r in a.categories["C"]["runs"]] == [
        r.name for r in b.categories["C"]["runs"]
    ]
    assert (
        make_summary(a, tmp_path / "sa").read_text() == make_summary(b, tmp_path / "sb").read_text()
    )
    other = _data({"C": {"RL": 0.5}}, problems=41)
    with pytest.raises(DataError, match="other problems"):
        write_data(tmp_path / "merged", other, merge=True)


def test_bases_are_shown_against_the_profiles_targets_and_a_newer_export_may_add_them(tmp_path):
    """Targets are descriptive: each base's pass@1 and pass@(n, T_max) with where it falls; an
    export that adds a descriptive key merges into a folder made without it."""
    data = _data({}, problems=40)
    write_data(tmp_path / "kept", data)  # an earlier export, without targets
    spec = data.categories["C"]
    spec["targets"] = {"pass1": [0.30, 0.40], "pass_n": [0.70, 0.85]}
    write_data(tmp_path / "kept", data, merge=True)
    text = make_summary(read_data(tmp_path / "kept"), tmp_path / "out").read_text()
    line = next(x for x in text.splitlines() if x.startswith("The bases against"))
    base0 = next(r for r in spec["runs"] if r.role == "base" and r.seed == 0)
    pass1 = float((base0.correct[:, -1] / base0.n).mean())
    passn = float((base0.correct[:, -1] > 0).mean())
    where = "inside" if 0.30 <= pass1 <= 0.40 else ("below" if pass1 < 0.30 else "above")
    assert f"base seed 0: pass@1 {pass1:.3f} (target 0.30-0.40: {where})" in line
    assert f"pass@(16, 5) {passn:.3f} (target 0.70-0.85: " in line
    assert line.count("base seed") == 3
    assert "The bases against" not in text.split("## C:")[0]  # A has no targets


def test_cost_counts_every_attempt_and_says_what_a_killed_stage_lost(tmp_path):
    """A unit interrupted and resumed costs both attempts; an interrupted stage has no stage line,
    so its wall time is missing while its unit time is not."""
    from passkt.study.summary import cost_rows

    timings = [
        {"stage": "base", "unit": "base", "seconds": 600.0, "status": "done"},
        {"stage": "base", "unit": "base-p1", "seconds": 300.0, "status": "aborted"},
        {"stage": "base", "unit": "base-p1", "seconds": 240.0, "status": "done"},
        {"stage": "base", "unit": "*", "seconds": 250.0, "status": "stage"},  # the resumed stage
        {"stage": "train", "unit": "grpo/C/s0", "seconds": 120.0, "status": "done"},
        {"stage": "train", "unit": "*", "seconds": 121.0, "status": "stage"},
        {"stage": "report", "unit": "*", "seconds": 3.0, "status": "stage"},
    ]
    rows = {r["stage"]: r for r in cost_rows(timings)}
    assert set(rows) == {"base", "train"}
    assert (rows["base"]["units"], rows["base"]["attempts"]) == (2, 3)
    assert rows["base"]["unit_seconds"] == 1140.0 and rows["base"]["wall_seconds"] == 250.0
    data = _data({}, problems=20)
    data = StudyData(data.name, data.per_seed, data.level, data.categories, timings)
    text = make_summary(data, tmp_path).read_text().split("## Cost")[1]
    assert "In all 0.3 hours of unit time and 0.1 hours of recorded stage wall time" in text
    assert "| base | 2 | 3 | 19.0 | 4.2 |" in text


def test_the_power_line_quotes_passkt_powers_own_answer_per_base_and_the_seed_level_power(
    tmp_path,
):
    """Each base's number is what ``passkt power BASE --delta 0.04 --sims 400`` computes from
    that base's counts; with 3 bases the seed-level test's power follows, and a larger effect
    of the same study has more of it."""
    from passkt.eval.power import required_problems, smoothed_rates
    from passkt.study.claim import POWER_DELTA, POWER_SIMS

    data = _data({"C": {"RL": 0.5}}, problems=200, n=16)
    text = make_summary(data, tmp_path).read_text()
    line = next(x for x in text.split("## C:")[1].splitlines() if x.startswith("Power"))
    base1 = next(r for r in data.categories["C"]["runs"] if r.role == "base" and r.seed == 1)
    rates = smoothed_rates(base1.correct[:, -1], base1.n)
    need = required_problems(rates, delta=POWER_DELTA, n=16, k=16, level=0.05, sims=POWER_SIMS)
    assert f"base seed 1 (pass@(16, 5) {need.base_pass_at_k:.3f} under its smoothed" in line
    assert f"needs {need.problems} problems (power {need.achieved:.2f})" in line
    assert "the 200 problems used detect a gain of +" in line and "and a loss of -" in line
    assert "The seed-level test over these 3 bases and 200 problems finds a +0.04 change" in line
    assert "and a -0.04 change with power" in line
    two = make_summary(_data({"C": {"RL": 0.5}}, seeds=2, problems=200), tmp_path / "two")
    assert "gives a verdict only from 3 bases" in two.read_text()


def test_the_claim_sentence_says_whether_other_recipes_widen_bridge_too():
    same = _data({"A": {"RL": 0.0}, "C": {"RL": 2.5, "SFT": 2.5}}, problems=400, n=8)
    sentence = claim_sentence(same, verdicts(same))
    assert "is supported" in sentence and "not specific to RL (SFT gain too)" in sentence
    only = _data({"A": {"RL": 0.0}, "C": {"RL": 2.5, "SFT": 0.0}}, problems=400, n=8)
    sentence = claim_sentence(only, verdicts(only))
    assert "same cell, for comparison: SFT − base" in sentence and sentence.endswith(
        ", inconclusive."
    )
    assert "RL − SFT on bridge +" in sentence


def _reliability_study(base_rates, trained_rates, seeds=3, n=16, seed=0):
    """Category C only: every seed's base draws from ``base_rates``, its RL from
    ``trained_rates`` (per-problem success rates, the same at every T)."""
    rng = np.random.default_rng(seed)
    runs = [_run("base", s, base_rates, n, rng) for s in range(seeds)]
    runs += [_run("RL", s, trained_rates, n, rng) for s in range(seeds)]
    spec = {
        "env_id": "BridgeQA-v0",
        "env_kwargs": {},
        "task_ids": [f"C-{i}" for i in range(len(base_rates))],
        "budgets": BUDGETS,
        "runs": runs,
    }
    return StudyData("synthetic", True, 0.95, {"C": spec}, [])


@pytest.mark.parametrize(
    "move, words",
    [
        ("sharpen", "more reliable; wider not shown"),  # solvable problems solved more often
        ("spread", "wider but less reliable"),  # unsolved ones now solved, the rest less often
    ],
)
def test_the_three_way_table_reads_boundary_and_reliability_apart(move, words):
    """Generated from rates with a known effect on the boundary and on pass^8: the sentence and
    every T's row of the table say which of the two moved."""
    from passkt.study.summary import _change_section, change_sentences

    rng = np.random.default_rng(7)
    solvable = rng.uniform(0.5, 0.8, size=200)
    base = np.concatenate([np.zeros(200), solvable])
    if move == "sharpen":
        trained = np.concatenate([np.zeros(200), np.minimum(solvable + 0.2, 1.0)])
    else:
        trained = np.concatenate([np.full(200, 0.3), solvable - 0.3])
    data = _reliability_study(base, trained)
    (sentence,) = change_sentences(data)
    assert sentence.startswith(
        "Secondary, uncorrected: on C (BridgeQA-v0) at T = 5, RL − base: boundary pass@16 "
    )
    assert sentence.endswith(f": {words}.")
    section = _change_section(data, data.categories["C"])
    rows = [line for line in section.splitlines() if line.startswith("| RL − base |")]
    assert len(rows) == len(BUDGETS) and all(row.endswith(f"| {words} |") for row in rows)
    assert "| boundary pass@(16, T) | pass@(1, T) | pass^8(T) | reading |" in section


@pytest.mark.parametrize("draw", range(6))
def test_the_claims_own_cells_are_primary_and_the_rest_share_one_holm_family(draw):
    """RL's boundary on bridge and on math are the claim's tests: read at the level as they are
    (the list says the same as the claim), and left out of the Holm family of the others."""
    from passkt.eval.intervals import holm

    rng = np.random.default_rng(draw)
    effects = {
        cat: {kind: float(rng.normal(0.0, 1.0)) for kind in ("SFT", "RL", "RFT")}
        for cat in ("A", "C")
    }
    data = _data(effects, seeds=int(rng.integers(3, 6)), problems=120, n=8, seed=draw, margin=0.04)
    found = verdicts(data)
    primary = [v for v in found if v.primary]
    assert {(v.cat, v.kind, v.metric.startswith("pass@(8,")) for v in primary} == {
        ("A", "RL", True),
        ("C", "RL", True),
    }
    for v in primary:
        assert v.holm_p is None and v.word == v.test.verdict(0.04)
        assert "the claim's own test, primary" in v.sentence("env")
    secondary = [v for v in found if not v.primary]
    adjusted = holm(np.array([v.test.p_value for v in secondary]))
    assert [v.holm_p for v in secondary] == pytest.approx(adjusted.tolist())
    claim = claim_tests(data)
    for v in primary:  # the list's line and the claim read one test
        t = claim[v.cat]
        assert (v.test.estimate, v.test.lower, v.test.upper) == pytest.approx(
            (t.estimate, t.lower, t.upper)
        )
