"""The base-choosing rule (passkt.study.calibrate): its properties over generated calibration
curves, and the hook inside a real pretraining (kept steps, stop, resume without re-evaluating).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from nano_pretrain import nano_config

from passkt.study.calibrate import Calibrator, Point, choose, distance
from passkt.study.testbed.pretrain import PretrainConfig, kept_step_dir, pretrain

RANGE = st.tuples(st.floats(0, 1), st.floats(0, 1)).map(sorted)


@st.composite
def curves(draw):
    """Kept steps with pass@1 and boundary, rising with noise (as pretraining does), or not."""
    size = draw(st.integers(1, 12))
    steps = sorted(draw(st.sets(st.integers(1, 100), min_size=size, max_size=size)))
    rates = draw(st.lists(st.floats(0, 1), min_size=size, max_size=size))
    gaps = draw(st.lists(st.floats(0, 1), min_size=size, max_size=size))
    if draw(st.booleans()):
        rates = sorted(rates)
    return [Point(s, r * g, r) for s, r, g in zip(steps, rates, gaps, strict=True)]


@settings(max_examples=400, deadline=None)
@given(curves(), RANGE, RANGE, st.booleans())
def test_the_rule_meets_the_boundary_target_first(points, span_n, span_1, final):
    target = {"pass_n": span_n, "pass1": span_1}
    choice = choose(points, target, final=final)
    chosen = next(p for p in points if p.step == choice.step)
    inside = [p for p in points if distance(p.pass_n, span_n) == 0]
    both = [p for p in inside if distance(p.pass1, span_1) == 0]
    # decided exactly when a boundary passed its range or pretraining ended
    assert choice.decided == (final or any(p.pass_n > span_n[1] for p in points))
    if both:  # the earliest step inside both targets
        assert chosen == min(both, key=lambda p: p.step)
    elif inside:  # the boundary target first; the nearest pass@1 among those
        assert chosen in inside
        assert distance(chosen.pass1, span_1) == min(distance(p.pass1, span_1) for p in inside)
    else:  # nothing inside: the nearest boundary
        assert distance(chosen.pass_n, span_n) == min(distance(p.pass_n, span_n) for p in points)
    # the choice never depends on the order the rows were read in
    assert choose(points[::-1], target, final=final) == choice


@settings(max_examples=200, deadline=None)
@given(curves(), RANGE, RANGE)
def test_a_later_step_never_revives_an_earlier_one(points, span_n, span_1):
    """What lets an export keep only the current choice and the unevaluated steps: adding
    later points changes the choice only to one of them."""
    target = {"pass_n": span_n, "pass1": span_1}
    for cut in range(1, len(points)):
        before = choose(points[:cut], target, final=False).step
        after = choose(points, target, final=False).step
        assert after == before or after > points[cut - 1].step


def _config(tmp_path, **overrides) -> PretrainConfig:
    """A nano pretraining that keeps and logs often enough for the calibration's hook."""
    return nano_config(
        tmp_path, **{**dict(max_steps=40, eval_every=10, save_every=5, log_every=5), **overrides}
    )


