"""The TRL adapter's pieces: task ids through TRL, repeated rows, EOS and length traps, config map.

The learning test and the fixed-batch loss agreement with real TRL are in test_trl_learning.py.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="the TRL adapter needs the trl extra: pip install 'passkt[trl]'")

from passkt.agents.rollout import Episode
from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.trl import (
    TASK_KEY,
    build_dataset,
    env_reward,
    episode_metrics,
    episode_to_sample,
    rollout_calls,
    task_id_of,
    trl_args,
)


def config(**overrides) -> GRPOConfig:
    fields = dict(
        policy="hf:/nowhere",
        env_id="BridgeQA-v0",
        env_kwargs={"source": "people"},
        t_train=2,
        group_size=4,
        tasks_per_step=2,
        micro_batch_size=4,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


def test_dataset_carries_task_ids_in_a_column_and_in_every_prompt_message(people):
    data = build_dataset(config())
    assert data[TASK_KEY] == list(people.task_ids)
    for row, (person, _) in zip(data, people.pairs, strict=True):
        prompt = row["prompt"]
        assert [m["role"] for m in prompt] == ["system", "user"]
        assert person in prompt[-1]["content"]
        assert {m[TASK_KEY] for m in prompt} == {row[TASK_KEY]}
        assert task_id_of(prompt) == row[TASK_KEY]


def test_the_dataset_of_a_plain_env_without_a_category(monkeypatch):
    """A third-party env without info["category"], tasks, protocol or max_tool_calls: the
    prompt is its protocol's (no system prompt), the tasks its train seeds."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "third_party"))
    for env_id in ("kv_lookup:KVLookupMinimal-v0", "kv_variants:KVLookupKwargs-v0"):
        data = build_dataset(config(env_id=env_id, env_kwargs={}, limit=3))
        assert data[TASK_KEY] == ["seed-1000000", "seed-1000001", "seed-1000002"]
        for row in data:
            (message,) = row["prompt"]
            assert message["role"] == "user"
            assert message["content"].startswith("What is the value of key ")


def test_a_prompt_without_a_task_id_is_refused_not_matched_by_text():
    prompt = [{"role": "user", "content": "Where was Mira Oskan born?"}]
    with pytest.raises(ValueError, match="build_dataset"):
        task_id_of(prompt)
    with pytest.raises(ValueError, match="task_id"):
        task_id_of("Where was Mira Oskan born?")


def test_repeated_rows_become_tasks_times_samples():
    # TRL repeats each prompt G = 3 times in a row.
    calls = rollout_calls(["a", "a", "a", "b", "b", "b"])
    assert len(calls) == 1
    assert calls[0].task_ids == ("a", "b") and calls[0].n == 3
    assert calls[0].rows == ((0, 1, 2), (3, 4, 5))


def test_a_group_cut_at_a_process_boundary_and_a_task_seen_twice_get_their_own_calls():
    # this process holds the last two samples of "a", a whole group of "b", and "a" again later
    calls = rollout_calls(["a", "a", "b", "b", "b", "c", "c", "c", "a", "a", "a"])
    by_n = {(c.n, c.task_ids): c.rows for c in calls}
    assert by_n[(2, ("a",))] == ((0, 1),)
    assert by_n[(3, ("b", "c", "a"))] == ((2, 3, 4), (5, 6, 7), (8, 9, 10))
    # every row is answered exactly once
    rows = sorted(r for c in calls for group in c.rows for r in group)
    assert rows == list(range(11))
    # the engine keys episodes by (task, sample): a task never appears twice in one call
    assert all(len(set(c.task_ids)) == len(c.task_ids) for c in calls)


def test_adjacent_groups_of_one_task_are_one_larger_group():
    calls = rollout_calls(["a"] * 8)
    assert [(c.task_ids, c.n) for c in calls] == [(("a",), 8)]


def episode(ids, mask, logprobs, *, reward=1.0, truncated=False, tool_calls=1) -> Episode:
    e = Episode("t", 0, 2, "bridge")
    e.token_ids, e.policy_mask, e.logprobs = list(ids), list(mask), list(logprobs)
    e.reward, e.truncated, e.terminated = reward, truncated, not truncated
    e.tool_calls = tool_calls
    return e


