"""Power analysis (``passkt.eval.power``): its answers hold when checked by fresh simulation.

Each check re-simulates, with another seed, the studies the analysis sized, and asks that the
power it promised is met within 3.8 binomial standard errors (2000 studies: about 0.034 at 0.8).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from passkt.eval.power import (
    power_at,
    required_problems,
    seed_level_power,
    shifted_rates,
    smallest_change,
    smoothed_rates,
    true_pass_at_k,
)

N = 16
SIMS = 2000
SLACK = 3.8 * math.sqrt(0.8 * 0.2 / SIMS)


@pytest.fixture(scope="module")
def base() -> np.ndarray:
    """A base like the study's bridge one: pass@1 near 0.3, most problems solved at k = n."""
    rng = np.random.default_rng(7)
    rates = 1 / (1 + np.exp(-rng.normal(-1.2, 2.0, size=200)))
    return smoothed_rates(rng.binomial(N, rates), N)


@pytest.mark.parametrize(("k", "delta"), [(1, 0.05), (N, 0.04), (N, -0.06), (4, 0.1)])
def test_the_shift_moves_pass_at_k_by_delta(base, k, delta):
    moved = shifted_rates(base, k, delta)
    assert true_pass_at_k(moved, k) - true_pass_at_k(base, k) == pytest.approx(delta, abs=1e-9)
    assert np.all(np.sign(moved - base) == np.sign(delta))  # one direction for every problem


def test_smoothing_keeps_never_solved_problems_possible():
    rates = smoothed_rates(np.array([0, 16, 8]), 16)
    assert rates[0] > 0 and rates[1] < 1 and rates[2] == pytest.approx(0.5)
    with pytest.raises(ValueError, match=r"0\.\.n"):
        smoothed_rates(np.array([17]), 16)


@pytest.mark.parametrize(("k", "delta"), [(1, 0.06), (N, 0.05)])
def test_required_problems_deliver_the_promised_power(base, k, delta):
    answer = required_problems(base, delta=delta, n=N, k=k, sims=SIMS, seed=0)
    trained = shifted_rates(base, k, delta)
    check = power_at(base, trained, problems=answer.problems, n=N, k=k, sims=SIMS, seed=123)
    assert check >= 0.8 - SLACK, (answer.problems, check)
    fewer = power_at(base, trained, problems=answer.problems // 2, n=N, k=k, sims=SIMS, seed=5)
    assert fewer < 0.8 - SLACK, (answer.problems // 2, fewer)  # and it is not wasteful


def test_smallest_change_is_detected_and_half_of_it_is_not(base):
    answer = smallest_change(base, problems=100, n=N, k=N, sims=SIMS, seed=0)
    assert answer.delta > 0 and answer.achieved >= 0.8
    full = shifted_rates(base, N, answer.delta)
    assert power_at(base, full, problems=100, n=N, k=N, sims=SIMS, seed=9) >= 0.8 - SLACK
    half = shifted_rates(base, N, answer.delta / 2)
    assert power_at(base, half, problems=100, n=N, k=N, sims=SIMS, seed=9) < 0.8 - SLACK


@pytest.mark.parametrize("k", [1, N])
def test_without_a_change_the_test_fires_at_most_at_its_level(base, k):
    """A/A: the simulated test is the calibrated one, so 'power' at delta = 0 is its one-sided
    false-positive rate, at most half the two-sided level."""
    rate = power_at(base, base, problems=100, n=N, k=k, sims=SIMS, seed=3)
    assert rate <= 0.025 + 3.8 * math.sqrt(0.025 * 0.975 / SIMS)


def test_bad_requests_are_refused(base):
    with pytest.raises(ValueError, match="leave"):
        shifted_rates(base, N, 0.9)
    with pytest.raises(ValueError, match="power must"):
        required_problems(base, delta=0.05, n=N, k=1, power=1.2)
    with pytest.raises(ValueError, match="k must"):
        power_at(base, base, problems=10, n=N, k=N + 1)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> str:
    from passkt.eval.evaluate import evaluate

    out = tmp_path_factory.mktemp("power") / "base"
    evaluate("BridgeQA-v0", "scripted:heuristic", n=8, limit=30, out_dir=out, progress=False)
    return str(out)


def test_the_command_answers_both_ways(base_run, capsys):
    from passkt.cli import main

    assert main(["power", base_run, "--delta", "0.2", "--sims", "400"]) == 0
    out = capsys.readouterr().out
    assert "problems detect a change of the boundary at T = 5" in out and "| problems |" in out
    assert main(["power", base_run, "--problems", "30", "--k", "1", "--sims", "400"]) == 0
    assert "30 problems detect a change of pass@1" in capsys.readouterr().out


def test_several_bases_give_the_seed_level_power(base_run, tmp_path, capsys):
    from passkt.cli import main
    from passkt.eval.evaluate import evaluate

    other = tmp_path / "base-s1"
    evaluate(
        "BridgeQA-v0", "scripted:heuristic", n=8, limit=30, out_dir=other, progress=False, seed=1
    )
    assert main(["power", base_run, str(other), "--delta", "0.2", "--sims", "200"]) == 0
    out = capsys.readouterr().out
    assert out.count("problems detect a change of the boundary") == 2
    assert "seed-level test over 2 replicates (cycling through these 2 bases" in out
    assert "their 30 shared problems" in out
    line = next(x for x in out.splitlines() if x.startswith("- upper bound"))
    power = float(line.split("power ")[1].split(" ")[0])
    assert 0.0 <= power <= 1.0
    with pytest.raises(SystemExit):
        main(["power", base_run, str(other), "--problems", "30"])
    assert "several runs: give --delta" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--delta", "0.1", "--problems", "5"], "not both"),
        ([], "give --delta"),
        (["--delta", "0.1", "--k", "9"], "--k 9 is more than"),
        (["--delta", "0.1", "--T", "4"], "T = 4 was not evaluated"),
        (["--delta", "0.1", "--power", "2"], "--power: expected a number in (0, 1)"),
    ],
)
def test_bad_requests_are_one_line(base_run, capsys, args, message):
    from passkt.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["power", base_run, *args])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


