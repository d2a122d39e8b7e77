"""Pretraining: the schedule and data order by hand, learning by learning, exact resumes."""

from __future__ import annotations

import importlib.metadata
import json
import math

import numpy as np
import pytest
import torch
from nano_pretrain import nano_config

from passkt.study.testbed.corpus import Corpus
from passkt.study.testbed.pretrain import (
    Batches,
    PretrainConfig,
    learning_rate,
    pretrain,
    split_documents,
)


def test_learning_rate_warms_up_then_decays_to_the_floor():
    config = PretrainConfig(learning_rate=1.0, warmup_steps=4, max_steps=104, min_lr_ratio=0.1)
    assert [learning_rate(config, s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(config, 4) == 1.0
    assert learning_rate(config, 54) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway: cos = 0
    assert learning_rate(config, 104) == pytest.approx(0.1)


def test_batches_pack_documents_in_an_order_fixed_by_seed_and_step():
    tokens = np.arange(100, dtype=np.int32)
    corpus = Corpus(tokens, tokens % 3 == 0, np.array([0, 30, 60, 100]))
    batches = Batches(corpus, np.array([0, 1, 2]), block_size=9, batch_size=2, seed=0)
    assert batches.blocks_per_epoch == 11
    ids, mask = batches.batch(3)
    assert ids.shape == (2, 10) and torch.equal(mask, ids % 3 == 0)
    first, second = batches.block(0), batches.block(1)
    assert first[0][-1] == second[0][0]  # blocks overlap by one token
    again = Batches(corpus, np.array([0, 1, 2]), block_size=9, batch_size=2, seed=0)
    assert torch.equal(again.batch(3)[0], ids)  # a resumed run sees the same batch
    epoch0 = np.concatenate([batches.block(i)[0][:-1] for i in range(11)])
    assert len(set(epoch0.tolist())) == 99  # an epoch reads every token once


def test_split_documents_holds_out_a_seeded_share():
    corpus = Corpus(np.zeros(10, np.int32), np.zeros(10, bool), np.arange(11))
    train, held = split_documents(corpus, 0.2, seed=0)
    assert len(held) == 2 and sorted([*train, *held]) == list(range(10))
    assert np.array_equal(split_documents(corpus, 0.2, seed=0)[1], held)


def test_pretraining_learns_the_corpus(tmp_path):
    result = pretrain(nano_config(tmp_path))
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [10, 20, 30, 40, 50, 60]
    start, end = lines[0], lines[-1]
    assert end["eval/loss/all"] < 0.6 * math.log(1261)  # far below a uniform guess (7.1 nats)
    assert end["loss/all"] < 0.7 * start["loss/all"]
    assert end["eval/loss/assistant"] < lines[2]["eval/loss/assistant"]
    assert result.steps == 60 and (result.model_dir / "config.json").is_file()


def test_resume_continues_exactly(tmp_path, monkeypatch):
    whole = pretrain(nano_config(tmp_path / "a", max_steps=20, save_every=10, log_every=5))
    config = nano_config(tmp_path / "b", max_steps=20, save_every=10, log_every=5)
    real_batch = Batches.batch

    def crash_at_17(self, step):  # after the checkpoint at 10 and the metrics line at 15
        if step == 17:
            raise KeyboardInterrupt("simulated crash")
        return real_batch(self, step)

    monkeypatch.setattr(Batches, "batch", crash_at_17)
    with pytest.raises(KeyboardInterrupt):
        pretrain(config)
    monkeypatch.setattr(Batches, "batch", real_batch)
    with pytest.raises(FileExistsError, match="resume=True"):
        pretrain(config)
    with pytest.raises(ValueError, match="differs in \\['learning_rate'\\]"):
        pretrain(nano_config(tmp_path / "b", max_steps=20, learning_rate=1e-3), resume=True)
    saved = tmp_path / "b" / "run" / "pretrain_config.json"  # a run from before a field existed
    old = json.loads(saved.read_text())
    del old["arithmetic_facts"]
    saved.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="differs in \\['arithmetic_facts'\\]"):
        pretrain(nano_config(tmp_path / "b", max_steps=20, arithmetic_facts=5), resume=True)
    (tmp_path / "b" / "run" / "corpus.npz").unlink()  # a study export keeps no corpus
    (tmp_path / "b" / "run").rename(tmp_path / "b" / "moved")  # restored elsewhere
    config = nano_config(tmp_path / "b", max_steps=20, save_every=10, log_every=5)
    config = PretrainConfig(**{**config.to_dict(), "output_dir": str(tmp_path / "b" / "moved")})
    resumed = pretrain(config, resume=True)  # the missing field had its default: resumable
    assert resumed.steps == 20
    from transformers import AutoModelForCausalLM

    a = AutoModelForCausalLM.from_pretrained(whole.model_dir)
    b = AutoModelForCausalLM.from_pretrained(resumed.model_dir)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    lines = (tmp_path / "b" / "moved" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [5, 10, 15, 20]  # none lost, none twice
    starts = (tmp_path / "b/moved/environment.jsonl").read_text().splitlines()
    starts = [json.loads(x) for x in starts]
    assert [s["start_step"] for s in starts] == [0, 10]  # the crashed start, then the resume
    assert starts[-1]["versions"]["torch"] == importlib.metadata.version("torch")
    assert starts[-1]["torch_threads"] == torch.get_num_threads()


def test_stop_step_is_a_checkpoint_of_the_longer_schedule(tmp_path):
    """Stopped at step 12 of a 20-step schedule, then resumed to its end: bitwise the run that
    never stopped (the schedule is laid over max_steps either way)."""
    from transformers import AutoModelForCausalLM

    whole = pretrain(nano_config(tmp_path / "a", max_steps=20, save_every=10, log_every=4))
    stopped = pretrain(nano_config(tmp_path / "b", max_steps=20, stop_step=12, save_every=10,
                               log_every=4))  # fmt: skip
    assert stopped.steps == 12
    lines = (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()
    expected = learning_rate(nano_config(tmp_path, max_steps=20), 11)
    assert json.loads(lines[-1])["lr"] == pytest.approx(expected)
    rest = pretrain(
        nano_config(tmp_path / "b", max_steps=20, save_every=10, log_every=4), resume=True
    )
    assert rest.steps == 20
    a = AutoModelForCausalLM.from_pretrained(whole.model_dir)
    b = AutoModelForCausalLM.from_pretrained(rest.model_dir)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(ValueError, match=r"stop_step must be in 1\.\.max_steps"):
        PretrainConfig(max_steps=10, stop_step=11)


def test_config_is_validated(tmp_path):
    with pytest.raises(ValueError, match="size must be one of"):
        PretrainConfig(size="huge")
    with pytest.raises(ValueError, match="loss_on must be"):
        PretrainConfig(loss_on="prompt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown PretrainConfig fields \\['lr'\\]"):
        PretrainConfig.from_dict({"lr": 1.0})


@pytest.mark.slow
def test_pretrained_nano_follows_the_protocol(tmp_path):
    """About a minute of pretraining: most turns end in a valid <search> or <answer>."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401
    from passkt.agents.lean import LeanPolicy
    from passkt.agents.policy import SamplingParams
    from passkt.agents.rollout import rollout

    config = nano_config(
        tmp_path, episodes_per_category=600, block_size=512, batch_size=8, max_steps=250,
        learning_rate=3e-3, warmup_steps=20, eval_every=250, save_every=250,
    )  # fmt: skip
    policy = LeanPolicy(pretrain(config).model_dir, batch_size=256)
    actions = []
    for env_id, budget in (("BridgeQA-v0", 3), ("ComparisonQA-v0", 3), ("Math-v0", 0)):
        env = gym.make(env_id, max_tool_calls=budget, split="test")
        ids = [task.task_id for task in env.unwrapped.tasks[:8]]
        result = rollout(
            policy, env_id, ids, n=4, budgets=(budget,), env_kwargs={"split": "test"},
            params=SamplingParams(max_new_tokens=32, seed=0),
        )  # fmt: skip
        actions += [a for episode in result.episodes for a in episode.actions]
    valid = sum(a in ("search", "answer") for a in actions) / len(actions)
    assert valid > 0.7, f"only {valid:.0%} of {len(actions)} turns were valid actions"


def test_a_resume_on_another_thread_count_is_flagged(tmp_path, caplog):
    from passkt.study.testbed.pretrain import ENVIRONMENT_FILE, _record_environment

    (tmp_path / ENVIRONMENT_FILE).write_text(
        json.dumps({"start_step": 0, "torch_threads": 97}) + "\n"
    )
    with caplog.at_level("WARNING"):
        _record_environment(tmp_path, start=0)  # a fresh start: nothing to compare with
        assert not caplog.records
        _record_environment(tmp_path, start=250)
    assert "97 torch thread(s) and resumes with" in caplog.text
    caplog.clear()
    lines = (tmp_path / ENVIRONMENT_FILE).read_text().splitlines()
    (tmp_path / ENVIRONMENT_FILE).write_text(lines[-1] + "\n")  # the same count throughout
    with caplog.at_level("WARNING"):
        _record_environment(tmp_path, start=500)
    assert not caplog.records
