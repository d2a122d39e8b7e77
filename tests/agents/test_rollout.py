"""The rollout engine: lock-step batching, budget branches, exact token records."""

from __future__ import annotations

import pytest

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.rollout import ChatTokens, rollout
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.envs.tasks import Paragraph, Task


def bridge_task(i: int) -> Task:
    """A hand-made 2-hop task: film -> director -> birthplace."""
    film, person, town = f"Film{i} Quorn", f"Person{i} Alvey", f"Town{i}"
    paragraphs = (
        Paragraph(film, f"{film} is a drama film directed by {person}."),
        Paragraph(person, f"{person} is a film director born in {town}."),
        Paragraph("Unrelated", "Unrelated is a song by a band."),
        Paragraph(f"Other{i} Quorn", f"Other{i} Quorn is a comedy film from the north."),
    )
    return Task(
        task_id=f"hand-{i}",
        category="bridge",
        question=f"Where was the director of the film {film} born?",
        answer=town,
        paragraphs=paragraphs,
        gold_titles=(film, person),
        gold_queries=(film, person),
        depth=2,
        source="hand",
        split="test",
    )


TASKS = [bridge_task(i) for i in range(4)]
IDS = [t.task_id for t in TASKS]
ENV = {"tasks": TASKS}


def test_oracle_solves_exactly_at_depth_with_budget_branches():
    result = rollout(
        OraclePolicy(TASKS), "BridgeQA-v0", IDS, n=2, budgets=(0, 1, 2, 3), env_kwargs=ENV
    )
    assert len(result.episodes) == len(IDS) * 2 * 4
    keys = [(e.task_id, e.sample, e.budget) for e in result.episodes]
    assert keys == [(t, s, b) for t in IDS for s in range(2) for b in (0, 1, 2, 3)]
    for episode in result.episodes:
        assert episode.correct == (episode.budget >= 2), (episode.budget, episode.messages)
        assert len(episode.turns) <= episode.budget + 1
        assert episode.tool_calls <= episode.budget
    # One main episode per sample (3 turns) plus branches at T = 0, 1, 2 (one turn each):
    # 4 rounds in all, however many tasks.
    assert result.stats.policy_calls == 3


def test_branch_transcript_equals_an_independent_episode():
    params = SamplingParams(temperature=0.0)
    shared = rollout(
        HeuristicPolicy(0), "BridgeQA-v0", IDS, budgets=(0, 1, 2, 3), env_kwargs=ENV, params=params
    )
    alone = rollout(
        HeuristicPolicy(0),
        "BridgeQA-v0",
        IDS,
        budgets=(0, 1, 2, 3),
        env_kwargs=ENV,
        params=params,
        share_prefix=False,
    )
    for a, b in zip(shared.episodes, alone.episodes, strict=True):
        assert (a.task_id, a.budget) == (b.task_id, b.budget)
        assert a.messages == b.messages
        assert (a.correct, a.tool_calls, a.truncated) == (b.correct, b.tool_calls, b.truncated)
    assert shared.stats.generated_tokens < alone.stats.generated_tokens


def test_seeded_rollouts_reproduce_and_differ_across_seeds():
    def run(seed):
        result = rollout(
            HeuristicPolicy(3), "BridgeQA-v0", IDS, n=4, budgets=(3,), env_kwargs=ENV, seed=seed
        )
        return [e.messages for e in result.episodes]

    assert run(1) == run(1)
    assert run(1) != run(2)


class ScriptPolicy:
    """Plays fixed scripts, one per task, to make episodes of unequal length."""

    def __init__(self, scripts):
        self.scripts = scripts

    def generate(self, conversations, params):
        out = []
        for conversation in conversations:
            question = conversation[1]["content"]
            script = next(s for q, s in self.scripts.items() if q in question)
            step = sum(m["role"] == "assistant" for m in conversation)
            out.append(Completion(script[min(step, len(script) - 1)]))
        return out


def test_episodes_of_unequal_length_end_independently():
    scripts = {
        TASKS[0].question: ["<answer>x</answer>"],
        TASKS[1].question: ["<search>a</search>", "<answer>y</answer>"],
        TASKS[2].question: [
            "no tags at all",
            "<search>b</search>",
            "<search>c</search>",
            "<answer>z</answer>",
        ],
    }
    result = rollout(ScriptPolicy(scripts), "BridgeQA-v0", IDS[:3], budgets=(5,), env_kwargs=ENV)
    turns = [len(e.turns) for e in result.episodes]
    assert turns == [1, 2, 4]
    assert [e.actions for e in result.episodes][2] == ["invalid", "search", "search", "answer"]
    assert result.episodes[2].tool_calls == 3
    assert result.stats.policy_calls == 4


