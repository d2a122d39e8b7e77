"""Segment perplexity: segments of text and tokens, exact NLL, learning, aggregation, CLI."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from passkt.envs.protocol import parse_action  # noqa: E402
from passkt.eval.analysis.perplexity import (  # noqa: E402
    TrajectoryScore,
    run_perplexity,
    score_trajectories,
    segment_perplexity,
    summarize_scores,
)
from passkt.eval.analysis.segments import (  # noqa: E402
    segment_spans,
    token_segments,
    trajectory_tokens,
)

SYSTEM = "You answer questions. Search with <search>q</search>, answer with <answer>a</answer>."
TURN_1 = "<think>I need the founder.</think>\n<search>Alder Vale founder</search>"
OBSERVATION = (
    "<information>Doc 1 (Title: Alder Vale) Alder Vale was founded by Mira Oskan.</information>"
)
TURN_2 = "<answer>Port Hollis</answer>"


def transcript(turn_1: str = TURN_1, turn_2: str = TURN_2) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Where was the founder of Alder Vale born?"},
        {"role": "assistant", "content": turn_1},
        {"role": "user", "content": OBSERVATION},
        {"role": "assistant", "content": turn_2},
    ]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from passkt.agents.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny-ppl") / "qwen2-tiny", seed=0)


@pytest.fixture(scope="session")
def scorer(tiny_checkpoint: Path):
    """(model, tokenizer) of the tiny checkpoint; tests must not train this model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(tiny_checkpoint)


def read_records(run_dir: Path, budget: int) -> list[dict]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    transcripts = (run_dir / "transcripts.jsonl").read_text().splitlines()  # same order
    records = [{**json.loads(a), **json.loads(b)} for a, b in zip(lines, transcripts, strict=True)]
    return [r for r in records if r["budget"] == budget]


# ---------------------------------------------------------------------- segments of text


def labelled(text: str) -> list[tuple[str, str]]:
    return [(text[s.start : s.end], s.segment) for s in segment_spans(text)]


def test_segment_spans_by_hand():
    assert labelled("Let me look. <think>need X</think>\n<search> Alder Vale </search>") == [
        ("Let me look. ", "reasoning"),
        ("<think>", "tag"),
        ("need X", "reasoning"),
        ("</think>", "tag"),
        ("\n", "reasoning"),
        ("<search>", "tag"),
        (" Alder Vale ", "query"),
        ("</search>", "tag"),
    ]
    assert labelled("So: <answer>Port Hollis</answer> done") == [
        ("So: ", "reasoning"),
        ("<answer>", "tag"),
        ("Port Hollis", "answer"),
        ("</answer>", "tag"),
        (" done", "reasoning"),
    ]


def test_segment_spans_follow_the_env_parser():
    # A search inside <think> is reasoning; the first action outside it counts.
    assert labelled("<think>maybe <search>a</search></think><answer>b</answer>") == [
        ("<think>", "tag"),
        ("maybe ", "reasoning"),
        ("<search>", "tag"),
        ("a", "reasoning"),
        ("</search></think><answer>", "tag"),
        ("b", "answer"),
        ("</answer>", "tag"),
    ]
    # Invalid turns have no query and no answer, only reasoning and tags.
    for text in ("<search>never closed", "<search>a <answer>b</answer></search>", "no tags"):
        assert parse_action(text).kind == "invalid"
        assert {s.segment for s in segment_spans(text)} <= {"reasoning", "tag"}
    assert segment_spans("") == ()


TAGS = ["<think>", "</think>", "<search>", "</search>", "<answer>", "</answer>"]
FRAGMENTS = [*TAGS, "a b", " ", "Q"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=8))
def test_segment_spans_agree_with_parse_action(parts):
    text = "".join(parts)
    spans = segment_spans(text)
    assert "".join(text[s.start : s.end] for s in spans) == text
    assert all(a.end == b.start for a, b in itertools.pairwise(spans))
    action = parse_action(text)
    content = {s.segment for s in spans} & {"query", "answer"}
    if action.kind == "invalid":
        assert not content
    else:
        segment = "query" if action.kind == "search" else "answer"
        assert content <= {segment}
        inside = "".join(text[s.start : s.end] for s in spans if s.segment == segment)
        assert inside.strip() == action.content


