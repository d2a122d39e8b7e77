"""Our GRPO next to TRL's ``GRPOTrainer``: same tiny model, same single-turn Math-v0 tasks.

    python benchmarks/grpo_vs_trl.py [--steps 12] [--tasks sevens|synthetic|lookup] [--threads 1]

``--tasks lookup`` is the multi-turn comparison (``BridgeQA-v0`` 1-hop lookups through the search
tool, TRL through passkt's adapter ``passkt.agents.train.trl``): see ``trl_multiturn.py``.

Both trainers start from the same checkpoint: the tiny test model (``passkt.agents.tiny``, width
64) after a short SFT warm-up on the answer format with uniformly random digits, so it answers
``<answer>d</answer>`` and earns about 1/10 on the ``sevens`` tasks (four questions whose answer is
7). Both then run the same number of GRPO steps with the same hyper-parameters (4 prompts x G = 8
samples per step, learning rate, clip 0.2, no KL, std-scaled group advantages, token-mean loss
(TRL's ``loss_type="dapo"``), constant schedule, grad-norm clip 1.0, temperature 1, at most
``--max-new-tokens`` tokens) and the same reward (the env's grader). Printed: end-to-end wall and
CPU time (load, train, save) with each trainer's ratio to ours in the same run, seconds per step
inside the training loop (ours: rollout + update; TRL: its ``step_time``), samples and completion
tokens per second of the loop, the mean training reward of the first and last steps, and the
reward of each final model in one separate, shared evaluation (sampled, temperature 1).
``--tasks synthetic`` uses the project's own Math-v0 word problems instead (the tiny model cannot
solve them: a speed comparison only); they need ``--max-new-tokens 64``.

TRL generates with ``model.generate`` (no stop strings), so its completions run to EOS or the
token limit; ours stop at ``</answer>``: compare samples per second as well as tokens per second.
Needs ``pip install trl`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import torch

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.tiny import make_tiny_checkpoint
from passkt.agents.train.common import TokenSequence
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.grpo import train_grpo
from passkt.agents.train.report import read_metrics
from passkt.agents.train.sft import ExpertExample, save_expert_dataset, train_sft
from passkt.envs.tasks import Task, register_source

QUESTIONS = (
    "What is two plus five?",
    "Name the lucky digit of the harbour.",
    "Which digit does the grader want?",
    "Tell me the answer for Alder Vale.",
)


def sevens(category: str, split: str, **options: object) -> list[Task]:
    """Four one-turn questions whose answer is 7."""
    if options or category != "math":
        return []
    return [
        Task(f"seven-{i}", "math", q, "7", answer_type="number", source="sevens", split=split)
        for i, q in enumerate(QUESTIONS)
    ]


class CyclingDigits:
    """Answers ``<answer>d</answer>`` with d = 0, 1, 2, ... in turn (format warm-up data)."""

    def __init__(self) -> None:
        self.calls = 0

    def generate(self, conversations, params):
        out = []
        for _ in conversations:
            out.append(Completion(f"<answer>{self.calls % 10}</answer>"))
            self.calls += 1
        return out


def task_setup(kind: str, limit: int) -> tuple[dict, list[str]]:
    """Env kwargs (without split) and task ids of the benchmark tasks."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    if kind == "sevens":
        register_source("sevens", sevens)
        env_kwargs: dict = {"source": "sevens"}
    else:
        env_kwargs = {"source": "synthetic"}
    env = gym.make("Math-v0", split="train", **env_kwargs)
    ids = [t.task_id for t in env.unwrapped.tasks[:limit]]
    return env_kwargs, ids


def warm_up(model: Path, env_kwargs: dict, task_ids: list[str], work: Path) -> Path:
    """SFT on the format with uniformly random digits; returns the start checkpoint."""
    from transformers import AutoTokenizer

    episodes = rollout(
        CyclingDigits(),
        "Math-v0",
        task_ids,
        n=10,
        budgets=(0,),
        env_kwargs={**env_kwargs, "split": "train"},
        tokenizer=AutoTokenizer.from_pretrained(model),
    ).episodes
    data = save_expert_dataset(
        [ExpertExample(e.task_id, e.reward, TokenSequence.from_episode(e)) for e in episodes],
        work / "format.jsonl",
    )
    config = SFTConfig(
        policy=f"hf:{model}",
        env_id="Math-v0",
        env_kwargs=env_kwargs,
        t_train=0,
        task_ids=tuple(task_ids),
        data_path=str(data),
        only_correct=False,
        finetune="full",
        learning_rate=3e-3,
        batch_size=20,
        micro_batch_size=20,
        max_steps=40,
        output_dir=str(work / "warmup"),
        progress=False,
    )
    result = train_sft(config)
    assert result.checkpoint is not None
    return result.checkpoint


def evaluate(checkpoint: Path, env_kwargs: dict, task_ids: list[str], n: int, tokens: int) -> float:
    """Shared evaluation: sampled reward of a checkpoint (our rollout engine, fixed seed)."""
    from passkt.agents.hf import HFPolicy

    result = rollout(
        HFPolicy(checkpoint, batch_size=64),
        "Math-v0",
        task_ids,
        n=n,
        budgets=(0,),
        env_kwargs={**env_kwargs, "split": "train"},
        params=SamplingParams(temperature=1.0, max_new_tokens=tokens),
        seed=12345,
    )
    return sum(e.reward for e in result.episodes) / len(result.episodes)


