"""Search-R1 mode: the rendering Search-R1's own code produces, token for token.

The expected strings below were written by hand from reading Search-R1's code
(github.com/PeterGriffinJin/Search-R1): the prompt of ``scripts/data_process/qa_search_*.py``
(question stripped, ``?`` added), ``_passages2string`` in ``search_r1/llm_agent/generation.py``
(``Doc {i}(Title: {first line}) {rest}\\n`` per document, over a corpus whose first line is the
quoted title), and ``execute_predictions`` there (``\\n\\n<information>{docs.strip()}</information>
\\n\\n`` after a search, the invalid-action text, nothing after an answer, a last turn without
search). Search-R1 tokenizes the chat-templated prompt, each turn and each observation separately
and concatenates the ids: so does the expectation.
"""

from __future__ import annotations

import pytest

from passkt.agents.policy import Completion
from passkt.agents.rollout import rollout
from passkt.envs.tasks import Paragraph, Task

QWEN_LIKE_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
"""Qwen2.5-Instruct's layout: its default system message when the conversation has none."""

TASK = Task(
    task_id="r1-0",
    category="bridge",
    question="  Where was the founder of Alder Vale born ",
    answer="Port Hollis",
    paragraphs=(
        Paragraph("Alder Vale", "Alder Vale is a town founded by Mira Oskan in 1871."),
        Paragraph("Mira Oskan", "Mira Oskan was a cartographer born in Port Hollis."),
        Paragraph("Stonemere", "Stonemere is a village with a stone bridge."),
        Paragraph("Quillport", "Quillport is a harbour on the western coast."),
    ),
    gold_titles=("Alder Vale", "Mira Oskan"),
    gold_queries=("Alder Vale", "Mira Oskan"),
    depth=2,
)

PROMPT = (
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n<|im_start|>user\nAnswer the given question. You must conduct reasoning inside "
    "<think> and </think> first every time you get new information. After reasoning, if you find "
    "you lack some knowledge, you can call a search engine by <search> query </search> and it "
    "will return the top searched results between <information> and </information>. You can "
    "search as many times as your want. If you find no further external knowledge needed, you "
    "can directly provide the answer inside <answer> and </answer>, without detailed "
    "illustrations. For example, <answer> Beijing </answer>. Question: Where was the founder of "
    "Alder Vale born?\n<|im_end|>\n<|im_start|>assistant\n"
)
TURN_1 = "<think>I need the founder first.</think>\n<search> Alder Vale cartographer </search>"
OBS_1 = (
    '\n\n<information>Doc 1(Title: "Alder Vale") Alder Vale is a town founded by Mira Oskan in '
    '1871.\nDoc 2(Title: "Mira Oskan") Mira Oskan was a cartographer born in Port Hollis.'
    "</information>\n\n"
)
TURN_2 = "I will answer now."
OBS_2 = (
    "\nMy previous action is invalid. If I want to search, I should put the query between "
    "<search> and </search>. If I want to give the final answer, I should put the answer between "
    "<answer> and </answer>. Let me try again.\n"
)
TURN_3 = "<think>Mira Oskan was born in Port Hollis.</think>\n<answer> Port Hollis </answer>"


class Script:
    """Plays fixed turns, one per call (one episode per rollout)."""

    def __init__(self, *turns: str) -> None:
        self.turns = list(turns)

    def generate(self, conversations, params):
        assert params.stop == ("</search>", "</answer>")
        return [Completion(self.turns.pop(0)) for _ in conversations]


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import PreTrainedTokenizerFast

    from passkt.agents.tiny import END_OF_TEXT, IM_END, _train_tokenizer

    return PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(512),
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=QWEN_LIKE_TEMPLATE,
    )


def run(tokenizer, budget: int, *turns: str):
    result = rollout(
        Script(*turns),
        "BridgeQA-v0",
        ["r1-0"],
        budgets=(budget,),
        env_kwargs={"tasks": [TASK], "protocol": "search-r1", "top_k": 2},
        tokenizer=tokenizer,
    )
    (episode,) = result.episodes
    return episode


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_an_episode_renders_as_search_r1_token_for_token(tokenizer):
    episode = run(tokenizer, 3, TURN_1, TURN_2, TURN_3)

    assert episode.correct and episode.terminated and episode.tool_calls == 2
    expected = [ids(tokenizer, part) for part in (PROMPT, TURN_1, OBS_1, TURN_2, OBS_2, TURN_3)]
    assert episode.token_ids == [i for part in expected for i in part]
    assert tokenizer.decode(episode.token_ids) == PROMPT + TURN_1 + OBS_1 + TURN_2 + OBS_2 + TURN_3
    policy = [len(expected[i]) * [i % 2 == 1] for i in range(len(expected))]
    assert episode.policy_mask == [m for part in policy for m in part]
    # one user turn and one assistant stream, as Search-R1 keeps them
    assert [m["role"] for m in episode.messages] == ["user", "assistant"]
    assert episode.messages[1]["content"] == TURN_1 + OBS_1 + TURN_2 + OBS_2 + TURN_3


def test_the_last_turn_has_no_notice_and_search_is_disabled(tokenizer):
    episode = run(tokenizer, 1, TURN_1, "<search> Mira Oskan </search>")

    # after the T-th search the model writes once more with nothing added; a search then ends it
    assert episode.truncated and not episode.correct and episode.tool_calls == 1
    assert tokenizer.decode(episode.token_ids) == PROMPT + TURN_1 + OBS_1 + (
        "<search> Mira Oskan </search>"
    )


def test_budget_branches_share_the_stream(tokenizer):
    result = rollout(
        Script(TURN_1, TURN_1, TURN_1, TURN_3),  # main; main and the T = 1 branch; main
        "BridgeQA-v0",
        ["r1-0"],
        budgets=(1, 2),
        env_kwargs={"tasks": [TASK], "protocol": "search-r1", "top_k": 2},
        tokenizer=tokenizer,
    )
    branch, main = result.episodes
    # the branch saw exactly the main episode's prefix (no notice), then was cut by its budget
    assert branch.budget == 1 and branch.truncated
    assert main.budget == 2 and main.tool_calls == 2 and main.correct
    assert tokenizer.decode(branch.token_ids) == PROMPT + TURN_1 + OBS_1 + TURN_1
    assert main.token_ids[: len(branch.token_ids)] == branch.token_ids


def test_search_r1_needs_tools_and_a_hidden_budget():
    import gymnasium as gym

    import passkt.envs  # noqa: F401

    with pytest.raises(ValueError, match="needs a search tool and a hidden budget"):
        gym.make("BridgeQA-v0", protocol="search-r1", reveal_budget=True)
    with pytest.raises(ValueError, match="protocol must be 'passkt' or 'search-r1'"):
        gym.make("BridgeQA-v0", protocol="searchr1")
