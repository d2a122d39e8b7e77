"""Any passkt env as a TRL ``GRPOTrainer`` environment (the optional extra ``trl``).

TRL's multi-turn extension point (TRL 1.x, read in ``trl/trainer/grpo_trainer.py``) is
``GRPOTrainer(rollout_func=...)``: the trainer hands the function this process's prompts and
itself, and the function returns ``prompt_ids``, ``completion_ids``, per-token ``logprobs`` and any
extra fields; an ``env_mask`` field is the loss mask inside the completion (1 at the model's own
tokens, 0 at the env's observations), the others go to the reward functions as keyword
arguments. ``PassktRollout`` is that function: it runs passkt's rollout engine (the same lock-step
engine and token records as ``passkt train grpo``) with the trainer's current policy and returns
the env's reward as the ``env_reward`` field, which ``env_reward`` (the reward function) passes on.

    from passkt.agents.train.trl import make_trl_trainer
    trainer = make_trl_trainer(passkt_grpo_config)       # same config as ``train_grpo``
    trainer.train()

Four traps of a naive adapter, each handled here (and tested):

- *Duplicated prompts.* TRL's sampler repeats every prompt ``num_generations`` times in a row, so
  the function sees each task G times. ``rollout_calls`` turns the rows back into tasks x samples
  (the engine keys episodes by ``(task, sample)``), one rollout call per distinct group size.
- *Task identity.* The function receives only the prompts. ``build_dataset`` writes the task id
  into every prompt message (key ``task_id``; chat templates ignore unknown keys) and into a
  ``task_id`` column; ``task_id_of`` reads it back. Question text is never matched.
- *EOS.* TRL counts a completion whose last id is not EOS / pad as truncated (and
  ``mask_truncated_completions=True`` drops it), but a passkt turn ends at ``</answer>``. An
  episode that ended (an answer, or the budget ran out) gets one EOS appended, outside the mask
  (never trained: the model did not sample it).
- *Length.* TRL enforces ``max_completion_length`` only on its own single-turn generation. Here
  the completion (every turn and observation) is cut to it, left without EOS (so TRL sees it as
  truncated), and keeps the episode's reward, as ``GRPOConfig.max_length`` does in our trainer.

Generation routes: the trainer's own model (``HFPolicy`` over it: CPU or one GPU), or TRL's vLLM
(``use_vllm=True``; server or colocate mode, see ``trl_vllm``). TRL syncs the weights into vLLM
before calling the function.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passkt.agents.env_runtime import EnvRunner
from passkt.agents.hf import HFPolicy
from passkt.agents.rollout import Episode, rollout
from passkt.agents.train.common import env_kwargs_for, env_options, load_task_list, step_seed
from passkt.agents.train.config import GRPOConfig, policy_path
from passkt.agents.train.loop import TrainResult
from passkt.agents.train.options import refuse_options
from passkt.agents.train.report import make_callback
from passkt.agents.train.trl_vllm import guard_sync_answers, trl_vllm_policy
from passkt.envs.errors import MissingDependencyError

logger = logging.getLogger(__name__)

TASK_KEY = "task_id"
"""Key of the task id in every prompt message and the name of the dataset column."""


# --------------------------------------------------------------------------- dataset


def task_rows(config: GRPOConfig) -> list[dict[str, Any]]:
    """One row per training task: ``prompt`` (the env's first conversation) and ``task_id``.

    Every prompt message carries the task id too, because TRL gives ``rollout_func`` only the
    prompts; the rollout itself re-renders the prompt from the env, so the text here is for TRL's
    logs and for reward functions.
    """

    tasks = load_task_list(config, config.split, task_ids=config.task_ids, limit=config.limit)
    # The rollout's own runner: the env's protocol renders the prompt (a plain env has no
    # category, no system prompt), and the contract decides the constructor arguments.
    runner = EnvRunner(config.env_id, env_kwargs_for(config, config.split))
    env = runner.make(config.t_train)
    rows = []
    for task in tasks:
        seed, options = runner.reset_args(task.task_id, config.seed)
        observation, _ = env.reset(seed=seed, options=options)
        messages = runner.protocol.first_messages(observation)
        prompt = [{**message, TASK_KEY: task.task_id} for message in messages]
        rows.append({"prompt": prompt, TASK_KEY: task.task_id})
    env.close()
    return rows


def build_dataset(config: GRPOConfig) -> Any:
    """The TRL training dataset of ``config``'s tasks (a ``datasets.Dataset``)."""
    try:
        from datasets import Dataset  # optional: the hub extra
    except ImportError as e:
        raise MissingDependencyError("datasets", "trl") from e
    return Dataset.from_list(task_rows(config))


def task_id_of(prompt: Any) -> str:
    """The task id a ``build_dataset`` prompt carries (in its last message)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        task_id = prompt[-1].get(TASK_KEY)
        if isinstance(task_id, str) and task_id:
            return task_id
    raise ValueError(
        f"prompt carries no {TASK_KEY!r} in its messages; build the TRL dataset with "
        "passkt.agents.train.trl.build_dataset (the rollout never matches question text)."
    )


# --------------------------------------------------------------------------- rows <-> episodes


@dataclass(frozen=True)
class RolloutCall:
    """One ``rollout`` call: ``n`` samples of each task, and the input rows they answer."""

    task_ids: tuple[str, ...]
    n: int
    rows: tuple[tuple[int, ...], ...]
    """``rows[i]``: the input row of each of the ``n`` samples of ``task_ids[i]``."""


def rollout_calls(task_ids: Sequence[str]) -> list[RolloutCall]:
    """Group TRL's repeated rows into rollout calls of distinct tasks with equal sample counts.

    Consecutive equal ids are one group (TRL repeats a prompt ``num_generations`` times in a row;
    a group cut at a process boundary is simply shorter). The engine keys an episode by task and
    sample, so a task that appears in two groups goes to two calls.
    """
    runs: list[tuple[str, list[int]]] = []
    for row, task_id in enumerate(task_ids):
        if runs and runs[-1][0] == task_id:
            runs[-1][1].append(row)
        else:
            runs.append((task_id, [row]))
    calls: list[tuple[int, list[str], list[tuple[int, ...]]]] = []
    for task_id, rows in runs:
        for n, ids, call_rows in calls:
            if n == len(rows) and task_id not in ids:
                ids.append(task_id)
                call_rows.append(tuple(rows))
                break
        else:
            calls.append((len(rows), [task_id], [tuple(rows)]))
    return [RolloutCall(tuple(ids), n, tuple(rows)) for n, ids, rows in calls]


@dataclass(frozen=True)
class TRLSample:
    """One episode in TRL's terms."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """Sampling log-probability per completion id (0.0 at env tokens and the appended EOS)."""
    env_mask: list[int]
    """1 at the model's own sampled ids, 0 at observation / template ids and the appended EOS."""
    truncated: bool
    """Cut at ``max_completion_length`` (no EOS: TRL sees it as truncated)."""


def episode_to_sample(
    episode: Episode, eos_id: int, max_completion_length: int | None = None
) -> TRLSample:
    """Split an episode's token record into TRL's prompt and completion (see the module doc).

    The prompt is everything before the first sampled id (system prompt, question, generation
    prompt); the completion is every turn and observation after it.
    """
    if not episode.token_ids:
        raise ValueError(
            f"episode of task {episode.task_id!r} has no token record: the adapter needs a "
            "TokenPolicy (HFPolicy, vLLM)."
        )
    if True not in episode.policy_mask:
        raise ValueError(f"episode of task {episode.task_id!r} has no sampled token")
    start = episode.policy_mask.index(True)
    completion = list(episode.token_ids[start:])
    # an episode the env failed (Episode.env_error) trains no token: the failure is not the
    # policy's (its reward still enters TRL's group baseline, which the adapter does not own)
    trained = episode.env_error is None
    mask = [int(m and trained) for m in episode.policy_mask[start:]]
    logprobs = [float(x) for x in episode.logprobs[start:]]
    truncated = max_completion_length is not None and len(completion) > max_completion_length
    if truncated:
        completion, mask, logprobs = (
            completion[:max_completion_length],
            mask[:max_completion_length],
            logprobs[:max_completion_length],
        )
    else:
        completion.append(eos_id)
        mask.append(0)
        logprobs.append(0.0)
    return TRLSample(list(episode.token_ids[:start]), completion, logprobs, mask, truncated)


def rollout_output(samples: Sequence[TRLSample], episodes: Sequence[Episode]) -> dict[str, Any]:
    """The dict ``rollout_func`` returns; the extra fields reach the reward functions."""
    return {
        "prompt_ids": [s.prompt_ids for s in samples],
        "completion_ids": [s.completion_ids for s in samples],
        "logprobs": [s.logprobs for s in samples],
        "env_mask": [s.env_mask for s in samples],
        "env_reward": [float(e.reward) for e in episodes],
        "tool_calls": [int(e.tool_calls) for e in episodes],
    }


def env_reward(
    prompts: Any, completions: Any, env_reward: Sequence[float], **_: Any
) -> list[float]:
    """TRL reward function: the env's reward of each episode, as ``PassktRollout`` returned it."""
    return [float(r) for r in env_reward]


def episode_metrics(episodes: Sequence[Episode], samples: Sequence[TRLSample]) -> dict[str, float]:
    """The slash-named episode metrics ``passkt train grpo`` logs, for the same names in TRL."""
    n = max(len(episodes), 1)
    rewards = [float(e.reward) for e in episodes]
    mean = sum(rewards) / n
    return {
        "reward/mean": mean,
        "reward/std": (sum((r - mean) ** 2 for r in rewards) / n) ** 0.5,
        "episode/tool_calls": sum(e.tool_calls for e in episodes) / n,
        "episode/turns": sum(len(e.turns) for e in episodes) / n,
        "episode/truncated": sum(
            e.truncated or s.truncated for e, s in zip(episodes, samples, strict=True)
        )
        / n,
        "episode/policy_tokens": sum(sum(s.env_mask) for s in samples) / n,
        "episode/env_failures": float(sum(e.env_error is not None for e in episodes)),
    }


# --------------------------------------------------------------------------- the rollout_func


class PassktRollout:
    """TRL's ``rollout_func`` for the tasks of a passkt ``GRPOConfig``.

    Args:
        config: Env id, env kwargs, split, ``t_train``, sampling (``temperature``, ``top_p``,
            ``top_k``, ``max_new_tokens`` per turn) and the seed.
        max_completion_length: Cut each episode's completion to this many tokens (``None``: the
            trainer's ``args.max_completion_length``).
    """

    def __init__(self, config: GRPOConfig, *, max_completion_length: int | None = None) -> None:
        self.config = config
        self.max_completion_length = max_completion_length
        self.last_episodes: list[Episode] = []
        """The episodes of the latest call, in row order (for tests and callbacks)."""
        self.last_samples: list[TRLSample] = []

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, Any]:
        task_ids = [task_id_of(p) for p in prompts]
        seed = step_seed(
            self.config.seed, int(trainer.state.global_step), int(trainer.accelerator.process_index)
        )
        with self.policy(trainer) as policy:
            episodes = self.run(policy, task_ids, seed)
        eos_ids = list(getattr(trainer, "eos_token_ids", None) or [])
        eos = eos_ids[0] if eos_ids else trainer.processing_class.eos_token_id
        limit = self.max_completion_length or getattr(trainer.args, "max_completion_length", None)
        samples = [episode_to_sample(e, eos, limit) for e in episodes]
        self.last_episodes, self.last_samples = episodes, samples
        _log_metrics(trainer, episode_metrics(episodes, samples))
        return rollout_output(samples, episodes)

    def run(self, policy: Any, task_ids: Sequence[str], seed: int) -> list[Episode]:
        """One episode per row of ``task_ids`` (rows of one task are its samples), in row order."""
        episodes: list[Episode | None] = [None] * len(task_ids)
        for index, call in enumerate(rollout_calls(task_ids)):
            result = rollout(
                policy,
                self.config.env_id,
                list(call.task_ids),
                n=call.n,
                budgets=(self.config.t_train,),
                env_kwargs=env_kwargs_for(self.config, self.config.split),
                **env_options(self.config),
                params=self.config.sampling_params(),
                seed=seed + 7919 * index,
            )
            flat_rows = [row for rows in call.rows for row in rows]
            for row, episode in zip(flat_rows, result.episodes, strict=True):
                episodes[row] = episode
        assert all(e is not None for e in episodes), "every row gets one episode"
        return episodes  # type: ignore[return-value]

    @contextlib.contextmanager
    def policy(self, trainer: Any) -> Iterator[Any]:
        """The trainer's current policy: TRL's vLLM engine when it uses one, else its model
        (gathered for generation under DeepSpeed ZeRO-3, as TRL's own generation does)."""
        if getattr(trainer, "use_vllm", False):
            if trainer.vllm_generation.mode == "server":
                wait_for_sync(trainer)
            yield trl_vllm_policy(trainer)
            return
        from trl.models import unwrap_model_for_generation  # optional: the trl extra

        wrapped = getattr(trainer, "model_wrapped", None) or trainer.model
        with unwrap_model_for_generation(wrapped, trainer.accelerator) as model:
            yield HFPolicy(
                model,
                tokenizer=trainer.processing_class,
                batch_size=self.config.generation_batch_size,
            )