@pytest.fixture(scope="module")
def three_bases(base) -> list[np.ndarray]:
    """Three pretrainings of one recipe: the same problems, each base a little off the others."""
    rng = np.random.default_rng(3)
    logit = np.log(base) - np.log1p(-base)
    return [1 / (1 + np.exp(-(logit + rng.normal(0, 0.4, size=base.size)))) for _ in range(3)]


def test_seed_level_power_holds_its_level_and_grows_with_the_change_and_the_problems(
    three_bases,
):
    """A/A: a recipe that changes nothing is called a gain at most level / 2 of the time; a
    change that moves every replicate is found more often with more problems, and less often
    than one paired comparison finds it (the between-replicate part has S - 1 = 2 degrees of
    freedom)."""
    common = dict(n=N, k=N, level=0.05, sims=SIMS)
    null = seed_level_power(three_bases, delta=0.0, problems=150, **common)
    assert null <= 0.025 + 3.8 * math.sqrt(0.025 * 0.975 / SIMS)
    small = seed_level_power(three_bases, delta=0.06, problems=100, **common)
    large = seed_level_power(three_bases, delta=0.06, problems=800, **common)
    assert small < large
    assert large > 0.8  # the test has power, not only a level
    one = power_at(three_bases[0], shifted_rates(three_bases[0], N, 0.06), problems=100, **common)
    assert small < one


def test_seed_level_power_is_met_by_a_fresh_simulation(three_bases):
    """The promised power, re-simulated with another seed, within binomial tolerance."""
    common = dict(delta=0.05, problems=200, n=N, k=N, level=0.05, sims=SIMS)
    promised = seed_level_power(three_bases, seed=0, **common)
    again = seed_level_power(three_bases, seed=1, **common)
    tolerance = 3.8 * math.sqrt(2 * promised * (1 - promised) / SIMS)
    assert abs(again - promised) <= tolerance


def test_seed_level_power_names_bad_input(three_bases):
    with pytest.raises(ValueError, match="same problems"):
        seed_level_power([three_bases[0], three_bases[1][:50]], delta=0.04, problems=50, n=N, k=N)
    with pytest.raises(ValueError, match="leave"):
        seed_level_power(three_bases, delta=0.9, problems=50, n=N, k=N)


def test_t_test_power_is_the_noncentral_t_and_seeds_needed_t_the_fewest_reaching_it():
    """The quadrature power equals scipy's noncentral t at the seed-level test's critical value,
    and the count is the fewest replicates that reach the power, over a generated grid of
    changes, spreads, levels, powers and counts."""
    from scipy import stats

    from passkt.eval.intervals import t_quantile
    from passkt.eval.power import seeds_needed_t, t_test_power

    rng = np.random.default_rng(0)
    for _ in range(60):
        delta = float(rng.uniform(0.005, 0.2)) * rng.choice([-1, 1])
        sd = abs(delta) * float(rng.uniform(0.5, 5.0))  # noncentralities scipy computes
        level, power = float(rng.choice([0.01, 0.05, 0.1])), float(rng.choice([0.6, 0.8, 0.9]))
        for count in map(int, rng.integers(2, 60, size=3)):
            df, nc = count - 1, abs(delta) * np.sqrt(count) / sd
            crit = t_quantile(1 - level, df)
            far = stats.nct.cdf(-crit, df, nc)  # below 1e-20 where scipy returns nan
            exact = stats.nct.sf(crit, df, nc) + (0.0 if np.isnan(far) else far)
            assert t_test_power(delta, sd, count, level=level) == pytest.approx(exact, abs=1e-4)
        count = seeds_needed_t(delta, sd, power=power, level=level)
        assert count is not None and count >= 3
        assert t_test_power(delta, sd, count, level=level) >= power
        if count > 3:
            assert t_test_power(delta, sd, count - 1, level=level) < power
    assert seeds_needed_t(0.04, 1.0, most=50) is None
    assert seeds_needed_t(0.0, 0.1) is None
    with pytest.raises(ValueError, match="sd"):
        seeds_needed_t(0.04, -0.1)


@pytest.mark.parametrize("draw", range(8))
def test_evaluation_sd_is_the_sd_of_a_simulated_replicates_change(draw):
    """Over generated rates, samples per problem, k and problem counts, the exact per-replicate
    evaluation sd matches the sd of many simulated changes (fresh problems and counts for both
    evaluations at the same rates), within 5 % (about 4.5 standard errors at 5000 draws)."""
    from passkt.eval.estimator import pass_at_k_array
    from passkt.eval.power import evaluation_sd

    rng = np.random.default_rng(100 + draw)
    a, b = rng.uniform(0.2, 3.0, size=2)
    rates = rng.beta(a, b, size=int(rng.integers(20, 400)))
    n = int(rng.choice([1, 4, 16, 64]))
    k, problems = int(rng.integers(1, n + 1)), int(rng.integers(5, 300))
    sims = 5000
    drawn = rng.integers(rates.size, size=(sims, problems))
    base = pass_at_k_array(n, rng.binomial(n, rates[drawn]), k).mean(axis=1)
    trained = pass_at_k_array(n, rng.binomial(n, rates[drawn]), k).mean(axis=1)
    simulated = float(np.std(trained - base, ddof=1))
    exact = evaluation_sd(rates, n=n, k=k, problems=problems)
    assert exact == pytest.approx(simulated, rel=0.05), (n, k, problems)
