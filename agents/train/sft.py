"""SFT on expert trajectories: the matched-data control of the study.

The expert is ``OraclePolicy`` (``expert = "oracle"``): it follows each task's gold chain
(``<search>`` the gold queries in order, then ``<answer>``); ``expert_format = "plain"`` writes
its turns as the testbed base's pretraining corpus does (bare actions, worked math). Its
episodes run through the same rollout engine and env as GRPO's,
on the same task list and budget T_train, and are tokenized with the trained model's own chat
template (``rollout(..., tokenizer=...)``), so SFT sees exactly the protocol GRPO samples in. With
``expert = "self"`` the episodes are instead the policy's own rewarded samples of the same tasks
(rejection sampling, the on-policy control); they are sampled once, before the first update, and
kept in ``expert_data.jsonl`` so a resumed run trains on the same ones.

The loop, per optimizer step::

    batch <- the step's batch_size expert episodes (a seeded permutation per epoch; this share)
    for each micro-batch (gradients accumulate):
        loss <- token NLL of the policy tokens                    # prompt/observations masked
        backward(loss)
    clip the gradient norm; optimizer step; schedule step
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passkt.agents.policy import Message, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.scripted import OraclePolicy
from passkt.agents.specs import PolicyContext, load_policy, resolve_factory
from passkt.agents.train.common import (
    TokenSequence,
    collate,
    env_kwargs_for,
    env_options,
    length_sorted_micro_batches,
    load_task_list,
    reduce_sums,
    sequence_logprobs,
)
from passkt.agents.train.config import SFTConfig
from passkt.agents.train.loop import Timer, TrainingRun, TrainResult
from passkt.agents.train.losses import policy_nll
from passkt.envs.contract import inspect_env
from passkt.envs.errors import DatasetFormatError
from passkt.envs.tasks import Task

logger = logging.getLogger(__name__)


class NoSuccessfulSamples(ValueError):
    """``expert = "self"``: the policy solved none of its samples, so there is nothing to train
    on (SFT on no data leaves the policy as it is)."""


@dataclass(frozen=True)
class ExpertExample:
    """One expert episode, tokenized for training."""

    task_id: str
    reward: float
    sequence: TokenSequence
    messages: tuple[Message, ...] = ()


def expert_tasks(config: SFTConfig) -> list[Task]:
    """The config's training tasks, checked to be ones the oracle can follow."""
    tasks = load_task_list(config, config.split, task_ids=config.task_ids, limit=config.limit)
    if not all(isinstance(task, Task) for task in tasks):
        raise ValueError(
            f"SFT's expert is passkt's oracle, which follows passkt Task records (gold queries and "
            f"answers); {config.env_id} has no such tasks. Give your own agent as the expert "
            "(--expert py:MODULE:FACTORY), sample the policy itself (--expert self: rejection "
            "sampling), or pass expert episodes (--data-path, a JSONL written by "
            "save_expert_dataset)."
        )
    return tasks


def build_expert_dataset(
    config: SFTConfig,
    tokenizer: Any,
    *,
    tasks: Sequence[Task] | None = None,
    seed: int | None = None,
) -> list[ExpertExample]:
    """Expert episodes of ``OraclePolicy`` on the config's training tasks, one per task.

    Args:
        config: Gives the env, its kwargs, the split, the task selection and T_train (the same
            fields as a ``GRPOConfig``, so both trainers see the same tasks).
        tokenizer: The tokenizer (with chat template) of the model to be trained.
        tasks: The tasks (default: ``load_task_list`` of the config).
        seed: Rollout seed (default: ``config.seed``).
    """

    if tasks is None:
        tasks = expert_tasks(config)
    plain = config.expert_format == "plain"
    result = rollout(
        OraclePolicy(tasks, think=not plain, worked=plain),
        config.env_id,
        [task.task_id for task in tasks],
        n=1,
        budgets=(config.t_train,),
        env_kwargs=env_kwargs_for(config, config.split),
        **env_options(config),
        seed=config.seed if seed is None else seed,
        tokenizer=tokenizer,
    )
    return [
        ExpertExample(
            task_id=e.task_id,
            reward=e.reward,
            sequence=TokenSequence(tuple(e.token_ids), tuple(e.policy_mask)),
            messages=tuple(e.messages),
        )
        for e in result.episodes
    ]


