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
        # main; main (the T = 1 branch sees the same stream, so it takes this turn too); main
        Script(TURN_1, TURN_1, TURN_3),
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
    with pytest.raises(ValueError, match="protocol must be 'passkt', 'search-r1' or 'tools'"):
        gym.make("BridgeQA-v0", protocol="searchr1")


# ---------------------------------------------------------------------- Search-R1's limits


def test_the_mode_carries_search_r1s_limits():
    from passkt.agents.policy import SamplingParams
    from passkt.agents.rollout import protocol_params
    from passkt.envs.search_r1 import PROTOCOL

    assert (PROTOCOL.max_turn_tokens, PROTOCOL.max_observation_tokens) == (500, 500)
    params = protocol_params(SamplingParams(max_new_tokens=2048), PROTOCOL)
    assert params.max_new_tokens == 500 and params.stop == ("</search>", "</answer>")
    assert protocol_params(SamplingParams(max_new_tokens=64), PROTOCOL).max_new_tokens == 64
    # the cut Search-R1 applies to a turn's text: up to the first </search>, else </answer>
    assert PROTOCOL.cut("<search> q </search>\n\n") == "<search> q </search>"
    assert PROTOCOL.cut("<answer> a </answer> <search> q </search>") == (
        "<answer> a </answer> <search> q </search>"
    )
    assert PROTOCOL.cut("no action\n") == "no action\n"


def test_each_observation_is_clipped_to_500_tokens(tokenizer):
    long_text = " ".join(f"w{i}" for i in range(800))  # far more than 500 tokens
    task = Task(
        task_id="r1-long",
        category="bridge",
        question="Where was the founder of Alder Vale born?",
        answer="Port Hollis",
        paragraphs=(Paragraph("Alder Vale", "Alder Vale " + long_text), *TASK.paragraphs[1:]),
        gold_titles=("Alder Vale",),
        gold_queries=("Alder Vale",),
        depth=1,
    )
    search = "<search> Alder Vale </search>"
    result = rollout(
        Script(search, TURN_3),
        "BridgeQA-v0",
        ["r1-long"],
        budgets=(1,),
        env_kwargs={"tasks": [task], "protocol": "search-r1", "top_k": 1},
        tokenizer=tokenizer,
    )
    (episode,) = result.episodes
    prompt, turn = ids(tokenizer, PROMPT), ids(tokenizer, search)
    observation = episode.token_ids[len(prompt) + len(turn) : -len(ids(tokenizer, TURN_3))]
    assert len(observation) == 500 and not any(episode.policy_mask[len(prompt) + len(turn) :][:500])
    stream = episode.messages[1]["content"]
    assert stream == search + tokenizer.decode(observation) + TURN_3
    assert "w799" not in stream and stream.count("<information>") == 1


@pytest.fixture(scope="module")
def merging_tokenizer():
    """A byte-level BPE whose merges join ``>`` with the newlines after it (``>\n\n`` is one
    token), as Qwen2.5's does: trained here on Search-R1 streams."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from passkt.agents.tiny import _QWEN2_SPLIT, END_OF_TEXT, IM_END, SPECIAL_TOKENS

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    corpus = [TURN_1 + OBS_1 + TURN_3, PROMPT] * 50
    trainer = trainers.BpeTrainer(
        vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    backend.train_from_iterator(corpus, trainer=trainer)
    backend.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=END_OF_TEXT,
        chat_template=QWEN_LIKE_TEMPLATE,
    )


class TokenScript:
    """A token policy that samples fixed texts, tokenized as a model would sample them."""

    def __init__(self, tokenizer, *turns: str) -> None:
        self.tokenizer, self.turns = tokenizer, list(turns)

    def generate(self, conversations, params):
        raise AssertionError("a token policy is called with ids")

    def generate_ids(self, prompts, params):
        out = []
        for _ in prompts:
            text = self.turns.pop(0)
            token_ids = tuple(ids(self.tokenizer, text))
            out.append(Completion(text, token_ids, (-0.5,) * len(token_ids)))
        return out


def test_the_token_path_cuts_at_the_first_search_as_search_r1_does(merging_tokenizer):
    tok = merging_tokenizer
    merged = ids(tok, "</search>\n\n")
    assert tok.decode(merged[-1:]).startswith(">") and tok.decode(merged[-1:]).endswith("\n\n")
    # the model sampled ">\n\n" as one token: the turn runs past </search>
    result = rollout(
        TokenScript(tok, TURN_1 + "\n\n", TURN_3),
        "BridgeQA-v0",
        ["r1-0"],
        budgets=(1,),
        env_kwargs={"tasks": [TASK], "protocol": "search-r1", "top_k": 2},
    )
    (episode,) = result.episodes
    text = tok.decode(episode.token_ids)
    assert "</search>\n\n\n\n<information>" not in text
    assert text == PROMPT + TURN_1 + OBS_1 + TURN_3
    # Search-R1's ids: the kept turn re-tokenized, not the sampled ones
    expected = [ids(tok, part) for part in (PROMPT, TURN_1, OBS_1, TURN_3)]
    assert episode.token_ids == [i for part in expected for i in part]
    policy = [len(expected[i]) * [i % 2 == 1] for i in range(len(expected))]
    assert episode.policy_mask == [m for part in policy for m in part]
    assert episode.messages[1]["content"] == TURN_1 + OBS_1 + TURN_3


def test_an_openai_server_is_asked_to_continue_the_stream():
    pytest.importorskip("openai")
    from passkt.agents.openai_policy import OpenAIPolicy
    from passkt.agents.policy import SamplingParams

    policy = OpenAIPolicy("http://127.0.0.1:9/v1", "m")
    stream = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": TURN_1 + OBS_1}]
    kwargs = policy._request_kwargs(stream, SamplingParams(), 1, None)
    assert kwargs["messages"][-1] == stream[-1]
    assert kwargs["extra_body"]["continue_final_message"] is True
    assert kwargs["extra_body"]["add_generation_prompt"] is False
    chat = policy._request_kwargs(stream[:1], SamplingParams(), 1, None)
    assert "continue_final_message" not in chat.get("extra_body", {})
