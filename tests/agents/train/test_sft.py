"""SFT: expert data in the env's own protocol, learning the expert's behaviour, dataset files."""

from __future__ import annotations

import json

import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.train.common import load_task_list
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.report import read_metrics
from passkt.agents.train.sft import (
    build_expert_dataset,
    load_expert_dataset,
    save_expert_dataset,
    train_sft,
)
from passkt.envs.errors import DatasetFormatError


def sft_config(model, out, env_kwargs, **overrides) -> SFTConfig:
    fields = dict(
        policy=f"hf:{model}",
        env_id="BridgeQA-v0",
        env_kwargs=env_kwargs,
        t_train=2,
        finetune="full",
        learning_rate=3e-3,
        batch_size=4,
        micro_batch_size=2,
        output_dir=str(out),
        progress=False,
    )
    fields.update(overrides)
    return SFTConfig(**fields)


def test_sft_learns_to_act_like_the_expert(tiny64, people, tmp_path):
    from passkt.agents.hf import HFPolicy

    result = train_sft(sft_config(tiny64, tmp_path / "sft", people.env_kwargs, max_steps=40))
    losses = [m["loss/nll"] for m in read_metrics(tmp_path / "sft")]
    assert losses[0] > 3.0 and losses[-1] < 0.05, losses[::8]

    # Greedy decoding of the trained model replays the oracle: search the person, then answer.
    policy = HFPolicy(result.checkpoint)
    episodes = rollout(
        policy,
        "BridgeQA-v0",
        list(people.task_ids),
        budgets=(2,),
        env_kwargs={**people.env_kwargs, "split": "train"},
        params=SamplingParams(temperature=0.0, max_new_tokens=40),
    ).episodes
    for episode, (person, town) in zip(episodes, people.pairs, strict=True):
        assert episode.actions == ["search", "answer"], episode.messages
        assert f"<search>{person}</search>" in episode.turns[0].completion.text
        assert episode.answer == town and episode.correct


def test_expert_data_is_the_oracle_in_the_env_protocol(tiny64, people, tmp_path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny64)
    config = sft_config(tiny64, tmp_path, people.env_kwargs)
    examples = build_expert_dataset(config, tokenizer)
    # Matched data: SFT's tasks are exactly the tasks a GRPO run with the same fields trains on.
    grpo = GRPOConfig(
        policy=config.policy, env_id=config.env_id, env_kwargs=people.env_kwargs, t_train=2
    )
    assert [e.task_id for e in examples] == [t.task_id for t in load_task_list(grpo, "train")]
    for example, (person, town) in zip(examples, people.pairs, strict=True):
        assert example.reward == 1.0
        ids, mask = example.sequence.token_ids, example.sequence.policy_mask
        trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
        # Only the two oracle turns are trained; question and search results are not.
        assert f"<search>{person}</search>" in trained and f"<answer>{town}</answer>" in trained
        assert "born in" not in trained and "Where was" not in trained
        assert "<information>" in tokenizer.decode(ids)
    path = save_expert_dataset(examples, tmp_path / "expert.jsonl")
    assert load_expert_dataset(path) == examples


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "record 1: key '-': not valid JSON"),
        (json.dumps({"task_id": "a", "token_ids": [1, 2]}), "key 'policy_mask': missing"),
        (
            json.dumps({"task_id": "a", "token_ids": [1, 2], "policy_mask": [0]}),
            "key 'policy_mask': has 1 entries for 2 token_ids",
        ),
    ],
)
def test_bad_expert_files_name_the_record_and_key(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(DatasetFormatError, match=message):
        load_expert_dataset(path)


def test_sft_refuses_data_without_rewarded_episodes(tiny64, people, tmp_path):
    path = tmp_path / "zero.jsonl"
    path.write_text(
        json.dumps(
            {"task_id": "person-0", "reward": 0.0, "token_ids": [1, 2], "policy_mask": [0, 1]}
        )
        + "\n"
    )
    config = sft_config(
        tiny64, tmp_path / "out", people.env_kwargs, data_path=str(path), max_steps=1
    )
    with pytest.raises(ValueError, match="None of the 1 expert episodes earned a reward"):
        train_sft(config)


@pytest.mark.slow
def test_on_policy_control_trains_on_the_bases_own_successes(format_checkpoint, tmp_path):
    """``expert = "self"`` (rejection sampling): the base's rewarded samples only, at most
    ``self_keep`` per task, and SFT on them makes the greedy policy give the rewarded answer."""
    from train_sources import DIGIT_ENV, DIGIT_IDS
    from transformers import AutoTokenizer

    from passkt.agents.hf import HFPolicy
    from passkt.agents.train.sft import build_self_dataset

    config = SFTConfig(
        policy=f"hf:{format_checkpoint}",
        env_id="Math-v0",
        env_kwargs=DIGIT_ENV,
        t_train=0,
        expert="self",
        self_samples=24,
        self_keep=2,
        finetune="full",
        learning_rate=3e-3,
        batch_size=4,
        micro_batch_size=4,
        epochs=15,
        max_new_tokens=8,
        output_dir=str(tmp_path / "self"),
        progress=False,
    )
    tokenizer = AutoTokenizer.from_pretrained(format_checkpoint)
    examples = build_self_dataset(config)
    per_task = {}
    for e in examples:
        per_task[e.task_id] = per_task.get(e.task_id, 0) + 1
        mask, ids = e.sequence.policy_mask, e.sequence.token_ids
        assert e.reward == 1.0
        assert "<answer>7</answer>" in tokenizer.decode(
            [i for i, m in zip(ids, mask, strict=True) if m]
        )
    assert set(per_task) <= set(DIGIT_IDS) and len(per_task) >= 2 and max(per_task.values()) <= 2

    result = train_sft(config)
    saved = load_expert_dataset(tmp_path / "self" / "expert_data.jsonl")
    assert [e.sequence for e in saved] == [e.sequence for e in examples]  # same samples, seeded
    episodes = rollout(
        HFPolicy(result.checkpoint),
        "Math-v0",
        DIGIT_IDS,
        budgets=(0,),
        env_kwargs={**DIGIT_ENV, "split": "train"},
        params=SamplingParams(temperature=0.0, max_new_tokens=8),
    ).episodes
    assert sum(e.correct for e in episodes) >= 3, [e.messages[-1] for e in episodes]


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_gradient_checkpointing_is_switched_on_and_still_trains(tiny64, finetune, recwarn):
    """``gradient_checkpointing`` recomputes activations in the backward pass: the model says it
    checkpoints, gradients still reach the trainable weights, and no deprecated name is used."""
    from passkt.agents.train.common import load_model

    config = sft_config(tiny64, "unused", {}, finetune=finetune, gradient_checkpointing=True)
    model, tokenizer = load_model(config)
    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:  # transformers before 5.25
        checkpointing = model.is_gradient_checkpointing
    assert checkpointing
    ids = tokenizer("a b c d", return_tensors="pt").input_ids
    model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)
    assert not [w for w in recwarn if "gradient_checkpointing_enable" in str(w.message)]
