"""Shared fixtures for the agent tests: one tiny checkpoint (and policy) per test session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 checkpoint folder with a ChatML byte-level tokenizer."""
    from passkt.agents.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "qwen2-tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_policy(tiny_checkpoint: Path):
    """An ``HFPolicy`` over ``tiny_checkpoint`` (float32, CPU). Do not mutate it in tests."""
    from passkt.agents.hf import HFPolicy

    return HFPolicy(tiny_checkpoint, batch_size=8)


@pytest.fixture
def conversations() -> list[list[dict[str, str]]]:
    """Three conversations of clearly different lengths (so the batch needs left padding)."""
    return [
        [{"role": "user", "content": "Hi"}],
        [
            {"role": "system", "content": "Answer with <answer>...</answer>."},
            {"role": "user", "content": "Where was the founder of Alder Vale born? Think first."},
        ],
        [{"role": "user", "content": "What is 12 + 30?"}],
    ]
