"""TRL through passkt's adapter next to passkt's GRPO on a multi-turn env (``grpo_vs_trl.py
--tasks lookup`` runs this).

The task: four 1-hop lookups in ``BridgeQA-v0`` ("Where was <person> born?"; searching the person
returns the paragraph with the birthplace). The start model is the tiny test model (width 64)
after 40 SFT steps on a half-right scripted expert (search then answer from the result, or answer a
wrong town at once), so it earns about 0.3 and RL has to learn to search first. Both trainers then
run the same ``GRPOConfig`` (4 tasks x G = 8 a step, lr 1e-3, T_train = 2, temperature 1, token-mean
loss, no KL, std-scaled advantages) for the same number of steps, with the same rollout engine:
TRL calls it through ``PassktRollout``. Printed: wall and CPU seconds (``time.process_time``) of
each whole run (load, train, save), seconds per step inside the loop, samples/s of the loop, train
reward of the first and last steps, the sampled reward of each final model in one shared
evaluation, and the fixed-batch agreement of the two losses (``trl_check``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.rollout import rollout
from passkt.agents.train.common import TokenSequence
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.report import read_metrics
from passkt.envs.tasks import Paragraph, Task, register_source

PEOPLE = (
    ("Mira Oskan", "Port Hollis"),
    ("Tamsin Orrel", "Alder Vale"),
    ("Brann Ketil", "Stonemere"),
    ("Ilse Varro", "Quillport"),
)
TOWNS = [town for _, town in PEOPLE]
IDS = [f"lookup-{i}" for i in range(len(PEOPLE))]
ENV = {"source": "lookup"}
FILLER = (
    ("Harbours", "Harbours shelter ships from storms."),
    ("Rivers", "Rivers carry water to the sea."),
    ("Bridges", "Bridges cross rivers and roads."),
)


def lookup_source(category: str, split: str, **options: object) -> list[Task]:
    """Four 1-hop questions, each with its answer paragraph and three fillers."""
    if options or category != "bridge":
        return []
    return [
        Task(
            task_id=IDS[i],
            category="bridge",
            question=f"Where was {person} born?",
            answer=town,
            paragraphs=(
                Paragraph(person, f"{person} was born in {town}."),
                *(Paragraph(title, text) for title, text in FILLER),
            ),
            gold_titles=(person,),
            gold_queries=(person,),
            depth=1,
            source="lookup",
            split=split,
        )
        for i, (person, town) in enumerate(PEOPLE)
    ]


class HalfRight:
    """Search then answer from the result, or (every other episode) a wrong town at once."""

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
                out.append(Completion(f"<answer>{TOWNS[(right + 1) % len(TOWNS)]}</answer>"))
            self.calls += 1
        return out


def warm_up(model: Path, work: Path) -> Path:
    from transformers import AutoTokenizer

    from passkt.agents.train.sft import ExpertExample, save_expert_dataset, train_sft

    episodes = rollout(
        HalfRight(),
        "BridgeQA-v0",
        IDS,
        n=6,
        budgets=(2,),
        env_kwargs={**ENV, "split": "train"},
        tokenizer=AutoTokenizer.from_pretrained(model),
    ).episodes
    data = save_expert_dataset(
        [ExpertExample(e.task_id, e.reward, TokenSequence.from_episode(e)) for e in episodes],
        work / "half-right.jsonl",
    )
    config = SFTConfig(
        policy=f"hf:{model}",
        env_id="BridgeQA-v0",
        env_kwargs=ENV,
        t_train=2,
        data_path=str(data),
        only_correct=False,
        finetune="full",
        learning_rate=3e-3,
        batch_size=8,
        micro_batch_size=8,
        max_steps=40,
        output_dir=str(work / "warmup"),
        progress=False,
    )
    result = train_sft(config)
    assert result.checkpoint is not None
    return result.checkpoint


def grpo_config(start: Path, out: Path, steps: int, **overrides) -> GRPOConfig:
    fields = dict(
        policy=f"hf:{start}",
        env_id="BridgeQA-v0",
        env_kwargs=ENV,
        t_train=2,
        group_size=8,
        tasks_per_step=4,
        micro_batch_size=16,
        learning_rate=1e-3,
        max_new_tokens=24,
        max_steps=steps,
        output_dir=str(out),
        progress=False,
    )
    fields.update(overrides)
    return GRPOConfig(**fields)


def evaluate(model, n: int) -> float:
    from passkt.agents.hf import HFPolicy

    result = rollout(
        HFPolicy(model, batch_size=64),
        "BridgeQA-v0",
        IDS,
        n=n,
        budgets=(2,),
        env_kwargs={**ENV, "split": "train"},
        params=SamplingParams(temperature=1.0, max_new_tokens=24),
        seed=12345,
    )
    return sum(e.reward for e in result.episodes) / len(result.episodes)


def run_passkt(config: GRPOConfig) -> dict:
    from passkt.agents.train.grpo import train_grpo

    wall, cpu = time.perf_counter(), time.process_time()
    result = train_grpo(config)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    metrics = read_metrics(config.output_dir)
    return {
        "wall": wall,
        "cpu": cpu,
        "loop": sum(m["time/rollout_s"] + m["time/update_s"] for m in metrics),
        "first": metrics[0]["reward/mean"],
        "last": metrics[-1]["reward/mean"],
        "model": result.checkpoint,
    }


def run_trl(config: GRPOConfig) -> dict:
    from passkt.agents.train.trl import make_trl_trainer

    wall, cpu = time.perf_counter(), time.process_time()
    trainer = make_trl_trainer(config)
    trainer.train()
    out = Path(config.output_dir) / "final"
    trainer.save_model(str(out))
    trainer.processing_class.save_pretrained(str(out))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    logs = [log for log in trainer.state.log_history if "reward/mean" in log]
    return {
        "wall": wall,
        "cpu": cpu,
        "loop": sum(log["step_time"] for log in logs),
        "first": logs[0]["reward/mean"],
        "last": logs[-1]["reward/mean"],
        "model": out,
    }


def main(args, work: Path) -> None:
    from passkt.agents.tiny import make_tiny_checkpoint
    from passkt.agents.train.trl import make_trl_trainer
    from passkt.agents.train.trl_check import fixed_batch_agreement

    register_source("lookup", lookup_source)
    start = warm_up(make_tiny_checkpoint(work / "tiny", hidden_size=64), work)
    before = evaluate(start, args.eval_n)
    results = {
        "passkt": run_passkt(grpo_config(start, work / "ours", args.steps)),
        "trl (adapter)": run_trl(grpo_config(start, work / "trl", args.steps)),
    }
    samples = args.steps * 4 * 8
    print(
        f"env=BridgeQA-v0 (1-hop lookup, T_train=2) steps={args.steps} samples={samples} "
        f"(4 tasks x G=8 a step) threads={args.threads} eval reward before={before:.3f} "
        f"(n={args.eval_n} x 4 tasks)"
    )
    print(
        "| trainer | wall s (load+train+save) | CPU s | s/step in loop | samples/s (loop) "
        "| samples per CPU s | train reward first -> last | eval reward after |"
    )
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for name, r in results.items():
        after = evaluate(r["model"], args.eval_n)
        print(
            f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['loop'] / args.steps:.2f} "
            f"| {samples / r['loop']:.1f} | {samples / r['cpu']:.2f} "
            f"| {r['first']:.3f} -> {r['last']:.3f} | {after:.3f} |"
        )
    config = grpo_config(
        start, work / "check", 1, group_size=4, tasks_per_step=4, micro_batch_size=16
    )
    agreement = fixed_batch_agreement(make_trl_trainer(config), config)
    print(
        f"fixed batch (4 tasks x G=4, reward sum {sum(agreement.rewards):.0f}/16): TRL loss "
        f"{agreement.trl_loss:.8f}, passkt loss {agreement.passkt_loss:.8f}, "
        f"max |grad diff| {agreement.max_grad_diff:.2e} (max |grad| {agreement.max_grad:.2e}), "
        f"max |logprob diff| at the env mask {agreement.max_logprob_diff:.2e}"
    )
