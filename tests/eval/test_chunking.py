"""Chunks and batches (``passkt.eval.chunking``): sized freely, they never change the samples."""

from __future__ import annotations

import json

import pytest

import passkt.eval.evaluate as evaluate_module
from passkt.agents.policy import SamplingParams
from passkt.eval.chunking import Batching, sample_seed
from passkt.eval.evaluate import evaluate
from passkt.eval.store import MANIFEST_FILE, RESULTS_FILE
from passkt.eval.transcripts import TRANSCRIPTS_FILE

SAMPLED = SamplingParams(temperature=1.0)
SMALL = {"source_options": {"num_tasks": 40}}
KWARGS = dict(n=4, limit=9, budgets=(0, 1, 3), params=SAMPLED, env_kwargs=SMALL, progress=False)


def _answers(run) -> list[tuple]:
    return [(r["task_id"], r["sample"], r["budget"], r["answer"], r["actions"]) for r in run]


def _records(directory) -> list[dict]:
    return [json.loads(line) for line in (directory / RESULTS_FILE).open()]


def test_two_chunkings_draw_the_same_samples(tmp_path):
    """One task per chunk and per batch, against chunks of 4 tasks batched 8 at a time: the
    outcomes and every answer and action are identical (the heuristic samples at T = 1)."""
    fine = evaluate(
        "BridgeQA-v0", "scripted:heuristic", seed=3, chunk_tasks=1, chunk_seconds=1e-9,
        out_dir=tmp_path / "fine", **KWARGS,
    )  # fmt: skip
    coarse = evaluate(
        "BridgeQA-v0", "scripted:heuristic", seed=3, chunk_tasks=4, chunk_seconds=1e9,
        out_dir=tmp_path / "coarse", **KWARGS,
    )  # fmt: skip
    assert fine.manifest["num_chunks"] == 9 and coarse.manifest["num_chunks"] == 3
    assert fine.manifest["seeding"] == "per-sample"
    assert fine.stats.policy_calls > coarse.stats.policy_calls  # really batched differently
    assert fine.outcomes == coarse.outcomes
    assert _answers(_records(tmp_path / "fine")) == _answers(_records(tmp_path / "coarse"))
    other_seed = evaluate("BridgeQA-v0", "scripted:heuristic", seed=4, **KWARGS)
    assert other_seed.outcomes != fine.outcomes  # the seed, not the chunking, picks the samples


def test_batches_follow_the_measured_speed():
    bounds = [(i, i + 1) for i in range(10)]
    batching = Batching(seed=0, per_sample=True, seconds=60.0, max_tasks=4)
    assert batching.take(list(range(10)), bounds) == [0]  # the first batch measures
    batching.measured(tasks=1, seconds=20.0)  # 20 s a task: 3 tasks make a minute
    assert batching.take(list(range(1, 10)), bounds) == [1, 2, 3]
    batching.measured(tasks=3, seconds=3.0)  # 1 s a task: capped at max_tasks
    assert batching.take(list(range(4, 10)), bounds) == [4, 5, 6, 7]
    batching.measured(tasks=4, seconds=4000.0)  # slower than the target: one chunk at a time
    assert batching.take([8, 9], bounds) == [8]
    legacy = Batching(seed=0, per_sample=False, seconds=1e9, max_tasks=4, tasks=4)
    assert legacy.take([2, 3, 4], bounds) == [2]
    assert legacy.rollout_seeds(["t"], 2, 5) == {"seed": evaluate_module.chunk_seed(0, 5)}


def test_sample_seeds_are_distinct_and_stable():
    seeds = {sample_seed(s, t, i) for s in (0, 1) for t in ("a", "b", "ab") for i in range(50)}
    assert len(seeds) == 300 and all(0 <= s < 2**31 - 1 for s in seeds)
    assert sample_seed(7, "bridge-3", 2) == sample_seed(7, "bridge-3", 2)