def test_the_hook_stops_pretraining_once_every_category_is_decided(tmp_path):
    """A real pretraining with a calibrator whose evaluation reads the kept step's weights: it
    keeps every 10th step, evaluates from step 10, stops at the first step whose boundary is
    above its range, and a resume neither trains nor evaluates again."""
    config = _config(tmp_path)
    folder = tmp_path / "run"
    calls = []

    def evaluate(cat, step, model):
        assert (model / "model.safetensors").is_file()
        calls.append((cat, step))
        # 10 problems, 4 samples: more solved the later the step (20 -> 4, 30 -> 6 ...)
        solved = {"A": step // 5, "C": step // 10}[cat]
        return np.array([4] * min(solved, 10) + [0] * (10 - min(solved, 10)))

    targets = {"A": {"pass_n": [0.3, 0.5]}, "C": {"pass_n": [0.1, 0.2], "pass1": [0.2, 0.3]}}
    hook = Calibrator(folder, targets, from_step=10, n=4, evaluate=evaluate)
    result = pretrain(config, keep_every=10, on_keep=hook)
    # A's boundary: 0.2, 0.4 (inside), 0.6 (above: decided at 30); C's: 0.1, 0.2, 0.3 (above at 30)
    assert result.steps == 30
    assert sorted(p.name for p in (folder / "steps").iterdir()) == [
        "step-10", "step-20", "step-30",
    ]  # fmt: skip
    assert calls == [("A", 10), ("C", 10), ("A", 20), ("C", 20), ("A", 30), ("C", 30)]
    chosen = hook.choices(final=False)
    assert chosen["A"]["step"] == 20 and chosen["A"]["reason"].startswith("boundary and pass@1")
    assert chosen["C"]["step"] == 20  # pass@1 0.2 at step 20: both inside
    rows = [json.loads(x) for x in (folder / "calibration.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    # the kept model is the weights of that step (a fresh run stopped there has them too)
    stopped = pretrain(_config(tmp_path / "b", stop_step=20, max_steps=40))
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(kept_step_dir(folder, 20))
    b = AutoModelForCausalLM.from_pretrained(stopped.model_dir)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    again = pretrain(config, resume=True, keep_every=10, on_keep=hook)
    assert again.steps == 30 and len(calls) == 6


def test_a_step_kept_but_not_evaluated_before_a_kill_is_evaluated_on_resume(tmp_path):
    config = _config(tmp_path, max_steps=20)
    folder = tmp_path / "run"
    pretrain(config, keep_every=10)  # kept steps 10 and 20, no hook: killed before evaluating
    calls = []

    def evaluate(cat, step, model):
        calls.append(step)
        return np.array([0, 0])

    hook = Calibrator(folder, {"C": {"pass_n": [0.5, 1.0]}}, from_step=0, n=2, evaluate=evaluate)
    pretrain(config, resume=True, keep_every=10, on_keep=hook)
    assert calls == [10, 20]
    assert hook.choices(final=True)["C"]["reason"].startswith("no kept step put the boundary")
    with pytest.raises(ValueError, match="keep_every must be a multiple of save_every"):
        pretrain(_config(tmp_path / "c"), keep_every=7)


def test_a_study_with_bases_and_no_evaluation_yet_has_a_summary(tmp_path):
    """A study in pieces exports its calibrated bases before anything is evaluated: the summary
    then says there is no verdict yet and shows each base's calibration, read from data/."""
    from passkt.study.counts import StudyData, read_data, write_data
    from passkt.study.summary import make_summary

    points = [[3000, 0.05, 0.41], [3500, 0.09, 0.63], [4000, 0.14, 0.77], [4500, 0.2, 0.86]]
    choice = choose([Point(*p) for p in points], {"pass_n": [0.72, 0.82]}, final=False)
    spec = {
        "env_id": "BridgeQA-v0", "env_kwargs": {}, "task_ids": ["a", "b"], "budgets": [0, 5],
        "runs": [], "targets": {"pass1": [0.28, 0.42], "pass_n": [0.72, 0.82]},
        "calibration": {"0": {"step": choice.step, "reason": choice.reason, "points": points,
                              "n": 64, "problems": 100}},
    }  # fmt: skip
    write_data(tmp_path / "data", StudyData("s", True, 0.95, {"C": spec}, [], 0.04))
    text = make_summary(read_data(tmp_path / "data"), tmp_path).read_text()
    assert "No verdict yet" in text and "No evaluation of this category has finished yet" in text
    row = next(line for line in text.splitlines() if line.startswith("| base seed 0 |"))
    assert "| 4000 |" in row and "0.140 (below)" in row and "0.770 (inside)" in row
    assert "3000, 3500, 4000, 4500" in row
    assert (tmp_path / "figures" / "calibration-C.png").is_file()
