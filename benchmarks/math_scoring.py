"""Bounded scoring: CPU per env step on MATH-500 gold answers, an adversarial LaTeX corpus, and
random fuzzed actions on every env.

Usage:
    python benchmarks/math_scoring.py                       # all of it, 1,000 fuzz episodes/env
    python benchmarks/math_scoring.py --episodes 3000 --seed 1
    python benchmarks/math_scoring.py --reward-only         # false accepts / false rejects only

The reward figures: every MATH-500 gold answer in its equivalent forms (must be rewarded) and
value-changing mutations of each (must not be), from ``tests/envs/math_mutations.py``.

CPU per step is this process's CPU time (``time.process_time``) plus the CPU the math scoring
worker spent on the step (``passkt.envs.math_worker``; a killed comparison counts what it used
until the kill), so load on the machine does not change the figures. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

import gymnasium as gym

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.math_worker import DEFAULT_CPU_LIMIT_S, shared_worker

ROOT = Path(__file__).resolve().parents[1]
MATH500 = ROOT / "tests" / "data" / "math500.jsonl"
sys.path.insert(0, str(ROOT / "tests" / "envs"))
from math_corpus import ADVERSARIAL, FRAGMENTS  # noqa: E402
from math_mutations import equivalent_forms, mutations  # noqa: E402

from passkt.envs.scoring import math_equal  # noqa: E402

ACTION_PIECES = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    " ",
    "\n",
    "Zanev",
    "東京",
    "\ud800",
    "😀",
    "the",
    "1e400",
    *FRAGMENTS,
]


def step_cpu(env: gym.Env, action: str) -> tuple[float, tuple]:
    worker = shared_worker()
    before, worker_before = time.process_time(), worker.cpu_s
    result = env.step(action)
    return time.process_time() - before + worker.cpu_s - worker_before, result


def random_action(rng: random.Random, math: bool) -> str:
    if math and rng.random() < 0.5:
        body = "".join(rng.choice(FRAGMENTS + ADVERSARIAL) for _ in range(rng.randint(1, 6)))
        return f"<answer>{body}</answer>"
    text = "".join(rng.choice(ACTION_PIECES) for _ in range(rng.randint(0, 10)))
    tag = rng.choice(["search", "answer", "think", None])
    return f"<{tag}>{text}</{tag}>" if tag else text


def fuzz(env_id: str, kwargs: dict, episodes: int, seed: int) -> dict:
    env = gym.make(env_id, **kwargs)
    rng = random.Random(seed)
    steps, worst, notes, errors = 0, 0.0, Counter(), 0
    is_math = env.unwrapped.category == "math"
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        done = False
        while not done:
            try:
                cpu, (_, _, terminated, truncated, info) = step_cpu(
                    env, random_action(rng, is_math)
                )
            except Exception:  # counted, never expected
                errors += 1
                break
            steps, worst, done = steps + 1, max(worst, cpu), terminated or truncated
            if info.get("score_note"):
                notes[info["score_note"].split(":")[0]] += 1
    return {"episodes": episodes, "steps": steps, "max_cpu_s": worst, "errors": errors,
            "not_compared": sum(notes.values())}  # fmt: skip


def math500_steps(answers_of: str) -> dict:
    """One step per MATH-500 task: its gold answer, or each adversarial answer in turn."""
    cpus, rewards, notes = [], [], Counter()
    for split in ("train", "test"):
        env = gym.make("Math-v0", source="math500", path=str(MATH500), split=split)
        tasks = env.unwrapped.tasks
        answers = [t.answer for t in tasks] if answers_of == "gold" else ADVERSARIAL
        for i, answer in enumerate(answers):
            if answers_of != "gold" and split == "test":
                break  # the adversarial corpus once, against train tasks' gold answers
            env.reset(options={"task_id": tasks[i % len(tasks)].task_id})
            cpu, (_, reward, _, _, info) = step_cpu(env, f"<answer>{answer}</answer>")
            cpus.append(cpu)
            rewards.append(reward)
            note = info["score_note"] or ""
            notes["worker killed" if "of CPU" in note else "refused" if note else "compared"] += 1
    return {"steps": len(cpus), "max_cpu_s": max(cpus), "mean_cpu_s": sum(cpus) / len(cpus),
            "reward_1": sum(r == 1.0 for r in rewards), **notes}  # fmt: skip


def reward_figures(golds: list[str]) -> dict:
    """False rejects over the golds' equivalent forms; false accepts over their mutations."""
    forms = [(gold, form) for gold in golds for form in equivalent_forms(gold)]
    rejected = [(gold, form) for gold, form in forms if not math_equal(form, gold)]
    wrong = [(gold, kind, m) for gold in golds for kind, m in mutations(gold)]
    accepted = [(gold, kind, m) for gold, kind, m in wrong if math_equal(m, gold)]
    return {
        "golds": len(golds),
        "gold_rejected": sum(not math_equal(gold, gold) for gold in golds),
        "forms": len(forms),
        "forms_rejected": len(rejected),
        "forms_rejected_examples": rejected[:20],
        "mutations": len(wrong),
        "mutation_kinds": dict(Counter(kind for _, kind, _ in wrong)),
        "mutations_accepted": len(accepted),
        "mutations_accepted_by_kind": dict(Counter(kind for _, kind, _ in accepted)),
        "mutations_accepted_examples": accepted[:20],
    }


