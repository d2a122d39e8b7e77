"""The base-strength sweep (passkt.study.sweep) over study folders' compare metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from passkt.study import sweep


def _study(folder: Path, steps: int, base: tuple[float, int], trained: dict, swap: int) -> Path:
    """A study folder as `passkt study run` leaves it: its profile, per-seed metrics and timings."""
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
    return folder


def test_sweep_orders_bases_by_strength_and_shows_changes_beside_the_floor(tmp_path):
    strong = _study(tmp_path / "strong", 6000, (0.35, 80), {"RL": [78, 76], "SFT": [85, 83]}, 9)
    weak = _study(tmp_path / "weak", 900, (0.02, 30), {"RL": [33, 35], "SFT": [40, 44]}, 7)
    path = sweep.make_sweep([strong, weak], tmp_path / "out")
    text = path.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| C |")]
    rows, ci_rows = rows[:2], rows[2:]
    assert len(ci_rows) == 2 and "900 steps" in rows[0] and "6000 steps" in rows[1]  # weak first
    assert "| 2 | - | ±7 |" in rows[0]  # training seeds; this floor names no base evaluations
    assert "| 0.020 |" in rows[0] and "| ±7 | +12.0 [+10, +14] | +4.0 [+3, +5] | - |" in rows[0]
    assert "| ±9 | +4.0 [+3, +5] | -3.0 [-4, -2] | - |" in rows[1]
    # pass@1 change beside it (every trained run here has pass@1 0): 0 - 0.35 on every seed.
    assert rows[1].endswith("| -0.350 [-0.350, -0.350] | -0.350 [-0.350, -0.350] | - |")
    # train: 180 unit seconds (both attempts) beside the stage's own 999 wall seconds.
    assert "| 3.0 / 16.6 | 3.0 / 16.6 |" in text
    # Per seed: each change with its CI where the compare stage gave one, and the findings.
    assert ci_rows[1].endswith("| ±9 | s0: +5; s1: +3; finding on 0/2 | s0: -2; s1: -4; "
                               "finding on 0/2 | - |")  # fmt: skip
    assert (tmp_path / "out" / "sweep_C.png").stat().st_size > 1000
    # The figure: boundary change (left) and pass@1 change (right), weak base first on x.
    left, right = sweep.figure_category(sweep.read_study(weak) + sweep.read_study(strong), "C").axes
    rl = next(c for c in left.containers if c.get_label() == "RL")
    assert list(rl.lines[0].get_ydata()) == [4.0, -3.0]
    rl = next(c for c in right.containers if c.get_label() == "RL")
    assert list(rl.lines[0].get_ydata()) == pytest.approx([-0.02, -0.35])


def test_sweep_names_a_folder_that_is_not_a_finished_study(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert sweep.main([str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no profile.json" in capsys.readouterr().err


def test_a_base_given_as_a_model_is_labelled_with_the_profile_name_and_its_path(tmp_path):
    folder = _study(tmp_path / "snap", 0, (0.1, 50), {"RL": [51]}, 3)
    stored = json.loads((folder / "profile.json").read_text())
    stored["profile"] |= {"name": "regime-d3000", "base": {"model": "runs/cal/d/model-3000"}}
    (folder / "profile.json").write_text(json.dumps(stored))
    (point,) = sweep.read_study(folder)
    assert point.label == "regime-d3000: runs/cal/d/model-3000"


def test_a_point_carries_its_cis_findings_and_what_its_floor_is_made_of(tmp_path):
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
    assert point.boundary_cis["RL"] == [(4.15, 17.85)] and point.findings == {"RL": 1, "SFT": 0}
    row = sweep.ci_table([point]).splitlines()[-1]
    assert "| s2: +8 [-0.5, +16.5]; finding on 0/1 | s2: +11 [+4.2, +17.9]; finding on 1/1 |" in row
    # The figure draws each kind's CI envelope around its boundary change, not the seed range.
    left, _ = sweep.figure_category([point], "C").axes
    pale = [c for c in left.containers if c.get_label() == "_nolegend_"]
    segments = sorted(tuple(seg[:, 1]) for c in pale for seg in c.lines[2][0].get_segments())
    assert segments == [pytest.approx((-0.5, 16.5)), pytest.approx((4.15, 17.85))]
