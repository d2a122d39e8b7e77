"""Searching a gold title on HotpotQA's own 10 paragraphs: before and after the title rule and fill.

Usage:
    python benchmarks/title_search.py [--data tests/data/hotpotqa_dev_distractor_subset.json]

For every gold (supporting-fact) title of every record, the query is the title itself, searched
in the record's own paragraphs with ``top_k`` = 3 (the envs' default). "before" is the ranking
the retrievers gave until the title rule: rank-bm25's positive scores only (``_top_k`` of the
raw scores); "title" is ``search`` (title rule, zero scores left out: ``search_fill=False``);
"title+fill" is ``search(..., fill=True)`` (what the envs do on HotpotQA: ``search_fill``
defaults on there). Prints, per backend: searches, rank-1 rate of the titled paragraph, searches
that returned nothing, titled paragraph outside the top 3, searches that returned fewer than
``k`` documents, and CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from passkt.envs.retrieval import BACKENDS, _top_k, tokenize
from passkt.envs.tasks import Paragraph

DEFAULT = Path(__file__).resolve().parents[1] / "tests/data/hotpotqa_dev_distractor_subset.json"


def before(retriever, query: str, k: int) -> list[int]:
    """The old ranking: positive BM25 scores only, best first, ties by index."""
    vocabulary = retriever._vocabulary()
    tokens = [t for t in tokenize(query) if t in vocabulary]
    return [] if not tokens else [int(i) for i in _top_k(retriever._scores(tokens), k)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT)
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    records = json.loads(args.data.read_text(encoding="utf-8"))
    print(f"{len(records)} records from {args.data}, top_k = {args.k}\n")
    print("| backend | ranking | searches | rank-1 | empty | not in top k | < k hits | cpu s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, backend in BACKENDS.items():
        rows = {label: [0, 0, 0, 0, 0, 0.0] for label in ("before", "title", "title+fill")}
        for record in records:
            paragraphs = [Paragraph(t, "".join(s)) for t, s in record["context"]]
            retriever = backend(paragraphs)
            for title in dict.fromkeys(t for t, _ in record["supporting_facts"]):
                gold = {i for i, p in enumerate(paragraphs) if p.title == title}
                for label in rows:
                    clock = time.process_time()
                    if label == "before":
                        ranked = before(retriever, title, args.k)
                    else:
                        fill = label == "title+fill"
                        hits = retriever.search(title, args.k, fill=fill)
                        ranked = [h.doc_index for h in hits]
                    row = rows[label]
                    row[5] += time.process_time() - clock
                    row[0] += 1
                    row[1] += bool(ranked) and ranked[0] in gold
                    row[2] += not ranked
                    row[3] += not gold & set(ranked)
                    row[4] += len(ranked) < min(args.k, len(paragraphs))
        for label, (n, first, empty, missed, short, cpu) in rows.items():
            print(
                f"| {name} | {label} | {n} | {first}/{n} = {first / n:.1%} | {empty} | {missed} "
                f"| {short} | {cpu:.2f} |"
            )


if __name__ == "__main__":
    main()
