"""Fixtures of the testbed tests: the fitted tokenizer and a small random testbed checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")


@pytest.fixture(scope="session")
def testbed_tokenizer():
    """The word-level tokenizer fitted to the synthetic world of seed 0 (a few seconds)."""
    from passkt.study.testbed.tokenizer import build_tokenizer, fit_vocabulary, fitting_texts

    return build_tokenizer(fit_vocabulary(fitting_texts(0)))


@pytest.fixture(scope="session")
def nano_checkpoint(tmp_path_factory: pytest.TempPathFactory, testbed_tokenizer) -> Path:
    """An untrained nano model over the testbed tokenizer, saved as a Hugging Face folder."""
    from passkt.study.testbed.model import build_model, save_checkpoint

    folder = tmp_path_factory.mktemp("testbed") / "nano"
    return save_checkpoint(
        build_model("nano", testbed_tokenizer, seed=0), testbed_tokenizer, folder
    )
