"""TRL's environment mode: ``environment_factory`` objects, and TRL's own ``GRPOTrainer`` training a
tiny tool-calling model on BridgeQA-v0 with them, whose checkpoint ``passkt eval`` then evaluates
in the tool format."""

from __future__ import annotations

import itertools
import json

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.agents.train.trl_env import EPISODE_OVER, environment_factory
from passkt.envs import tool_calls
from passkt.envs.tool_calls import TOOL_SCHEMAS

TASKS = 30


def tool_schemas(environment) -> list[dict]:
    """The schemas TRL builds from the environment's public methods (as its trainer does)."""
    import inspect

    from transformers.utils import get_json_schema

    methods = inspect.getmembers(type(environment), predicate=inspect.isfunction)
    names = [n for n, _ in methods if n not in ("reset", "get_reward") and not n.startswith("_")]
    return [get_json_schema(getattr(environment, name)) for name in names]


def test_the_methods_are_the_env_tools_as_trl_reads_them():
    pytest.importorskip("transformers")
    schemas = {s["function"]["name"]: s["function"] for s in tool_schemas(
        environment_factory("BridgeQA-v0")()
    )}  # fmt: skip
    for tool in TOOL_SCHEMAS:
        expected = tool["function"]
        got = schemas.pop(expected["name"])
        assert got["description"] == expected["description"]
        assert got["parameters"] == expected["parameters"]
    assert schemas == {}
    math = tool_schemas(environment_factory("Math-v0", max_tool_calls=0)())
    assert [s["function"]["name"] for s in math] == ["act"]


@pytest.mark.parametrize("budget", [0, 1, 3])
def test_an_episode_through_the_methods_is_the_env_episode(budget):
    """The oracle's calls through the methods give the observations and the reward of the env
    itself stepped with the same calls in the tool format, task after task."""
    from passkt.agents.scripted import write_action

    factory = environment_factory("BridgeQA-v0", max_tool_calls=budget, split="test", seed=5)
    environment = factory()
    env = gym.make("BridgeQA-v0", protocol="tools", max_tool_calls=budget)
    solved = 0
    for index in range(TASKS):
        question = environment.reset(prompt=[{"role": "user", "content": ""}])
        task = environment.env.unwrapped.task
        observation, _ = env.reset(options={"task_id": task.task_id})
        assert question == observation
        total = 0.0
        for query in [*task.gold_queries, None]:
            if query is None:
                got, action = environment.answer(answer=task.answer), ("answer", task.answer)
            else:
                got, action = environment.search(query=query), ("search", query)
            observation, reward, terminated, truncated, _ = env.step(write_action(*action, True))
            total += reward
            assert got == observation, (index, query)
            if terminated or truncated:
                break
        assert environment.done and environment.get_reward() == total
        assert environment.search(query="more") == EPISODE_OVER
        solved += environment.correct
    assert 0 < solved <= TASKS if budget >= 2 else solved == 0


def test_malformed_calls_are_invalid_actions_not_exceptions():
    environment = environment_factory("BridgeQA-v0", max_tool_calls=2)()
    environment.reset()
    assert environment.search(q="x").startswith("Invalid action: search takes exactly one")
    last = environment.answer(answer=["a", 1])
    assert last.startswith("Invalid action:") and last.endswith(tool_calls.FINAL_NOTICE)
    assert not environment.done
    assert environment.search(query="x") == tool_calls.TRUNCATED_MESSAGE
    assert environment.done and environment.get_reward() == 0.0


def test_each_reset_draws_the_next_task_and_a_named_task_is_kept():
    factory = environment_factory("BridgeQA-v0", max_tool_calls=1, seed=0)
    first, second = factory(), factory()
    questions = [first.reset(), second.reset(), first.reset()]
    assert len(set(questions)) == 3  # three seeds, three draws (ties are possible but rare)
    task = gym.make("BridgeQA-v0", split="train").unwrapped.tasks[7]
    assert first.reset(task_id=task.task_id) == task.question


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_tool_calls": -1}, "max_tool_calls must be an int >= 0"),
        ({"env_kwargs": {"max_tool_calls": 2}}, "not in env_kwargs"),
        ({"env_kwargs": {"protocol": "tool"}}, "protocol must be"),
    ],
)
def test_bad_arguments_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        environment_factory("BridgeQA-v0", **kwargs)