def wait_for_sync(trainer: Any) -> None:
    """Hold every process until the main process's weight sync of this step is done.

    In server mode TRL's main process alone sends the new weights and resets the server's prefix
    cache (``VLLMGeneration.sync_weights``), then every process calls the rollout function; its
    own rounds go to the server at once. Without this barrier a process samples while the update
    or the reset is in flight: stale weights, and a reset refused with ``{"success": false}``.
    The next step's sync cannot overtake a rollout either: it comes after the optimizer step,
    whose gradient all-reduce waits for every process's rollouts.
    """
    trainer.accelerator.wait_for_everyone()


def guard_server(trainer: Any) -> None:
    """Make the main process's server client fail loudly on a refused sync (``trl_vllm``)."""
    generation = getattr(trainer, "vllm_generation", None)
    client = getattr(generation, "vllm_client", None)
    if generation is not None and generation.mode == "server" and client is not None:
        guard_sync_answers(client.session, lambda: int(trainer.state.global_step))


def _log_metrics(trainer: Any, metrics: Mapping[str, float]) -> None:
    """Add passkt's metric names to TRL's per-step metrics (averaged and logged by TRL)."""
    store = getattr(trainer, "_metrics", None)
    if store is None:
        return
    mode = "train" if trainer.model.training else "eval"
    for name, value in metrics.items():
        store[mode][name].append(float(value))


