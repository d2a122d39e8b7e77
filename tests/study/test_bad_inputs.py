"""The study and testbed commands refuse bad input in one line, before anything is written."""

from __future__ import annotations

import pytest

from passkt.cli import main
from passkt.study.profile import StudyError, resolve
from passkt.study.testbed.corpus import Corpus


def test_resume_of_a_pretraining_that_is_not_there(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["testbed", "pretrain", "--out", str(tmp_path / "none"), "--resume"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "nothing to resume" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "none").exists()


@pytest.mark.parametrize(
    ("budgets", "message"),
    [("[5, 3]", "increasing"), ("[0, 1000000]", "at most 1000"), ("[]", "empty")],
)
def test_a_profile_budget_grid_is_checked_like_the_cli(budgets, message):
    with pytest.raises(StudyError, match=message):
        resolve("tiny", [f"eval.budgets={budgets}"])


def test_a_damaged_corpus_file_is_named(tmp_path):
    bad = tmp_path / "corpus.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match=r"corpus\.npz: not a testbed corpus"):
        Corpus.load(bad)
