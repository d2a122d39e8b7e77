"""passkt.study.chain_stages and corpus_agent: where multi-hop episodes stop along the
gold chain, and how often the corpus's own agent succeeds."""

from __future__ import annotations

import subprocess
import sys

import pytest

from passkt.study import chain_stages

GOLD = ("Torsake", "Ninaga")
ANSWERS = {"1924"}


def _episode(*turns: str) -> list[dict[str, str]]:
    """A conversation: system, the question, then alternating agent turns and observations."""
    messages = [
        {"role": "system", "content": "You answer questions. Ninaga Torsake"},  # names ignored
        {"role": "user", "content": "In what year did the nation of Torsake gain independence?"},
    ]
    for i, text in enumerate(turns):
        messages.append({"role": "assistant" if i % 2 == 0 else "user", "content": text})
    return messages


TORSAKE = "<information>Doc 1 (Title: Torsake) Torsake is a small city in Ninaga.</information>"
NINAGA = "<information>Doc 1 (Title: Ninaga) Ninaga was declared independent in 1924.</information>"


@pytest.mark.parametrize(
    ("turns", "stage"),
    [
        (("<answer>1707</answer>",), "stopped after hop 0: answered"),
        (("<search>Mitove</search>", "<information>No documents found.</information>"),
         "stopped after hop 0: searched something not in the conversation"),
        (("<search>Torsake", ), "stopped after hop 0: no well-formed action"),
        (("<search>Torsake</search>", TORSAKE, "<search>Mitove</search>"),
         "stopped after hop 1: searched something not in the conversation"),
        (("<search>Torsake</search>", TORSAKE, "<search>Torsake</search>", TORSAKE,
          "<search>Ninagu</search>"), "stopped after hop 1: searched a name it had read"),
        (("<search>Torsake</search>", TORSAKE, "<answer>1707</answer>"),
         "stopped after hop 1: answered"),
        (("<search>Torsake</search>", TORSAKE, "<search>Ninaga</search>", NINAGA,
          "<answer>1924</answer>"), "read all: answered right"),
        (("<search>Torsake</search>", TORSAKE, "<search>Ninaga</search>", NINAGA,
          "<answer>1707</answer>"), "read all: answered wrong"),
        (("<search>Torsake</search>", TORSAKE, "<search>Ninaga</search>", NINAGA),
         "read all: no answer"),
        # the hop-2 paragraph read first (by luck) does not count until hop 1 is read
        (("<search>x</search>", NINAGA, "<answer>1924</answer>"),
         "stopped after hop 0: searched something not in the conversation"),
    ],
)  # fmt: skip
def test_each_episode_ends_in_the_stage_it_reached(turns, stage):
    assert chain_stages.episode_stage(_episode(*turns), GOLD, ANSWERS) == stage


def test_a_name_is_copied_only_if_the_conversation_had_it_before_the_turn():
    turns = ("<search>Torsake</search>", TORSAKE, "<search>Rossava</search>")
    stage = chain_stages.episode_stage(_episode(*turns), GOLD, ANSWERS)
    assert stage.endswith("not in the conversation")


def test_runs_of_scripted_agents_give_their_stages(tmp_path):
    """Real runs: the oracle reads every gold paragraph and answers right; the heuristic agent
    (which searches only names it has read) stops at hop 1 or reads all; a column per run."""
    runs = {}
    for policy in ("oracle", "heuristic"):
        out = tmp_path / policy
        command = [
            sys.executable, "-m", "passkt.eval.cli", "eval", "--env", "BridgeQA-v0",
            "--env-kwargs", "hops=[2]", "--policy", f"scripted:{policy}", "--n", "4",
            "--budgets", "5", "--limit", "10", "--no-progress", "--out", str(out),
        ]  # fmt: skip
        subprocess.run(command, check=True, capture_output=True)
        runs[policy] = chain_stages.stages(out)
    assert runs["oracle"] == {"read all: answered right": 40}
    heuristic = runs["heuristic"]
    assert sum(heuristic.values()) == 40
    assert any(k.startswith("stopped after hop 1") for k in heuristic)
    assert not any(k.endswith("not in the conversation") for k in heuristic)  # it never invents
    results = (tmp_path / "heuristic" / "results.jsonl").read_text().splitlines()
    assert heuristic["read all: answered right"] <= sum('"correct": true' in r for r in results)
    text = chain_stages.table(runs)
    assert text.splitlines()[0] == "| stage | oracle | heuristic |"
    assert "| read all: answered right | 1.000 |" in text and "| episodes | 40 | 40 |" in text


def test_a_folder_that_is_no_run_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        chain_stages.main([str(tmp_path)])
    assert "not an eval run folder" in capsys.readouterr().err


def test_the_corpus_agent_succeeds_more_often_the_more_it_is_guided():
    from passkt.study import corpus_agent

    low, high = (corpus_agent.success("C", r, limit=12, n=4) for r in (0.0, 1.0))
    assert high > 0.8 and low < 0.5  # guided turns follow the gold chain; heuristic ones guess
    text = corpus_agent.table(["C"], [0.0, 1.0], [[0.0, 1.0]], limit=12, n=4)
    row = text.splitlines()[2].split(" | ")
    assert float(row[-1].rstrip(" |")) == pytest.approx((low + high) / 2, abs=5e-4)
    with pytest.raises(SystemExit):
        corpus_agent.main(["--rates", "0,2"])
