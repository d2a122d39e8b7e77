"""``passkt power`` near the ceiling: the refusal names the value the report shows and suggests
flags that answer, and each suggestion, run, does answer."""

from __future__ import annotations

import subprocess
import sys

import pytest

from passkt.eval.evaluate import evaluate


@pytest.fixture(scope="module")
def near_top(tmp_path_factory):
    out = tmp_path_factory.mktemp("power") / "run"
    evaluate(
        "ComparisonQA-v0", "scripted:heuristic", n=8, budgets=(0, 1, 3), limit=24, out_dir=out,
        progress=False,
    )  # fmt: skip
    return out


def power(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "passkt", "power", *argv, "--sims", "200"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("delta", ["0.3", "0.6", "-0.999"])
def test_no_room_names_the_shown_value_and_each_suggestion_answers(near_top, delta):
    from passkt.eval.estimator import surface
    from passkt.eval.store import load_run

    refused = power(str(near_top), "--delta", delta)
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    shown = surface(load_run(near_top)[1], (8,)).value(8, 3)
    assert f"pass@(8, 3) is {shown:.3f} (as `passkt report` shows it" in line
    groups = line.split("try ", 1)[1].split(" or ")
    assert groups and all(group.startswith("--") for group in groups), line
    for group in groups:
        flags = group.split()
        argv = [str(near_top), *flags] + ([] if "--delta" in flags else ["--delta", delta])
        answered = power(*argv)
        assert answered.returncode == 0, (argv, answered.stderr)