def warm_up(model, tokenizer, tools, tasks, steps: int = 120) -> None:
    """Teach the random model the call format: for each question, an ``answer`` call with each
    task's answer in turn, so it calls ``answer`` and is right about half the time (GRPO then has
    rewards that differ within a group). Both prompts it will see are taught: TRL's (the question
    as the user turn, the methods' schemas) and ``passkt eval``'s (the env's system prompt)."""
    import torch

    from passkt.envs.tool_calls import render_tool_call, tools_protocol

    rows = []
    for task in tasks:
        trl_prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": task.question}],
            tools=tools,
            add_generation_prompt=True,
            tokenize=False,
        )
        passkt_prompt = tokenizer.apply_chat_template(
            tools_protocol("bridge").first_messages(task.question),
            tools=list(TOOL_SCHEMAS),
            add_generation_prompt=True,
            tokenize=False,
        )
        for prompt, other in itertools.product((trl_prompt, passkt_prompt), tasks):
            prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            call = render_tool_call("answer", {"answer": other.answer}) + "<|im_end|>"
            rows.append((prompt_ids, tokenizer(call, add_special_tokens=False)["input_ids"]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for step in range(steps):
        prompt_ids, target = rows[step % len(rows)]
        labels = torch.tensor([[-100] * len(prompt_ids) + target])
        model(input_ids=torch.tensor([prompt_ids + target]), labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


@pytest.mark.slow
def test_trl_trains_a_tiny_tool_model_in_environment_mode_and_passkt_evaluates_it(
    tmp_path, monkeypatch, capsys
):
    """A tiny model with Qwen2.5's tool-calling template (random weights, taught the call format
    only) trains two GRPO steps through TRL's own trainer on BridgeQA-v0 with the factory: TRL
    parses its calls, the env scores them (``get_reward``), the weights move. ``passkt eval`` then
    evaluates the checkpoint in the tool format and reads its calls as answers."""
    pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer
    from trl.chat_template_utils import qwen2_5_chat_template

    from passkt.agents.tiny import make_tiny_checkpoint
    from passkt.cli import main

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    folder = make_tiny_checkpoint(
        tmp_path / "tiny", seed=0, hidden_size=64, chat_template=qwen2_5_chat_template
    )
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(folder)
    factory = environment_factory("BridgeQA-v0", max_tool_calls=2, split="train")
    probe = factory()
    tasks = list(probe.env.unwrapped.tasks[:2])
    warm_up(model, tokenizer, [probe.answer, probe.search], tasks)
    before = {k: v.clone() for k, v in model.state_dict().items()}

    rows = [{"prompt": [{"role": "user", "content": ""}], "task_id": t.task_id} for t in tasks]
    args = GRPOConfig(
        output_dir=str(tmp_path / "run"), max_steps=2, per_device_train_batch_size=4,
        num_generations=4, max_completion_length=80, max_tool_calling_iterations=2,
        learning_rate=1e-3, use_cpu=True, report_to=[], logging_steps=1, save_strategy="no",
        seed=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model, args=args, processing_class=tokenizer, environment_factory=factory,
        train_dataset=Dataset.from_list(rows * 4),
    )  # fmt: skip
    trainer.train()
    logs = [log for log in trainer.state.log_history if "rewards/BridgeQAv0Environment/mean" in log]
    assert trainer.state.global_step == 2 and len(logs) == 2
    assert any(0 < log["rewards/BridgeQAv0Environment/mean"] < 1 for log in logs), logs
    assert any(not v.equal(before[k]) for k, v in trainer.model.state_dict().items())
    trainer.save_model(str(tmp_path / "final"))

    out = tmp_path / "eval"
    argv = ["eval", "--env", "BridgeQA-v0", "--policy", f"hf:{tmp_path / 'final'}"]
    argv += ["--env-kwargs", "protocol=tools", "--split", "train", "--n", "4", "--budgets", "0,2"]
    argv += ["--task-ids", ",".join(t.task_id for t in tasks), "--max-new-tokens", "64"]
    argv += ["--out", str(out), "--no-progress", "--no-report"]
    assert main(argv) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    episodes = [r for r in records if "task_id" in r]
    assert len(episodes) == 2 * 4 * 2
    # The model's calls are read as answers (before the warm-up every turn was invalid), and
    # an answer is one the model was taught.
    answered = [r for r in episodes if r["actions"][0] == "answer"]
    assert answered and {r["answer"] for r in answered} <= {t.answer for t in tasks}
    assert any(r["correct"] for r in episodes)
