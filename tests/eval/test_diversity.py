"""Strategy diversity: query normalization, unique sequences, overlaps, the CLI end to end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from passkt.eval.analysis.diversity import (
    diversity_markdown,
    normalize_query,
    query_overlap,
    query_sequence,
    run_diversity,
    strategy_diversity,
)


def record(task: str, *turns: str, sample: int = 0, budget: int = 3) -> dict:
    """A result record whose assistant turns are ``turns`` (observations in between)."""
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "question"}]
    for i, turn in enumerate(turns):
        if i:
            messages.append({"role": "user", "content": "<information>...</information>"})
        messages.append({"role": "assistant", "content": turn})
    return {
        "task_id": task,
        "sample": sample,
        "budget": budget,
        "correct": False,
        "messages": messages,
    }


def search(query: str) -> str:
    return f"<search>{query}</search>"


ANSWER = "<answer>x</answer>"


def test_normalize_query_merges_case_whitespace_and_punctuation():
    assert normalize_query("  Alder-Vale   FOUNDER? ") == "alder vale founder"
    assert normalize_query("alder vale\tfounder") == "alder vale founder"
    assert normalize_query("ＡＬＤＥＲ vale") == "alder vale"  # full-width letters (NFKC)
    assert normalize_query("Straße") == normalize_query("STRASSE")  # case folding
    assert normalize_query("the founder") != normalize_query("founder")  # articles are kept
    assert normalize_query("?!") == ""


def test_query_sequence_reads_searches_as_the_env_parses_them():
    messages = record(
        "t",
        "<think>plan: <search>not this</search></think><search>Alder  Vale</search>",
        "<search>never closed",  # invalid: not a search
        "thinking... " + search("Mira Oskan") + " trailing",
        ANSWER,
    )["messages"]
    assert query_sequence(messages) == ("alder vale", "mira oskan")
    assert query_sequence(record("t", ANSWER)["messages"]) == ()


def hand_records() -> list[dict]:
    return [
        # p1: four samples, three strategies (case and spacing variants merge; no search counts)
        record("p1", search("Alder Vale"), ANSWER, sample=0),
        record("p1", search("alder  vale!"), ANSWER, sample=1),
        record("p1", search("Alder Vale"), search("Mira"), ANSWER, sample=2),
        record("p1", ANSWER, sample=3),
        # p2: two samples, one strategy
        record("p2", search("Tamsin"), ANSWER, sample=0),
        record("p2", search("TAMSIN"), ANSWER, sample=1),
    ]


def test_strategy_diversity_by_hand():
    d = strategy_diversity(hand_records(), name="base", n_boot=200)
    assert d.task_ids == ("p1", "p2")
    assert d.unique == (3, 1) and d.samples == (4, 2) and d.n == 4
    assert d.mean_unique == pytest.approx(2.0)
    assert 1.0 <= d.lower <= 2.0 <= d.upper <= 3.0 and d.lower < d.upper
    assert d.histogram() == {1: 1, 3: 1}
    assert d.mean_searches == pytest.approx((1 + 1 + 2 + 0 + 1 + 1) / 6)
    assert d.budget == 3
    data = d.to_dict()
    assert data["histogram"] == {"1": 1, "3": 1} and data["unique"] == [3, 1]
    json.dumps(data, allow_nan=False)


def test_strategy_diversity_counts_one_budget():
    mixed = [*hand_records(), record("p1", search("other"), budget=5)]
    with pytest.raises(ValueError, match=r"several budgets \[3, 5\]; pass budget=T"):
        strategy_diversity(mixed)
    at_5 = strategy_diversity(mixed, budget=5)
    assert at_5.task_ids == ("p1",) and at_5.unique == (1,)
    assert strategy_diversity(mixed, budget=3).unique == (3, 1)
    with pytest.raises(ValueError, match="no trajectories at T=7"):
        strategy_diversity(mixed, budget=7)


def test_query_overlap_by_hand():
    s1, s2, s3 = search("one"), search("two"), search("three")
    a = [
        record("p1", s1, ANSWER, sample=0),
        record("p1", s2, ANSWER, sample=1),
        record("p2", s1, ANSWER, sample=0),
        record("only-a", s1, ANSWER, sample=0),
    ]
    b = [
        record("p1", s2, ANSWER, sample=0),
        record("p1", s3, ANSWER, sample=1),
        record("p1", s3, ANSWER, sample=2),
        record("p2", s1, ANSWER, sample=0),
    ]
    overlap = query_overlap(a, b, name_a="base", name_b="rl")
    assert overlap.task_ids == ("p1", "p2") and overlap.excluded == ("only-a",)
    # p1: {one, two} vs {two, three} -> 1/3; p2: {one} vs {one} -> 1
    assert overlap.jaccard == pytest.approx((1 / 3, 1.0))
    assert overlap.mean_jaccard == pytest.approx(2 / 3)
    # B's 4 samples on shared problems: "two" and p2's "one" occur in A -> 2 of 4
    assert overlap.share_b_in_a == pytest.approx(2 / 4)
    # A's 3 samples on shared problems: p1 "two" and p2 "one" occur in B -> 2 of 3
    assert overlap.share_a_in_b == pytest.approx(2 / 3)
    markdown = diversity_markdown([strategy_diversity(a), strategy_diversity(b)], [overlap])
    assert "| rl vs base | 2 | 0.667 | 0.500 | 0.667 |" in markdown
    with pytest.raises(ValueError, match="share no task ids"):
        query_overlap(a[:1], [record("zzz", s1)])


# ---------------------------------------------------------------------- run directories and CLI


@pytest.fixture(scope="module")
def run_dirs(heuristic_run) -> tuple[Path, ...]:
    """Two runs of the heuristic agent that differ only in its seed (0 and 1)."""
    return tuple(
        heuristic_run(f"heuristic-{seed}", policy_options={"seed": seed}, name=f"heuristic-{seed}")
        for seed in (0, 1)
    )


def count_by_regex(run_dir: Path, budget: int) -> dict[str, int]:
    """Distinct query sequences per task, counted independently of the module."""
    sequences: dict[str, set] = {}
    for line in (run_dir / "transcripts.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["budget"] != budget:
            continue
        queries = tuple(
            " ".join(re.sub(r"[^\w\s]", " ", q).lower().split())
            for m in r["messages"]
            if m["role"] == "assistant"
            for q in re.findall(r"^<search>(.*?)</search>", m["content"], re.DOTALL)
        )
        sequences.setdefault(r["task_id"], set()).add(queries)
    return {t: len(s) for t, s in sequences.items()}


def test_run_diversity_matches_an_independent_count(run_dirs):
    expected = count_by_regex(run_dirs[0], 4)
    d = run_diversity(run_dirs[0])
    assert d.budget == 4 and d.name == "heuristic-0"
    assert dict(zip(d.task_ids, d.unique, strict=True)) == expected
    assert max(d.unique) > 1, "the heuristic agent should vary its queries"
    assert run_diversity(run_dirs[0], 2).budget == 2


def test_cli_diversity_end_to_end(run_dirs, tmp_path, passkt_cli):
    a, b = map(str, run_dirs)
    argv = ["analyze", "diversity", a, a, b, "--names", "base,same,other", "--budget", "2"]
    code, out, err = passkt_cli(*argv, "--out", str(tmp_path))
    assert code == 0, err
    data = json.loads((tmp_path / "diversity-T2.json").read_text())
    assert data["budget"] == 2
    assert [d["name"] for d in data["diversity"]] == ["base", "same", "other"]
    expected = count_by_regex(run_dirs[0], 2)
    assert data["diversity"][0]["unique"] == [expected[t] for t in data["diversity"][0]["task_ids"]]
    same, other = data["overlap"]
    assert same["mean_jaccard"] == 1.0 and same["share_b_in_a"] == 1.0
    assert other["name_b"] == "other" and other["mean_jaccard"] < 1.0
    assert (tmp_path / "diversity-T2.md").read_text() in out
    code, _, err = passkt_cli("analyze", "diversity", a, "--budget", "3")
    assert code == 2 and err.startswith("passkt: error: ") and err.count("\n") == 1
    assert "no budget T=3" in err
    code, _, err = passkt_cli("analyze", "diversity", a, b, "--names", "x")
    assert code == 2 and "--names gives 1 names for 2 runs" in err
