"""Proof by a third party: an env written from docs/env-contract.md alone, trained through the CLI.

``tests/third_party/kv_lookup.py`` imports nothing from passkt. ``passkt train grpo --import
kv_lookup`` trains the tiny format-warmed model on its ``KVLookup-v0`` (every value is 7 with
``digits=7``, at T = 0 the agent must answer at once: the same learnable signal as the digit tasks
of conftest.py), and ``passkt eval`` measures the reward before and after, both from the command
line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from passkt.eval.cli import main

THIRD_PARTY = Path(__file__).resolve().parents[2] / "third_party"
ENV = ["--import", "kv_lookup", "--env", "KVLookup-v0", "--env-kwargs", 'digits="7"']


def cli_reward(checkpoint: Path, out: Path, capsys) -> float:
    """Mean success of sampled episodes on the train keys, from ``passkt eval``'s stored run."""
    argv = ["eval", *ENV, "--policy", f"hf:{checkpoint}", "--split", "train", "--budgets", "0"]
    argv += ["--n", "20", "--max-new-tokens", "12", "--out", str(out), "--no-report"]
    argv += ["--no-progress"]
    assert main(argv) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return sum(r["correct"] for r in records) / len(records)


@pytest.mark.slow
def test_grpo_from_the_cli_raises_the_reward_of_a_third_party_env(
    format_checkpoint, tmp_path, monkeypatch, capsys
):
    monkeypatch.syspath_prepend(str(THIRD_PARTY))
    before = cli_reward(format_checkpoint, tmp_path / "before", capsys)
    assert before < 0.3, f"the warm-up should leave about 1/10 reward, got {before}"

    argv = ["train", "grpo", *ENV, "--policy", f"hf:{format_checkpoint}", "--t-train", "0"]
    argv += ["--group-size", "8", "--tasks-per-step", "4", "--micro-batch-size", "16"]
    argv += ["--learning-rate", "1e-3", "--max-new-tokens", "12", "--max-steps", "12"]
    argv += ["--out", str(tmp_path / "grpo"), "--no-progress"]
    assert main(argv) == 0
    checkpoint = Path(capsys.readouterr().out.strip().splitlines()[-1])
    config = json.loads((tmp_path / "grpo" / "config.json").read_text())
    assert config["imports"] == ["kv_lookup"]  # resumed and distributed runs import it too

    after = cli_reward(checkpoint, tmp_path / "after", capsys)
    print(f"KVLookup-v0 reward through the CLI: {before:.2f} -> {after:.2f}")
    assert after > before + 0.4, f"GRPO did not learn: reward {before:.2f} -> {after:.2f}"
