"""The study and testbed commands refuse bad input in one line, before anything is written."""

from __future__ import annotations

import pytest

from passkt.cli import main
from passkt.study import pipeline as study
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


def test_unknown_stage_profile_category_and_key(tmp_path, capsys):
    out = str(tmp_path / "s")
    with pytest.raises(SystemExit):
        study.run(["evaluate", "--out", out, "--profile", "tiny"])
    assert "invalid choice: 'evaluate'" in capsys.readouterr().err
    with pytest.raises(StudyError, match=r"Unknown profile 'tiy'\. Did you mean 'tiny'"):
        study.run(["splits", "--out", out, "--profile", "tiy"])
    with pytest.raises(StudyError, match=r"\['D'\] not among the profile's categories"):
        study.run(["splits", "--out", out, "--profile", "tiny", "--categories", "A,D"])
    with pytest.raises(StudyError, match=r"unknown key 'nn'.*did you mean 'n'"):
        study.run(["splits", "--out", out, "--profile", "tiny", "--set", "eval.nn=3"])
    with pytest.raises(StudyError, match="seed are set by the pipeline"):
        study.run(["splits", "--out", out, "--profile", "tiny", "--set", "grpo.seed=3"])
    with pytest.raises(StudyError, match=r"grpo.*group_size must be >= 2"):
        study.run(["splits", "--out", out, "--profile", "tiny", "--set", "grpo.group_size=1"])
    with pytest.raises(StudyError, match="holds no study yet"):
        study.run(["splits", "--out", out])
