"""Every committed study summary is what the code makes from the committed data beside it.

A study run in pieces keeps its compact data in ``results/NAME/data/`` (``passkt study export``)
and its generated page in ``results/NAME/summary.md``. Here each such page is remade from its data
alone, the way ``passkt study report results/NAME`` does (a fresh process, seconds, no model), and
must come out identical: a hand edit of the page, data changed without remaking the page, or code
that no longer reads old data all fail.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEPT = sorted(p.parent.parent for p in (ROOT / "results").glob("*/data/study.json"))


def test_some_study_keeps_its_data_in_the_repository():
    assert KEPT, "no results/*/data/study.json: export a study (passkt study export)"


@pytest.mark.parametrize("folder", KEPT, ids=lambda p: p.name)
def test_the_committed_summary_is_remade_from_the_committed_data(folder, tmp_path):
    page = folder / "summary.md"
    assert page.is_file(), f"{page} is missing: run passkt study report {folder.relative_to(ROOT)}"
    copy = tmp_path / folder.name
    shutil.copytree(folder / "data", copy / "data")
    done = subprocess.run(
        [sys.executable, "-m", "passkt", "study", "report", str(copy)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    remade = (copy / "summary.md").read_text(encoding="utf-8")
    assert remade == page.read_text(encoding="utf-8"), (
        f"{page} differs from what its data make: run passkt study report "
        f"{folder.relative_to(ROOT)} and commit the page"
    )


@pytest.mark.parametrize("folder", KEPT, ids=lambda p: p.name)
def test_no_kept_file_is_ignored_by_git(folder):
    """A kept file that ``.gitignore`` matches is on this disk and never in a clone: the summary
    would be remade here and fail everywhere else."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = [str(p.relative_to(ROOT)) for p in folder.rglob("*") if p.is_file()]
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", *files], cwd=ROOT, capture_output=True, text=True
    )
    assert done.stdout.split() == [], f"ignored by .gitignore: {done.stdout.split()[:5]}"