# --------------------------------------------------------------------------- the trainer


_SCHEDULERS = {"constant": "constant", "linear": "linear", "cosine": "cosine"}
_SCALE_REWARDS = {"std": "group", "dr_grpo": "none"}
_LOSS_TYPES = {"token_mean": "dapo", "sequence_mean": "grpo"}


def trl_args(config: GRPOConfig, world_size: int = 1, **overrides: Any) -> dict[str, Any]:
    """``trl.GRPOConfig`` keyword arguments equivalent to a passkt ``GRPOConfig``.

    One optimizer step sees ``tasks_per_step`` tasks x ``group_size`` episodes over all
    processes, split into micro-batches of ``micro_batch_size`` (TRL's
    ``per_device_train_batch_size``) with gradient accumulation over the rest, as in
    ``train_grpo``. ``overrides`` (any ``trl.GRPOConfig`` field, e.g. ``use_vllm=True``,
    ``vllm_mode="server"``) win. ``max_length`` becomes TRL's ``max_completion_length`` (the
    multi-turn completion, turns and observations, after the prompt; default 4096). Metrics go
    through passkt's ``MetricsLogger`` (the config's ``report_to``), not transformers' reporters.

    Raises:
        ValueError: For settings TRL has no equivalent of (RLOO advantages, another
            ``advantage_eps`` than TRL's fixed 1e-4), or a batch that does not split evenly.
    """
    if config.advantage not in _SCALE_REWARDS:
        raise ValueError(
            f"advantage={config.advantage!r} has no TRL equivalent; use 'std' or 'dr_grpo' with "
            "train.backend=trl, or passkt's own trainer."
        )
    if config.advantage_eps != 1e-4:
        raise ValueError(
            f"advantage_eps={config.advantage_eps} differs from TRL's fixed 1e-4; keep the default."
        )
    episodes = config.tasks_per_step * config.group_size
    per_pass = config.micro_batch_size * world_size
    if episodes % per_pass:
        raise ValueError(
            f"tasks_per_step x group_size = {episodes} episodes do not split into micro-batches "
            f"of {config.micro_batch_size} on {world_size} process(es); make micro_batch_size "
            "divide the episodes per process."
        )
    import torch  # optional: the hf extra (torch, transformers)

    args: dict[str, Any] = {
        "output_dir": config.output_dir,
        "seed": config.seed,
        "learning_rate": config.learning_rate,
        "weight_decay": config.weight_decay,
        "lr_scheduler_type": _SCHEDULERS[config.lr_scheduler],
        "warmup_steps": config.warmup_steps,
        "num_train_epochs": config.epochs,
        "max_steps": config.max_steps if config.max_steps is not None else -1,
        "per_device_train_batch_size": config.micro_batch_size,
        "gradient_accumulation_steps": episodes // per_pass,
        "num_generations": config.group_size,
        "num_iterations": config.num_iterations,
        "epsilon": config.clip_low,
        "epsilon_high": config.clip_high,
        "beta": config.kl_coef,
        "loss_type": _LOSS_TYPES[config.aggregation],
        "scale_rewards": _SCALE_REWARDS[config.advantage],
        "temperature": config.temperature,
        "top_p": config.top_p,
        "top_k": config.top_k,
        "max_completion_length": config.max_length or 4096,
        "max_grad_norm": config.max_grad_norm if config.max_grad_norm is not None else 0.0,
        "logging_steps": 1,
        "save_strategy": "steps" if config.save_every else "no",
        "save_steps": config.save_every or 500,
        "save_total_limit": config.save_total_limit,
        "report_to": "none",  # our MetricsLogger callback writes the same sinks as train_grpo
        "use_cpu": not torch.cuda.is_available(),
        "bf16": config.dtype == "bfloat16",
        "model_init_kwargs": {"dtype": config.dtype if config.dtype != "auto" else "auto"},
        "disable_tqdm": not config.progress,
    }
    if config.gradient_checkpointing:
        args["gradient_checkpointing"] = True
    refuse_unhonoured(config)
    args.update(rollout_engine_args(config))
    args.update(overrides)
    refuse_unsupported_vllm(args)
    return args


