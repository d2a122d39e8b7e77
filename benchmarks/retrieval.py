"""Open-domain retrieval at scale: bm25s (passkt.envs.corpus.Corpus) against rank-bm25.

Usage:
    python benchmarks/retrieval.py                                  # 10k and 100k documents
    python benchmarks/retrieval.py --sizes 10000 100000 1000000 --rank-queries 200 100 20
    python benchmarks/retrieval.py --sizes --hotpotqa path/to/hotpot.json    # recall only

Per corpus size N, in one run: index build time, memory (resident-set growth, and the peak above
the starting point, via /proc's VmHWM, reset per phase), save and load time, queries per second
(one query at a time, as the envs search), and top-10 agreement between the two backends on the
queries rank-bm25 answers (it scans every document per query word, so it gets fewer queries at
large N). Documents: the synthetic world's paragraphs, then paragraphs generated from them with
other fictional names and years (the world itself stops at a few tens of thousands of entities).
Queries: entity names, alone or inside a question ("Who directed the film X?").

Then recall@k of the gold (supporting-fact) paragraphs of every HotpotQA question, searched with
the question text: each question's own 10 paragraphs (the study's setting) against one global
corpus of all the file's paragraphs.

Prints Markdown tables (paste them into benchmarks/README.md); ``--json`` also writes the figures.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s
import numpy as np

from passkt.envs.corpus import Corpus
from passkt.envs.retrieval import Hit, RankBM25Retriever, Retriever
from passkt.envs.sources.synthetic_world import NAME_SUFFIXES, SYLLABLES, build_world
from passkt.envs.tasks import Paragraph

DEFAULT_HOTPOT = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_HOTPOT = DEFAULT_HOTPOT / "hotpotqa_dev_distractor_subset.json"
WORLD_SCALE = 10
"""Blocks of the synthetic world used as templates (12,800 paragraphs)."""
QUESTIONS = ("{}", "{} film director", "Who directed the film {}?", "Where was {} born?")


# --- memory ---------------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return int(re.search(rf"^{field}:\s+(\d+)", f.read(), re.M).group(1))  # type: ignore[union-attr]


class Memory:
    """Resident-set growth and peak (MB) over a block of code (Linux /proc)."""

    def __enter__(self) -> Memory:
        gc.collect()
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")  # resets VmHWM (the peak) to the current resident set
        self.start = _status_kib("VmRSS")
        return self

    def __exit__(self, *exc: object) -> None:
        self.growth_mb = (_status_kib("VmRSS") - self.start) / 1024
        self.peak_mb = (_status_kib("VmHWM") - self.start) / 1024


# --- documents and queries ------------------------------------------------------------------------


def generate_paragraphs(n: int, seed: int = 0) -> list[Paragraph]:
    """The world's paragraphs, then copies with fresh names and years, ``n`` in all.

    A copy replaces each name word of a world paragraph (consistently within the paragraph) by a
    word from a pool that grows with ``n`` (the world's name words plus syllable words), so the
    vocabulary keeps growing as real corpora do.
    """
    world = build_world(seed, scale=WORLD_SCALE)
    base = list(world.paragraphs[:n])
    names = sorted({w for p in base for w in p.title.split()} - NAME_SUFFIXES)
    rng = random.Random(f"passkt-bench/{seed}")
    pool = list(names)
    while len(pool) < max(len(names), n // 4):
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(3, 4)))
        pool.append(word.capitalize())
    known = set(names)
    pattern = re.compile(r"\b(?:[A-Z][a-z]+|1[789]\d\d|20[01]\d)\b")
    out = list(base)
    while len(out) < n:
        template = base[rng.randrange(len(base))]
        mapping: dict[str, str] = {}

        def swap(match: re.Match[str], mapping: dict[str, str] = mapping) -> str:
            word = match.group(0)
            if word[0].isdigit():
                return mapping.setdefault(word, str(rng.randint(1700, 2019)))
            return mapping.setdefault(word, rng.choice(pool)) if word in known else word

        out.append(Paragraph(pattern.sub(swap, template.title), pattern.sub(swap, template.text)))
    return out


def make_queries(paragraphs: Sequence[Paragraph], count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [
        rng.choice(QUESTIONS).format(paragraphs[rng.randrange(len(paragraphs))].title)
        for _ in range(count)
    ]


# --- measurements ---------------------------------------------------------------------------------


def time_queries(retriever: Retriever, queries: Sequence[str], k: int = 10) -> dict:
    latencies, results = [], []
    cpu = time.process_time()
    for query in queries:
        start = time.perf_counter()
        results.append(retriever.search(query, k))
        latencies.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    return {
        "qps": len(queries) / sum(latencies),
        "qps_cpu": len(queries) / cpu,
        "p50_ms": 1e3 * statistics.median(latencies),
        "p95_ms": 1e3 * sorted(latencies)[int(0.95 * (len(latencies) - 1))],
        "results": results,
    }


def agreement(reference: list[list[Hit]], fast: list[list[Hit]]) -> dict:
    """Top-10 overlap, and the share of queries whose ranked lists agree up to tied scores."""
    overlaps, same = [], 0
    for a, b in zip(reference, fast, strict=True):
        ids_a, ids_b = [h.doc_index for h in a], [h.doc_index for h in b]
        overlaps.append(len(set(ids_a) & set(ids_b)) / max(len(ids_a), len(ids_b), 1))
        score = {h.doc_index: h.score for h in a}
        same += len(a) == len(b) and all(
            x.doc_index == y.doc_index or np.isclose(score.get(y.doc_index, -1), x.score, 1e-5)
            for x, y in zip(a, b, strict=True)
        )
    return {"overlap@10": statistics.mean(overlaps), "same_ranking": same / len(reference)}


def bench_size(n: int, n_queries: int, n_rank_queries: int, workdir: Path) -> dict:
    paragraphs = generate_paragraphs(n)
    queries = make_queries(paragraphs, n_queries)
    row: dict = {"docs": n}
    log = _progress(n)

    with Memory() as mem:
        start, cpu = time.perf_counter(), time.process_time()
        corpus = Corpus.build(paragraphs)
        row["bm25s_build_s"] = time.perf_counter() - start
        row["bm25s_build_cpu_s"] = time.process_time() - cpu
    row |= {"bm25s_build_growth_mb": mem.growth_mb, "bm25s_build_peak_mb": mem.peak_mb}
    row["terms"], row["postings"] = corpus.manifest.num_terms, len(corpus._index.scores["data"])
    log(f"bm25s built in {row['bm25s_build_s']:.1f} s")
    start = time.perf_counter()
    folder = corpus.save(workdir / f"corpus-{n}")
    row["save_s"] = time.perf_counter() - start
    row["disk_mb"] = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20
    del corpus
    with Memory() as mem:
        start = time.perf_counter()
        corpus = Corpus.load(folder)
        row["load_s"] = time.perf_counter() - start
        fast = time_queries(corpus, queries)
    row |= {"bm25s_loaded_growth_mb": mem.growth_mb, "bm25s_loaded_peak_mb": mem.peak_mb}
    row |= {f"bm25s_{key}": value for key, value in fast.items() if key != "results"}
    row["bm25s_queries"] = len(queries)
    log(f"bm25s: {row['bm25s_qps']:.0f} queries/s")

    with Memory() as mem:
        start, cpu = time.perf_counter(), time.process_time()
        reference = RankBM25Retriever(paragraphs)
        row["rank_build_s"] = time.perf_counter() - start
        row["rank_build_cpu_s"] = time.process_time() - cpu
    row |= {"rank_build_growth_mb": mem.growth_mb, "rank_build_peak_mb": mem.peak_mb}
    log(f"rank-bm25 built in {row['rank_build_s']:.1f} s")
    slow = time_queries(reference, queries[:n_rank_queries])
    row |= {f"rank_{key}": value for key, value in slow.items() if key != "results"}
    row["rank_queries"] = n_rank_queries
    row |= agreement(slow["results"], fast["results"][:n_rank_queries])
    row["speedup"] = row["bm25s_qps"] / row["rank_qps"]
    row["speedup_cpu"] = row["bm25s_qps_cpu"] / row["rank_qps_cpu"]
    log(f"rank-bm25: {row['rank_qps']:.2f} queries/s")
    return row


def _progress(n: int) -> Callable[[str], None]:
    start = time.perf_counter()
    return lambda text: print(f"[{n:,} docs, {time.perf_counter() - start:6.1f} s] {text}",
                              file=sys.stderr, flush=True)  # fmt: skip


# --- recall on HotpotQA ---------------------------------------------------------------------------


def hotpot_recall(path: Path, ks: Sequence[int] = (1, 3, 10)) -> list[dict]:
    """Recall@k of the supporting-fact paragraphs, per-task corpora against the global corpus."""
    records = json.loads(path.read_text(encoding="utf-8"))
    questions = []
    for record in records:
        paragraphs = tuple(Paragraph(t, "".join(s)) for t, s in record["context"])
        gold_titles = {title for title, _ in record["supporting_facts"]}
        gold = {(p.title, p.text) for p in paragraphs if p.title in gold_titles}
        questions.append((record["question"], paragraphs, gold, record["type"]))
    corpus = Corpus.from_hotpotqa(path)
    setups: list[tuple[str, str, Callable]] = [
        ("per-task (10 docs)", "rank_bm25", lambda q: RankBM25Retriever(q[1])),
        ("per-task (10 docs)", "bm25s", lambda q: Corpus.build(q[1])),
        (f"global ({len(corpus):,} docs)", "rank_bm25", _shared(RankBM25Retriever, corpus)),
        (f"global ({len(corpus):,} docs)", "bm25s", lambda q: corpus),
    ]
    rows = []
    for label, backend, retriever_for in setups:
        found: dict[int, list[float]] = {k: [] for k in ks}
        start, cpu = time.perf_counter(), time.process_time()
        for question in questions:
            hits = retriever_for(question).search(question[0], max(ks))
            for k in ks:
                got = sum((h.title, h.text) in question[2] for h in hits[:k])
                found[k].append(got / len(question[2]))
        row = {"corpus": label, "backend": backend, "questions": len(questions)}
        row |= {f"recall@{k}": statistics.mean(v) for k, v in found.items()}
        row["seconds"] = time.perf_counter() - start
        row["cpu_seconds"] = time.process_time() - cpu
        rows.append(row)
    return rows


def _shared(backend: Callable[[Sequence[Paragraph]], Retriever], corpus: Corpus) -> Callable:
    retriever = backend(list(corpus.paragraphs))
    return lambda question: retriever


# --- main -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=1000, help="bm25s queries per size")
    parser.add_argument("--rank-queries", type=int, nargs="*", default=[200, 100, 20],
                        help="rank-bm25 queries per size (the last value repeats)")  # fmt: skip
    parser.add_argument("--hotpotqa", type=Path, default=DEFAULT_HOTPOT)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="where to save indexes (default: a temp dir)")
    args = parser.parse_args(argv)

    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
        f"bm25s {bm25s.__version__}, load {os.getloadavg()[0]:.1f}\n"
    )
    workdir = Path(tempfile.mkdtemp(dir=args.workdir, prefix="passkt-bench-"))
    rows = []
    try:
        for i, n in enumerate(args.sizes):
            n_rank = args.rank_queries[min(i, len(args.rank_queries) - 1)]
            rows.append(bench_size(n, args.queries, min(n_rank, args.queries), workdir))
            shutil.rmtree(workdir / f"corpus-{n}", ignore_errors=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if rows:
        print_scale_tables(rows)
    recall = hotpot_recall(args.hotpotqa) if args.hotpotqa.exists() else []
    if recall:
        print("\n| corpus | backend | recall@1 | recall@3 | recall@10 | seconds | CPU s |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for r in recall:
            print(f"| {r['corpus']} | {r['backend']} | {r['recall@1']:.3f} | "
                  f"{r['recall@3']:.3f} | {r['recall@10']:.3f} | {r['seconds']:.1f} | "
                  f"{r['cpu_seconds']:.1f} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"scale": rows, "recall": recall}, indent=2) + "\n")


def print_scale_tables(rows: list[dict]) -> None:
    head = ["docs", "terms", "postings", "backend", "build (s)", "build CPU (s)", "build peak (MB)"]
    head += ["RSS growth (MB)", "queries/s", "queries/CPU-s", "p50 (ms)", "p95 (ms)", "queries"]
    _row(head)
    _row(["---:"] * 3 + ["---"] + ["---:"] * 9)
    for r in rows:
        size = [f"{r['docs']:,}", f"{r['terms']:,}", f"{r['postings']:,}"]
        for name, key, qps in (
            ("bm25s (loaded)", "bm25s", "{:,.0f}"),
            ("rank-bm25", "rank", "{:,.2f}"),
        ):
            growth = r["bm25s_loaded_growth_mb"] if key == "bm25s" else r["rank_build_growth_mb"]
            _row([*size, name, f"{r[key + '_build_s']:.1f}", f"{r[key + '_build_cpu_s']:.1f}",
                  f"{r[key + '_build_peak_mb']:,.0f}", f"{growth:,.0f}",
                  qps.format(r[key + "_qps"]), qps.format(r[key + "_qps_cpu"]),
                  f"{r[key + '_p50_ms']:.2f}",
                  f"{r[key + '_p95_ms']:.2f}", str(r[key + "_queries"])])  # fmt: skip
    print()
    _row(["docs", "speed-up (queries/s)", "speed-up (queries/CPU-s)", "top-10 overlap",
          "same ranking (up to ties)", "index on disk (MB)", "save (s)", "load (s)"])  # fmt: skip
    _row(["---:"] * 8)
    for r in rows:
        _row([f"{r['docs']:,}", f"{r['speedup']:,.0f}x", f"{r['speedup_cpu']:,.0f}x",
              f"{r['overlap@10']:.3f}",
              f"{r['same_ranking']:.3f}", f"{r['disk_mb']:,.0f}", f"{r['save_s']:.2f}",
              f"{r['load_s']:.3f}"])  # fmt: skip


def _row(cells: Sequence[str]) -> None:
    print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