def test_token_segments_majority_and_ties():
    text = "<think>I</think><search>ab</search>"
    offsets = [(0, 6), (6, 8), (8, 15), (15, 16), (16, 23), (23, 26), (26, 35), (24, 24)]
    assert [text[a:b] for a, b in offsets[:7]] == [
        "<think",
        ">I",
        "</think",
        ">",
        "<search",
        ">ab",
        "</search>",
    ]
    assert token_segments(text, offsets) == [
        "tag",
        "reasoning",  # '>' + 'I': a tie goes to the content segment
        "tag",
        "tag",
        "tag",
        "query",  # two query characters against one tag character
        "tag",
        "query",  # an empty span takes the segment of the character at its start
    ]


def test_trajectory_tokens_rebuild_the_rollout_sequence(scorer):
    from passkt.agents.rollout import ChatTokens

    _, tokenizer = scorer
    messages = transcript()
    tokens = trajectory_tokens(tokenizer, messages)
    chat = ChatTokens(tokenizer)
    prompt = chat.prompt_ids(messages[:2])
    turn_1, observation = chat.encode(TURN_1), chat.observation_ids(OBSERVATION)
    turn_2 = chat.encode(TURN_2)
    assert list(tokens.token_ids) == prompt + turn_1 + observation + turn_2
    context = [i for i, s in enumerate(tokens.segments) if s is None]
    assert context == list(range(len(prompt))) + list(
        range(len(prompt) + len(turn_1), len(prompt) + len(turn_1) + len(observation))
    )
    # Which tokens are which, read off the tiny tokenizer's pieces by hand.
    pieces = [
        (tokenizer.decode([token]), segment)
        for token, segment in zip(tokens.token_ids, tokens.segments, strict=True)
        if segment is not None
    ]
    assert pieces == [
        ("<think", "tag"),
        (">I", "reasoning"),
        (" n", "reasoning"),
        ("eed", "reasoning"),
        (" the", "reasoning"),
        (" founder", "reasoning"),
        (".</", "tag"),
        ("think", "tag"),
        (">\n", "reasoning"),
        ("<search", "tag"),
        (">Alder", "query"),
        (" Vale", "query"),
        (" founder", "query"),
        ("</", "tag"),
        ("search", "tag"),
        (">", "tag"),
        ("<answer", "tag"),
        (">Port", "answer"),
        (" Hollis", "answer"),
        ("</", "tag"),
        ("answer", "tag"),
        (">", "tag"),
    ]


def test_trajectory_tokens_reject_a_broken_transcript(scorer):
    _, tokenizer = scorer
    messages = transcript()
    messages.insert(3, {"role": "system", "content": "late"})
    with pytest.raises(ValueError, match="message 3 has role 'system'"):
        trajectory_tokens(tokenizer, messages)


# ---------------------------------------------------------------------- scoring


def direct_nll(model, tokenizer, messages) -> list[float]:
    """NLL of the assistant tokens from one unbatched forward pass."""
    tokens = trajectory_tokens(tokenizer, messages)
    with torch.no_grad():
        logits = model(torch.tensor([tokens.token_ids])).logits[0]  # (L, V)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return [-logprobs[i - 1, tokens.token_ids[i]].item() for i in tokens.scored_positions]


@pytest.mark.parametrize("skip_prompt_logits", [True, False])
def test_nll_equals_a_direct_forward_pass(scorer, monkeypatch, skip_prompt_logits):
    from passkt.eval.analysis import perplexity

    model, tokenizer = scorer
    # Both paths: logits only from the first assistant token on, and logits of every position.
    monkeypatch.setattr(perplexity, "_forward_options", lambda model: skip_prompt_logits)
    short = {"task_id": "t1", "sample": 0, "budget": 1, "correct": True, "messages": transcript()}
    long_turn = TURN_1.replace("founder.", "founder of the town, then where that person was born.")
    long = {**short, "task_id": "t2", "messages": transcript(turn_1=long_turn)}
    batched = score_trajectories(model, tokenizer, [short, long], batch_size=2)
    one_by_one = score_trajectories(model, tokenizer, [short, long], batch_size=1)
    for score, single, record in zip(batched, one_by_one, [short, long], strict=True):
        expected = direct_nll(model, tokenizer, record["messages"])
        assert len(score.token_nll) == len(expected) > 10
        assert score.token_nll == pytest.approx(expected, abs=1e-4)
        assert single.token_nll == pytest.approx(expected, abs=1e-4)
    assert batched[1].task_id == "t2" and batched[1].correct is True
    assert batched[0].token_segments.count("query") == 3


