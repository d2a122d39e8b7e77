"""Bounded scoring: CPU per env step on MATH-500 gold answers, an adversarial LaTeX corpus, and
random fuzzed actions on every env.

Usage:
    python benchmarks/math_scoring.py                       # all of it, 1,000 fuzz episodes/env
    python benchmarks/math_scoring.py --episodes 3000 --seed 1
    python benchmarks/math_scoring.py --reward-only         # false accepts / false rejects only
    python benchmarks/math_scoring.py --step-cost --baseline REV   # step CPU, now and at REV

The reward figures, per family, for passkt and for Hugging Face's math-verify (its default
``parse`` and ``verify``: the reference) on the same cases: every MATH-500 gold answer as written
and in its equivalent forms, value-changing mutations of each (``tests/envs/math_mutations.py``),
and the adversarial families of ``tests/envs/math_families.py`` over all 500 golds (hacks that
must be refused, equivalent forms that must be rewarded).

The step cost: CPU of one Math-v0 step for every MATH-500 task's gold and family answers; with
``--baseline REV``, the same steps with the passkt of git revision ``REV`` (exported with
``git archive`` and run in a subprocess), and the ratio.

CPU per step is this process's CPU time (``time.process_time``) plus the CPU the math scoring
worker spent on the step (``passkt.envs.math_worker``; a killed comparison counts what it used
until the kill), so load on the machine does not change the figures. Prints Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
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
from math_families import RIGHT_FAMILIES, wrong_answers  # noqa: E402
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


def reward_cases(golds: list[str]) -> list[tuple[str, bool, str, str]]:
    """``(family, must be rewarded, gold, answer)`` for every family over every gold."""
    cases = [("gold as written", True, gold, gold) for gold in golds]
    cases += [("equivalent forms", True, g, form) for g in golds for form in equivalent_forms(g)]
    cases += [("mutations", False, g, answer) for g in golds for _, answer in mutations(g)]
    cases += [(family, False, g, answer) for g in golds for family, answer in wrong_answers(g)]
    cases += [
        (family, True, g, answer)
        for family, forms_of in RIGHT_FAMILIES.items()
        for g in golds
        for answer in forms_of(g)
    ]
    return cases


def math_verify_equal(answer: str, gold: str, _golds: dict = {}) -> bool:  # noqa: B006 (a cache)
    """Hugging Face math-verify's verdict, the reference: its default ``parse`` of the answer as
    written, or of ``$answer$`` when that extracts nothing (it reads LaTeX only between math
    delimiters), against the gold's ``$gold$``, with its default ``verify``."""
    from math_verify import parse, verify

    if gold not in _golds:
        _golds[gold] = parse(f"${gold}$")
    try:
        parsed = parse(answer) or parse(f"${answer}$")
        return bool(verify(_golds[gold], parsed))
    except Exception:  # the reference's own failure: not rewarded
        return False


def reward_figures(golds: list[str]) -> dict:
    """Per family: how many cases, and how many passkt and math-verify get wrong."""
    rows: dict[str, dict] = {}
    for family, right, gold, answer in reward_cases(golds):
        row = rows.setdefault(family, {"must_reward": right, "cases": 0, "passkt": 0,
                                       "math_verify": 0, "passkt_examples": []})  # fmt: skip
        row["cases"] += 1
        if math_equal(answer, gold) != right:
            row["passkt"] += 1
            if len(row["passkt_examples"]) < 5:
                row["passkt_examples"].append((gold, answer))
        row["math_verify"] += math_verify_equal(answer, gold) != right
    return rows


def print_reward(rows: dict) -> None:
    print(
        "| family | must be | cases | passkt wrong | math-verify wrong |\n|---|---|---:|---:|---:|"
    )
    for name, row in rows.items():
        verdict = "rewarded" if row["must_reward"] else "refused"
        print(f"| {name} | {verdict} | {row['cases']:,} | {row['passkt']:,} | "
              f"{row['math_verify']:,} |")  # fmt: skip
    for kind, right in (("false accepts", False), ("false rejects", True)):
        chosen = [row for row in rows.values() if row["must_reward"] == right]
        cases, ours, theirs = (
            sum(row[k] for row in chosen) for k in ("cases", "passkt", "math_verify")
        )
        print(f"| **all: {kind}** | | {cases:,} | {ours:,} | {theirs:,} |")
    for name, row in rows.items():
        for gold, answer in row["passkt_examples"]:
            print(f"  passkt wrong ({name}): gold {gold!r}, answer {answer[-80:]!r}")


