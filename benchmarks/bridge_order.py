"""HotpotQA bridge hop order: the rule before and after the answer steps, against hand labels.

Usage:
    python benchmarks/bridge_order.py [--data tests/data/hotpotqa_dev_distractor_subset.json]

Hand labels: ``tests/envs/data/bridge_order_labels.json`` (40 bridge tasks drawn with
``random.Random(12).sample(bridge_records, 40)``, each read and ordered by hand; ``order`` null
where the question asks about both paragraphs in parallel, so either order is right). "before"
is ``order_bridge_titles`` without the answer (steps mention, question, supporting facts);
"after" is the rule the loader uses. Also, over every bridge record of the file: how often the
paragraph that holds the answer comes first, and how often the expert's first search is the
answer itself, and which step decided.
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from pathlib import Path

from passkt.envs.sources.hotpotqa import _answer_name, _mentions, _name, order_bridge_titles

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT / "tests/data/hotpotqa_dev_distractor_subset.json"
LABELS = ROOT / "tests/envs/data/bridge_order_labels.json"


def orders(record: dict) -> dict[str, tuple[tuple[str, ...], str]]:
    """The rule's order before and after the answer steps."""
    texts: dict[str, str] = {}
    for title, sentences in record["context"]:
        texts.setdefault(title, "".join(sentences))
    titles = tuple(dict.fromkeys(title for title, _ in record["supporting_facts"]))
    question, answer = record["question"], record["answer"]
    return {
        "before": order_bridge_titles(question, titles, texts),
        "after": order_bridge_titles(question, titles, texts, answer),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT)
    args = parser.parse_args()
    records = json.loads(args.data.read_text(encoding="utf-8"))
    bridge = [r for r in records if r["type"] == "bridge"]
    labels = json.loads(LABELS.read_text(encoding="utf-8"))["labels"]
    drawn = [r["_id"] for r in random.Random(12).sample(bridge, len(labels))]
    assert drawn == [label["id"] for label in labels], "labels are not the seeded sample"
    by_id = {r["_id"]: r for r in bridge}
    agree = Counter()
    for label in labels:
        for when, (order, rule) in orders(by_id[label["id"]]).items():
            ok = label["order"] is None or list(order) == label["order"]
            agree[when] += ok
            if not ok:
                print(
                    f"{when:6} disagrees on {label['id']} ({label['reason']}, rule {rule}): "
                    f"rule {list(order)}, hand {label['order']}"
                )
    n, parallel = len(labels), sum(label["order"] is None for label in labels)
    print(f"\nhand-labelled sample: {n} tasks ({parallel} parallel: either order agrees)")
    for when in ("before", "after"):
        print(f"  {when:6} agreement {agree[when]}/{n} = {agree[when] / n:.1%}")
    print(f"\nall {len(bridge)} bridge records of {args.data.name}:")
    for when in ("before", "after"):
        first_holds = first_is_answer = 0
        rules = Counter()
        for record in bridge:
            (first, *rest), rule = orders(record)[when]
            rules[rule] += 1
            answer = _answer_name(record["answer"])
            texts = {t: "".join(s) for t, s in record["context"]}
            only_first = _mentions(texts[first], answer) and not any(
                _mentions(texts[t], answer) for t in rest
            )
            first_holds += only_first
            first_is_answer += bool(rest) and _name(first) == answer.lower()
        print(
            f"  {when:6} answer only in the first paragraph: {first_holds}; first search is "
            f"the answer's title: {first_is_answer}; decided by {dict(rules)}"
        )


if __name__ == "__main__":
    main()
