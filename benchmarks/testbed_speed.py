"""Speed of the testbed's models: where decoding time goes, and what the whole experiment costs.

Three measurements on one checkpoint (a pretrained testbed base, ``passkt testbed pretrain``):

1. Whole calls side by side on the same synthetic prompts: ``model.generate``, ``HFPolicy`` and
   ``LeanPolicy`` (greedy, no stop strings, no end-of-sequence token: every row decodes
   ``--new-tokens`` tokens), CPU and wall seconds, ratios to ``generate`` measured in the same run,
   and whether the ids agree.
2. One evaluation chunk per category as the evaluator runs it (``--tasks`` tasks x n = 64,
   T in 0,1,2,3,5 with prefix sharing; math at T = 0): generated and prefilled tokens per sample
   and seconds per sample, for ``LeanPolicy`` (and ``HFPolicy`` on a smaller chunk), then scaled
   to one evaluation of 100 problems x 64 samples.
3. The time budget of the matched-data experiment from those figures and two more: the training
   step's tokens/s, and the cost of GRPO rollouts (G = 8, T_train = 5, no branches) on training
   tasks (see ``benchmarks/README.md``).

``--compare REV`` runs instead one evaluation chunk per category as the study runs it (bridge with
hops 2 at T in 0,1,2,3,5, math at T = 0; n = 64, per-sample seeds, ``batch_size=512``, the
study's sampling) with ``LeanPolicy`` as it is at git revision ``REV`` and as it is now, on the
same loaded model, alternating the two ``--repeats`` times in one process, each measured chunk
right after a chunk of other tasks (as in an evaluation, where a policy runs one batch of tasks
after another). It prints CPU and wall
seconds per sample, generated and prefilled tokens per sample, minutes per evaluation of
``--problems`` problems, the ratios, and how many episodes' sampled ids differ.

    python benchmarks/testbed_speed.py --model runs/testbed/base/model
    python benchmarks/testbed_speed.py --model runs/testbed/base/model --quick --threads 2
    python benchmarks/testbed_speed.py --model runs/regime/base/model --compare main --tasks 4

``--pretrain-rates SIZE`` measures instead the pretraining step of a fresh model of ``SIZE``
(4 x 1,024 tokens, forward, weighted loss, backward, clipping, AdamW, as ``pretrain`` runs it) in
tokens per second of wall time: one process on 1 thread, one on 2 threads, and two processes on
1 thread each at once (how a study with ``--jobs 2`` runs two pretrainings).

    python benchmarks/testbed_speed.py --model runs/regime/base/model --pretrain-rates micro
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from passkt.agents.hf import HFPolicy
from passkt.agents.lean import LeanPolicy
from passkt.agents.policy import SamplingParams
from passkt.agents.rollout import rollout

EVAL_TASKS, EVAL_N = 100, 64
BUDGETS = (0, 1, 2, 3, 5)
CATEGORIES = (
    ("BridgeQA-v0", BUDGETS, "bridge (hops 2, 3)"),
    ("ComparisonQA-v0", BUDGETS, "comparison"),
    ("Math-v0", (0,), "math"),
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="runs/testbed/base/model", help="a testbed checkpoint")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--tasks", type=int, default=4, help="tasks per evaluation chunk (n = 64)")
    p.add_argument("--hf-tasks", type=int, default=1, help="tasks of HFPolicy's chunk (slow)")
    p.add_argument("--new-tokens", type=int, default=16, help="decoded tokens in part 1")
    p.add_argument("--max-new-tokens", type=int, default=48, help="per turn, in part 2")
    p.add_argument("--quick", action="store_true", help="fewer settings in part 1")
    p.add_argument("--grpo-tasks", type=int, default=32, help="training tasks x G = 8, part 3")
    p.add_argument(
        "--pretrain-minutes", type=float, default=8.5, help="measured pretraining time (part 3)"
    )
    p.add_argument("--compare", metavar="REV", help="LeanPolicy at git REV against now (only)")
    p.add_argument("--repeats", type=int, default=2, help="alternations of --compare")
    p.add_argument("--problems", type=int, default=600, help="problems per evaluation (--compare)")
    p.add_argument("--pretrain-rates", metavar="SIZE", help="pretraining tokens/s of SIZE (only)")
    p.add_argument("--steps", type=int, default=30, help="steps per --pretrain-rates run")
    return p


class CountingHFPolicy(HFPolicy):
    """``HFPolicy`` that counts the prompt tokens it runs through the model (all of them)."""

    prefilled_tokens = 0

    def generate_ids(self, prompts, params):  # type: ignore[no-untyped-def]
        self.prefilled_tokens += sum(len(p) for p in prompts) * params.n
        return super().generate_ids(prompts, params)


def _no_eos(policy: HFPolicy) -> HFPolicy:
    """Every row decodes exactly ``max_new_tokens`` tokens (a throughput probe, not a policy)."""
    policy.eos_token_ids = frozenset()
    return policy


def _generate(model, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy ``model.generate`` on equal-length prompts (no padding), ``new_tokens`` per row."""
    ids = torch.tensor(prompts)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[:, ids.shape[1] :].tolist()