def step_costs(stride: int) -> list[float]:
    """CPU seconds of one Math-v0 step for each task's gold and family answers."""
    cpus = []
    for split in ("train", "test"):
        env = gym.make("Math-v0", source="math500", path=str(MATH500), split=split)
        for task in env.unwrapped.tasks[::stride]:
            answers = [task.answer, *(a for _, a in wrong_answers(task.answer))]
            answers += [a for forms_of in RIGHT_FAMILIES.values() for a in forms_of(task.answer)]
            for answer in answers:
                env.reset(options={"task_id": task.task_id})
                cpus.append(step_cpu(env, f"<answer>{answer}</answer>")[0])
    return cpus


def baseline_step_costs(revision: str, stride: int) -> list[float]:
    """``step_costs`` with the passkt of ``revision`` (from ``git archive``), in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        source, package = Path(tmp) / "src", Path(tmp) / "pkg" / "passkt"
        source.mkdir()
        packages = ["passkt", "envs", "agents", "eval", "study"]
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", revision, *packages],
            check=True,
            capture_output=True,
        )
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
        shutil.copytree(source / "passkt", package)
        for sub in ("envs", "agents", "eval", "study"):
            shutil.copytree(source / sub, package / sub)
        out = Path(tmp) / "costs.json"
        env = {**os.environ, "PYTHONPATH": str(package.parent)}
        subprocess.run([sys.executable, __file__, "--step-cost-only", "--stride", str(stride),
                        "--json", str(out)], check=True, env=env, cwd=tmp)  # fmt: skip
        return json.loads(out.read_text())["step_cpu_s"]


def cost_summary(cpus: list[float]) -> dict:
    ordered = sorted(cpus)
    return {"steps": len(ordered), "median_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
            "max_ms": 1000 * ordered[-1]}  # fmt: skip


def print_costs(now: dict, before: dict | None, revision: str | None) -> None:
    print("| Math-v0 step CPU | steps | median (ms) | p99 (ms) | max (ms) |")
    print("|---|---:|---:|---:|---:|")
    rows = [("now", now)] + ([(f"before ({revision})", before)] if before else [])
    for name, f in rows:
        print(f"| {name} | {f['steps']:,} | {f['median_ms']:.2f} | {f['p99_ms']:.1f} | "
              f"{f['max_ms']:.0f} |")  # fmt: skip
    if before:
        print(
            f"| now / before | | {now['median_ms'] / before['median_ms']:.2f}x | "
            f"{now['p99_ms'] / before['p99_ms']:.2f}x | {now['max_ms'] / before['max_ms']:.2f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000, help="fuzz episodes per env")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--reward-only", action="store_true", help="only the reward figures")
    parser.add_argument("--step-cost", action="store_true", help="only the step CPU figures")
    parser.add_argument("--baseline", help="a git revision whose step CPU to measure beside")
    parser.add_argument("--stride", type=int, default=1, help="step cost: every n-th task")
    parser.add_argument("--step-cost-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shared_worker().compare("1", ["1"])  # start the worker outside the measurements
    if args.step_cost_only:  # the baseline's subprocess: raw figures only
        args.json.write_text(json.dumps({"step_cpu_s": step_costs(args.stride)}))
        return
    figures: dict = {"cpu_limit_s": DEFAULT_CPU_LIMIT_S}
    if not args.step_cost:
        lines = MATH500.read_text(encoding="utf-8").splitlines()
        figures["reward"] = reward_figures([json.loads(x)["answer"] for x in lines if x.strip()])
        print_reward(figures["reward"])
        print()
    if not args.reward_only:
        figures["step_cost"] = cost_summary(step_costs(args.stride))
        if args.baseline:
            before = cost_summary(baseline_step_costs(args.baseline, args.stride))
            figures["step_cost_before"] = {"revision": args.baseline, **before}
        print_costs(figures["step_cost"], figures.get("step_cost_before"), args.baseline)
        print()
    if args.reward_only or args.step_cost:
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2) + "\n")
        return
    print(f"Math scoring CPU limit: {DEFAULT_CPU_LIMIT_S} s per comparison\n")
    figures["gold"] = math500_steps("gold")
    figures["adversarial"] = math500_steps("adversarial")
    print("| MATH-500 answers | steps | reward 1 | compared | refused | killed | max CPU/step "
          "(s) | mean (s) |\n|---|---|---|---|---|---|---|---|")  # fmt: skip
    for name in ("gold", "adversarial"):
        f = figures[name]
        print(f"| {name} | {f['steps']} | {f['reward_1']} | {f.get('compared', 0)} | "
              f"{f.get('refused', 0)} | {f.get('worker killed', 0)} | {f['max_cpu_s']:.3f} | "
              f"{f['mean_cpu_s']:.3f} |")  # fmt: skip
    cases = [
        ("Math-v0", {}),
        ("Math-v0", {"source": "math500", "path": str(MATH500)}),
        ("BridgeQA-v0", {}),
        ("ComparisonQA-v0", {}),
    ]
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