def build_self_dataset(config: SFTConfig, *, seed: int | None = None) -> list[ExpertExample]:
    """The policy's own rewarded episodes of the config's training tasks (rejection sampling).

    ``config.policy`` (the untrained base) samples every task ``self_samples`` times at budget
    T_train; up to ``self_keep`` rewarded episodes with distinct texts are kept per task, in
    sample order. Tasks it never solves contribute nothing, so the set is the base's own
    successes, on the same problems as the expert data.
    """

    tasks = load_task_list(config, config.split, task_ids=config.task_ids, limit=config.limit)
    options = {"batch_size": config.generation_batch_size}
    result = rollout(
        load_policy(config.policy, **options),
        config.env_id,
        [task.task_id for task in tasks],
        n=config.self_samples,
        budgets=(config.t_train,),
        env_kwargs=env_kwargs_for(config, config.split),
        **env_options(config),
        params=SamplingParams(
            temperature=config.self_temperature, max_new_tokens=config.max_new_tokens
        ),
        seed=config.seed if seed is None else seed,
    )
    kept: dict[str, list[ExpertExample]] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for e in result.episodes:
        texts = (e.task_id, tuple(m["content"] for m in e.messages if m["role"] == "assistant"))
        chosen = kept.setdefault(e.task_id, [])
        if not e.correct or texts in seen or len(chosen) >= config.self_keep:
            continue
        seen.add(texts)
        chosen.append(
            ExpertExample(
                task_id=e.task_id,
                reward=e.reward,
                sequence=TokenSequence(tuple(e.token_ids), tuple(e.policy_mask)),
                messages=tuple(e.messages),
            )
        )
    return [example for task in tasks for example in kept.get(task.task_id, [])]


def build_agent_dataset(
    config: SFTConfig, tokenizer: Any, *, seed: int | None = None
) -> list[ExpertExample]:
    """The successful episodes of the agent ``config.expert`` (``py:MODULE:FACTORY``) on the
    config's training tasks, one sample per task at budget T_train, tokenized with the trained
    model's chat template. The factory gets the env's ``PolicyContext``, as under ``passkt eval``.
    """
    tasks = load_task_list(config, config.split, task_ids=config.task_ids, limit=config.limit)
    kwargs = {k: v for k, v in config.env_kwargs.items() if k != "split"}
    contract = inspect_env(config.env_id, kwargs, config.split)
    ids = [task.task_id for task in tasks]
    context = PolicyContext(
        env_id=config.env_id,
        env_kwargs=kwargs,
        task_ids=tuple(ids),
        tasks=contract.tasks,
        protocol=contract.protocol,
    )
    result = rollout(
        load_policy(config.expert, tasks=contract.tasks, context=context),
        config.env_id,
        ids,
        n=1,
        budgets=(config.t_train,),
        env_kwargs=env_kwargs_for(config, config.split),
        **env_options(config),
        seed=config.seed if seed is None else seed,
        tokenizer=tokenizer,
        contract=contract,
    )
    return [
        ExpertExample(
            task_id=e.task_id,
            reward=e.reward,
            sequence=TokenSequence(tuple(e.token_ids), tuple(e.policy_mask)),
            messages=tuple(e.messages),
        )
        for e in result.episodes
        if e.correct
    ]