def print_reward(f: dict) -> None:
    print("| MATH-500 | count | rewarded wrongly / refused wrongly |\n|---|---|---|")
    print(f"| gold answers, as written | {f['golds']} | {f['gold_rejected']} refused |")
    print(f"| gold answers, equivalent forms | {f['forms']} | {f['forms_rejected']} refused |")
    print(f"| value-changing mutations | {f['mutations']} | {f['mutations_accepted']} rewarded |")
    for gold, form in f["forms_rejected_examples"]:
        print(f"  refused: gold {gold!r}, answer {form!r}")
    for gold, kind, answer in f["mutations_accepted_examples"]:
        print(f"  rewarded: gold {gold!r}, {kind} {answer!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000, help="fuzz episodes per env")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--reward-only", action="store_true", help="only the reward figures")
    args = parser.parse_args()
    shared_worker().compare("1", ["1"])  # start the worker outside the measurements
    figures: dict = {"cpu_limit_s": DEFAULT_CPU_LIMIT_S}
    if MATH500.is_file():
        lines = MATH500.read_text(encoding="utf-8").splitlines()
        figures["reward"] = reward_figures([json.loads(x)["answer"] for x in lines if x.strip()])
        print_reward(figures["reward"])
        print()
    if args.reward_only:
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return
    print(f"Math scoring CPU limit: {DEFAULT_CPU_LIMIT_S} s per comparison\n")
    if MATH500.is_file():
        figures["gold"] = math500_steps("gold")
        figures["adversarial"] = math500_steps("adversarial")
        print("| MATH-500 answers | steps | reward 1 | compared | refused | killed | max CPU/step "
              "(s) | mean (s) |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
        for name in ("gold", "adversarial"):
            f = figures[name]
            print(f"| {name} | {f['steps']} | {f['reward_1']} | {f.get('compared', 0)} | "
                  f"{f.get('refused', 0)} | {f.get('worker killed', 0)} | {f['max_cpu_s']:.3f} | "
                  f"{f['mean_cpu_s']:.3f} |")  # fmt: skip
    cases = [("Math-v0", {}), ("BridgeQA-v0", {}), ("ComparisonQA-v0", {})]
    if MATH500.is_file():
        cases.insert(1, ("Math-v0", {"source": "math500", "path": str(MATH500)}))
    print("\n| env | source | episodes | steps | exceptions | not compared | max CPU/step (s) |")
    print("|---|---|---|---|---|---|---|")
    for env_id, kwargs in cases:
        f = fuzz(env_id, kwargs, args.episodes, args.seed)
        source = kwargs.get("source", "synthetic")
        figures[f"fuzz {env_id} {source}"] = f
        print(f"| {env_id} | {source} | {f['episodes']} | {f['steps']} | {f['errors']} | "
              f"{f['not_compared']} | {f['max_cpu_s']:.3f} |")  # fmt: skip
    print(f"\nworker restarts (kills): {shared_worker().restarts}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
