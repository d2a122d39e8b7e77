"""The boundary section for ``passkt compare``: sizes per T, saturation depth, single-run lists."""

from __future__ import annotations

import numpy as np
import pytest

from passkt.eval.analysis.boundary_report import boundary_summary
from passkt.eval.outcomes import OutcomeTable

F, T = False, True


def table(name: str, rows: dict[str, list[list[bool]]]) -> OutcomeTable:
    """``rows[task][sample]`` is the outcome at T = 0, 1, 2."""
    return OutcomeTable(tuple(rows), (0, 1, 2), np.array(list(rows.values())), name=name)


# Successes per T (samples out of n = 2), worked out by hand:
#   a: x 0,1,2   y 0,0,0   z 0,0,1   (w only in a)    b: x 2,2,2   y 0,1,1   z 0,0,0
A = table(
    "a",
    {
        "x": [[F, T, T], [F, F, T]],
        "y": [[F, F, F], [F, F, F]],
        "z": [[F, F, T], [F, F, F]],
        "w": [[T, T, T], [T, T, T]],
    },
)
B = table(
    "b",
    {
        "x": [[T, T, T], [T, T, T]],
        "y": [[F, T, T], [F, F, F]],
        "z": [[F, F, F], [F, F, F]],
    },
)


def test_boundary_summary_by_hand():
    summary = boundary_summary([A, B])
    assert (summary.budgets, summary.ks, summary.budget) == ((0, 1, 2), (1, 2), 2)
    assert summary.num_tasks == 3 and summary.excluded == ("w",)
    a, b = summary.runs
    assert a.sizes == (0, 1, 2) and b.sizes == (1, 2, 2)
    # pass@1 of a by T: 0, 1/6, 1/2 -> saturates at T = 2; of b: 1/3, 1/2, 1/2 -> at T = 1.
    # pass@2 of a: 0, 1/3, 2/3 -> T = 2; of b: 1/3, 2/3, 2/3 -> T = 1.
    assert a.saturation == (2, 2) and b.saturation == (1, 1)
    assert a.only == ("z",) and b.only == ("y",)
    at_1 = boundary_summary([A, B], budget=1)
    assert at_1.runs[0].only == () and at_1.runs[1].only == ("y",)
    # A tolerance as large as b's whole gain makes it saturate at once.
    assert boundary_summary([A, B], tol=0.2).runs[1].saturation == (0, 1)


def test_boundary_markdown_lists_what_compare_needs():
    markdown = boundary_summary([A, B]).to_markdown()
    for line in (
        "| a | 2 | 0 | 1 | 2 |",
        "| b | 2 | 1 | 2 | 2 |",
        "| run | pass@1 | pass@2 |",
        "| a | 2 | 2 |",
        "| b | 1 | 1 |",
        "| a | 1 | z |",
        "| b | 1 | y |",
    ):
        assert line in markdown, line
    assert "1 unshared left out" in markdown
    assert "only one run" not in boundary_summary([A, B]).to_markdown(only_one_lists=False)
    single = boundary_summary([A]).to_markdown()
    assert "| a | 2 | 1 | 2 | 3 |" in single and "only one run" not in single


def test_boundary_summary_errors():
    with pytest.raises(ValueError, match="run names must differ"):
        boundary_summary([A, A])
    with pytest.raises(ValueError, match=r"T=5 was not evaluated by every run; shared budgets"):
        boundary_summary([A, B], budget=5)
    with pytest.raises(ValueError, match=r"ks must lie in 1\.\.2"):
        boundary_summary([A, B], ks=(1, 4))
    other = table("c", {"q": [[F, F, F], [F, F, F]]})
    with pytest.raises(ValueError, match="share no task ids"):
        boundary_summary([A, other])