def test_budget_is_enforced_when_the_policy_never_answers():
    scripts = {t.question: ["<search>Unrelated</search>"] for t in TASKS}
    result = rollout(ScriptPolicy(scripts), "BridgeQA-v0", IDS[:2], budgets=(0, 2), env_kwargs=ENV)
    for episode in result.episodes:
        assert episode.truncated and not episode.terminated
        assert len(episode.turns) == episode.budget + 1


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="budgets="):
        rollout(OraclePolicy(TASKS), "BridgeQA-v0", IDS, env_kwargs={**ENV, "max_tool_calls": 2})
    with pytest.raises(ValueError, match=r"params\.n=1"):
        rollout(OraclePolicy(TASKS), "BridgeQA-v0", IDS, env_kwargs=ENV, params=SamplingParams(n=2))


def test_token_record_keeps_sampled_ids_exactly(tiny_policy):
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    result = rollout(
        tiny_policy,
        "BridgeQA-v0",
        IDS[:2],
        n=2,
        budgets=(1, 2),
        env_kwargs=ENV,
        params=params,
        seed=5,
    )
    chat = ChatTokens(tiny_policy.tokenizer)
    assert result.stats.generated_tokens > 0
    for episode in result.episodes:
        ids, mask, logprobs = episode.token_ids, episode.policy_mask, episode.logprobs
        assert len(ids) == len(mask) == len(logprobs)
        sampled = [t for t, m in zip(ids, mask, strict=True) if m]
        assert sampled == [t for turn in episode.turns for t in turn.completion.token_ids]
        sampled_lp = [lp for lp, m in zip(logprobs, mask, strict=True) if m]
        assert sampled_lp == [lp for turn in episode.turns for lp in turn.completion.logprobs]
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)
        # The prompt is the chat template of the first two messages, and every observation
        # segment is the template's tokens for that observation: nothing was re-tokenized.
        prompt = chat.prompt_ids(episode.messages[:2])
        assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)])
        position = len(prompt)
        for k, turn in enumerate(episode.turns):
            position += len(turn.completion.token_ids)
            if k + 1 < len(episode.turns):
                observation = episode.messages[2 + 2 * k + 1]["content"]
                segment = chat.observation_ids(observation)
                assert ids[position : position + len(segment)] == segment
                position += len(segment)
        assert position == len(ids)


def test_tokenizer_fills_token_records_for_scripted_experts(tiny_policy):
    result = rollout(
        OraclePolicy(TASKS),
        "BridgeQA-v0",
        IDS[:1],
        budgets=(2,),
        env_kwargs=ENV,
        tokenizer=tiny_policy.tokenizer,
    )
    (episode,) = result.episodes
    assert episode.correct
    text = tiny_policy.tokenizer.decode(
        [t for t, m in zip(episode.token_ids, episode.policy_mask, strict=True) if m]
    )
    assert text == "".join(turn.completion.text for turn in episode.turns)


@pytest.mark.parametrize("temperature", [float("nan"), float("inf"), -0.5])
def test_sampling_params_refuse_non_finite_or_negative_temperature(temperature):
    from passkt.agents.policy import SamplingParams

    with pytest.raises(ValueError, match="temperature must be a finite number >= 0"):
        SamplingParams(temperature=temperature)


class _Broken:
    """An agent whose code fails in each way a user's can."""

    def __init__(self, how):
        self.how = how

    def generate(self, conversations, params):
        from passkt.agents.policy import Completion

        if self.how == "raises":
            raise ZeroDivisionError("division by zero in the agent")
        if self.how == "too few":
            return [Completion("<answer>x</answer>")][: len(conversations) - 1]
        if self.how == "strings":
            return ["<answer>x</answer>"] * len(conversations)
        return None


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("raises", "_Broken.generate raised ZeroDivisionError: division by zero in the agent"),
        ("too few", "_Broken.generate returned 0 for 1 conversations"),
        ("strings", "_Broken.generate returned a str, not a passkt.agents.policy.Completion"),
        ("none", "_Broken.generate returned <class 'NoneType'> for 1 conversations"),
    ],
)
def test_an_agent_whose_generate_fails_is_a_policy_error_naming_it(how, message):
    from passkt.envs.errors import PolicyError

    with pytest.raises(PolicyError) as error:
        rollout(_Broken(how), "BridgeQA-v0", ["syn-bridge-h2-000000"], n=1, budgets=(1,))
    assert message in str(error.value)


def test_the_cli_says_one_line_and_leaves_nothing_when_an_agent_raises(tmp_path):
    import subprocess
    import sys

    (tmp_path / "broken_agent.py").write_text(
        "class Agent:\n"
        "    def generate(self, conversations, params):\n"
        "        raise KeyError('no such thing')\n"
        "def make(context):\n"
        "    return Agent()\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "passkt", "eval", "--policy", "py:broken_agent:make", "--limit",
         "1", "--n", "1", "--no-progress", "--out", "run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    *announced, line = done.stderr.strip().splitlines()
    assert announced == ["passkt: run directory run"]  # the run had started
    assert line == "passkt: error: Agent.generate raised KeyError: 'no such thing'"
    assert not (tmp_path / "run").exists()  # no chunk finished: nothing is left behind
