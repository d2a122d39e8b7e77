"""The TRL adapter with real TRL on CPU: it learns a multi-turn lookup, and its loss is ours.

The task (``lookup``, train_sources.py): "Where was <person> born?"; searching the person returns
the paragraph with the birthplace, and copying it into ``<answer>`` earns reward 1. The start
model is the tiny test model after a short SFT on a half-right expert (``HalfRight``): it searches
then answers from the result in half of its examples and answers a wrong town at once in the other
half, so it starts near reward 0.3 and RL has one clear thing to learn: search first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from train_sources import LOOKUP_ENV, LOOKUP_IDS, PEOPLE, lookup_source

pytest.importorskip("trl", reason="the TRL adapter needs the trl extra: pip install 'passkt[trl]'")

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.train.common import TokenSequence
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.grpo import train_grpo
from passkt.agents.train.report import read_metrics
from passkt.agents.train.trl import make_trl_trainer
from passkt.envs.tasks import register_source

TOWNS = [town for _, town in PEOPLE]


class HalfRight:
    """Searches the person and answers from the result, or (every other episode) answers a wrong
    town at once. Test-only scripted expert: it reads the question to pick its query."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conversations, params):
        out = []
        for conversation in conversations:
            found = re.search(r"was born in ([^.]+)\.", conversation[-1]["content"])
            if found:
                out.append(Completion(f"<answer>{found.group(1)}</answer>"))
                continue
            person = re.search(r"Where was (.+?) born\?", conversation[1]["content"]).group(1)
            if self.calls % 2 == 0:
                out.append(Completion(f"<search>{person}</search>"))
            else:
                right = TOWNS.index(dict(PEOPLE)[person])
                wrong = TOWNS[(right + 1 + (self.calls // 2) % 3) % len(TOWNS)]
                out.append(Completion(f"<answer>{wrong}</answer>"))
            self.calls += 1
        return out


@pytest.fixture(scope="module")
def lookup_start(tiny64: Path, tmp_path_factory) -> Path:
    """``tiny64`` after 40 SFT steps on ``HalfRight``'s episodes (reward about 0.3)."""
    from transformers import AutoTokenizer

    from passkt.agents.train.sft import ExpertExample, save_expert_dataset, train_sft

    register_source("lookup", lookup_source)
    root = tmp_path_factory.mktemp("lookup")
    episodes = rollout(
        HalfRight(),
        "BridgeQA-v0",
        LOOKUP_IDS,
        n=6,
        budgets=(2,),
        env_kwargs={**LOOKUP_ENV, "split": "train"},
        tokenizer=AutoTokenizer.from_pretrained(tiny64),
    ).episodes
    assert sum(e.reward for e in episodes) == len(episodes) / 2
    data = save_expert_dataset(
        [ExpertExample(e.task_id, e.reward, TokenSequence.from_episode(e)) for e in episodes],
        root / "half-right.jsonl",
    )
    config = SFTConfig(
        policy=f"hf:{tiny64}",
        env_id="BridgeQA-v0",
        env_kwargs=LOOKUP_ENV,
        t_train=2,
        data_path=str(data),
        only_correct=False,
        finetune="full",
        learning_rate=3e-3,
        batch_size=8,
        micro_batch_size=8,
        max_steps=40,
        output_dir=str(root / "sft"),
        progress=False,
    )
    torch.set_num_threads(1)
    result = train_sft(config)
    assert result.checkpoint is not None
    return result.checkpoint


def lookup_config(start: Path, out: Path, **overrides) -> GRPOConfig:
    """One config for both trainers."""
    fields = dict(
        policy=f"hf:{start}",
        env_id="BridgeQA-v0",
        env_kwargs=LOOKUP_ENV,
        t_train=2,
        group_size=8,
        tasks_per_step=4,
        micro_batch_size=32,
        learning_rate=1e-3,
        max_new_tokens=24,
        max_steps=8,
        output_dir=str(out),
        progress=False,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


def sampled_reward(model, n: int = 16, seed: int = 7) -> float:
    """Reward at temperature 1 on the four tasks: one evaluation shared by both trainers."""
    from passkt.agents.hf import HFPolicy

    result = rollout(
        HFPolicy(model, batch_size=64),
        "BridgeQA-v0",
        LOOKUP_IDS,
        n=n,
        budgets=(2,),
        env_kwargs={**LOOKUP_ENV, "split": "train"},
        params=SamplingParams(temperature=1.0, max_new_tokens=24),
        seed=seed,
    )
    return sum(e.reward for e in result.episodes) / len(result.episodes)


@pytest.mark.slow
def test_trl_through_the_adapter_and_our_trainer_both_learn_the_lookup(lookup_start, tmp_path):
    before = sampled_reward(lookup_start)
    assert 0.1 < before < 0.5, f"the warm-up should leave about 0.3 reward, got {before}"

    ours = train_grpo(lookup_config(lookup_start, tmp_path / "ours"))
    trainer = make_trl_trainer(lookup_config(lookup_start, tmp_path / "trl"))
    trainer.train()

    # TRL handed the rollout each task G = 8 times in a row: one group of 8 samples per task
    last = trainer.rollout_func.last_episodes
    assert [e.sample for e in last] == list(range(8)) * 4
    assert all(len({e.task_id for e in last[i : i + 8]}) == 1 for i in range(0, 32, 8))

    after_ours = sampled_reward(ours.checkpoint)
    after_trl = sampled_reward(trainer.model)
    assert after_ours > before + 0.15, f"passkt GRPO: {before:.2f} -> {after_ours:.2f}"
    assert after_trl > before + 0.15, f"TRL through the adapter: {before:.2f} -> {after_trl:.2f}"
    # Both logged the same slash-named episode metrics, step by step.
    ours_log = read_metrics(tmp_path / "ours")
    trl_log = read_metrics(tmp_path / "trl")  # TRL's logs through our MetricsLogger
    assert len(ours_log) == len(trl_log) == 8
    for log in (ours_log[-1], trl_log[-1]):
        assert {"reward/mean", "episode/tool_calls", "episode/policy_tokens"} <= set(log)
    # TRL's own reward column is the env reward the adapter returned
    assert trl_log[-1]["reward"] == pytest.approx(trl_log[-1]["reward/mean"])


@pytest.mark.slow
def test_one_fixed_batch_gives_the_same_loss_and_gradient_in_trl_and_in_passkt(
    lookup_start, tmp_path
):
    from passkt.agents.train.trl_check import fixed_batch_agreement

    # 2 tasks x G = 4 in one micro-batch: one pass, no accumulation on either side
    config = lookup_config(
        lookup_start, tmp_path / "trl", group_size=4, tasks_per_step=2, micro_batch_size=8
    )
    agreement = fixed_batch_agreement(make_trl_trainer(config), config)
    assert 0 < sum(agreement.rewards) < len(agreement.rewards), "want both outcomes in the batch"
    # same advantages, and TRL scores exactly the tokens the rollout sampled, with their logprobs
    assert agreement.max_advantage_diff < 1e-5
    assert agreement.max_logprob_diff < 1e-4
    # same loss and gradient
    assert abs(agreement.passkt_loss) > 1e-4, "a zero loss would agree trivially"
    assert agreement.trl_loss == pytest.approx(agreement.passkt_loss, rel=1e-5, abs=1e-7)
    assert agreement.max_grad > 1e-4
    assert agreement.max_grad_diff < 1e-4 * agreement.max_grad
