"""Proof by a third party, from the command line: ``--import``, ``--env MODULE:ID``, ``py:`` agents.

The envs and the agent live in this folder (``kv_lookup.py``, ``kv_agents.py``), written from
docs/env-contract.md; nothing here subclasses passkt. GRPO training on the same env through the CLI
is ``tests/agents/train/test_third_party_train.py`` (it needs the trainer tests' warmed model).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from passkt.envs import contract
from passkt.eval.cli import main

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    contract._ANNOUNCED.clear()


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]


def test_eval_of_a_minimal_env_with_a_user_agent(tmp_path, capsys, caplog):
    out = tmp_path / "run"
    argv = ["eval", "--import", "kv_lookup", "--env", "KVLookupMinimal-v0"]
    argv += ["--policy", "py:kv_agents:make_policy", "--n", "2", "--budgets", "0,1,2"]
    argv += ["--limit", "4", "--out", str(out), "--no-progress", "--no-report"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert "| 1 | 1.000 | 1.000 |" in printed.out  # T = 1: looked up, then answered
    assert "| 0 | 0.000 | 0.000 |" in printed.out  # T = 0: the lookup is cut by the budget
    assert "no fork(max_tool_calls)" in caplog.text  # each fallback is announced
    rows = records(out)
    assert {r["task_id"] for r in rows} == {f"seed-{i}" for i in range(4)}
    assert all(r["correct"] == (r["budget"] > 0) for r in rows)


def test_module_colon_id_runs_and_resumes(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", "--env", "kv_lookup:KVLookup-v0", "--policy", "py:kv_agents:make_policy"]
    argv += ["--n", "2", "--budgets", "0,2", "--out", str(out), "--no-progress", "--no-report"]
    assert main(argv) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["env_id"] == "kv_lookup:KVLookup-v0"
    assert main([*argv, "--resume"]) == 0  # the stored id imports its module again
    rows = records(out)
    assert len(rows) == 5 * 2 * 2 and {r["category"] for r in rows} == {"lookup"}
    capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["eval", "--import", "no_such_module"], "cannot import module 'no_such_module'"),
        (["eval", "--env", "no_such_module:X-v0"], "cannot import module 'no_such_module'"),
        (["eval", "--env", "kv_lookup:KVLookup-v0", "--policy", "py:kv_agents:nope"], "'nope'"),
        (["train", "grpo", "--policy", "py:kv_agents:make_policy"], "cannot be trained"),
        (["analyze", "diversity", "RUN", "--import", "no_such_module"], "no_such_module"),
    ],
)
def test_bad_plug_ins_fail_in_one_line_before_writing(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    extra = ["--out", str(out)] if argv[0] == "eval" else []
    with pytest.raises(SystemExit) as exit_info:
        main(argv + extra)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("passkt: error: ") and message in err[-1]
    assert not out.exists()


def test_sft_without_passkt_tasks_asks_for_expert_data(tmp_path, capsys):
    argv = ["train", "sft", "--import", "kv_lookup", "--env", "KVLookup-v0", "--policy", "hf:x"]
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--out", str(tmp_path / "sft")])
    assert exit_info.value.code == 2
    assert "--data-path" in capsys.readouterr().err