def rollout_engine_args(config: GRPOConfig) -> dict[str, Any]:
    """TRL's vLLM fields for ``config.rollout_engine``: none for ``hf`` (the trained model
    samples), a colocated engine per process for ``vllm``, a ``trl vllm-serve`` server for
    ``vllm-server``."""
    if config.rollout_engine == "vllm":
        return {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": config.vllm_gpu_memory_utilization,
        }
    if config.rollout_engine == "vllm-server":
        return {
            "use_vllm": True,
            "vllm_mode": "server",
            "vllm_server_base_url": config.vllm_server_url,
        }
    return {}


def refuse_unhonoured(config: Any) -> None:
    """Refuse, in one line, a passkt option that TRL's trainers would not honour.

    TRL's micro-batches are ``per_device_train_batch_size`` rows (``micro_batch_size``) whatever
    their length, its fused output head computes the log-probabilities in its own tiles, and the
    route does not evaluate during training: ``micro_batch_tokens``, ``loss_logits``,
    ``logits_chunk_tokens`` and ``eval_every`` set away from their defaults would be no-ops.

    Raises:
        PlanError: Naming the option and why (a ``ValueError``).
    """
    refuse_options(config, "trl")


def refuse_unsupported_vllm(args: Mapping[str, Any]) -> None:
    """Refuse TRL vLLM options the adapter's rollouts cannot honour, before anything starts.

    ``PassktRollout`` calls TRL's engine itself (``trl_vllm``), not through TRL's ``generate``,
    so it neither gathers the prompts of a tensor-parallel group (colocate with
    ``vllm_tensor_parallel_size > 1``: each rank of the group would send different prompts) nor
    wakes the KV cache that ``vllm_enable_sleep_mode`` puts to sleep.

    Raises:
        ValueError: One line naming the option and what to use instead.
    """
    if not args.get("use_vllm"):
        return
    colocate = args.get("vllm_mode", "colocate") == "colocate"  # TRL 1.16's default mode
    if colocate and int(args.get("vllm_tensor_parallel_size", 1)) > 1:
        raise ValueError(
            "vllm_tensor_parallel_size > 1 with vllm_mode='colocate' is not supported by passkt's "
            "rollouts; use vllm_mode='server' (trl vllm-serve --tensor-parallel-size N) or 1."
        )
    if args.get("vllm_enable_sleep_mode"):
        raise ValueError(
            "vllm_enable_sleep_mode=True is not supported by passkt's rollouts (they would "
            "generate while the KV cache sleeps); leave it off."
        )


