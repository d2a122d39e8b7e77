"""The registered envs: Gymnasium API (check_env), determinism, vector envs, budget, fork, errors.

Parametrized over the registry (``passkt.envs.ENV_SPECS``) and every task source, as Gymnasium's
own ``tests/envs/test_envs.py`` does.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import pickle
import subprocess
import sys
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)
from real_data import DATA

from passkt.envs import ENV_SPECS, SOURCES, Paragraph, Task, UnknownSourceError, UnknownTaskError
from passkt.envs.protocol import (
    ANSWER_RECEIVED,
    FINAL_NOTICE,
    NO_RESULTS,
    TRUNCATED_MESSAGE,
    invalid_action_message,
    parse_action,
)
from passkt.envs.spaces import ActionText, SharedTextBatch, UnicodeText

SOURCE_CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("Math-v0", "synthetic", {}),
    ("ComparisonQA-v0", "synthetic", {}),
    ("BridgeQA-v0", "synthetic", {}),
    ("BridgeQA-v0", "synthetic", {"hops": 4}),
    ("ComparisonQA-v0", "hotpotqa", {"path": "hotpotqa_sample.json"}),
    ("BridgeQA-v0", "hotpotqa", {"path": "hotpotqa_sample.json"}),
    ("Math-v0", "math500", {"path": "math500.jsonl"}),
    ("Math-v0", "gsm8k", {"path": "gsm8k_sample.jsonl"}),
]


def make_kwargs(source: str, options: dict[str, Any]) -> dict[str, Any]:
    """Env kwargs for a source case, skipping when its loader or data file is missing."""
    module = SOURCES[source].partition(":")[0]
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"task source {source!r}: loader module {module} is not written yet")
    kwargs: dict[str, Any] = {"source": source, **options}
    if "path" in options:
        path = DATA / options["path"]
        kwargs["path"] = str(path)
    return kwargs


def bridge_tasks(n: int = 4) -> list[Task]:
    """Small hand-made two-hop tasks with predictable observations."""
    return [
        Task(
            task_id=f"film-{i}",
            category="bridge",
            question=f"In which city was the director of Film{i} born?",
            answer=f"City{i}",
            paragraphs=(
                Paragraph(f"Film{i}", f"Film{i} is a drama directed by Maker{i}."),
                Paragraph(f"Maker{i}", f"Maker{i} was born in City{i} in 1950."),
                Paragraph("Café Zoë", "Café Zoë in 東京 serves naïve crêpes."),
            ),
            gold_titles=(f"Film{i}", f"Maker{i}"),
            gold_queries=(f"Film{i}", f"Maker{i}"),
            depth=2,
        )
        for i in range(n)
    ]


def bridge_env(**kwargs: Any) -> Any:
    return gym.make("BridgeQA-v0", tasks=bridge_tasks(), **kwargs).unwrapped


# --- registry and Gymnasium API ---


def test_every_registered_env_has_a_source_case() -> None:
    assert {case[0] for case in SOURCE_CASES} == set(ENV_SPECS)
    for env_id in ENV_SPECS:
        assert gym.spec(env_id).disable_env_checker is False


@pytest.mark.parametrize("env_id", ["BridgeQA-v0", "ComparisonQA-v0"])
def test_check_env_at_budget_zero_samples_answers(env_id: str) -> None:
    env = gym.make(env_id, max_tool_calls=0).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env)
    assert env.action_space.sample().startswith("<answer>")
    env.reset(seed=0)
    wider, _ = env.fork(2)  # a fork with calls to spend samples searches again
    assert any(wider.action_space.sample().startswith("<search>") for _ in range(20))


@pytest.mark.parametrize(("env_id", "source", "options"), SOURCE_CASES)
def test_check_env(env_id: str, source: str, options: dict[str, Any]) -> None:
    env = gym.make(env_id, **make_kwargs(source, options))
    assert len(env.unwrapped.tasks) > 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env.unwrapped)
    assert [str(w.message) for w in caught] == []
    obs, info = env.reset(seed=0)
    assert obs == env.unwrapped.task.question + (
        "\n\n" + FINAL_NOTICE if env_id == "Math-v0" else ""
    )
    assert info["category"] == env.unwrapped.category == env.unwrapped.task.category


@pytest.mark.parametrize("env_id", list(ENV_SPECS))
def test_seeded_determinism(env_id: str) -> None:
    def episode(seed: int) -> list[Any]:
        env = gym.make(env_id)
        env.action_space.seed(seed)
        obs, info = env.reset(seed=seed)
        out: list[Any] = [obs, info]
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            out += [obs, reward, terminated, truncated, info]
            done = terminated or truncated
        return out

    assert episode(3) == episode(3)
    first_observations = {episode(seed)[0] for seed in range(6)}
    assert len(first_observations) > 1


def scripted_action(task: Task, step: int) -> str:
    """Step 1 of 3 is invalid; the others search a gold query (math: answer)."""
    if task.category == "math":
        return f"<answer>{task.answer}</answer>" if step != 1 else "no tag at all"
    if step == 1:
        return "<search>unclosed"
    return f"<search>{task.gold_queries[step // 2 % len(task.gold_queries)]}</search>"


def _vector_reference(env_id: str, seeds: list[int], steps: int) -> tuple[list, list]:
    """Actions and per-step observations of independent single envs (``None`` once ended)."""
    envs = [gym.make(env_id) for _ in seeds]
    observations = [[env.reset(seed=seed)[0] for env, seed in zip(envs, seeds, strict=True)]]
    tasks = [env.unwrapped.task for env in envs]
    actions = [
        tuple(scripted_action(task, (step + i) % 3) for i, task in enumerate(tasks))
        for step in range(steps)
    ]
    done = [False] * len(envs)
    for batch in actions:
        row = []
        for i, (env, action) in enumerate(zip(envs, batch, strict=True)):
            if done[i]:
                row.append(None)
                continue
            obs, _, terminated, truncated, _ = env.step(action)
            done[i] = terminated or truncated
            row.append(obs)
        observations.append(row)
    return actions, observations


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("env_id", list(ENV_SPECS))
def test_make_vec_observations_are_current(env_id: str, mode: str) -> None:
    actions, expected = _vector_reference(env_id, [10, 11, 12], steps=3)
    vec = gym.make_vec(env_id, num_envs=3, vectorization_mode=mode)
    try:
        obs, _ = vec.reset(seed=10)
        assert obs == tuple(expected[0])
        for batch, row in zip(actions, expected[1:], strict=True):
            obs, *_ = vec.step(batch)
            assert isinstance(obs, tuple)
            for got, want in zip(obs, row, strict=True):
                if want is not None:
                    assert got == want
        for i in range(3):  # each env's text changes at every step: a stale buffer would fail
            column = [row[i] for row in expected if row[i] is not None]
            assert all(a != b for a, b in itertools.pairwise(column))
    finally:
        vec.close()


def test_import_and_make_in_a_fresh_interpreter() -> None:
    code = (
        "import sys, gymnasium as gym\n"
        "env = gym.make('passkt.envs:BridgeQA-v0')\n"
        "obs, info = env.reset(seed=0)\n"
        "assert isinstance(obs, str) and info['category'] == 'bridge', info\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('ok')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


# --- budget semantics ---


def test_episode_with_budget_two() -> None:
    env = bridge_env(max_tool_calls=2)
    obs, info = env.reset(options={"task_id": "film-1"})
    assert obs == "In which city was the director of Film1 born?"
    assert info == {
        "task_id": "film-1",
        "category": "bridge",
        "tool_calls": 0,
        "turns": 0,
        "budget": 2,
        "depth": 2,
        "action": None,
        "answer": None,
        "correct": False,
        "f1": 0.0,
        "score_note": None,
    }
    obs, reward, terminated, truncated, info = env.step("<search>Film1</search>")
    assert obs.startswith("<information>Doc 1 (Title: Film1) Film1 is a drama directed by Maker1.")
    assert obs.endswith("</information>")
    assert (reward, terminated, truncated, info["tool_calls"], info["action"]) == (
        0.0,
        False,
        False,
        1,
        "search",
    )
    obs, reward, terminated, truncated, info = env.step("I think Maker1.")
    assert (
        obs == invalid_action_message("no <search> or <answer> tag found") + "\n\n" + FINAL_NOTICE
    )
    assert (terminated, truncated, info["tool_calls"], info["action"]) == (
        False,
        False,
        2,
        "invalid",
    )
    obs, reward, terminated, truncated, info = env.step("<answer>city1</answer>")
    assert (obs, reward, terminated, truncated) == (ANSWER_RECEIVED, 1.0, True, False)
    assert (info["answer"], info["correct"], info["f1"], info["turns"]) == ("city1", True, 1.0, 3)
    with pytest.raises(gym.error.ResetNeeded, match="call reset"):
        env.step("<answer>x</answer>")


def test_no_answer_after_the_final_notice_truncates() -> None:
    env = bridge_env(max_tool_calls=1)
    env.reset(seed=0)
    obs, *_ = env.step("<search></search>")
    assert obs == NO_RESULTS + "\n\n" + FINAL_NOTICE
    obs, reward, terminated, truncated, info = env.step("<search>Film1</search>")
    assert (obs, reward, terminated, truncated) == (TRUNCATED_MESSAGE, 0.0, False, True)
    assert (info["tool_calls"], info["turns"], info["answer"], info["correct"]) == (
        1,
        2,
        None,
        False,
    )


def test_budget_zero_shows_the_notice_at_reset() -> None:
    env = bridge_env(max_tool_calls=0)
    obs, _ = env.reset(seed=1)
    assert obs == env.task.question + "\n\n" + FINAL_NOTICE
    _, reward, terminated, truncated, info = env.step("<answer>nobody</answer>")
    assert (reward, terminated, truncated, info["correct"], info["f1"]) == (
        0.0,
        True,
        False,
        False,
        0.0,
    )


def test_reveal_budget_states_calls_left() -> None:
    env = bridge_env(max_tool_calls=2, reveal_budget=True)
    obs, _ = env.reset(options={"task_id": "film-0"})
    assert obs == env.task.question + "\n\nYou have 2 tool calls left."
    obs, *_ = env.step("<search>zeppelin</search>")
    assert obs == NO_RESULTS + "\n\nYou have 1 tool call left."
    obs, *_ = env.step("<search>zeppelin</search>")
    assert obs == NO_RESULTS + "\n\n" + FINAL_NOTICE


def test_math_has_no_tools() -> None:
    tasks = [Task("m1", "math", "What is 6 times 7?", "42", answer_type="math")]
    env = gym.make("Math-v0", tasks=tasks).unwrapped
    assert env.action_space.sample().startswith("<answer>")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("<search>6 times 7</search>")
    assert (obs, reward, terminated, truncated, info["action"]) == (
        TRUNCATED_MESSAGE,
        0.0,
        False,
        True,
        "invalid",
    )
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("6*7 = 42 <answer>42</answer>")
    assert (reward, terminated, info["correct"]) == (1.0, True, True)
    with pytest.raises(ValueError, match="has no tools, so max_tool_calls must be 0"):
        gym.make("Math-v0", tasks=tasks, max_tool_calls=1)


def test_global_corpus_reaches_other_tasks_paragraphs() -> None:
    for corpus, found in (("task", False), ("global", True)):
        for retriever in ("rank_bm25", "bm25s"):
            env = bridge_env(corpus=corpus, retriever=retriever)
            env.reset(options={"task_id": "film-0"})
            obs, *_ = env.step("<search>Maker3</search>")
            assert ("(Title: Maker3)" in obs) is found
            assert obs.count("(Title: Café Zoë)") <= 1  # shared paragraph is deduplicated


def test_render_ansi() -> None:
    env = bridge_env(render_mode="ansi")
    assert "call reset()" in env.render()
    env.reset(options={"task_id": "film-2"})
    env.step("<search>Film2</search>")
    text = env.render()
    assert text.startswith("BridgeQAEnv task film-2 | tool calls 1/5 | turns 1\n")
    assert "--- action (search) ---\n<search>Film2</search>" in text
    assert "(Title: Film2)" in text


# --- fork: prefix sharing ---

SCRIPT = [
    "<search>Film1</search>",
    "hmm",
    "<search>Maker1</search>",
    "<search></search>",
    "<answer",
]


@pytest.mark.parametrize("reveal_budget", [False, True])
@pytest.mark.parametrize("final", ["<answer>City1</answer>", "<answer>City2</answer>", "no answer"])
def test_fork_equals_a_fresh_episode_with_that_budget(reveal_budget: bool, final: str) -> None:
    long_run = bridge_env(max_tool_calls=len(SCRIPT), reveal_budget=reveal_budget)
    long_run.reset(options={"task_id": "film-1"})
    for t in range(len(SCRIPT) + 1):
        fork, fork_obs = long_run.fork(t)
        fresh = bridge_env(max_tool_calls=t, reveal_budget=reveal_budget)
        obs, _ = fresh.reset(options={"task_id": "film-1"})
        for action in SCRIPT[:t]:
            obs, *_ = fresh.step(action)
        assert fork_obs == obs
        assert obs.endswith(FINAL_NOTICE)
        assert fork.step(final) == fresh.step(final)
        if t < len(SCRIPT):
            long_obs, *_ = long_run.step(SCRIPT[t])
            assert not long_obs.endswith(FINAL_NOTICE) or t + 1 == len(SCRIPT)


def test_fork_is_independent_and_checked() -> None:
    env = bridge_env(max_tool_calls=3)
    with pytest.raises(ValueError, match="needs an episode in progress"):
        env.fork(1)
    env.reset(options={"task_id": "film-0"})
    env.step("<search>Film0</search>")
    env.step("<search>Maker0</search>")
    with pytest.raises(ValueError, match="already made 2 tool calls"):
        env.fork(1)
    fork, obs = env.fork(10)
    assert not obs.endswith(FINAL_NOTICE) and fork.max_tool_calls == 10
    assert fork.spec.kwargs["max_tool_calls"] == 10 and env.spec.kwargs["max_tool_calls"] == 3
    assert fork.tasks is env.tasks and fork._retrievers is env._retrievers  # shared, not copied
    fork.step("<search>City0</search>")
    assert fork._episode.tool_calls == 3 and env._episode.tool_calls == 2
    obs, *_ = env.step("<search>x</search>")
    assert obs.endswith(FINAL_NOTICE)
    env.step("<answer>City0</answer>")
    with pytest.raises(ValueError, match="needs an episode in progress"):
        env.fork(3)


def test_a_fork_draws_tasks_as_its_parent_would_without_touching_it() -> None:
    env = bridge_env(max_tool_calls=3)
    env.reset(seed=7)
    twin = bridge_env(max_tool_calls=3)
    twin.reset(seed=7)
    fork, _ = env.fork(2)
    grandchild, _ = fork.fork(3)  # forked before the fork used its RNG
    drawn = [fork.reset()[1]["task_id"] for _ in range(5)]
    expected = [twin.reset()[1]["task_id"] for _ in range(5)]
    assert drawn == expected and len(set(drawn)) > 1
    assert [grandchild.reset()[1]["task_id"] for _ in range(5)] == expected
    assert [env.reset()[1]["task_id"] for _ in range(5)] == expected  # the parent did not move


# --- argument checks ---


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"source": "synthetc"}, UnknownSourceError, "Did you mean 'synthetic'"),
        ({"max_tool_calls": -1}, ValueError, "max_tool_calls must be an int >= 0"),
        ({"max_tool_calls": True}, ValueError, "max_tool_calls must be an int >= 0"),
        ({"top_k": 0}, ValueError, "top_k must be an int >= 1"),
        ({"corpus": "wiki"}, ValueError, "corpus must be 'task'"),
        ({"retriever": "bm25"}, ValueError, "Did you mean 'bm25s'"),
        ({"reveal_budget": "yes"}, ValueError, "reveal_budget must be True or False"),
        ({"split": "dev"}, ValueError, "split must be 'train' or 'test'"),
        ({"hops": 7}, ValueError, "hops must be one of"),
        ({"source_options": {"colour": 1}}, ValueError, "rejected the options"),
        ({"tasks": bridge_tasks(), "path": "x.json"}, ValueError, "either tasks= .* not both"),
        ({"tasks": []}, ValueError, "gave no tasks"),
        ({"tasks": bridge_tasks() * 2}, ValueError, "occurs twice"),
        ({"tasks": [Task("m", "math", "1+1", "2")]}, ValueError, "has category 'math'"),
    ],
)
def test_bad_arguments_say_how_to_fix(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        gym.make("BridgeQA-v0", **kwargs)


def test_unsupported_render_mode() -> None:
    with (
        pytest.warns(UserWarning, match="not in the possible render_modes"),
        pytest.raises(ValueError, match="render_mode must be None or one of \\['ansi'\\]"),
    ):
        gym.make("BridgeQA-v0", render_mode="human")


def test_misspelled_argument_is_not_swallowed() -> None:
    with pytest.raises(TypeError, match="max_tool_call"):
        gym.make("BridgeQA-v0", max_tool_call=3)
    with pytest.raises(TypeError, match="hops"):
        gym.make("ComparisonQA-v0", hops=2)


def test_reset_checks_options() -> None:
    env = bridge_env()
    with pytest.raises(UnknownTaskError, match="Did you mean 'film-1'"):
        env.reset(options={"task_id": "flim-1"})
    with pytest.raises(ValueError, match="takes only 'task_id'"):
        env.reset(options={"task": "film-1"})
    assert env.reset(options={"task_id": "film-3"})[1]["task_id"] == "film-3"


# --- spaces ---


def test_unicode_text_space() -> None:
    space = UnicodeText(20, seed=0)
    assert "Zoë 東京 😀 \x00\ud800" in space
    assert "x" * 21 not in space and 5 not in space
    samples = [space.sample() for _ in range(50)]
    assert all(s in space for s in samples)
    assert any(ord(c) > 127 for s in samples for c in s)
    first, second = UnicodeText(20, seed=1), UnicodeText(20, seed=1)
    assert [first.sample() for _ in range(3)] == [second.sample() for _ in range(3)]
    assert len(space.sample(mask=7)) == 7
    with pytest.raises(ValueError, match="takes a length in"):
        space.sample(mask=21)
    assert pickle.loads(pickle.dumps(space)) == space == copy.deepcopy(space)
    assert ActionText(50, tags=("answer",)) != ActionText(50)
    for tags in (("search", "answer"), ("answer",)):
        action_space = ActionText(100, tags=tags, seed=0)
        kinds = {parse_action(action_space.sample()).kind for _ in range(40)}
        assert kinds == set(tags)


def test_unicode_text_shared_memory_round_trip() -> None:
    space = UnicodeText(16)
    memory = create_shared_memory(space, n=3)
    view = read_from_shared_memory(space, memory, n=3)
    assert isinstance(view, SharedTextBatch)
    values = ["Zoë 東京 😀", "", "\ud800 lone surrogate"[:16]]
    for i, value in enumerate(values):
        write_to_shared_memory(space, i, value, memory)
    assert tuple(view) == tuple(values)
    snapshot = copy.deepcopy(view)
    write_to_shared_memory(space, 0, "changed", memory)
    assert view[0] == "changed" and snapshot == tuple(values)  # live view, frozen snapshot
    with pytest.raises(ValueError, match="does not fit"):
        write_to_shared_memory(space, 1, "y" * 17, memory)
    assert np.frombuffer(memory.get_obj(), dtype=np.int32).size == 3 * 17


@pytest.mark.parametrize("options", ["task_id", ["task_id"], 3])
def test_reset_options_that_are_not_a_dict_are_a_clear_error(options: Any) -> None:
    with pytest.raises(ValueError, match=r"reset\(options=...\) must be a dict such as"):
        bridge_env().reset(options=options)
