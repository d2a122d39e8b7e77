"""Speed of the passkt envs: steps per second with prewritten actions, and search latency.

Usage:
    python benchmarks/envs.py                       # all envs, synthetic tasks, 300 episodes each
    python benchmarks/envs.py --episodes 1000 --hotpotqa path/to/hotpotqa.json

Prints Markdown tables (paste them into benchmarks/README.md). Numbers depend on the machine;
the script reports its Python, CPU count and library versions with them.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import gymnasium as gym

import passkt.envs
from passkt.envs import ENV_SPECS, Paragraph, Task, load_tasks
from passkt.envs.retrieval import BM25sRetriever, RankBM25Retriever, global_corpus
from passkt.envs.sources import synthetic, synthetic_world

DEFAULT_HOTPOT = Path(__file__).resolve().parents[1] / "tests" / "data"
DEFAULT_HOTPOT = DEFAULT_HOTPOT / "hotpotqa_dev_distractor_subset.json"


def episode_actions(task: Task) -> list[str]:
    """A fixed script per task: the gold searches with one invalid turn among them, then an answer
    (math: just the answer)."""
    if task.category == "math":
        return [f"Working it out step by step. <answer>{task.answer}</answer>"]
    searches = [f"<think>I need {q}.</think>\n<search>{q}</search>" for q in task.gold_queries]
    return [
        searches[0],
        "I am not sure what to do.",
        *searches[1:],
        f"<answer>{task.answer}</answer>",
    ]


def bench_env(env_id: str, episodes: int) -> dict[str, float]:
    """Steps per second over ``episodes`` episodes, first with cold search caches, then warm."""
    env = gym.make(env_id, max_tool_calls=0 if env_id == "Math-v0" else 8)
    tasks = env.unwrapped.tasks[:episodes]
    scripts = [(task.task_id, episode_actions(task)) for task in tasks]
    result = {}
    for phase in ("cold", "warm"):
        steps, solved = 0, 0
        start, cpu = time.perf_counter(), time.process_time()
        for task_id, actions in scripts:
            env.reset(options={"task_id": task_id})
            for action in actions:
                _, reward, terminated, truncated, _ = env.step(action)
                steps += 1
                if terminated or truncated:
                    solved += reward == 1.0
                    break
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        result[f"{phase}_steps_per_s"] = steps / elapsed
        result[f"{phase}_steps_per_cpu_s"] = steps / cpu
        result["steps_per_episode"] = steps / len(scripts)
        result["solved"] = solved / len(scripts)
    return result


def _time_per_call(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Wall and CPU seconds per call."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat, (time.process_time() - cpu) / repeat


def bench_search(corpora: Sequence[tuple[tuple[Paragraph, ...], list[str]]], k: int) -> dict:
    """Per backend: mean index build time per corpus and mean latency per query (microseconds),
    wall and CPU."""
    out = {}
    for name, backend in (("rank_bm25", RankBM25Retriever), ("bm25s", BM25sRetriever)):
        builds, latencies = [], []
        for paragraphs, queries in corpora:
            builds.append(_time_per_call(lambda p=paragraphs, b=backend: b(p), 1))
            retriever = backend(paragraphs)
            for query in queries:
                latencies.append(_time_per_call(lambda r=retriever, q=query: r.search(q, k), 3))
        walls = [wall for wall, _ in latencies]
        out[name] = {
            "build_us": 1e6 * statistics.mean(wall for wall, _ in builds),
            "build_cpu_us": 1e6 * statistics.mean(cpu for _, cpu in builds),
            "query_us": 1e6 * statistics.mean(walls),
            "query_cpu_us": 1e6 * statistics.mean(cpu for _, cpu in latencies),
            "query_p95_us": 1e6 * sorted(walls)[int(0.95 * (len(walls) - 1))],
            "queries": len(latencies),
        }
    return out


def synthetic_corpora(n: int) -> list[tuple[tuple[Paragraph, ...], list[str]]]:
    tasks = load_tasks("synthetic", "bridge", "test", hops=(2, 3, 4))[:n]
    return [(t.paragraphs, [t.question, *t.gold_queries]) for t in tasks]


def hotpot_corpora(path: Path) -> list[tuple[tuple[Paragraph, ...], list[str]]]:
    out = []
    for category in ("bridge", "comparison"):
        tasks = load_tasks("hotpotqa", category, "test", path=str(path), test_fraction=1.0)
        out += [(t.paragraphs, [t.question, *t.gold_queries]) for t in tasks]
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="*", default=list(ENV_SPECS), help="env ids to run")
    parser.add_argument("--episodes", type=int, default=300, help="episodes per env")
    parser.add_argument("--corpora", type=int, default=300, help="synthetic corpora to search")
    parser.add_argument("--top-k", type=int, default=3, help="documents per search")
    parser.add_argument("--hotpotqa", type=Path, default=DEFAULT_HOTPOT, help="HotpotQA JSON")
    args = parser.parse_args(argv)

    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, gymnasium "
        f"{gym.__version__}, passkt {getattr(passkt.envs, '__version__', 'dev')}\n"
    )
    start, cpu = time.perf_counter(), time.process_time()
    synthetic_world.build_world.__wrapped__(7)  # uncached: the world itself
    world = (time.perf_counter() - start, time.process_time() - cpu)
    for category in ("bridge", "comparison", "math"):
        for split in ("train", "test"):
            synthetic.load_tasks(category, split, seed=7)
    tasks = (time.perf_counter() - start, time.process_time() - cpu)
    print(
        f"synthetic world (seed 7): built in {world[0]:.2f} s wall / {world[1]:.2f} s CPU; "
        f"with every default task list: {tasks[0]:.2f} s wall / {tasks[1]:.2f} s CPU\n"
    )
    print(
        "| env | steps/s cold (wall) | steps/s warm (wall) | steps/CPU-s cold | steps/CPU-s warm "
        "| warm vs cold (CPU) | steps/episode | solved |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for env_id in args.envs:
        r = bench_env(env_id, args.episodes)
        print(
            f"| {env_id} | {r['cold_steps_per_s']:,.0f} | {r['warm_steps_per_s']:,.0f} | "
            f"{r['cold_steps_per_cpu_s']:,.0f} | {r['warm_steps_per_cpu_s']:,.0f} | "
            f"{r['warm_steps_per_cpu_s'] / r['cold_steps_per_cpu_s']:.2f}x | "
            f"{r['steps_per_episode']:.1f} | {r['solved']:.2f} |"
        )

    suites = [("synthetic per-task (10 docs)", synthetic_corpora(args.corpora))]
    if args.hotpotqa.exists():
        hotpot = hotpot_corpora(args.hotpotqa)
        suites.append(("HotpotQA per-task (10 docs)", hotpot))
        tasks = [Task(str(i), "bridge", "q", "a", paragraphs=p) for i, (p, _) in enumerate(hotpot)]
        union = global_corpus(tasks)
        queries = [q for _, qs in hotpot[:100] for q in qs[:1]]
        suites.append((f"HotpotQA global ({len(union):,} docs)", [(union, queries)]))
    else:
        print(f"\n({args.hotpotqa} not found: HotpotQA rows skipped)", file=sys.stderr)
    print(
        "\n| corpus | backend | index build (us) | build CPU (us) | query mean (us) "
        "| query CPU (us) | query p95 (us) | queries | query CPU, rank_bm25 / this |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, corpora in suites:
        results = bench_search(corpora, args.top_k)
        for backend, r in results.items():
            ratio = results["rank_bm25"]["query_cpu_us"] / r["query_cpu_us"]
            print(
                f"| {label} | {backend} | {r['build_us']:,.0f} | {r['build_cpu_us']:,.0f} | "
                f"{r['query_us']:,.0f} | {r['query_cpu_us']:,.0f} | {r['query_p95_us']:,.0f} | "
                f"{r['queries']:,} | {ratio:.1f}x |"
            )


if __name__ == "__main__":
    main()