def trained_copy(tiny_checkpoint: Path, tokenizer, messages, steps: int = 40):
    """A fresh tiny model trained to repeat one trajectory (full-sequence LM loss)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint, dtype=torch.float32)
    ids = torch.tensor([trajectory_tokens(tokenizer, messages).token_ids])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    torch.manual_seed(0)
    for _ in range(steps):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


def test_a_learned_trajectory_has_lower_perplexity_than_random_text(tiny_checkpoint, scorer):
    base, tokenizer = scorer
    learned = {"task_id": "a", "messages": transcript()}
    rng = random.Random(0)
    words = ["alder", "vale", "mira", "oskan", "port", "hollis", "river", "town", "born"]
    noise = " ".join(rng.choice(words) for _ in range(6))
    random_text = {
        "task_id": "b",
        "messages": transcript(
            turn_1=f"<think>{noise}</think>\n<search>{noise[::-1]}</search>",
            turn_2=f"<answer>{' '.join(rng.sample(words, 2))}</answer>",
        ),
    }
    before = segment_perplexity(base, tokenizer, [learned], n_boot=10)
    model = trained_copy(tiny_checkpoint, tokenizer, learned["messages"])
    after = segment_perplexity(model, tokenizer, [learned], n_boot=10)
    other = segment_perplexity(model, tokenizer, [random_text], n_boot=10)
    for segment in ("query", "answer", "reasoning", "all"):
        assert after.segment(segment).perplexity < before.segment(segment).perplexity / 5
    assert after.segment("all").perplexity < other.segment("all").perplexity / 5


# ---------------------------------------------------------------------- aggregation


def test_summarize_scores_by_hand():
    def score(task, nll, segments):
        return TrajectoryScore(task, 0, 5, True, tuple(nll), tuple(segments))

    scores = [
        score("p1", [1.0, 3.0, 2.0], ["query", "reasoning", "query"]),
        score("p2", [4.0, 1.0], ["query", "answer"]),
    ]
    result = summarize_scores(scores, n_boot=200, ci_unit="trajectory")
    query = result.segment("query")
    assert (query.tokens, query.trajectories) == (3, 2)
    assert query.mean_nll == pytest.approx(7 / 3)
    assert query.perplexity == pytest.approx(math.exp(7 / 3))
    # Per-trajectory query NLL is 1.5 and 4.0: every resample lies between them.
    assert 1.5 <= query.nll_lower <= query.mean_nll <= query.nll_upper <= 4.0
    assert query.nll_lower < query.nll_upper
    assert query.ppl_lower == pytest.approx(math.exp(query.nll_lower))
    assert result.segment("reasoning").mean_nll == pytest.approx(3.0)
    assert result.segment("answer").perplexity == pytest.approx(math.e)
    assert result.segment("all").mean_nll == pytest.approx(11 / 5)
    tag = result.segment("tag")
    assert (tag.tokens, tag.mean_nll, tag.perplexity, tag.ppl_upper) == (0, None, None, None)
    assert result.to_dict()["segments"][3]["mean_nll"] is None
    # One problem holding both trajectories: nothing to resample, the interval is a point.
    same = [scores[0], TrajectoryScore("p1", 1, 5, True, (4.0, 1.0), ("query", "answer"))]
    single = summarize_scores(same, n_boot=50).segment("query")
    assert single.nll_lower == pytest.approx(single.mean_nll) == pytest.approx(single.nll_upper)
    with pytest.raises(ValueError, match="ci_unit must be"):
        summarize_scores(scores, ci_unit="token")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no trajectories"):
        summarize_scores([])


def test_run_perplexity_scores_only_successful_trajectories(run_dir, scorer):
    model, tokenizer = scorer
    records = read_records(run_dir, 4)
    correct = [r for r in records if r["correct"]]
    assert 0 < len(correct) < len(records), "the fixture needs successes and failures at T = 4"
    result = run_perplexity(run_dir, model, tokenizer, n_boot=50)
    assert (result.budget, result.only_correct, result.run) == (4, True, "scripted:heuristic")
    assert result.num_trajectories == len(correct)
    expected = score_trajectories(model, tokenizer, correct)
    total = sum(len(s.token_nll) for s in expected)
    nll = sum(sum(s.token_nll) for s in expected)
    assert result.segment("all").tokens == total
    assert result.segment("all").mean_nll == pytest.approx(nll / total, rel=1e-6)
    everything = run_perplexity(run_dir, model, tokenizer, only_correct=False, n_boot=50)
    assert everything.num_trajectories == len(records)
    assert run_perplexity(run_dir, model, tokenizer, budget=2, only_correct=False).budget == 2


def test_run_perplexity_errors_name_the_fix(run_dir, scorer):
    from passkt.eval.store import RunDirError

    model, tokenizer = scorer
    with pytest.raises(RunDirError, match=r"no budget T=3; evaluated budgets: \[0, 2, 4\]"):
        run_perplexity(run_dir, model, tokenizer, budget=3)
    if not any(r["correct"] for r in read_records(run_dir, 0)):
        with pytest.raises(ValueError, match=r"no successful trajectories at T=0.*--all"):
            run_perplexity(run_dir, model, tokenizer, budget=0)
    with pytest.raises(ValueError, match="needs tokenizer"):
        run_perplexity(run_dir, model)


# ---------------------------------------------------------------------- command line


def test_cli_ppl_end_to_end(run_dir, tiny_checkpoint, tmp_path, passkt_cli):
    model = f"hf:{tiny_checkpoint}"
    argv = ["analyze", "ppl", str(run_dir), "--model", model, "--all", "--out", str(tmp_path)]
    code, out, err = passkt_cli(*argv, "--n-boot", "20")
    assert code == 0, err
    data = json.loads((tmp_path / "perplexity-qwen2-tiny-T4.json").read_text())
    markdown = (tmp_path / "perplexity-qwen2-tiny-T4.md").read_text()
    assert data["num_trajectories"] == len(read_records(run_dir, 4))
    assert data["only_correct"] is False and data["scorer"] == model
    counts = {s["segment"]: s["tokens"] for s in data["segments"]}
    assert counts["query"] > 0 and counts["answer"] > 0
    assert counts["all"] == sum(v for k, v in counts.items() if k != "all")
    assert "| query |" in out and markdown in out
    code, _, err = passkt_cli("analyze", "ppl", str(run_dir), "--model", model, "--budget", "3")
    assert code == 2
    assert err.count("\n") == 1 and "passkt: error:" in err and "no budget T=3" in err


def test_episodes_and_policies_are_accepted(scorer, tiny_checkpoint):
    from passkt.agents.hf import HFPolicy
    from passkt.agents.rollout import Episode
    from passkt.eval.analysis.perplexity import load_scorer

    model, tokenizer = scorer
    episode = Episode("t", 3, 1, "bridge", messages=transcript(), correct=True)
    from_episode = score_trajectories(model, tokenizer, [episode])[0]
    from_record = score_trajectories(model, tokenizer, [episode.to_record()])[0]
    assert from_episode == from_record and from_episode.sample == 3
    policy = HFPolicy(tiny_checkpoint)
    assert load_scorer(policy) == (policy.model, policy.tokenizer)
    with pytest.raises(ValueError, match="give hf:PATH_OR_ID"):
        load_scorer("vllm:Qwen/Qwen2.5-7B-Instruct")
    with pytest.raises(TypeError, match="expected a result record"):
        score_trajectories(model, tokenizer, ["not a trajectory"])
