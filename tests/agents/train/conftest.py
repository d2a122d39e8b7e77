"""Fixtures of the trainer tests: tiny models, a digit task source a tiny model can master.

``digit_tasks`` registers the task source ``digits``: four one-turn questions (``Math-v0``, T = 0)
whose answer is the digit 7. ``format_checkpoint`` is a tiny model after a short SFT warm-up on
the *format* only: for every question it saw ``<answer>d</answer>`` once for each digit d, so it
answers in the protocol with a near-uniform digit (reward about 1/10) and GRPO has something to
learn: which digit the grader wants.

Why one shared answer: a random 64-wide model barely tells the four prompts apart (they share a
long system prompt), and with a different digit per question GRPO solved all four within the
test's time budget in only about half of the seeds we tried, the others settling at 3/4 (one
question collapsed onto another's digit). The shared answer makes learning reliable while still
needing the whole pipeline right: sampled tokens, rewards, advantages aligned with their
episodes, the masked surrogate and the optimizer step.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from train_sources import (
    DIGIT_ENV,
    DIGIT_IDS,
    PEOPLE,
    digit_source,
    people_source,
)

from passkt.agents.policy import Completion
from passkt.envs.tasks import register_source


@dataclass(frozen=True)
class People:
    """The ``people`` source as the tests see it."""

    env_kwargs: dict
    pairs: tuple[tuple[str, str], ...]
    """(person, birthplace) of each task, in task order."""
    task_ids: tuple[str, ...]


@pytest.fixture(scope="session")
def people() -> People:
    """Register the ``people`` source (one-hop bridge questions)."""
    register_source("people", people_source)
    return People({"source": "people"}, PEOPLE, tuple(f"person-{i}" for i in range(len(PEOPLE))))


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models run faster on one thread, and much faster when other jobs share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def digit_tasks() -> list[str]:
    """Register the ``digits`` source; returns its task ids."""
    register_source("digits", digit_source)
    return list(DIGIT_IDS)


@pytest.fixture(scope="session")
def tiny64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 checkpoint (width 64, 2 layers) with a ChatML tokenizer."""
    from passkt.agents.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny64") / "model", hidden_size=64)


class CyclingDigits:
    """A scripted policy that answers ``<answer>d</answer>`` with d = 0, 1, 2, ... in turn."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conversations, params):
        out = []
        for _ in conversations:
            out.append(Completion(f"<answer>{self.calls % 10}</answer>"))
            self.calls += 1
        return out


def format_examples(tokenizer, path: Path) -> Path:
    """Write warm-up data: each question answered once with every digit (rewarded or not)."""
    from passkt.agents.rollout import rollout
    from passkt.agents.train.common import TokenSequence
    from passkt.agents.train.sft import ExpertExample, save_expert_dataset

    result = rollout(
        CyclingDigits(),
        "Math-v0",
        DIGIT_IDS,
        n=10,
        budgets=(0,),
        env_kwargs={**DIGIT_ENV, "split": "train"},
        tokenizer=tokenizer,
    )
    examples = [
        ExpertExample(e.task_id, e.reward, TokenSequence.from_episode(e)) for e in result.episodes
    ]
    return save_expert_dataset(examples, path)


@pytest.fixture(scope="session")
def format_checkpoint(tiny64: Path, digit_tasks: list[str], tmp_path_factory) -> Path:
    """``tiny64`` after 20 epochs of SFT on ``format_examples`` (a few seconds)."""
    from transformers import AutoTokenizer

    from passkt.agents.train.config import SFTConfig
    from passkt.agents.train.sft import train_sft

    root = tmp_path_factory.mktemp("format")
    data = format_examples(AutoTokenizer.from_pretrained(tiny64), root / "format.jsonl")
    config = SFTConfig(
        policy=f"hf:{tiny64}",
        env_id="Math-v0",
        env_kwargs=DIGIT_ENV,
        t_train=0,
        data_path=str(data),
        only_correct=False,
        finetune="full",
        learning_rate=3e-3,
        batch_size=20,
        micro_batch_size=20,
        epochs=20,
        output_dir=str(root / "sft"),
        progress=False,
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train_sft(config)
    finally:
        torch.set_num_threads(before)
    assert result.checkpoint is not None
    return result.checkpoint