# prompt 10 11 12 | turn 20 21 | observation 30 31 | turn 22 23
IDS = [10, 11, 12, 20, 21, 30, 31, 22, 23]
MASK = [False, False, False, True, True, False, False, True, True]
LOGPROBS = [0.0, 0.0, 0.0, -0.5, -0.25, 0.0, 0.0, -1.0, -2.0]


def test_an_episode_splits_into_prompt_and_masked_completion_with_an_eos_outside_the_mask():
    sample = episode_to_sample(episode(IDS, MASK, LOGPROBS), eos_id=99)
    assert sample.prompt_ids == [10, 11, 12]
    assert sample.completion_ids == [20, 21, 30, 31, 22, 23, 99]
    assert sample.env_mask == [1, 1, 0, 0, 1, 1, 0]
    assert sample.logprobs == [-0.5, -0.25, 0.0, 0.0, -1.0, -2.0, 0.0]
    # TRL calls a completion truncated unless its last id is EOS / pad
    assert not sample.truncated and sample.completion_ids[-1] == 99


def test_an_episode_the_budget_ended_still_ends_in_eos():
    sample = episode_to_sample(episode(IDS, MASK, LOGPROBS, reward=0.0, truncated=True), eos_id=99)
    assert sample.completion_ids[-1] == 99 and not sample.truncated


def test_max_completion_length_cuts_the_multi_turn_completion_and_leaves_it_truncated():
    sample = episode_to_sample(episode(IDS, MASK, LOGPROBS), eos_id=99, max_completion_length=4)
    assert sample.completion_ids == [20, 21, 30, 31]
    assert sample.env_mask == [1, 1, 0, 0] and sample.logprobs == [-0.5, -0.25, 0.0, 0.0]
    assert sample.truncated and 99 not in sample.completion_ids
    # a completion that fits (6 ids) is not cut
    assert not episode_to_sample(episode(IDS, MASK, LOGPROBS), 99, 6).truncated


def test_an_episode_without_a_token_record_says_what_policy_is_needed():
    with pytest.raises(ValueError, match="TokenPolicy"):
        episode_to_sample(episode([], [], []), eos_id=99)


def test_reward_and_metrics_come_from_the_env():
    episodes = [episode(IDS, MASK, LOGPROBS, reward=r, tool_calls=c) for r, c in ((1, 1), (0, 3))]
    samples = [episode_to_sample(e, 99) for e in episodes]
    assert env_reward(None, None, env_reward=[1.0, 0.0], task_id=["t", "t"]) == [1.0, 0.0]
    metrics = episode_metrics(episodes, samples)
    assert metrics["reward/mean"] == 0.5 and metrics["reward/std"] == 0.5
    assert metrics["episode/tool_calls"] == 2.0 and metrics["episode/policy_tokens"] == 4.0


def test_trl_args_map_the_batch_and_the_loss():
    args = trl_args(config(tasks_per_step=4, group_size=8, micro_batch_size=8), world_size=2)
    assert args["per_device_train_batch_size"] == 8
    assert args["gradient_accumulation_steps"] == 2  # 32 episodes = 8 per pass x 2 processes x 2
    assert args["num_generations"] == 8
    assert args["loss_type"] == "dapo" and args["scale_rewards"] == "group"
    assert args["beta"] == 0.0 and args["epsilon"] == 0.2 and args["epsilon_high"] == 0.2
    seq = trl_args(config(aggregation="sequence_mean", advantage="dr_grpo"))
    assert seq["loss_type"] == "grpo" and seq["scale_rewards"] == "none"
    assert trl_args(config(), use_vllm=True)["use_vllm"] is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"advantage": "rloo"}, "no TRL equivalent"),
        ({"advantage_eps": 1e-6}, "TRL's fixed 1e-4"),
        ({"micro_batch_size": 3}, "do not split"),
    ],
)
def test_trl_args_refuse_what_trl_cannot_do(change, message):
    with pytest.raises(ValueError, match=message):
        trl_args(config(**change))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"use_vllm": True, "vllm_tensor_parallel_size": 2}, "vllm_mode='server'"),
        (
            {"use_vllm": True, "vllm_mode": "colocate", "vllm_tensor_parallel_size": 2},
            "tensor_parallel_size > 1",
        ),
        ({"use_vllm": True, "vllm_enable_sleep_mode": True}, "KV cache sleeps"),
    ],
)
def test_trl_vllm_options_the_rollouts_cannot_honour_are_refused_up_front(overrides, message):
    with pytest.raises(ValueError, match=message):
        trl_args(config(), **overrides)


