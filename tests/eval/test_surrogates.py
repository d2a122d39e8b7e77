"""A lone surrogate in a model's text (e.g. from a JSON ``\\ud800`` escape) round-trips through
the env, the store, a resume and the reports, and reaches the Wikipedia tool as U+FFFD."""

from __future__ import annotations

import json

import gymnasium as gym

from passkt.agents.policy import Completion
from passkt.eval.evaluate import evaluate
from passkt.eval.reports import write_report
from passkt.eval.store import RESULTS_FILE, read_run
from passkt.eval.transcripts import TRANSCRIPTS_FILE, attach_transcripts

SEARCH = "<search>Zanev \ud800 river</search>"
ANSWER = "<answer>city\udcff</answer>"


class SurrogatePolicy:
    """Searches, then answers, each time with a lone surrogate in the text."""

    def generate(self, conversations, params):
        text = [SEARCH if len(c) < 3 else ANSWER for c in conversations]
        return [Completion(t) for t in text for _ in range(params.n)]


def test_env_accepts_and_reports_lone_surrogates():
    env = gym.make("BridgeQA-v0", max_tool_calls=1)
    env.reset(seed=0)
    obs, *_ = env.step(SEARCH)
    assert obs in env.observation_space
    _, reward, terminated, _, info = env.step(ANSWER)
    assert terminated and reward == 0.0 and info["answer"] == "city\udcff"


def test_lone_surrogates_round_trip_through_store_resume_and_report(tmp_path):
    kwargs = dict(
        n=2,
        budgets=(0, 1),
        limit=3,
        chunk_tasks=1,
        env_kwargs={"source_options": {"num_tasks": 6}},
        progress=False,
        name="run\udcff",
    )
    run = evaluate("BridgeQA-v0", SurrogatePolicy(), out_dir=tmp_path / "run", **kwargs)
    raw = (tmp_path / "run" / RESULTS_FILE).read_bytes()
    talk = (tmp_path / "run" / TRANSCRIPTS_FILE).read_bytes()
    for data in (raw, talk):
        data.decode("utf-8")  # valid UTF-8 on disk, the surrogates escaped as JSON does
    assert b"\\udcff" in raw and b"\\ud800" in talk and b"\\udcff" in talk
    records = attach_transcripts(tmp_path / "run", read_run(tmp_path / "run").records)
    assert {r["answer"] for r in records if r["answer"]} == {"city\udcff"}
    assert any(m["content"] == SEARCH for r in records for m in r["messages"])  # exactly as sent
    assert json.loads((tmp_path / "run" / "manifest.json").read_bytes())["name"] == "run\udcff"

    # A crash in the last chunk, then a deterministic resume: the same chunk is written again.
    lines = raw.splitlines(keepends=True)
    (tmp_path / "run" / RESULTS_FILE).write_bytes(b"".join(lines[:-2]))
    again = evaluate(
        "BridgeQA-v0", SurrogatePolicy(), out_dir=tmp_path / "run", resume=True, **kwargs
    )
    assert again.chunks_run == 1 and (tmp_path / "run" / RESULTS_FILE).read_bytes() == raw
    assert run.outcomes.correct.shape == again.outcomes.correct.shape

    report = write_report(tmp_path / "run", n_boot=50)
    for path in report.files:
        if path.suffix in (".md", ".csv", ".json"):
            path.read_text(encoding="utf-8")  # valid UTF-8
    assert "run\\udcff" in (report.out_dir / "surface.md").read_text(encoding="utf-8")
