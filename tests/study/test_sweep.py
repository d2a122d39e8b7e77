"""The base-strength sweep (passkt.study.sweep) over study folders' compare metrics and the
seed-level verdicts of their report data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from passkt.study import sweep
from passkt.study.claim import verdicts
from passkt.study.summary import SHARED, RunCounts, StudyData, read_data, write_data

PROBLEMS = 100


def _counts(role: str, seed: int, boundary: int) -> RunCounts:
    """n = 2 samples at T = 0 and 3: the first ``boundary`` problems solved once, the rest never."""
    correct = np.zeros((PROBLEMS, 2), dtype=np.int64)
    correct[:boundary] = 1
    zeros = np.zeros_like(correct)
    return RunCounts(f"{role} s{seed}", role, seed, 2, correct, zeros, zeros)


def _report_data(folder: Path, base: int, trained: dict) -> None:
    """The report's data/ of one base shared by every training seed, boundaries as given."""
    runs = [_counts("base", SHARED, base)]
    runs += [_counts(r, s, b) for r, bs in trained.items() for s, b in enumerate(bs)]
    ids = [f"C-{i}" for i in range(PROBLEMS)]
    spec = {"env_id": "BridgeQA-v0", "env_kwargs": {}, "task_ids": ids, "budgets": [0, 3]}
    data = StudyData("testbed", False, 0.95, {"C": {**spec, "runs": runs}}, [])
    write_data(folder / "report" / "data", data)