def _policy_ids(policy: HFPolicy, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens, stop=(), seed=0)
    return [list(c.token_ids) for c in policy.generate_ids(prompts, params)]


def generate_ids_table(model_dir: Path, new_tokens: int, quick: bool) -> list[str]:
    """Part 1: whole calls side by side on the same prompts: ``model.generate``, ``HFPolicy``,
    ``LeanPolicy`` (greedy, ``new_tokens`` per row, prefill included). CPU seconds are this
    process's, so other jobs on the machine change the wall column but not the CPU ratios."""
    rows = [
        "| batch | prompt tokens | method | CPU s | wall s | new tok/CPU-s | CPU vs generate "
        "| wall vs generate | ids |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    settings = [(1, 300), (64, 300), (256, 300), (256, 800)] if quick else [
        (1, 300), (8, 300), (64, 300), (256, 300), (512, 300), (64, 800), (256, 800), (512, 800)
    ]  # fmt: skip
    hf = _no_eos(HFPolicy(model_dir, batch_size=512))
    lean = _no_eos(LeanPolicy(hf.model, hf.tokenizer, batch_size=512))
    methods = {
        "generate": lambda ps: _generate(hf.model, ps, new_tokens),
        "HFPolicy": lambda ps: _policy_ids(hf, ps, new_tokens),
        "LeanPolicy": lambda ps: _policy_ids(lean, ps, new_tokens),
    }
    generator = torch.Generator().manual_seed(0)
    vocab = len(hf.tokenizer)
    with torch.inference_mode():  # one-off costs (lean's fused weights, lazy inits) go first
        for method in methods.values():
            method([[20, 21, 22]])
    for batch, length in settings:
        prompts = torch.randint(20, vocab, (batch, length), generator=generator).tolist()
        results: dict[str, tuple[list[list[int]], float, float]] = {}
        for name, method in methods.items():
            lean._store = None  # no prefix reuse from an earlier call: each call starts cold
            wall, cpu = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                ids = method(prompts)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            results[name] = (ids, cpu, wall)
            ref = results["generate"]
            rows.append(
                f"| {batch} | {length} | {name} | {cpu:.2f} | {wall:.2f} | "
                f"{sum(map(len, ids)) / cpu:,.0f} | {ref[1] / cpu:.2f}x | {ref[2] / wall:.2f}x | "
                f"{'same' if ids == ref[0] else 'differ'} |"
            )
            print(rows[-1], flush=True)
    return rows