def save_expert_dataset(examples: Sequence[ExpertExample], path: str | Path) -> Path:
    """Write expert examples as JSONL: task_id, reward, token_ids, policy_mask, messages."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for example in examples:
            record = {
                "task_id": example.task_id,
                "reward": example.reward,
                "token_ids": list(example.sequence.token_ids),
                "policy_mask": [int(m) for m in example.sequence.policy_mask],
                "messages": list(example.messages),
            }
            handle.write(json.dumps(record) + "\n")
    return path


def load_expert_dataset(path: str | Path) -> list[ExpertExample]:
    """Read a JSONL written by ``save_expert_dataset`` (or by hand in the same format)."""

    examples = []
    lines = Path(path).read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetFormatError(path, number, "-", f"not valid JSON ({e})") from e
        for key in ("task_id", "token_ids", "policy_mask"):
            if key not in record:
                raise DatasetFormatError(path, number, key, "missing; see save_expert_dataset")
        ids, mask = record["token_ids"], record["policy_mask"]
        if len(ids) != len(mask):
            raise DatasetFormatError(
                path, number, "policy_mask", f"has {len(mask)} entries for {len(ids)} token_ids"
            )
        examples.append(
            ExpertExample(
                task_id=str(record["task_id"]),
                reward=float(record.get("reward", 1.0)),
                sequence=TokenSequence(tuple(ids), tuple(bool(m) for m in mask)),
                messages=tuple(record.get("messages", ())),
            )
        )
    if not examples:
        raise DatasetFormatError(path, 0, "-", "the file has no examples")
    return examples


def train_sft(config: SFTConfig, *, resume: bool = False) -> TrainResult:
    """Fine-tune ``config.policy`` on expert episodes (built from the config's tasks, or read
    from ``config.data_path``).

    Args:
        config: The run's config (see ``SFTConfig``).
        resume: Continue from the newest checkpoint in ``config.output_dir``.

    Returns:
        Where the run wrote its checkpoints and metrics, and the last step's metrics.
    """
    # The tasks are checked before the run folder is made or the model is loaded.
    oracle = config.data_path is None and config.expert == "oracle"
    tasks = expert_tasks(config) if oracle else None
    if config.data_path is None and config.expert.startswith("py:"):
        resolve_factory(config.expert)  # a bad agent fails before the run folder exists
    run = TrainingRun.start(config, resume=resume)
    with run:  # releases the writer lock however the run ends
        examples = expert_examples(config, run.tokenizer, tasks=tasks, reuse=resume)
        by_id = {f"{i}:{e.task_id}": e for i, e in enumerate(examples)}
        run.plan(list(by_id), config.batch_size)
        if run.is_main and config.data_path is None:
            save_expert_dataset(examples, run.output_dir / "expert_data.jsonl")
        for step in run.steps("sft"):
            timer = Timer()
            with timer("update"):
                sequences = [by_id[item].sequence for item in run.local_items(step)]
                sums = sft_update(run, config, sequences)
            totals = reduce_sums(run.accelerator, sums)
            metrics = {
                "loss/nll": totals["loss"] / run.world,
                "tokens/policy": totals["tokens"],
                "grad_norm": sums["grad_norm"],
                "tokens/s": totals["all_tokens"] / max(timer.seconds["update"], 1e-9),
                "time/update_s": timer.seconds["update"],
            }
            run.end_step(step, metrics, postfix=f"nll={metrics['loss/nll']:.3f}")
        return run.finish()


def expert_examples(
    config: SFTConfig,
    tokenizer: Any,
    *,
    tasks: Sequence[Task] | None = None,
    reuse: bool = False,
) -> list[ExpertExample]:
    """The run's training examples: ``config.data_path`` or freshly built expert episodes (of
    ``tasks``, default the config's), keeping only rewarded ones when ``config.only_correct``.
    ``reuse``: a resumed ``expert = "self"`` run reads the samples it saved in its folder."""
    sampled = Path(config.output_dir) / "expert_data.jsonl"
    if config.data_path is not None:
        examples = load_expert_dataset(config.data_path)
    elif config.expert == "self" and reuse and sampled.is_file():  # a resumed run: the same samples
        examples = load_expert_dataset(sampled)
    elif config.expert.startswith("py:"):
        examples = build_agent_dataset(config, tokenizer)
    elif config.expert == "self":
        examples = build_self_dataset(config)
        if not examples:
            raise NoSuccessfulSamples(
                f"{config.policy} solved none of its {config.self_samples} samples of any "
                "training task, so the on-policy control has no data; raise self_samples."
            )
    else:
        examples = build_expert_dataset(config, tokenizer, tasks=tasks)
    # Sampled datasets (self, py:) hold only successful episodes already: by success, not by
    # reward, which a shaped env may pay at or below 0 for a success.
    sampled_successes = config.data_path is None and config.expert != "oracle"
    kept = [e for e in examples if sampled_successes or e.reward > 0 or not config.only_correct]
    if not kept:
        raise ValueError(
            f"None of the {len(examples)} expert episodes earned a reward; check the tasks and "
            "T_train (the oracle needs as many tool calls as a task's gold queries), or set "
            "only_correct=False."
        )
    if len(kept) < len(examples):
        logger.warning("dropped %d expert episodes without reward", len(examples) - len(kept))
    if config.max_length is not None:
        kept = [
            ExpertExample(e.task_id, e.reward, _cut(e.sequence, config.max_length), e.messages)
            for e in kept
        ]
    return kept


def _cut(sequence: TokenSequence, length: int) -> TokenSequence:
    return TokenSequence(sequence.token_ids[:length], sequence.policy_mask[:length])


def sft_update(
    run: TrainingRun, config: SFTConfig, sequences: Sequence[TokenSequence]
) -> dict[str, float]:
    """One optimizer step of token NLL on policy tokens; returns this process's sums."""
    device = run.accelerator.device
    counts = {
        "tokens": float(sum(s.num_policy_tokens for s in sequences)),
        "sequences": float(len(sequences)),
    }
    totals = reduce_sums(run.accelerator, counts)
    key = "tokens" if config.aggregation == "token_mean" else "sequences"
    normalizer = totals[key] / run.world
    chunks = length_sorted_micro_batches(
        sequences, config.micro_batch_size, config.micro_batch_tokens
    )
    loss_sum = 0.0
    for j, chunk in enumerate(chunks):
        batch = collate([sequences[i] for i in chunk], run.policy.pad_token_id, device)
        last = j == len(chunks) - 1
        with contextlib.nullcontext() if last else run.accelerator.no_sync(run.model):
            logp = sequence_logprobs(
                run.model,
                batch,
                logits=config.loss_logits,
                chunk_tokens=config.logits_chunk_tokens,
            )  # (B, L)
            loss = policy_nll(logp, batch.policy_mask, config.aggregation, normalizer)
            run.accelerator.backward(loss)
        loss_sum += loss.item()
    grad_norm = run.optimizer_step()
    return {
        "loss": loss_sum,
        "tokens": counts["tokens"],
        "all_tokens": float(sum(len(s.token_ids) for s in sequences)),
        "grad_norm": grad_norm,
    }
