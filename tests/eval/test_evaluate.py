"""``evaluate``: prefix sharing against independent runs, chunked resume, task selection, errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.eval.evaluate import chunk_seed, default_chunk_tasks, env_info, evaluate
from passkt.eval.store import RESULTS_FILE, RunDirError
from passkt.eval.transcripts import TRANSCRIPTS_FILE

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.0)
BUDGETS = (0, 1, 2, 3, 5)
# Envs re-check their whole task list on every gym.make (one per episode): a short list keeps
# these tests fast. The first tasks of the synthetic source do not depend on num_tasks.
SMALL = {"source_options": {"num_tasks": 40}}


def _run(env_id, policy, share, **kwargs):
    kwargs.setdefault("budgets", BUDGETS)
    return evaluate(env_id, policy, share_prefix=share, progress=False, **kwargs)


@pytest.mark.parametrize("which", ["oracle", "heuristic-greedy"])
def test_prefix_sharing_identical_to_independent_runs_for_deterministic_policy(which):
    env_id = "BridgeQA-v0"
    policy = (
        OraclePolicy(env_info(env_id, SMALL).tasks)
        if which == "oracle"
        else HeuristicPolicy(seed=3)
    )
    kwargs = dict(n=2, limit=30, params=GREEDY, seed=5, env_kwargs=SMALL)
    shared = _run(env_id, policy, True, **kwargs)
    alone = _run(env_id, policy, False, **kwargs)
    assert shared.manifest["share_prefix"] and not alone.manifest["share_prefix"]
    assert shared.outcomes == alone.outcomes
    np.testing.assert_array_equal(shared.surface.values, alone.surface.values)
    # Not vacuous: the outcomes vary over T, so a wrong branch would show.
    per_t = shared.outcomes.correct.mean(axis=(0, 1))
    assert per_t.min() < per_t.max()
    assert shared.stats.generated_tokens < alone.stats.generated_tokens
    assert shared.stats.episodes == alone.stats.episodes == 30 * 2 * len(BUDGETS)


def _two_proportion_p(successes_a: int, successes_b: int, total: int) -> float:
    """Two-sided p-value of the pooled two-proportion z-test (equal sample sizes)."""
    pooled = (successes_a + successes_b) / (2 * total)
    if pooled in (0.0, 1.0):
        return 1.0
    z = (successes_a - successes_b) / total / math.sqrt(pooled * (1 - pooled) * 2 / total)
    return math.erfc(abs(z) / math.sqrt(2))


def test_prefix_sharing_agrees_within_sampling_error_for_stochastic_policy():
    # ComparisonQA: the heuristic succeeds about half the time, so the test has power.
    kwargs = dict(n=8, limit=40, params=SAMPLED, env_kwargs=SMALL)
    shared = _run("ComparisonQA-v0", HeuristicPolicy(seed=0), True, seed=11, **kwargs)
    alone = _run("ComparisonQA-v0", HeuristicPolicy(seed=0), False, seed=12, **kwargs)
    counts_a = shared.outcomes.correct.sum(axis=(0, 1))
    counts_b = alone.outcomes.correct.sum(axis=(0, 1))
    total = 40 * 8
    assert shared.outcomes != alone.outcomes  # stochastic: different draws
    for j, t in enumerate(BUDGETS):
        p = _two_proportion_p(int(counts_a[j]), int(counts_b[j]), total)
        assert p > 0.01, f"T={t}: {counts_a[j]} vs {counts_b[j]} successes of {total}, p={p:.4g}"
    # The same test does detect a real difference (T = 0 against T = 5 within one run).
    assert _two_proportion_p(int(counts_a[0]), int(counts_a[-1]), total) < 0.01


def test_reveal_budget_runs_each_budget_on_its_own():
    run = _run(
        "BridgeQA-v0", HeuristicPolicy(), None, n=2, limit=4, env_kwargs={"reveal_budget": True}
    )
    assert run.manifest["share_prefix"] is False
    assert run.outcomes.budgets == BUDGETS and run.outcomes.n == 2
    with pytest.raises(ValueError, match="needs a hidden budget"):
        _run("BridgeQA-v0", HeuristicPolicy(), True, limit=2, env_kwargs={"reveal_budget": True})


def test_resume_after_lost_chunks_reproduces_the_file_exactly(tmp_path):
    kwargs = dict(n=4, limit=9, chunk_tasks=2, params=SAMPLED, seed=7, env_kwargs=SMALL)
    kwargs["out_dir"] = tmp_path / "run"
    full = _run("BridgeQA-v0", "scripted:heuristic", None, **kwargs)
    assert full.chunks_run == 5 and full.manifest["num_chunks"] == 5
    results = tmp_path / "run" / RESULTS_FILE
    original = results.read_bytes()
    lines = original.splitlines(keepends=True)
    # Keep chunks 0-1 (2 tasks x 4 samples x 5 T = 40 lines each) and half of chunk 2, torn.
    results.write_bytes(b"".join(lines[:100]) + lines[100][:25])
    resumed = _run("BridgeQA-v0", "scripted:heuristic", None, resume=True, **kwargs)
    assert (resumed.chunks_run, resumed.chunks_skipped) == (3, 2)
    assert results.read_bytes() == original
    assert resumed.outcomes == full.outcomes
    assert resumed.stats.episodes == 5 * 4 * 5  # tasks 4..8 ran again, nothing else
    with pytest.raises(RunDirError, match="already holds a run; pass --resume"):
        _run("BridgeQA-v0", "scripted:heuristic", None, **kwargs)


def test_task_selection_order_limit_and_records(tmp_path):
    ids = [t.task_id for t in env_info("BridgeQA-v0").tasks[:6]]
    picked = [ids[4], ids[1], ids[5]]
    run = _run(
        "BridgeQA-v0",
        "scripted:oracle",
        None,
        n=1,
        budgets=(0, 3),
        task_ids=picked,
        limit=2,
        out_dir=tmp_path / "run",
    )
    assert run.outcomes.task_ids == tuple(picked[:2])
    assert run.manifest["task_ids"] == picked[:2]
    records = [json.loads(line) for line in (tmp_path / "run" / RESULTS_FILE).open()]
    assert [(r["task_id"], r["budget"]) for r in records] == [
        (picked[0], 0), (picked[0], 3), (picked[1], 0), (picked[1], 3)
    ]  # fmt: skip
    transcripts = [json.loads(line) for line in (tmp_path / "run" / TRANSCRIPTS_FILE).open()]
    assert transcripts[0]["messages"][0]["role"] == "system" and records[0]["chunk"] == 0
    assert "messages" not in records[0] and len(transcripts) == len(records)
    assert run.outcomes.categories == ("bridge", "bridge")


def test_chunk_seeds_and_sizes():
    seeds = {chunk_seed(0, i) for i in range(100)} | {chunk_seed(1, i) for i in range(100)}
    assert len(seeds) == 200 and all(0 <= s < 2**31 - 1 for s in seeds)
    assert chunk_seed(3, 4) == chunk_seed(3, 4)
    assert default_chunk_tasks(16) == 16 and default_chunk_tasks(64) == 4
    assert default_chunk_tasks(1000) == 1


def test_errors_say_what_to_fix(tmp_path):
    with pytest.raises(ValueError, match=r"Unknown env id 'BridgQA-v0'.*'BridgeQA-v0'"):
        evaluate("BridgQA-v0", "scripted:heuristic", progress=False)
    with pytest.raises(ValueError, match=r"no tools \(math\), so only T = 0.*budgets=\(0,\)"):
        evaluate("Math-v0", "scripted:heuristic", budgets=(0, 1), limit=2, progress=False)
    with pytest.raises(ValueError, match=r"Unknown task id.*Did you mean"):
        evaluate("BridgeQA-v0", "scripted:heuristic", task_ids=["syn-bridge-h2-00000"])
    with pytest.raises(ValueError, match="give the split once"):
        evaluate("BridgeQA-v0", HeuristicPolicy(), env_kwargs={"split": "train"}, split="test")
    with pytest.raises(ValueError, match=r"budgets= .*not env_kwargs\[.max_tool_calls.\]"):
        evaluate("BridgeQA-v0", HeuristicPolicy(), env_kwargs={"max_tool_calls": 2})
    with pytest.raises(ValueError, match="resume=True needs out_dir"):
        evaluate("BridgeQA-v0", HeuristicPolicy(), resume=True)
    with pytest.raises(ValueError, match="k must"):
        evaluate("BridgeQA-v0", HeuristicPolicy(), n=4, ks=(1, 8))


def test_math_at_t0():
    run = evaluate("Math-v0", "scripted:heuristic", budgets=(0,), n=2, limit=5, progress=False)
    assert run.outcomes.budgets == (0,) and run.outcomes.categories[0] == "math"


def test_progress_moves_within_a_chunk(monkeypatch):
    # One chunk of 4 tasks: the tasks bar moves only when it ends, so the episodes bar (with the
    # round) shows the work inside it; with a model policy one chunk can take minutes.
    import tqdm.auto

    import passkt.agents.progress

    bars = []

    class Recorded(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.shown = not kwargs.get("disable", False)  # tqdm sets disable on close
            self.postfixes, self.counts = [], []
            bars.append(self)

        def set_postfix_str(self, s="", refresh=True):
            self.postfixes.append(s)
            super().set_postfix_str(s, refresh)

        def update(self, n=1):
            self.counts.append(self.n + n)
            return super().update(n)

    monkeypatch.setattr(passkt.agents.progress, "tqdm", Recorded)
    monkeypatch.setattr(passkt.agents.progress, "_on_terminal", lambda: True)  # a bar, not lines
    evaluate(
        "BridgeQA-v0", "scripted:oracle", n=2, budgets=(0, 3), limit=4, chunk_tasks=4, progress=True
    )
    (episodes,) = [bar for bar in bars if bar.desc == "episodes"]
    assert episodes.shown and episodes.total == 8  # 4 tasks x n = 2 main episodes
    assert episodes.postfixes[:2] == ["round 1, 16 live", "round 2, 8 live"]  # T = 0 forks done
    assert episodes.counts == list(range(1, 9))  # counted as each one finishes