def chunk_costs(model_dir: Path, tasks: int, hf_tasks: int, max_new_tokens: int) -> dict:
    """Part 2: one evaluation chunk per category, both policies; costs per sample."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    params = SamplingParams(max_new_tokens=max_new_tokens)
    out: dict = {}
    for env_id, budgets, label in CATEGORIES:
        env = gym.make(env_id, max_tool_calls=budgets[-1], split="test")
        ids = [t.task_id for t in env.unwrapped.tasks]
        env.close()
        for name, cls, count in (
            ("LeanPolicy", LeanPolicy, tasks),
            ("HFPolicy", CountingHFPolicy, hf_tasks),
        ):
            if count < 1:
                continue
            policy = cls(model_dir, batch_size=512)
            started = time.perf_counter()
            result = rollout(
                policy, env_id, ids[:count], n=EVAL_N, budgets=budgets,
                env_kwargs={"split": "test"}, params=params, seed=0,
            )  # fmt: skip
            seconds = time.perf_counter() - started
            samples = count * EVAL_N
            prefilled = getattr(policy, "prefilled_tokens", None)
            out[label, name] = {
                "samples": samples,
                "seconds/sample": seconds / samples,
                "generated/sample": result.stats.generated_tokens / samples,
                "prefilled/sample": None if prefilled is None else prefilled / samples,
                "policy calls": result.stats.policy_calls,
                "eval minutes": seconds / samples * EVAL_TASKS * EVAL_N / 60,
            }
            print(
                label,
                name,
                {
                    k: round(v, 4) if isinstance(v, float) else v
                    for k, v in out[label, name].items()
                },
                flush=True,
            )
    return out


def train_throughput(model_dir: Path, micro_batch: int = 4, length: int = 1024) -> float:
    """Tokens/s of a training step (forward, backward, AdamW) on ``micro_batch x length``."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(20, model.config.vocab_size, (micro_batch, length))
    times = []
    for _ in range(4):
        started = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        times.append(time.perf_counter() - started)
    return micro_batch * length / min(times[1:])


