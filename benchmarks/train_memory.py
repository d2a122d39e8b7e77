"""Peak memory per trained token of the GRPO update: passkt's trainer without and with its memory
options, next to TRL's GRPOTrainer through the adapter, on one fixed batch of multi-turn episodes.

    OMP_NUM_THREADS=1 python benchmarks/train_memory.py [--steps 2] [--tasks-per-step 2]
        [--group-size 2] [--t-train 5] [--micro-batch-size 4] [--micro-batch-tokens 1024]
        [--configs before,after,trl,trl-gc] [--threads 1]

The batch: ``--steps`` x ``--tasks-per-step`` synthetic ``BridgeQA-v0`` tasks (hops 2, train
split) x G episodes at budget T_train, played by the scripted ``HeuristicPolicy`` (it searches
names it has read and answers at random moments, so episodes run 1 to T_train + 1 turns and
each search result, about 300 tokens, stays in the context of every later turn) and tokenized
with SmolLM2's chat template. The episodes are sampled once, in this process, and every
configuration trains on exactly these token sequences (one batch per optimizer step), with the
env's rewards, so the loss mask (the heuristic's own turns) and every padded width are the same.
The model trained is SmolLM2-135M-Instruct (``smollm2_path()``, float32, full fine-tuning,
AdamW, lr 1e-6, no KL, token-mean loss / TRL ``dapo``).

Each configuration runs in its own Python process: it loads the model (passkt: ``TrainingRun``;
TRL: ``make_trl_trainer``, whose ``rollout_func`` is replaced by one that returns the fixed
batch), reads every weight once (transformers maps the safetensors file lazily), reads its
resident set size (RSS) and ``ru_maxrss``, trains ``--steps`` optimizer steps,
and reads ``ru_maxrss`` again. Printed per configuration: RSS after loading, the peak, the peak
minus the RSS after loading (what training added: gradients, AdamW's two moments, activations,
logits), the same less the gradients and AdamW states (12 bytes per float32 parameter: an
estimate of activations and logits), that increase per trained token (loss-mask tokens of one
step), the wall and CPU seconds of the training part, and the ratios of the increases in the
same run.

Configurations (``--configs``): ``all`` passkt with the output head on every position
(``loss_logits="all"``: ``(B, L, V)`` logits); ``before`` passkt as it ran before its memory
options (``loss_logits="columns"``, micro-batches by row count, no checkpointing); ``trained``
passkt with only ``loss_logits="trained"`` (the default now); ``cap`` and ``gc`` passkt before
with only ``micro_batch_tokens`` or only ``gradient_checkpointing``; ``after`` passkt with every
option (``trained`` logits, ``micro_batch_tokens``, ``gradient_checkpointing``); ``trl`` TRL's
``GRPOTrainer`` via ``passkt.agents.train.trl`` as ``trl_args`` maps the same config;
``trl-gc`` the same with ``gradient_checkpointing=True``.

What differs between the trainers on this batch: TRL splits each episode into a left-padded
prompt (the tokens before the first trained one) and a right-padded completion (turns and
observations, one EOS appended), so its rows are as wide as the longest prompt plus the longest
completion; it runs its fused output head (``trl.trainer.utils.add_fused_lm_head``) over every
completion position (the CPU path scores all of them, masked afterwards) and computes the
entropy too; its micro-batches are ``per_device_train_batch_size`` rows (= ``micro_batch_size``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "all": ("passkt", {"loss_logits": "all"}),
    "before": ("passkt", {"loss_logits": "columns"}),
    "trained": ("passkt", {"loss_logits": "trained"}),
    "cap": ("passkt", {"loss_logits": "columns", "micro_batch_tokens": None}),
    "gc": ("passkt", {"loss_logits": "columns", "gradient_checkpointing": True}),
    "after": (
        "passkt",
        {"loss_logits": "trained", "micro_batch_tokens": None, "gradient_checkpointing": True},
    ),
    "trl": ("trl", {}),
    "trl-gc": ("trl", {"gradient_checkpointing": True}),
}
"""name -> (trainer, config fields); ``cap`` and ``after`` cap micro-batches at
``--micro-batch-tokens``."""

LABELS = {
    "all": "passkt, logits at every position",
    "before": "passkt before (logits_to_keep columns, row micro-batches, no checkpointing)",
    "trained": "passkt, logits at trained positions only",
    "cap": "passkt, token-capped micro-batches only",
    "gc": "passkt, gradient checkpointing only",
    "after": "passkt after (trained logits, token-capped micro-batches, checkpointing)",
    "trl": "TRL GRPOTrainer via the adapter",
    "trl-gc": "TRL GRPOTrainer via the adapter, gradient checkpointing",
}


def grpo_config(args: argparse.Namespace, output_dir: str, name: str) -> Any:
    """The ``GRPOConfig`` of configuration ``name`` (the same fields for both trainers)."""
    from passkt.agents.smollm import smollm2_path
    from passkt.agents.train.config import GRPOConfig

    _, options = CONFIGS[name]
    options = dict(options)
    if "micro_batch_tokens" in options:
        options["micro_batch_tokens"] = args.micro_batch_tokens
    return GRPOConfig(
        policy=f"hf:{smollm2_path()}",
        env_id="BridgeQA-v0",
        env_kwargs={"source": "synthetic", "hops": 2},
        t_train=args.t_train,
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        micro_batch_size=args.micro_batch_size,
        learning_rate=1e-6,
        max_steps=args.steps,
        output_dir=output_dir,
        progress=False,
        **options,
    )


# --------------------------------------------------------------------------- the batch


def sample_batches(args: argparse.Namespace) -> list[list[Any]]:
    """The fixed batch: one list of episodes (tasks x G, task-major) per optimizer step."""
    from transformers import AutoTokenizer

    from passkt.agents.policy import SamplingParams
    from passkt.agents.rollout import rollout
    from passkt.agents.scripted import HeuristicPolicy
    from passkt.agents.smollm import smollm2_path
    from passkt.agents.train.common import load_task_list

    config = grpo_config(args, "unused", "before")
    tasks = load_task_list(config, "train", limit=args.steps * args.tasks_per_step)
    result = rollout(
        HeuristicPolicy(seed=args.seed),
        config.env_id,
        [t.task_id for t in tasks],
        n=args.group_size,
        budgets=(args.t_train,),
        env_kwargs={**config.env_kwargs, "split": "train"},
        params=SamplingParams(temperature=1.0),
        seed=args.seed,
        tokenizer=AutoTokenizer.from_pretrained(smollm2_path()),
    )
    per_step = args.tasks_per_step * args.group_size
    episodes = result.episodes
    return [episodes[i : i + per_step] for i in range(0, len(episodes), per_step)]


# --------------------------------------------------------------------------- one configuration


def rss_bytes() -> int:
    import psutil

    return int(psutil.Process().memory_info().rss)


def make_resident(model: Any) -> None:
    """Read every weight once: transformers maps safetensors files lazily, so the weights would
    otherwise join the resident set during the first forward pass and count as training's."""
    import torch

    with torch.no_grad():
        for tensor in (*model.parameters(), *model.buffers()):
            tensor.sum()


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def run_passkt(args: argparse.Namespace, batches: list[list[Any]], output_dir: str) -> dict:
    import torch

    from passkt.agents.train.common import TokenSequence, length_sorted_micro_batches
    from passkt.agents.train.grpo import policy_update
    from passkt.agents.train.loop import TrainingRun
    from passkt.agents.train.losses import group_advantages

    config = grpo_config(args, output_dir, args.one)
    task_ids = sorted({e.task_id for batch in batches for e in batch})
    run = TrainingRun.start(config)
    run.plan(task_ids, config.tasks_per_step)
    make_resident(run.unwrapped)
    loaded, load_peak = rss_bytes(), max_rss_bytes()
    micro_batches = padded = 0
    wall, cpu = time.perf_counter(), time.process_time()
    with run:
        for episodes in batches:
            rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
            advantages = group_advantages(
                rewards.view(-1, config.group_size), config.advantage, config.advantage_eps
            ).view(-1)
            sequences = [TokenSequence.from_episode(e, config.max_length) for e in episodes]
            chunks = length_sorted_micro_batches(
                sequences, config.micro_batch_size, config.micro_batch_tokens
            )
            micro_batches += len(chunks)
            padded += sum(len(c) * max(len(sequences[i].token_ids) for i in c) for c in chunks)
            policy_update(run, config, sequences, advantages, reference=None)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        params = sum(p.numel() for p in run.unwrapped.parameters() if p.requires_grad)
    return {
        "loaded": loaded,
        "load_peak": load_peak,
        "peak": max_rss_bytes(),
        "wall_s": wall,
        "cpu_s": cpu,
        "micro_batches": micro_batches,
        "padded_tokens": padded,
        "trainable_params": params,
    }


