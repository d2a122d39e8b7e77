"""Tests of the Markdown / CSV / JSON tables of surfaces, comparisons and boundary sets."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest

from passkt.eval.estimator import surface
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.stats import bootstrap_surface, boundary_comparison, compare, venn
from passkt.eval.tables import (
    boundary_markdown,
    comparison_csv,
    comparison_json,
    comparison_markdown,
    markdown_k_columns,
    surface_csv,
    surface_json,
    surface_markdown,
    venn_csv,
    venn_markdown,
    write_surface_tables,
)

BUDGETS = (0, 1, 3)


def _run(name: str, probs: np.ndarray, seed: int, n: int = 8) -> OutcomeTable:
    rng = np.random.default_rng(seed)
    correct = rng.random((len(probs), n, len(BUDGETS))) < probs[:, None, None]
    return OutcomeTable(tuple(f"t{i:02d}" for i in range(len(probs))), BUDGETS, correct, name=name)


@pytest.fixture(scope="module")
def runs() -> tuple[OutcomeTable, OutcomeTable]:
    idx = np.arange(30)
    a = _run("base", np.where(idx < 12, 0.9, 0.0), 1)
    b = _run("rl", np.where(idx < 24, 0.15, 0.0), 2)
    return a, b


def _markdown_rows(text: str) -> list[list[str]]:
    rows = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def test_surface_markdown_cells(runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    surf = surface(runs[0])
    ci = bootstrap_surface(surf, n_boot=200)
    rows = _markdown_rows(surface_markdown(surf, ci))
    assert rows[0] == ["T \\ k", *(str(k) for k in surf.ks)]
    assert [r[0] for r in rows[2:]] == [str(t) for t in BUDGETS]  # one row per T
    i, j = surf.ks.index(4), BUDGETS.index(3)
    expected = f"{surf.values[i, j]:.3f} [{ci.lower[i, j]:.2f}, {ci.upper[i, j]:.2f}]"
    assert rows[2 + j][1 + i] == expected
    plain = _markdown_rows(surface_markdown(surf))
    assert plain[2][1] == f"{surf.values[0, 0]:.3f}"
    assert "30 problems, n = 8" in surface_markdown(surf)


def test_dense_k_grids_show_powers_of_two_in_markdown_and_every_k_in_csv(runs) -> None:
    assert markdown_k_columns([1, 2, 3, 4]) == [0, 1, 2, 3]  # short grids are shown whole
    ks = tuple(range(1, 9))  # n = 8, every k
    surf = surface(runs[0], ks)
    rows = _markdown_rows(surface_markdown(surf))
    assert rows[0] == ["T \\ k", "1", "2", "3", "4", "5", "6", "7", "8"]  # still short
    dense = tuple(range(1, 65))
    assert [dense[i] for i in markdown_k_columns(dense)] == [1, 2, 4, 8, 16, 32, 64]
    assert [dense[i] for i in markdown_k_columns(dense[:50])] == [1, 2, 4, 8, 16, 32, 50]
    wide = _run("wide", np.full(5, 0.5), 3, n=64)
    surf = surface(wide, dense)
    rows = _markdown_rows(surface_markdown(surf))
    assert rows[0] == ["T \\ k", "1", "2", "4", "8", "16", "32", "64"]
    assert rows[2][3] == f"{surf.values[dense.index(4), 0]:.3f}"  # column k = 4 holds pass@4
    header = next(csv.reader(io.StringIO(surface_csv(surf))))
    assert len([h for h in header if h.startswith("pass@")]) == 64


def test_surface_csv_and_json_round_trip(runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    surf = surface(runs[1])
    ci = bootstrap_surface(surf, n_boot=200)
    rows = list(csv.DictReader(io.StringIO(surface_csv(surf, ci))))
    assert [int(r["T"]) for r in rows] == list(BUDGETS)
    for j, row in enumerate(rows):
        for i, k in enumerate(surf.ks):
            assert float(row[f"pass@{k}"]) == surf.values[i, j]  # repr(): exact round trip
            assert float(row[f"pass@{k}_lower"]) == ci.lower[i, j]
            assert float(row[f"pass@{k}_upper"]) == ci.upper[i, j]
    assert "pass@1_lower" not in surface_csv(surf)
    data = json.loads(surface_json(surf, ci))
    np.testing.assert_array_equal(np.array(data["values"]), surf.values)
    np.testing.assert_array_equal(np.array(data["upper"]), ci.upper)
    assert data["ks"] == list(surf.ks) and data["level"] == 0.95


def test_write_surface_tables(tmp_path: Path, runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    surf = surface(runs[0])
    paths = write_surface_tables(surf, None, tmp_path / "out", stem="base")
    assert {p.name for p in paths.values()} == {"base.md", "base.csv", "base.json"}
    assert paths["md"].read_text() == surface_markdown(surf)
    assert json.loads(paths["json"].read_text())["name"] == "base"


def test_ci_grid_mismatch_is_an_error(runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    ci = bootstrap_surface(surface(runs[0], ks=(1, 2)), n_boot=10)
    with pytest.raises(ValueError, match="does not match the surface"):
        surface_markdown(surface(runs[0]), ci)


def test_comparison_tables(runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    cmp = compare(*runs, n_boot=300)
    text = comparison_markdown(cmp)
    assert "rl - base" in text and "30 shared problems" in text
    tables = text.split("\n\n")
    gap_rows = _markdown_rows(tables[1])
    star = "*" if cmp.significant[0, 0] else ""
    assert gap_rows[2][1] == (
        f"{cmp.gap[0, 0]:+.3f} [{cmp.gap_lower[0, 0]:.2f}, {cmp.gap_upper[0, 0]:.2f}]{star}"
    )
    stars = sum(cell.endswith("*") for row in gap_rows[2:] for cell in row[1:])
    assert stars == int(cmp.significant.sum()) and f"{stars} of {cmp.gap.size} cells" in text
    assert "Holm" in tables[0]
    assert tables[2].startswith("**Headline test**") and cmp.headline.label in tables[2]
    summary = _markdown_rows(tables[3])
    assert summary[0][:5] == [
        "T",
        "crossover k",
        "bracket",
        "k range (95%)",
        "crossing significant",
    ]
    for j, row in enumerate(summary[2:]):
        cross = cmp.crossovers[j]
        assert row[0] == str(cmp.budgets[j])
        assert row[2] == (
            "-" if cross.bracket is None else f"{cross.bracket[0]}-{cross.bracket[1]}"
        )
        if cross.bracket is not None:
            assert row[4] == ("yes" if cross.significant else "no")
        assert row[-1] == ("yes" if cmp.widens[j] else "no")
    assert any(c.bracket is not None for c in cmp.crossovers)  # the fixture does cross

    rows = list(csv.DictReader(io.StringIO(comparison_csv(cmp))))
    assert len(rows) == len(cmp.ks) * len(cmp.budgets)
    last = rows[-1]
    assert (int(last["T"]), int(last["k"])) == (cmp.budgets[-1], cmp.ks[-1])
    assert float(last["gap"]) == cmp.gap[-1, -1]
    assert float(last["pass_b"]) - float(last["pass_a"]) == pytest.approx(cmp.gap[-1, -1])
    data = json.loads(comparison_json(cmp))
    assert data["widens"] == list(cmp.widens) and data["name_b"] == "rl"


def test_boundary_and_venn_tables(runs: tuple[OutcomeTable, OutcomeTable]) -> None:
    a, b = runs
    bc = boundary_comparison(a, b, 3)
    text = boundary_markdown(bc, max_ids=3)
    assert f"**base** {bc.size_a}, **rl** {bc.size_b}" in text
    rows = {r[0]: r for r in _markdown_rows(text)[2:]}
    assert rows["rl only"][1] == str(len(bc.only_b))
    if len(bc.only_b) > 3:
        assert rows["rl only"][2].endswith(f"... (+{len(bc.only_b) - 3})")
    assert rows["both"][1] == str(len(bc.both))

    v = venn([a, b, b.with_name("sft")], 3)
    md_rows = _markdown_rows(venn_markdown(v))[2:]
    assert [r[0] for r in md_rows] == list(v.counts())
    assert [int(r[1]) for r in md_rows] == list(v.counts().values())
    csv_rows = list(csv.DictReader(io.StringIO(venn_csv(v))))
    assert len(csv_rows) == 8
    both = next(r for r in csv_rows if r["region"] == "rl & sft")
    assert (both["base"], both["rl"], both["sft"]) == ("0", "1", "1")
    # sft is a copy of rl, so "rl & sft" holds exactly the tasks only rl solves in the pair view.
    assert bc.only_b and both["task_ids"].split(";") == list(bc.only_b)
    assert int(both["count"]) == len(bc.only_b)