def test_trl_vllm_options_the_rollouts_honour_pass():
    server = trl_args(config(), use_vllm=True, vllm_mode="server", vllm_tensor_parallel_size=2)
    assert server["vllm_tensor_parallel_size"] == 2
    assert trl_args(config(), vllm_enable_sleep_mode=True)["vllm_enable_sleep_mode"]  # no vLLM


def test_the_fixed_batch_check_wants_one_micro_batch():
    from passkt.agents.train.trl_check import fixed_batch_agreement

    with pytest.raises(ValueError, match="one micro-batch"):
        fixed_batch_agreement(None, config(tasks_per_step=2, group_size=4, micro_batch_size=4))


@pytest.mark.slow
@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_train_grpo_trl_leaves_a_checkpoint_passkt_loads_and_resumes(
    tiny64, people, tmp_path, finetune, monkeypatch
):
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline by default
    from passkt.agents.hf import HFPolicy
    from passkt.agents.policy import SamplingParams
    from passkt.agents.train import trl as adapter
    from passkt.agents.train.report import read_metrics
    from passkt.agents.train.trl import train_grpo_trl

    calls = []
    original = adapter.PassktRollout.__call__

    def counted(self, prompts, trainer):
        calls.append(trainer.state.global_step)
        return original(self, prompts, trainer)

    monkeypatch.setattr(adapter.PassktRollout, "__call__", counted)

    fields = dict(
        policy=f"hf:{tiny64}",
        max_steps=1,
        max_new_tokens=8,
        finetune=finetune,
        save_every=1,
        learning_rate=1e-3,
        report_to=("tensorboard", "wandb"),
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = train_grpo_trl(config(**fields))
    assert result.steps == 1 and result.checkpoint == tmp_path / "run" / "final"
    assert (tmp_path / "run" / "checkpoint-1").is_dir()
    assert "reward/mean" in result.last_metrics
    # a plain HF folder (LoRA merged): the evaluator's policies load it as it is
    assert not (result.checkpoint / "adapter_config.json").exists()
    policy = HFPolicy(result.checkpoint)
    (completion,) = policy.generate([[{"role": "user", "content": "Hi"}]], SamplingParams())
    assert completion.token_ids
    # resuming continues from checkpoint-1: one more rollout (at step 1), not a fresh start
    resumed = train_grpo_trl(config(**{**fields, "max_steps": 2}), resume=True)
    assert resumed.steps == 2 and calls == [0, 1]
    # TRL's logs went through our sinks, under our names, one line per step across the resume
    out = tmp_path / "run"
    metrics = read_metrics(out)
    assert [m["step"] for m in metrics] == [1, 2]
    assert {"reward/mean", "episode/tool_calls", "loss"} <= set(metrics[-1])
    import wandb

    wandb.teardown()  # the wandb service writes the run file in the background; wait for it
    assert b"reward/mean" in next((out / "wandb").glob("offline-run-*/run-*.wandb")).read_bytes()
    assert list((out / "tb").glob("events.out.tfevents.*"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id", ["kv_lookup:KVLookupMinimal-v0", "kv_variants:KVLookupKwargs-v0"]
)
def test_train_grpo_trl_runs_on_a_plain_env_and_a_kwargs_env(env_id, tiny64, tmp_path, monkeypatch):
    """The TRL route on envs without a category, task list or budget argument: two steps run
    and leave a checkpoint."""
    from pathlib import Path

    from passkt.agents.train.trl import train_grpo_trl

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "third_party"))
    overrides = dict(env_id=env_id, env_kwargs={}, t_train=1, group_size=2, max_steps=2)
    overrides.update(policy=f"hf:{tiny64}", limit=4, max_new_tokens=8, finetune="full")
    result = train_grpo_trl(config(**overrides, output_dir=str(tmp_path / "trl")))
    assert result.steps == 2 and result.checkpoint is not None and result.checkpoint.is_dir()
