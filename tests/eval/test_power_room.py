"""``passkt power`` near the ceiling: the refusal names the value the report shows and suggests
flags that answer, and each suggestion, run, does answer."""

from __future__ import annotations

import math
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


@pytest.fixture(scope="module")
def three_bases(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bases")
    runs = []
    for seed in range(3):
        out = folder / f"base{seed}"
        evaluate(
            "BridgeQA-v0", "scripted:heuristic", n=8, budgets=(0, 2), limit=40, seed=seed,
            out_dir=out, progress=False,
        )  # fmt: skip
        runs.append(str(out))
    return runs


def test_power_prints_the_upper_bound_and_the_realistic_power_and_says_which(three_bases):
    done = power(
        *three_bases, "--delta", "-0.3", "--spread", "0.1", "--replicates", "4",
        "--seeds-for", "0.5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    upper = float(done.stdout.split("exactly -0.3): power ")[1].split()[0])
    realistic = float(
        done.stdout.split("capped at the room its base leaves): power ")[1].split()[0]
    )
    assert "over 4 replicates (cycling through these 3 bases" in done.stdout
    assert realistic < upper  # replicates whose changes differ widen the interval
    assert "- replicates for power 0.5 (realistic): " in done.stdout
    bare = power(*three_bases, "--delta", "-0.3")
    assert "realistic: give --spread SD" in bare.stdout


def test_past_its_search_power_gives_the_t_tests_replicate_count(three_bases):
    """A spread far beyond the change: 16 replicates do not reach the power, and the answer
    gives the count a t-test on the replicates' changes needs, with the sd it used."""
    from passkt.eval.power import seeds_needed_t

    done = power(*three_bases, "--delta", "-0.05", "--spread", "0.3", "--seeds-for", "0.8")
    assert done.returncode == 0, done.stderr
    line = done.stdout.split("- replicates for power 0.8 (realistic): ")[1].splitlines()[0]
    assert line.startswith("more than 16 (about "), line
    count = int(line.split("about ")[1].split()[0])
    sd = float(line.split(", sd ")[1].split(":")[0])
    noise = float(line.split("evaluation noise, ")[1].rstrip(")"))
    assert noise > 0 and sd == pytest.approx(math.hypot(0.3, noise), abs=1e-3)
    assert abs(count - seeds_needed_t(-0.05, sd, power=0.8)) <= 2  # sd printed to 3 decimals


def test_a_spread_of_changes_lowers_the_seed_level_power():
    import numpy as np

    from passkt.eval.power import seed_level_power

    rng = np.random.default_rng(0)
    bases = [rng.beta(0.5, 0.5, size=300) for _ in range(3)]
    study = dict(delta=-0.06, problems=200, n=8, k=8, sims=400)
    exact = seed_level_power(bases, **study)
    spread = seed_level_power(bases, spread=0.06, **study)
    wide = seed_level_power(bases, spread=0.5, **study)
    assert exact > spread > wide
    assert wide < 0.25  # a spread far beyond the change: the test finds it rarely
    more = seed_level_power(bases, spread=0.06, replicates=9, **study)
    assert more > spread  # more replicates narrow the interval