def grpo_rollout_costs(model_dir: Path, tasks: int, max_new_tokens: int) -> dict:
    """Seconds and tokens per GRPO episode (G = 8, T_train = 5, no budget branches)."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    out = {}
    for env_id, budgets, label in CATEGORIES:
        env = gym.make(env_id, max_tool_calls=budgets[-1], split="train")
        ids = [t.task_id for t in env.unwrapped.tasks[:tasks]]
        env.close()
        policy = LeanPolicy(model_dir, batch_size=512)
        started = time.perf_counter()
        result = rollout(
            policy, env_id, ids, n=8, budgets=(budgets[-1],), env_kwargs={"split": "train"},
            params=SamplingParams(max_new_tokens=max_new_tokens), seed=1,
        )  # fmt: skip
        episodes = len(result.episodes)
        out[label] = {
            "seconds/episode": (time.perf_counter() - started) / episodes,
            "tokens/episode": sum(len(e.token_ids) for e in result.episodes) / episodes,
        }
        print("GRPO rollout", label, out[label], flush=True)
    return out


def budget_table(evals: dict, grpo: dict, train_tps: float, pretrain_minutes: float) -> list[str]:
    """Part 3: minutes per stage of the whole experiment on one core (see the README)."""
    seeds, problems, group, epochs = 3, 200, 8, 10
    rows = ["| stage | count | work | minutes (1 core) |", "|---|---:|---|---:|"]
    rows.append(f"| pretrain base | 1 | 12.3M tokens + corpus | {pretrain_minutes:.1f} |")
    total = pretrain_minutes
    for label in ("bridge (hops 2, 3)", "comparison", "math"):
        c = evals[label, "LeanPolicy"]
        minutes = 7 * c["eval minutes"]
        rows.append(
            f"| evaluate {label} | 7 (base, 3 SFT, 3 RL) | 6,400 samples x "
            f"{c['generated/sample']:.0f} generated + {c['prefilled/sample']:.0f} prefilled tok "
            f"| {minutes:.1f} |"
        )
        total += minutes
    for label in ("bridge (hops 2, 3)", "comparison", "math"):
        g = grpo[label]
        episodes = problems * group * epochs
        roll = episodes * g["seconds/episode"] / 60
        # fwd+bwd on every episode, plus one forward (about a third) for the old logprobs
        train = episodes * g["tokens/episode"] / train_tps * (4 / 3) / 60
        rows.append(
            f"| GRPO {label} | {seeds} | {episodes:,} episodes x {g['tokens/episode']:.0f} tok: "
            f"rollout {roll:.1f} + train {train:.1f} min each | {seeds * (roll + train):.1f} |"
        )
        sft = problems * epochs * g["tokens/episode"] / train_tps / 60
        rows.append(
            f"| SFT {label} | {seeds} | {problems} expert episodes x {epochs} epochs "
            f"| {seeds * sft:.1f} |"
        )
        total += seeds * (roll + train + sft)
    rows.append(f"| **total** | | | **{total:.0f}** (about {total / 2:.0f} on 2 cores) |")
    return rows


STUDY_CHUNKS = (
    ("bridge", "BridgeQA-v0", {"hops": [2]}, BUDGETS),
    ("math", "Math-v0", {}, (0,)),
)
"""The categories of the regime profile that the next study evaluates at scale."""


def lean_at(rev: str) -> type:
    """``LeanPolicy`` as ``agents/lean.py`` was at git revision ``rev`` (a module of its own)."""
    root = Path(__file__).resolve().parents[1]
    source = subprocess.run(
        ["git", "-C", str(root), "show", f"{rev}:agents/lean.py"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "lean_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("lean_before", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lean_before"] = module
    spec.loader.exec_module(module)
    return module.LeanPolicy


def _study_chunk(policy: LeanPolicy, env_id: str, kwargs: dict, budgets, ids: list[str]):
    """One rollout batch as the evaluator runs it for the study (per-sample seeds, seed 0)."""
    from passkt.eval.chunking import sample_seed

    params = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=48)
    seeds = {(t, s): sample_seed(0, t, s) for t in ids for s in range(EVAL_N)}
    before = policy.prefilled_tokens
    wall, cpu = time.perf_counter(), time.process_time()
    result = rollout(
        policy, env_id, ids, n=EVAL_N, budgets=budgets, params=params, seed=0,
        env_kwargs={**kwargs, "split": "test"}, episode_seeds=seeds,
    )  # fmt: skip
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    samples = len(ids) * EVAL_N
    return {
        "cpu": cpu / samples,
        "wall": wall / samples,
        "generated": result.stats.generated_tokens / samples,
        "prefilled": (policy.prefilled_tokens - before) / samples,
        "ids": [tuple(e.token_ids) for e in result.episodes],
    }


def compare_table(model_dir: Path, rev: str, tasks: int, repeats: int, problems: int) -> list[str]:
    """``LeanPolicy`` at ``rev`` against now, alternating, on the study's evaluation chunks."""
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    now = LeanPolicy(model_dir, batch_size=512)
    before = lean_at(rev)(now.model, now.tokenizer, batch_size=512)
    rows = [
        f"| category | LeanPolicy | CPU s/sample | wall s/sample | generated tok/sample "
        f"| prefilled tok/sample | minutes per evaluation ({problems} x {EVAL_N}, CPU) "
        "| CPU ratio | wall ratio | episodes with other ids |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, env_id, kwargs, budgets in STUDY_CHUNKS:
        env = gym.make(env_id, max_tool_calls=budgets[-1], split="test", **kwargs)
        ids = [t.task_id for t in env.unwrapped.tasks[: 2 * tasks]]
        env.close()
        runs: dict[str, list[dict]] = {"before": [], "now": []}
        for _ in range(repeats):
            for name, policy in (("before", before), ("now", now)):
                # as in an evaluation, the batch before was other tasks (so nothing is reused)
                _study_chunk(policy, env_id, kwargs, budgets, ids[tasks:])
                runs[name].append(_study_chunk(policy, env_id, kwargs, budgets, ids[:tasks]))
                r = runs[name][-1]
                print(label, name, {k: round(v, 5) for k, v in r.items() if k != "ids"}, flush=True)
        best = {name: min(r, key=lambda x: x["cpu"]) for name, r in runs.items()}
        differ = sum(a != b for a, b in zip(best["before"]["ids"], best["now"]["ids"], strict=True))
        for name in ("before", "now"):
            b = best[name]
            minutes = b["cpu"] * problems * EVAL_N / 60
            ratio_cpu = best["before"]["cpu"] / b["cpu"]
            ratio_wall = best["before"]["wall"] / b["wall"]
            rows.append(
                f"| {label} | {rev if name == 'before' else 'now'} | {b['cpu']:.4f} "
                f"| {b['wall']:.4f} | {b['generated']:.1f} | {b['prefilled']:.0f} "
                f"| {minutes:.1f} | {ratio_cpu:.2f}x | {ratio_wall:.2f}x "
                f"| {differ if name == 'now' else ''} |"
            )
        print(rows[-2], rows[-1], sep="\n", flush=True)
    return rows


def _pretrain_rate(model_dir: str, size: str, threads: int, steps: int) -> tuple[float, float]:
    """Tokens/s of wall time and CPU/wall of ``steps`` pretraining steps of a fresh ``size``
    model on ``threads`` torch threads (random tokens: the cost does not depend on them)."""
    from transformers import AutoTokenizer

    from passkt.study.testbed.model import build_model
    from passkt.study.testbed.pretrain import (
        PretrainConfig,
        _optimizer,
        token_losses,
        training_loss,
    )

    torch.set_num_threads(threads)
    config = PretrainConfig(size=size)
    model = build_model(size, AutoTokenizer.from_pretrained(model_dir), seed=0).train()
    optimizer = _optimizer(model, config)
    generator = torch.Generator().manual_seed(0)
    shape = (config.batch_size, config.block_size + 1)
    ids = torch.randint(20, model.config.vocab_size, shape, generator=generator)
    mask = torch.rand(shape, generator=generator) < 0.04  # about the agent's share of tokens

    def step() -> None:
        training_loss(*token_losses(model, ids, mask), config).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return steps * config.batch_size * config.block_size / wall, cpu / wall


def pretrain_rates(model_dir: Path, size: str, steps: int) -> list[str]:
    """One process on 1 and on 2 threads, then two 1-thread processes at once."""
    import multiprocessing

    rows = ["| run | tokens/s (wall) | CPU / wall |", "|---|---:|---:|"]
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        for threads in (1, 2):
            rate, load = pool.apply(_pretrain_rate, (str(model_dir), size, threads, steps))
            rows.append(f"| 1 process, {threads} thread(s) | {rate:,.0f} | {load:.2f} |")
            print(rows[-1], flush=True)
        both = [
            pool.apply_async(_pretrain_rate, (str(model_dir), size, 1, steps)) for _ in range(2)
        ]
        rates = [r.get() for r in both]
    total = sum(rate for rate, _ in rates)
    loads = ", ".join(f"{load:.2f}" for _, load in rates)
    rows.append(f"| 2 processes at once, 1 thread each (sum) | {total:,.0f} | {loads} |")
    print(rows[-1], flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    model_dir = Path(args.model)
    if not (model_dir / "config.json").is_file():
        raise SystemExit(
            f"{model_dir} is not a checkpoint folder; make one with "
            "`passkt testbed pretrain --out runs/testbed/base` and pass "
            "--model runs/testbed/base/model"
        )
    if args.pretrain_rates:
        print(f"## pretraining steps of a fresh {args.pretrain_rates} model\n")
        for line in pretrain_rates(model_dir, args.pretrain_rates, args.steps):
            print(line)
        return 0
    if args.compare:
        print(f"## LeanPolicy at {args.compare} against now ({args.threads} thread(s))\n")
        for line in compare_table(model_dir, args.compare, args.tasks, args.repeats, args.problems):
            print(line)
        return 0
    print(f"## generate_ids ({args.threads} thread(s), {args.new_tokens} new tokens per row)\n")
    generate_ids_table(model_dir, args.new_tokens, args.quick)
    print(f"\n## one evaluation chunk per category (n = {EVAL_N}, scaled to {EVAL_TASKS} tasks)\n")
    costs = chunk_costs(model_dir, args.tasks, args.hf_tasks, args.max_new_tokens)
    print(
        "\n| category | policy | generated tok/sample | prefilled tok/sample | s/sample "
        "| minutes per evaluation |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for (label, name), c in costs.items():
        prefilled = "-" if c["prefilled/sample"] is None else f"{c['prefilled/sample']:.0f}"
        print(
            f"| {label} | {name} | {c['generated/sample']:.1f} | {prefilled} | "
            f"{c['seconds/sample']:.4f} | {c['eval minutes']:.1f} |"
        )
    print("\n## the matched-data experiment (3 categories x base/SFT/RL x 3 seeds)\n")
    tps = train_throughput(model_dir)
    print(f"training step: {tps:,.0f} tokens/s (forward, backward, AdamW; 4 x 1024 tokens)")
    grpo = grpo_rollout_costs(model_dir, args.grpo_tasks, args.max_new_tokens)
    for line in budget_table(costs, grpo, tps, args.pretrain_minutes):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