def run_trl(args: argparse.Namespace, batches: list[list[Any]], output_dir: str) -> dict:
    import contextlib

    from passkt.agents.train.trl import PassktRollout, episode_to_sample, make_trl_trainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    config = grpo_config(args, output_dir, args.one)
    trl_options = {"gradient_checkpointing": True} if args.one == "trl-gc" else {}
    trainer = make_trl_trainer(config, **trl_options)
    padded = [0]

    class Replay(PassktRollout):
        """``rollout_func`` that returns the fixed batch, one step's episodes per call."""

        calls = 0

        @contextlib.contextmanager
        def policy(self, trainer: Any) -> Any:
            yield None  # nothing samples

        def run(self, policy: Any, task_ids: Any, seed: int) -> list[Any]:
            episodes = batches[Replay.calls]
            Replay.calls += 1
            if len(task_ids) != len(episodes):
                raise RuntimeError(f"TRL asked {len(task_ids)} rows; a step has {len(episodes)}")
            eos = trainer.processing_class.eos_token_id
            samples = [episode_to_sample(e, eos) for e in episodes]
            width = max(len(s.prompt_ids) for s in samples)
            width += max(len(s.completion_ids) for s in samples)
            padded[0] += len(samples) * width
            return episodes

    trainer.rollout_func = Replay(config, max_completion_length=trainer.args.max_completion_length)
    make_resident(trainer.model)
    loaded, load_peak = rss_bytes(), max_rss_bytes()
    wall, cpu = time.perf_counter(), time.process_time()
    trainer.train()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return {
        "loaded": loaded,
        "load_peak": load_peak,
        "peak": max_rss_bytes(),
        "wall_s": wall,
        "cpu_s": cpu,
        "micro_batches": len(batches) * trainer.args.gradient_accumulation_steps,
        "padded_tokens": padded[0],
        "trainable_params": params,
        "steps_done": int(trainer.state.global_step),
    }


