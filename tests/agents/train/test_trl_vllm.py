"""The TRL adapter's vLLM route: requests to TRL's vLLM server and reading its answers.

vLLM needs a CUDA GPU; these are the pure functions of the route, checked on answers shaped as
TRL 1.16's ``VLLMClient.generate`` returns them (``trl/generation/vllm_client.py``: ids per
completion, logprobs and their token ids ranked per position).
"""

from __future__ import annotations

import math

import pytest

from passkt.agents.policy import SamplingParams
from passkt.agents.train.trl_vllm import completions_from_server, server_generate_kwargs

EOS = 2
TEXT = {10: "<answer>", 11: "Paris", 12: "</answer>", 13: " and", 14: " more", EOS: "<eos>"}


def decode(ids):
    return "".join(TEXT[i] for i in ids)


def test_server_requests_keep_the_protocol_stop_strings_and_no_shared_seed():
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=64, seed=5)
    kwargs = server_generate_kwargs(params)
    assert kwargs["n"] == 1 and kwargs["max_tokens"] == 64 and kwargs["logprobs"] == 0
    assert kwargs["temperature"] == 0.7 and kwargs["top_p"] == 0.9 and kwargs["top_k"] == -1
    extra = kwargs["generation_kwargs"]
    assert extra["stop"] == ["</search>", "</answer>"] and extra["include_stop_str_in_output"]
    assert not extra["skip_special_tokens"]
    # one seed for the whole request would give the G equal prompts of a task equal samples
    assert "seed" not in extra and "seed" not in kwargs


def test_server_answers_become_completions_with_the_sampled_tokens_logprobs():
    params = SamplingParams(max_new_tokens=3)
    output = {
        "prompt_ids": [[1], [1], [1]],
        "completion_ids": [[10, 11, 12], [10, 11, EOS], [13, 14, 13]],
        # ranked candidates per position; the sampled id is not always the most likely one
        "logprobs": [
            [[-0.1], [-0.2], [-0.3]],
            [[-0.1], [-0.5, -0.9], [None]],
            [[-1.0], [-2.0], [-3.0]],
        ],
        "logprob_token_ids": [[[10], [11], [12]], [[10], [99, 11], [EOS]], [[13], [14], [13]]],
    }
    stop, eos, length = completions_from_server(output, params, [EOS], decode)
    # ended by the stop string: ids kept, finish "stop"
    assert stop.token_ids == (10, 11, 12) and stop.text == "<answer>Paris</answer>"
    assert stop.logprobs == (-0.1, -0.2, -0.3) and stop.finish_reason == "stop"
    # ended by EOS: the EOS id and its logprob are dropped (the passkt contract)
    assert eos.token_ids == (10, 11) and eos.finish_reason == "stop"
    assert eos.logprobs == (-0.1, -0.9)  # the sampled id 11, second in its ranking
    # hit max_tokens without a stop: "length"
    assert length.finish_reason == "length" and length.token_ids == (13, 14, 13)


def test_an_unscored_token_reads_as_nan_and_missing_logprobs_are_an_error():
    params = SamplingParams(max_new_tokens=8)
    output = {"completion_ids": [[13]], "logprobs": [[[None]]], "logprob_token_ids": [[[13]]]}
    (completion,) = completions_from_server(output, params, [EOS], decode)
    assert math.isnan(completion.logprobs[0])
    with pytest.raises(RuntimeError, match="no logprobs"):
        completions_from_server({"completion_ids": [[13]], "logprobs": None}, params, [EOS], decode)
