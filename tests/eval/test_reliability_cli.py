"""pass^k and chance floors through the command line: ``passkt eval | report | compare``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from passkt.eval.estimator import Surface
from passkt.eval.evaluate import evaluate
from passkt.eval.tables import surface_markdown

SMALL = {"source_options": {"num_tasks": 40}}


@pytest.fixture(scope="module")
def comparison_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The heuristic agent and the oracle on 12 synthetic ComparisonQA tasks, n = 8."""
    root = tmp_path_factory.mktemp("cmpqa")
    runs = []
    for policy in ("scripted:heuristic", "scripted:oracle"):
        out = root / policy.split(":")[1]
        evaluate(
            "ComparisonQA-v0", policy, env_kwargs=SMALL, n=8, budgets=(0, 2), limit=12,
            out_dir=out, progress=False,
        )  # fmt: skip
        runs.append(out)
    return runs[0], runs[1]


def test_report_shows_pass_hat_k_and_the_chance_floor(passkt_cli, comparison_runs, tmp_path):
    code, out, err = passkt_cli("report", str(comparison_runs[0]), "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert "pass^k(T) of **scripted:heuristic**" in out and "Chance floors of" in out
    assert "12 of 12 problems declare a closed answer set" in out
    surface = json.loads((tmp_path / "r" / "reliability.json").read_text())
    assert surface["metric"] == "pass^k" and len(surface["values"]) == 4  # k = 1, 2, 4, 8
    chance = json.loads((tmp_path / "r" / "chance.json").read_text())
    np.testing.assert_allclose(chance["chance"], [1 - 0.5**k for k in (1, 2, 4, 8)])
    for name in ("heatmap_reliability.png", "reliability_curves.svg", "reliability.csv"):
        assert (tmp_path / "r" / name).is_file()
    assert "pass^1" in (tmp_path / "r" / "reliability.csv").read_text().splitlines()[0]


def test_report_of_an_open_answer_env_has_no_chance_floor(passkt_cli, run_dir, tmp_path):
    code, out, err = passkt_cli("report", str(run_dir), "--out", str(tmp_path / "r"))
    assert code == 0, err
    assert "pass^k(T) of" in out and "Chance floors" not in out
    assert not (tmp_path / "r" / "chance.md").exists()


def test_compare_shows_pass_hat_k_gaps_and_the_three_way_change(
    passkt_cli, comparison_runs, tmp_path
):
    out_dir = tmp_path / "c"
    code, out, err = passkt_cli(
        "compare", *map(str, comparison_runs), "--names", "heur,oracle", "--out", str(out_dir),
        "--reliability-k", "4",
    )  # fmt: skip
    assert code == 0, err
    assert "Gap pass^k(T) **oracle - heur**" in out
    assert "| T | boundary (pass@8) | pass@1 | pass^4 | reading |" in out
    change = json.loads((out_dir / "change_oracle_vs_heur.json").read_text())
    assert change["k"] == 4 and np.shape(change["estimate"]) == (3, 2)
    rel = json.loads((out_dir / "reliability_oracle_vs_heur.json").read_text())
    assert rel["metric"] == "pass^k"
    # The oracle solves everything at T = 2, every time: pass^4 rises there.
    assert change["estimate"][2][1] > 0 and change["p_holm"][2][1] < 0.05
    assert (out_dir / "chance_heur.md").is_file() and (out_dir / "chance_oracle.md").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ("report", "{a}", "--ks", "1,16"),
        ("compare", "{a}", "{b}", "--ks", "1,16"),
        ("compare", "{a}", "{b}", "--reliability-k", "9"),
    ],
)
def test_k_above_n_is_refused_in_one_line_and_nothing_is_written(
    passkt_cli, comparison_runs, tmp_path, argv
):
    out_dir = tmp_path / "out"
    a, b = map(str, comparison_runs)
    code, _, err = passkt_cli(*(x.format(a=a, b=b) for x in argv), "--out", str(out_dir))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("passkt: error: ")
    assert "undefined for k > n" in lines[0] and "n=8" in lines[0]
    assert not out_dir.exists()


def test_eval_refuses_k_above_n_for_both_metrics(passkt_cli, tmp_path):
    out_dir = tmp_path / "run"
    code, _, err = passkt_cli(
        "eval", "--env", "ComparisonQA-v0", "--n", "4", "--ks", "1,8", "--limit", "2",
        "--out", str(out_dir), "--no-progress",
    )  # fmt: skip
    assert code == 2 and "pass@k and pass^k are undefined for k > n" in err
    assert len(err.strip().splitlines()) == 1 and not out_dir.exists()


def test_an_undefined_cell_says_so() -> None:
    values = np.array([[0.5, np.nan]])
    surf = Surface("r", (1,), (0, 1), values, values[None], ("t0",), 4, metric="pass^k")
    table = surface_markdown(surf)
    assert "| 0 | 0.500 |" in table and "| 1 | undefined |" in table
    assert "nan" not in table.lower()