def run_ours(start: Path, env_kwargs: dict, task_ids: list[str], args, work: Path) -> dict:
    config = GRPOConfig(
        policy=f"hf:{start}",
        env_id="Math-v0",
        env_kwargs=env_kwargs,
        t_train=0,
        task_ids=tuple(task_ids),
        group_size=8,
        tasks_per_step=4,
        micro_batch_size=32,
        learning_rate=args.lr,
        max_new_tokens=args.max_new_tokens,
        max_steps=args.steps,
        output_dir=str(work / "ours"),
        progress=False,
    )
    started, cpu = time.perf_counter(), time.process_time()
    result = train_grpo(config)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    metrics = read_metrics(work / "ours")
    return {
        "wall": wall,
        "cpu": cpu,
        "loop": sum(m["time/rollout_s"] + m["time/update_s"] for m in metrics),
        "tokens": sum(m["tokens/generated"] for m in metrics),
        "first": metrics[0]["reward/mean"],
        "last": metrics[-1]["reward/mean"],
        "checkpoint": result.checkpoint,
    }


def run_trl(start: Path, env_kwargs: dict, task_ids: list[str], args, work: Path) -> dict:
    import gymnasium as gym
    from datasets import Dataset
    from transformers import PrinterCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer

    from passkt.envs.protocol import SYSTEM_PROMPTS

    env = gym.make("Math-v0", split="train", max_tool_calls=0, **env_kwargs)
    rows = []
    for task_id in task_ids:
        observation, _ = env.reset(options={"task_id": task_id})
        prompt = [
            {"role": "system", "content": SYSTEM_PROMPTS["math"]},
            {"role": "user", "content": observation},
        ]
        rows.append({"prompt": prompt, "task_id": task_id})
    counted = {"tokens": 0, "samples": 0}

    def env_reward(prompts, completions, task_id, completion_ids=None, **kwargs):
        rewards = []
        for completion, tid in zip(completions, task_id, strict=True):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            env.reset(options={"task_id": tid})
            rewards.append(float(env.step(text)[1]))
        counted["samples"] += len(completions)
        if completion_ids is not None:
            counted["tokens"] += sum(len(ids) for ids in completion_ids)
        return rewards

    config = TRLConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=32,
        gradient_accumulation_steps=1,
        num_generations=8,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        temperature=1.0,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        disable_tqdm=True,
    )
    started, cpu = time.perf_counter(), time.process_time()
    trainer = GRPOTrainer(
        model=str(start),
        reward_funcs=env_reward,
        args=config,
        train_dataset=Dataset.from_list(rows * (args.steps * 8)),
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    out = work / "trl-final"
    trainer.save_model(str(out))
    trainer.processing_class.save_pretrained(str(out))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    logs = [log for log in trainer.state.log_history if "reward" in log]
    rewards = [log["reward"] for log in logs]
    return {
        "wall": wall,
        "cpu": cpu,
        "loop": sum(log["step_time"] for log in logs),
        "tokens": counted["tokens"],
        "first": rewards[0],
        "last": rewards[-1],
        "checkpoint": out,
        "samples": counted["samples"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12, help="GRPO steps of each trainer")
    parser.add_argument("--tasks", choices=("sevens", "synthetic", "lookup"), default="sevens")
    parser.add_argument("--limit", type=int, default=4, help="number of tasks (synthetic)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-new-tokens", type=int, default=12)
    parser.add_argument("--eval-n", type=int, default=50, help="evaluation samples per task")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.disable_progress_bar()

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.tasks == "lookup":
            import trl_multiturn

            trl_multiturn.main(args, work)
            return
        env_kwargs, task_ids = task_setup(args.tasks, args.limit)
        model = make_tiny_checkpoint(work / "tiny", hidden_size=64)
        start = warm_up(model, env_kwargs, task_ids, work)
        before = evaluate(start, env_kwargs, task_ids, args.eval_n, args.max_new_tokens)
        results = {
            "passkt": run_ours(start, env_kwargs, task_ids, args, work),
            "trl": run_trl(start, env_kwargs, task_ids, args, work),
        }
        samples = args.steps * 4 * 8
        print(
            f"tasks={args.tasks} steps={args.steps} samples={samples} (4 prompts x G=8 a step) "
            f"threads={args.threads} torch={torch.__version__} reward before={before:.3f}"
        )
        print(
            "| trainer | wall s (load+train+save) | CPU s (load+train+save) | CPU vs passkt "
            "| wall vs passkt | s/step in loop | samples/s | completion tokens | tokens/s "
            "| train reward first -> last | eval reward after |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
        ours = results["passkt"]
        for name, r in results.items():
            after = evaluate(
                r["checkpoint"], env_kwargs, task_ids, args.eval_n, args.max_new_tokens
            )
            print(
                f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['cpu'] / ours['cpu']:.2f}x "
                f"| {r['wall'] / ours['wall']:.2f}x | {r['loop'] / args.steps:.2f} "
                f"| {samples / r['loop']:.0f} | {int(r['tokens']):,} "
                f"| {r['tokens'] / r['loop']:.0f} "
                f"| {r['first']:.3f} -> {r['last']:.3f} | {after:.3f} |"
            )


if __name__ == "__main__":
    main()
