"""The paper profile's ``train.backend``: passkt's GRPO or TRL's GRPOTrainer through the adapter."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

STUDY_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "paper"
sys.path.insert(0, str(STUDY_DIR))

from study_profile import StudyError, resolve  # noqa: E402


def test_paper_trains_with_passkt_by_default_and_with_trl_when_asked():
    assert resolve("paper")["train"]["backend"] == "passkt"
    assert resolve("paper", ['train.backend="trl"'])["train"]["backend"] == "trl"


def test_an_unknown_backend_is_refused_with_the_choices():
    with pytest.raises(StudyError, match=r"train\.backend must be passkt .* or trl"):
        resolve("paper", ['train.backend="verl"'])
    with pytest.raises(StudyError, match="unknown key 'backnd'"):
        resolve("paper", ['train.backnd="trl"'])
