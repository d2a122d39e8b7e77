"""GRPO: learning by learning, policy-token masks, logprob alignment, config validation."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
from pathlib import Path

import pytest
import torch

from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.train.common import (
    TokenSequence,
    collate,
    length_sorted_micro_batches,
    sequence_logprobs,
)
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.grpo import grpo_loss, policy_update, train_grpo
from passkt.agents.train.loop import TrainingRun
from passkt.agents.train.losses import token_logprobs
from passkt.agents.train.report import read_metrics
from passkt.envs.tasks import Paragraph, Task

DIGIT_ENV = {"source": "digits"}  # registered by the digit_tasks fixture (conftest.py)


def mean_reward(checkpoint: Path, task_ids: list[str], n: int, seed: int) -> float:
    """Sampled (temperature 1) reward of a checkpoint on the digit tasks: a separate evaluation."""
    from passkt.agents.hf import HFPolicy

    policy = HFPolicy(checkpoint, batch_size=64)
    result = rollout(
        policy,
        "Math-v0",
        task_ids,
        n=n,
        budgets=(0,),
        env_kwargs={**DIGIT_ENV, "split": "train"},
        params=SamplingParams(temperature=1.0, max_new_tokens=12),
        seed=seed,
    )
    return sum(e.reward for e in result.episodes) / len(result.episodes)


def digit_config(policy: Path, out: Path, **overrides) -> GRPOConfig:
    fields = dict(
        policy=f"hf:{policy}",
        env_id="Math-v0",
        env_kwargs=DIGIT_ENV,
        t_train=0,
        group_size=8,
        tasks_per_step=4,
        micro_batch_size=16,
        learning_rate=1e-3,
        max_new_tokens=12,
        output_dir=str(out),
        progress=False,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


MEMORY_OPTIONS = {
    "gradient_checkpointing": True,
    "micro_batch_tokens": 800,  # about 4 of the ~180-token episodes per micro-batch, not 16
    "loss_logits": "trained",
    "logits_chunk_tokens": 8,
}
"""Every option that bounds the update's memory (``test_memory.py``), set tighter than a real run
would, so that the learning test exercises them all."""


@pytest.mark.parametrize("options", [{}, MEMORY_OPTIONS], ids=["defaults", "memory-options"])
def test_grpo_raises_the_reward_of_a_tiny_model(format_checkpoint, digit_tasks, tmp_path, options):
    before = mean_reward(format_checkpoint, digit_tasks, n=50, seed=101)
    assert before < 0.2, f"the warm-up should leave about 1/10 reward, got {before}"

    config = digit_config(format_checkpoint, tmp_path / "grpo", max_steps=12, **options)
    result = train_grpo(config)

    after = mean_reward(result.checkpoint, digit_tasks, n=50, seed=202)
    assert after > 0.8, f"GRPO did not learn: reward {before:.2f} -> {after:.2f}"
    metrics = read_metrics(tmp_path / "grpo")
    assert [m["step"] for m in metrics] == list(range(1, 13))
    first, last = metrics[0], metrics[-1]
    assert last["reward/mean"] > first["reward/mean"] + 0.5
    assert last["samples"] == 12 * 4 * 8
    for key in ("loss/policy", "clip_frac", "grad_norm", "tokens/s", "episode/tool_calls", "lr"):
        assert math.isfinite(last[key]), key
    # the answer turn is "<answer>7</answer>": a handful of policy tokens, nothing else trained
    assert 3 <= last["episode/policy_tokens"] <= 12


def hand_bridge_task(i: int) -> Task:
    person, town = f"Person{i} Alvey", f"Town{i}"
    return Task(
        task_id=f"hand-{i}",
        category="bridge",
        question=f"Where was {person} born?",
        answer=town,
        paragraphs=(
            Paragraph(person, f"{person} is a film director born in {town}."),
            Paragraph("Unrelated", "Unrelated is a song by a band."),
        ),
        gold_titles=(person,),
        gold_queries=(person,),
        depth=1,
    )


@pytest.fixture
def multi_turn_episodes(tiny64):
    """Sampled multi-turn BridgeQA episodes of the tiny model (prompt, turns, observations)."""
    from passkt.agents.hf import HFPolicy

    tasks = [hand_bridge_task(i) for i in range(2)]
    policy = HFPolicy(tiny64)
    result = rollout(
        policy,
        "BridgeQA-v0",
        [t.task_id for t in tasks],
        n=2,
        budgets=(2,),
        env_kwargs={"tasks": tasks},
        params=SamplingParams(temperature=1.0, max_new_tokens=10),
        seed=3,
    )
    return policy, result.episodes


def test_sampling_logprobs_equal_recomputed_ones(multi_turn_episodes):
    policy, episodes = multi_turn_episodes
    assert any(len(e.turns) > 1 for e in episodes), "want multi-turn episodes"
    sequences = [TokenSequence.from_episode(e) for e in episodes]
    batch = collate(sequences, policy.pad_token_id)
    with torch.no_grad():
        logp = sequence_logprobs(policy.model, batch, temperature=1.0)  # (B, L)
    for row, seq in enumerate(sequences):
        sampled = torch.tensor(seq.logprobs)
        mask = torch.tensor(seq.policy_mask)
        recomputed = logp[row, : len(seq.token_ids)]
        # Same tokens, same positions: the trainer's logp_old equals the sampler's.
        torch.testing.assert_close(recomputed[mask], sampled[mask], atol=1e-4, rtol=1e-4)


def test_logprobs_from_kept_positions_equal_the_full_logits(multi_turn_episodes):
    policy, episodes = multi_turn_episodes
    batch = collate([TokenSequence.from_episode(e) for e in episodes], policy.pad_token_id)
    with torch.no_grad():
        full = token_logprobs(policy.model(input_ids=batch.input_ids).logits, batch.input_ids)
        kept = sequence_logprobs(policy.model, batch)  # the output head on policy positions only
    mask = batch.policy_mask
    torch.testing.assert_close(kept[mask], full[mask], atol=1e-5, rtol=1e-5)
    assert mask.sum() < 0.5 * mask.numel()  # the shortcut skipped most positions


def test_only_policy_tokens_carry_gradient(multi_turn_episodes):
    policy, episodes = multi_turn_episodes
    sequences = [TokenSequence.from_episode(e) for e in episodes]
    batch = collate(sequences, policy.pad_token_id)
    for row, (episode, seq) in enumerate(zip(episodes, sequences, strict=True)):
        n = len(seq.token_ids)
        assert batch.policy_mask[row, :n].tolist() == list(seq.policy_mask)
        assert not batch.policy_mask[row, n:].any()  # padding is never trained
        sampled = sum(len(turn.completion.token_ids) for turn in episode.turns)
        assert int(batch.policy_mask[row].sum()) == sampled  # exactly the sampled ids

    config = GRPOConfig(policy="hf:x", kl_coef=0.5)
    model = policy.model
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    logits.retain_grad()
    logp = token_logprobs(logits, batch.input_ids)  # (B, L)
    reference = logp.detach() - 0.3  # any reference: the KL term is active too
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    loss, _, kl = grpo_loss(logp, batch.policy_mask, advantages, config, logp_ref=reference)
    assert kl is not None and kl.item() > 0
    loss.backward()
    # Logits at position t predict token t + 1: only rows whose next token was sampled by the
    # policy get gradient; prompt, observation and padding targets get none.
    predicts_policy = torch.zeros_like(batch.policy_mask)
    predicts_policy[:, :-1] = batch.policy_mask[:, 1:]
    row_grad = logits.grad.abs().sum(-1)  # (B, L)
    assert (row_grad[~predicts_policy] == 0).all()
    assert (row_grad[predicts_policy] > 0).all()


def test_several_iterations_clip_and_a_lora_reference_gives_kl(format_checkpoint, tmp_path):
    config = digit_config(
        format_checkpoint,
        tmp_path / "iter",
        max_steps=2,
        num_iterations=3,
        learning_rate=2e-2,
        clip_low=0.05,
        clip_high=0.05,
        finetune="lora",
        lora_r=4,
        kl_coef=0.1,
        eval_every=1,
        eval_split="train",
        eval_limit=2,
    )
    train_grpo(config)
    metrics = read_metrics(tmp_path / "iter")
    evaluations = [m for m in metrics if "eval/reward" in m]
    assert [m["step"] for m in evaluations] == [0, 1, 2]  # a baseline, then every step
    assert all(0 <= m["eval/reward"] <= 1 for m in evaluations)
    metrics = metrics[1:]
    # logp_old is frozen before the first update, so later iterations see ratios != 1
    assert max(m["clip_frac"] for m in metrics) > 0
    assert all(m["kl"] >= 0 for m in metrics)
    assert metrics[-1]["kl"] > 0  # the adapter moved away from the base (the reference)


def test_tensorboard_events_hold_the_logged_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from passkt.agents.train.report import MetricsLogger

    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=True)
    logger.log(1, {"reward/mean": 0.25})
    logger.log(2, {"reward/mean": 0.75})
    logger.close()
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    scalars = events.Scalars("reward/mean")
    assert [(e.step, e.value) for e in scalars] == [(1, 0.25), (2, 0.75)]


def test_tensorboard_without_the_package_says_what_to_install(tmp_path, monkeypatch):
    import sys

    from passkt.agents.train.report import MetricsLogger

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    with pytest.raises(ImportError, match="pip install tensorboard"):
        MetricsLogger(tmp_path, enabled=True, tensorboard=True)


def test_existing_run_needs_resume(format_checkpoint, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    with pytest.raises(FileExistsError, match="already holds a run; pass resume=True"):
        train_grpo(digit_config(format_checkpoint, out, max_steps=1))


def test_one_trainer_per_output_dir(
    format_checkpoint, digit_tasks, tmp_path, monkeypatch, lock_holder
):
    # A second trainer on a run folder another process is writing is refused at once, naming
    # the writer; a run that fails after it started lets go of the folder (same process).
    import passkt.agents.train.grpo as grpo
    from passkt.agents.run_lock import RunLockedError

    out = tmp_path / "run"
    out.mkdir()
    holder = lock_holder(out)
    with pytest.raises(RunLockedError, match=rf"pid {holder.pid}\).*another output_dir"):
        train_grpo(digit_config(format_checkpoint, out, max_steps=1))
    assert not (out / "metrics.jsonl").exists()  # refused before anything was written
    holder.send_signal(signal.SIGKILL)
    holder.wait()

    def broken(*args, **kwargs):
        raise RuntimeError("sampling failed")

    monkeypatch.setattr(grpo, "sample_groups", broken)
    with pytest.raises(RuntimeError, match="sampling failed"):  # fails inside the started run
        train_grpo(digit_config(format_checkpoint, out, max_steps=1), resume=True)
    monkeypatch.undo()
    result = train_grpo(digit_config(format_checkpoint, out, max_steps=1), resume=True)
    assert result.steps == 1 and (out / "checkpoint-1").is_dir()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"group_size": 1}, "group_size must be >= 2"),
        ({"clip_low": 1.0}, r"clip_low must be in \[0, 1\)"),
        ({"kl_coef": -0.1}, "kl_coef must be >= 0"),
        ({"temperature": 0.0}, "temperature must be > 0 for GRPO"),
        ({"advantage": "ppo"}, "advantage must be one of 'std', 'dr_grpo', 'rloo'"),
        ({"policy": ""}, "policy is empty"),
        ({"policy": "vllm:Qwen/Qwen2.5-7B-Instruct"}, "cannot be trained"),
        ({"env_kwargs": {"max_tool_calls": 3}}, "with t_train, not env_kwargs"),
        ({"env_kwargs": {"split": "test"}}, "disagrees with split"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"max_steps": 0}, "max_steps must be None or >= 1"),
        ({"micro_batch_size": 0}, "micro_batch_size must be an integer >= 1"),
    ],
)
def test_config_rejects_bad_values(change, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig(**{"policy": "hf:model", **change})


def test_config_round_trips_through_json_and_names_unknown_fields(tmp_path):
    config = GRPOConfig(policy="hf:model", group_size=4, lora_target_modules=("q_proj", "v_proj"))
    path = tmp_path / "grpo.json"
    config.save(path)
    assert GRPOConfig.load(path) == config
    data = json.loads(path.read_text())
    data["group_sise"] = 8
    with pytest.raises(ValueError, match="'group_sise' \\(did you mean 'group_size'\\?\\)"):
        GRPOConfig.from_dict(data)
    assert GRPOConfig(policy="hf:m").sampling_params() == SamplingParams(max_new_tokens=256)
    # every field carries a docstring (the CLI's --help)
    from passkt.agents.train.config import field_docs

    docs = field_docs(GRPOConfig)
    assert {f.name for f in dataclasses.fields(GRPOConfig)} <= set(docs)


def test_lean_rollouts_train_the_same_run(format_checkpoint, digit_tasks, tmp_path):
    # ``lean:PATH`` trains the same model with rollouts from the testbed's decoding loop, which
    # samples the same tokens as HFPolicy's for the same seed: the runs are the same run.
    runs = {}
    for kind in ("hf", "lean"):
        config = digit_config(format_checkpoint, tmp_path / kind, max_steps=3)
        train_grpo(dataclasses.replace(config, policy=f"{kind}:{format_checkpoint}"))
        runs[kind] = read_metrics(tmp_path / kind)
    assert len(runs["lean"]) == 3
    for hf, lean in zip(runs["hf"], runs["lean"], strict=True):
        assert lean["reward/mean"] == hf["reward/mean"]
        assert lean["samples"] == hf["samples"]
        assert lean["loss/policy"] == pytest.approx(hf["loss/policy"], rel=1e-3, abs=1e-5)
        assert lean["tokens/generated"] == hf["tokens/generated"]
    assert {m["reward/mean"] for m in runs["hf"]} != {0.0}  # some reward to learn from


def test_length_sorted_micro_batches_pad_less_and_keep_every_sequence():
    lengths = [9, 2, 30, 3, 28, 8, 31, 1]
    sequences = [TokenSequence(tuple(range(n)), (True,) * n) for n in lengths]
    chunks = length_sorted_micro_batches(sequences, 3)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(lengths)))
    assert all(len(chunk) <= 3 for chunk in chunks)

    def padded(chunks):
        return sum(len(c) * max(lengths[i] for i in c) for c in chunks)

    consecutive = [list(range(i, min(i + 3, len(lengths)))) for i in range(0, len(lengths), 3)]
    assert padded(chunks) == 3 * 3 + 3 * 28 + 2 * 31  # [1 2 3] [8 9 28] [30 31]
    assert padded(chunks) < padded(consecutive)


def test_the_update_is_the_gradient_of_the_whole_batch_however_it_is_split(
    format_checkpoint, tmp_path
):
    # Sequences of very different lengths, in sorted micro-batches of 2 or taken whole: the
    # accumulated gradient equals the one written by hand, sequence by sequence, with each
    # sequence's own advantage (ratio 1: d/dθ of -Σ_i A_i Σ_t log p_it / policy tokens).
    gen = torch.Generator().manual_seed(0)
    sequences = []
    for n in (40, 7, 33, 12, 25, 9):
        ids = torch.randint(3, 60, (n,), generator=gen).tolist()
        sequences.append(TokenSequence(tuple(ids), (False,) * (n // 2) + (True,) * (n - n // 2)))
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.25])
    tokens = sum(s.num_policy_tokens for s in sequences)

    def gradients(run):
        return {
            name: p.grad.detach().clone()
            for name, p in run.unwrapped.named_parameters()
            if p.grad is not None
        }

    config = digit_config(format_checkpoint, tmp_path / "hand")
    run = TrainingRun.start(config)
    run.model.zero_grad()
    for seq, adv in zip(sequences, advantages, strict=True):
        batch = collate([seq], run.tokenizer.pad_token_id)
        logp = sequence_logprobs(run.model, batch)
        (-(adv * logp[batch.policy_mask]).sum() / tokens).backward()
    expected = gradients(run)
    assert any(g.abs().sum() > 0 for g in expected.values())

    for size in (2, len(sequences)):
        config = digit_config(format_checkpoint, tmp_path / f"mb{size}", micro_batch_size=size)
        run = TrainingRun.start(config)
        run.plan(["t0", "t1"], per_step=1)
        captured = {}

        def capture(run=run, captured=captured):
            captured.update(gradients(run))
            return 0.0

        run.optimizer_step = capture
        stats = policy_update(run, config, sequences, advantages, reference=None)
        assert stats.policy_tokens == tokens
        assert captured.keys() == expected.keys()
        for name, g in captured.items():
            torch.testing.assert_close(g, expected[name], atol=1e-6, rtol=1e-4)