def _study(
    folder: Path, steps: int, base: tuple[float, int], trained: dict, swap: int, data: bool = True
) -> Path:
    """A study folder as `passkt study run` leaves it: its profile, per-seed metrics, timings and
    the report's data/ (``data``)."""
    pre = {"size": "micro", "max_steps": steps, "seed": 1}
    profile = {"source": "testbed", "profile": {"name": "testbed", "base": {"pretrain": pre}}}
    folder.mkdir(parents=True)
    (folder / "profile.json").write_text(json.dumps(profile))
    for seed, boundaries in enumerate(zip(*trained.values(), strict=True)):
        runs = {"base": {"pass@1": base[0], "pass@n": 0.5, "boundary": base[1]}}
        for role, boundary in zip(trained, boundaries, strict=True):
            runs[role] = {"pass@1": 0.0, "pass@n": 0.0, "boundary": boundary}
        metrics = {"runs": runs, "noise_floor": {"max_swap": swap, "max_abs_gap@1": 0.01}}
        path = folder / "compare" / "C" / f"seed{seed}" / "metrics.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(metrics))
    lines = [
        {"stage": "train", "unit": "grpo/C/s0", "seconds": 120.0, "status": "done"},
        {"stage": "train", "unit": "grpo/C/s0", "seconds": 60.0, "status": "aborted"},
        {"stage": "train", "unit": "*", "seconds": 999.0, "status": "stage"},
    ]
    (folder / "timings.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if data:
        _report_data(folder, base[1], trained)
    return folder


def _cell(v) -> str:
    t = v.test
    return f"{t.estimate:+.3f} [{t.lower:+.3f}, {t.upper:+.3f}] {v.word}"


def test_sweep_orders_bases_by_strength_and_shows_changes_beside_the_floor(tmp_path):
    strong = _study(tmp_path / "strong", 6000, (0.35, 80), {"RL": [78, 76], "SFT": [85, 83]}, 9)
    weak = _study(tmp_path / "weak", 900, (0.02, 30), {"RL": [33, 35], "SFT": [40, 44]}, 7)
    path = sweep.make_sweep([strong, weak], tmp_path / "out")
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| C |")]
    verdict_rows, rows, ci_rows = rows[:2], rows[2:4], rows[4:]
    assert len(ci_rows) == 2 and "900 steps" in rows[0] and "6000 steps" in rows[1]  # weak first
    assert "900 steps" in verdict_rows[0] and "900 steps" in ci_rows[0]
    # The room at k = n (P - base boundary) beside the base; two training seeds of one base.
    assert "| 0.020 | 70 of 100 | 2 training seeds of one base |" in verdict_rows[0]
    assert "| 30 | 70 of 100 | 2 | - | ±7 |" in rows[0]  # this floor names no base evaluations
    assert "| 0.020 |" in rows[0] and "| ±7 | +12.0 [+10, +14] | +4.0 [+3, +5] | - |" in rows[0]
    assert "| ±9 | +4.0 [+3, +5] | -3.0 [-4, -2] | - |" in rows[1]
    # pass@1 change beside it (every trained run here has pass@1 0): 0 - 0.35 on every seed.
    assert rows[1].endswith("| -0.350 [-0.350, -0.350] | -0.350 [-0.350, -0.350] | - |")
    # train: 180 unit seconds (both attempts) beside the stage's own 999 wall seconds.
    assert "| 3.0 / 16.6 | 3.0 / 16.6 |" in text
    # Per seed: each change with its CI where the compare stage gave one.
    assert ci_rows[1].endswith("| ±9 | s0: +5; s1: +3 | s0: -2; s1: -4 | - |")
    # Two replicates: seed-level estimates, no verdict; the floor is no rule for anything.
    assert verdict_rows[0].count("not replicated") == 4 and "finding" not in text.lower()
    assert "noise floor (descriptive)" in text and "not the rule" in text
    assert (tmp_path / "out" / "sweep_C.png").stat().st_size > 1000
    # The figure: boundary change (left) and pass@1 change (right), weak base first on x.
    left, right = sweep.figure_category(sweep.read_study(weak) + sweep.read_study(strong), "C").axes
    rl = next(c for c in left.containers if c.get_label() == "RL")
    assert list(rl.lines[0].get_ydata()) == [4.0, -3.0]
    rl = next(c for c in right.containers if c.get_label() == "RL")
    assert list(rl.lines[0].get_ydata()) == pytest.approx([-0.02, -0.35])


def test_the_verdicts_are_the_study_summarys_seed_level_test(tmp_path):
    folder = _study(tmp_path / "s", 3000, (0.2, 60), {"RL": [75, 72, 78], "SFT": [50, 48, 53]}, 4)
    (point,) = sweep.read_study(folder)
    found = verdicts(read_data(folder / "report" / "data"))
    assert [v.kind for v in found] == ["SFT", "SFT", "RL", "RL"]  # pass@1, then pass@(2, 3)
    for v in found:
        which = "pass@1" if v.metric == "pass@(1, 3)" else "boundary"
        assert v.metric in ("pass@(1, 3)", "pass@(2, 3)") and point.verdicts[v.kind][which] == v
    rl, sft = point.verdicts["RL"]["boundary"], point.verdicts["SFT"]["boundary"]
    assert rl.test.verdict() == "gain" and sft.test.verdict() == "loss"
    # secondary: a gain or loss stands only if it survives Holm's correction over the four
    assert rl.word == ("gain" if rl.survives else "inconclusive")
    assert sft.word == ("loss" if sft.survives else "inconclusive")
    assert (point.problems, point.room, point.per_seed) == (100, 40, False)
    row = sweep.verdict_table([point]).splitlines()[-1]
    cells = [_cell(point.verdicts[r][w]) for w in ("boundary", "pass@1") for r in ("SFT", "RL")]
    assert row.endswith(f"| {cells[0]} | {cells[1]} | - | {cells[2]} | {cells[3]} | - |")
    text = sweep.make_sweep([folder], tmp_path / "out").read_text()
    assert _cell(point.verdicts["RL"]["boundary"]) in text
    assert f" {rl.word} |" in text
    assert "finding" not in text.lower()
    # One base: its replicates are training seeds from it, so the verdict is about that base.
    assert "a verdict is about this base, not the recipe" in text
    assert "not comparable as a strength-vs-widening curve" in text


def test_sweep_names_a_folder_that_is_not_a_finished_study(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert sweep.main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no profile.json" in capsys.readouterr().err
    # Compare metrics but neither the report's data/ nor evaluations to read the verdicts from.
    bare = _study(tmp_path / "bare", 900, (0.02, 30), {"RL": [33]}, 7, data=False)
    assert sweep.main([str(bare), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bare}: no report/data/study.json" in err and "passkt study report" in err


def test_a_base_given_as_a_model_is_labelled_with_the_profile_name_and_its_path(tmp_path):
    folder = _study(tmp_path / "snap", 0, (0.1, 50), {"RL": [51]}, 3)
    stored = json.loads((folder / "profile.json").read_text())
    stored["profile"] |= {"name": "regime-d3000", "base": {"model": "runs/cal/d/model-3000"}}
    (folder / "profile.json").write_text(json.dumps(stored))
    (point,) = sweep.read_study(folder)
    assert point.label == "regime-d3000: runs/cal/d/model-3000"


def test_a_point_carries_its_cis_and_what_its_floor_is_made_of(tmp_path):
    folder = _study(tmp_path / "regime", 9000, (0.29, 88), {"RL": [99], "SFT": [96]}, 4)
    path = folder / "compare" / "C" / "seed0" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["seed"] = 2
    metrics["noise_floor"] |= {
        "evaluations": 4,
        "names": ["base", "base (eval 1)", "base p1", "base p1 (eval 1)"],
    }
    metrics["vs_base"] = {
        "RL": {"boundary_difference_ci": [4.15, 17.85], "finding_boundary": True},
        "SFT": {"boundary_difference_ci": [-0.5, 16.5], "finding_boundary": False},
    }
    path.write_text(json.dumps(metrics))
    (point,) = sweep.read_study(folder)
    assert point.seeds == [2] and point.floor_from == "4 evals, 2 pretraining seeds"
    assert point.boundary_cis["RL"] == [(4.15, 17.85)]
    row = sweep.ci_table([point]).splitlines()[-1]
    assert "| s2: +8 [-0.5, +16.5] | s2: +11 [+4.2, +17.9] |" in row
    # The figure draws each kind's CI envelope around its boundary change, not the seed range.
    left, _ = sweep.figure_category([point], "C").axes
    pale = [c for c in left.containers if c.get_label() == "_nolegend_"]
    segments = sorted(tuple(seg[:, 1]) for c in pale for seg in c.lines[2][0].get_segments())
    assert segments == [pytest.approx((-0.5, 16.5)), pytest.approx((4.15, 17.85))]