def lora_config(config: GRPOConfig) -> Any:
    """The peft ``LoraConfig`` of ``config`` (None for full fine-tuning)."""
    if config.finetune != "lora":
        return None
    from peft import LoraConfig  # optional: the hf extra (torch, transformers)

    targets = config.lora_target_modules
    return LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules="all-linear" if targets == ("all-linear",) else list(targets),
        task_type="CAUSAL_LM",
    )


def make_trl_trainer(config: GRPOConfig, **trl_overrides: Any) -> Any:
    """A ``trl.GRPOTrainer`` that trains ``config.policy`` on ``config``'s env through passkt.

    Args:
        config: The same config ``train_grpo`` takes.
        trl_overrides: Further ``trl.GRPOConfig`` fields (they win over the mapped ones).
    """
    try:
        from trl import GRPOConfig as TRLConfig  # optional: the trl extra
        from trl import GRPOTrainer  # optional: the trl extra
    except ImportError as e:
        raise MissingDependencyError("trl", "trl") from e

    world = int(os.environ.get("WORLD_SIZE", "1"))
    args = TRLConfig(**trl_args(config, world, **trl_overrides))
    trainer = GRPOTrainer(
        model=policy_path(config.policy),
        reward_funcs=env_reward,
        args=args,
        train_dataset=build_dataset(config),
        peft_config=lora_config(config),
        rollout_func=PassktRollout(config, max_completion_length=args.max_completion_length),
        callbacks=[make_callback(Path(config.output_dir), config.report_to, config.to_dict())],
    )
    guard_server(trainer)
    if not config.progress:  # with tqdm off, transformers would print every log line instead
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)
    return trainer