def test_a_run_from_before_per_sample_seeds_resumes_its_own_way(tmp_path, monkeypatch):
    """An old run (no ``seeding`` in its manifest, chunks of 3 seeded by index) loses its last
    chunks; the resume keeps its seeding and chunk size, so it ends as the uninterrupted run."""
    out = tmp_path / "old"
    with monkeypatch.context() as m:
        m.setattr(evaluate_module, "stored_scheme", lambda out_dir, resume: (None, 3))
        full = evaluate("BridgeQA-v0", "scripted:heuristic", seed=5, out_dir=out, **KWARGS)
    manifest = json.loads((out / MANIFEST_FILE).read_text())
    assert "seeding" not in manifest and manifest["chunk_tasks"] == 3
    original = (out / RESULTS_FILE).read_bytes()
    lines = original.splitlines(keepends=True)
    (out / RESULTS_FILE).write_bytes(b"".join(lines[: 3 * 4 * 3]))  # chunk 0 only
    resumed = evaluate(
        "BridgeQA-v0", "scripted:heuristic", seed=5, out_dir=out, resume=True, **KWARGS
    )
    assert (resumed.chunks_skipped, resumed.chunks_run) == (1, 2)
    assert (out / RESULTS_FILE).read_bytes() == original
    assert resumed.outcomes == full.outcomes
    fresh = evaluate("BridgeQA-v0", "scripted:heuristic", seed=5, chunk_tasks=3, **KWARGS)
    assert fresh.outcomes != full.outcomes  # per-sample seeds would have drawn other samples


def test_chunk_seconds_must_be_positive():
    with pytest.raises(ValueError, match="chunk_seconds must be > 0"):
        evaluate("BridgeQA-v0", "scripted:heuristic", chunk_seconds=0, **KWARGS)


def test_per_row_seeds_make_a_row_independent_of_its_batch():
    """The heuristic and the request seeds of vLLM / OpenAI-compatible servers honour
    ``SamplingParams.seeds``: a row's completion depends on its own seed only."""
    from passkt.agents.scripted import HeuristicPolicy
    from passkt.agents.vllm_policy import request_seeds
    from passkt.eval.evaluate import env_info

    task = env_info("BridgeQA-v0", SMALL).tasks[0]
    convo = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": f"Question: {task.question}"},
    ]
    policy = HeuristicPolicy()
    alone = policy.generate([convo], SamplingParams(seeds=(11,)))
    batched = policy.generate([convo] * 3, SamplingParams(seed=99, seeds=(5, 11, 7)))
    assert batched[1] == alone[0]
    texts = {policy.generate([convo], SamplingParams(seeds=(s,)))[0].text for s in range(20)}
    assert len(texts) > 1  # the seed does choose: the equality above is not a constant policy
    assert request_seeds(3, 2, (10, 20)) == [10, 20] and request_seeds(3, 2) == [3, 4]
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        request_seeds(None, 3, (1, 2))


def test_a_model_policy_draws_the_same_samples_in_any_batching(tmp_path):
    """A tiny transformers model (``hf:`` loads ``LeanPolicy`` on a CPU) seeds each row on its
    own, so one chunk per batch and all chunks in a few batches give the same transcripts."""
    from passkt.agents.specs import load_policy
    from passkt.agents.tiny import make_tiny_checkpoint

    checkpoint = make_tiny_checkpoint(tmp_path / "tiny", seed=0)
    policy = load_policy(f"hf:{checkpoint}", batch_size=8)
    assert policy.seeds_each_row
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    kwargs = {**KWARGS, "n": 2, "limit": 3, "budgets": (0, 1), "params": params}
    runs = {}
    for name, seconds in (("fine", 1e-9), ("coarse", 1e9)):
        runs[name] = evaluate(
            "BridgeQA-v0", policy, seed=3, chunk_tasks=1, chunk_seconds=seconds,
            out_dir=tmp_path / name, **kwargs,
        )  # fmt: skip
    assert runs["fine"].stats.policy_calls > runs["coarse"].stats.policy_calls
    assert runs["fine"].outcomes == runs["coarse"].outcomes
    fine, coarse = ((tmp_path / name / TRANSCRIPTS_FILE).read_text() for name in runs)
    assert fine == coarse and len(fine.splitlines()) == 3 * 2 * 2
    turns = {str(json.loads(line)["messages"][-1]) for line in fine.splitlines()}
    assert len(turns) > 1  # sampled turns, not one constant