def run_one(args: argparse.Namespace) -> dict:
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    with open(args.episodes, "rb") as handle:
        batches = pickle.load(handle)
    with tempfile.TemporaryDirectory() as tmp:
        if CONFIGS[args.one][0] == "passkt":
            out = run_passkt(args, batches, str(Path(tmp) / "run"))
        else:
            out = run_trl(args, batches, str(Path(tmp) / "run"))
    return {"config": args.one, **out}


# --------------------------------------------------------------------------- the table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--t-train", type=int, default=5)
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=1024,
        help="the token cap of the 'after' configuration",
    )
    parser.add_argument("--configs", default="before,after,trl,trl-gc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--one", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    parser.add_argument("--episodes", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args)))
        return
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        sys.exit(f"unknown configurations {unknown}; choose from {sorted(CONFIGS)}")
    started = time.perf_counter()
    batches = sample_batches(args)
    episodes = [e for batch in batches for e in batch]
    trained = sum(sum(e.policy_mask[1:]) for e in episodes)  # collate never trains token 0
    total = sum(len(e.token_ids) for e in episodes)
    steps = len(batches)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "episodes.pkl"
        path.write_bytes(pickle.dumps(batches))
        for name in names:
            argv = [
                f"--{key.replace('_', '-')}={value}"
                for key, value in vars(args).items()
                if key not in ("configs", "one", "episodes")
            ]
            done = subprocess.run(
                [sys.executable, __file__, *argv, "--one", name, "--episodes", str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                sys.exit(f"{name} failed:\n{done.stderr[-4000:]}")
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))

    mb = 2**20
    lengths = sorted(len(e.token_ids) for e in episodes)
    print(
        f"SmolLM2-135M-Instruct (float32, full fine-tuning, CPU, {args.threads} thread(s)); "
        f"{steps} steps x {args.tasks_per_step} tasks x G = {args.group_size} episodes of "
        f"BridgeQA-v0 (synthetic, hops 2, T_train = {args.t_train}, HeuristicPolicy seed "
        f"{args.seed}); micro_batch_size {args.micro_batch_size}; 'after' caps micro-batches at "
        f"{args.micro_batch_tokens} padded tokens"
    )
    print(
        f"batch: {len(episodes)} episodes, {total:,} tokens ({total // steps:,} a step), "
        f"{trained:,} trained ({trained // steps:,} a step, {trained / total:.1%}); episode "
        f"lengths {lengths[0]}-{lengths[-1]} tokens, turns "
        f"{min(len(e.turns) for e in episodes)}-{max(len(e.turns) for e in episodes)}, "
        f"rewards {sorted({e.reward for e in episodes})}"
    )
    print()
    print(
        "| configuration | micro-batches | padded tokens | RSS after load (MB) | peak RSS (MB) "
        "| peak - load (MB) | less grads + AdamW (MB, est.) | bytes per trained token "
        "| wall s | CPU s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    by_name = {}
    for r in rows:
        added = r["peak"] - r["loaded"]
        states = 12 * r["trainable_params"]  # float32 gradient + AdamW exp_avg + exp_avg_sq
        by_name[r["config"]] = added
        print(
            f"| {LABELS[r['config']]} | {r['micro_batches']} | {r['padded_tokens']:,} "
            f"| {r['loaded'] / mb:,.0f} | {r['peak'] / mb:,.0f} | {added / mb:,.0f} "
            f"| {(added - states) / mb:,.0f} | {added / (trained / steps):,.0f} "
            f"| {r['wall_s']:.1f} | {r['cpu_s']:.1f} |"
        )
        if r["load_peak"] > r["peak"] - 2**20:
            print(f"  note: {r['config']}'s peak was reached while loading")
        if r.get("steps_done", steps) != steps:
            print(f"  note: {r['config']} did {r['steps_done']} steps, not {steps}")
    print()
    pairs = [("before", "after"), ("all", "after"), ("trl", "after"), ("trl-gc", "after")]
    pairs += [("trl", "before"), ("before", "trained"), ("before", "cap"), ("before", "gc")]
    for a, b in pairs:
        if a in by_name and b in by_name:
            print(f"peak - load, {a} / {b}: {by_name[a] / by_name[b]:.2f}x")
    print(f"whole script: {time.perf_counter() - started:.0f} s wall")


if __name__ == "__main__":
    main()