def train_grpo_trl(config: GRPOConfig, *, resume: bool = False, **trl_overrides: Any) -> Any:
    """Train with TRL's ``GRPOTrainer`` through the adapter, as ``train_grpo`` does with ours.

    TRL writes its own ``checkpoint-STEP`` folders (``save_every``) and resumes from the newest
    with ``resume=True``. The final model goes to ``output_dir/final`` as a plain HF folder
    (LoRA merged into the weights), which ``passkt eval`` loads like any checkpoint.

    Returns:
        A ``TrainResult`` (the final folder, the steps, the last logged metrics).
    """
    # optional: the hf extra (torch, transformers)
    from transformers.trainer_utils import get_last_checkpoint

    trainer = make_trl_trainer(config, **trl_overrides)
    exists = resume and os.path.isdir(config.output_dir)
    trainer.train(resume_from_checkpoint=get_last_checkpoint(config.output_dir) if exists else None)
    return finish_trl_run(trainer, config, "reward/mean")


def finish_trl_run(trainer: Any, config: Any, metric: str) -> TrainResult:
    """Save a finished TRL run as ``OUT/final`` (a plain HF folder; LoRA merged, its adapter in
    ``OUT/final-adapter``) and describe it; ``metric`` picks the log lines of the last metrics."""
    final = os.path.join(config.output_dir, "final")
    main = trainer.accelerator.is_main_process
    if config.finetune == "lora":  # the adapter beside, the merged model as the checkpoint
        trainer.save_model(final + "-adapter")  # every process: gathers ZeRO-3 / FSDP shards
        if main:
            # optional: the hf extra (torch, transformers)
            from peft import AutoPeftModelForCausalLM

            merged = AutoPeftModelForCausalLM.from_pretrained(final + "-adapter").merge_and_unload()
            merged.save_pretrained(final)
    else:
        trainer.save_model(final)
    if main:
        trainer.processing_class.save_pretrained(final)
    trainer.accelerator.wait_for_everyone()
    logs = [log for log in trainer.state.log_history if metric in log]
    return TrainResult(
        output_dir=Path(config.output_dir),
        checkpoint=Path(final) if main else None,
        steps=int(trainer.state.global_step),
        last_metrics={k: float(v) for k, v in (logs[-1] if logs else {}).items()},
        model=trainer.accelerator.unwrap_model(trainer.model),
    )
