"""VLLMPolicy: request building and output conversion on stand-ins; the engine itself on a GPU."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import pytest

from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.vllm_policy import (
    VLLMPolicy,
    completions_from_vllm,
    request_seeds,
    to_vllm_sampling_kwargs,
)
from passkt.envs.errors import MissingDependencyError

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


# Stand-ins with the attribute shapes of vLLM's output classes
# (vllm-project/vllm: vllm/outputs.py CompletionOutput / RequestOutput, vllm/logprobs.py Logprob).


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True


def output(index, ids, lps, reason, stop_reason=None, text="", others=True):
    """A CompletionOutput whose logprob dicts also hold a better-ranked other token."""
    positions = [
        {tok: Logprob(lp, rank=2), 999: Logprob(-0.01, rank=1)} if others else {tok: Logprob(lp)}
        for tok, lp in zip(ids, lps, strict=True)
    ]
    return CompletionOutput(index, text, ids, sum(lps), positions, reason, stop_reason)


def decode(ids):
    return "".join(chr(96 + i) for i in ids)


def test_sampling_kwargs_follow_vllm_names():
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33, n=4, seed=3)
    kwargs = to_vllm_sampling_kwargs(params)
    assert kwargs["n"] == 4 and kwargs["max_tokens"] == 33 and kwargs["seed"] == 3
    assert (kwargs["temperature"], kwargs["top_p"], kwargs["top_k"]) == (0.7, 0.9, -1)
    assert kwargs["stop"] == ["</search>", "</answer>"]
    assert kwargs["include_stop_str_in_output"] is True
    assert kwargs["logprobs"] == 0
    assert to_vllm_sampling_kwargs(SamplingParams(top_k=20))["top_k"] == 20
    assert to_vllm_sampling_kwargs(params, logprobs=False)["logprobs"] is None


def test_request_seeds_are_distinct_and_reproducible():
    assert request_seeds(None, 3) == [None, None, None]
    seeds = request_seeds(7, 5)
    assert len(set(seeds)) == 5 and seeds == request_seeds(7, 5)
    assert request_seeds(8, 5) != seeds


def test_conversion_is_request_major_in_index_order():
    outs = [
        RequestOutput(
            "0",
            None,
            [1],
            None,
            [output(1, [2], [-0.2], "length"), output(0, [1], [-0.1], "length")],
        ),
        RequestOutput(
            "1",
            None,
            [1],
            None,
            [output(0, [3], [-0.3], "length"), output(1, [4], [-0.4], "length")],
        ),
    ]
    got = completions_from_vllm(outs, decode=decode)
    assert [c.token_ids for c in got] == [(1,), (2,), (3,), (4,)]
    assert [c.logprobs for c in got] == [(-0.1,), (-0.2,), (-0.3,), (-0.4,)]
    assert all(c.finish_reason == "length" for c in got)


def test_stop_string_keeps_its_token_and_eos_is_dropped():
    by_string = output(0, [5, 6, 7], [-1.0, -2.0, -3.0], "stop", "</answer>", text="efg")
    by_eos = output(1, [5, 6, 2], [-1.0, -2.0, -0.5], "stop", None, text="ef<eos>")
    by_token = output(2, [5, 9], [-1.0, -0.7], "stop", 9, text="e")
    got = completions_from_vllm(
        [RequestOutput("0", None, [1], None, [by_string, by_eos, by_token])]
    )
    assert got[0] == Completion("efg", (5, 6, 7), (-1.0, -2.0, -3.0), "stop")
    assert got[1].token_ids == (5, 6) and got[1].logprobs == (-1.0, -2.0)
    assert got[2].token_ids == (5,) and got[2].logprobs == (-1.0,)
    # with decode, the text is exactly the decoding of the kept ids
    decoded = completions_from_vllm([RequestOutput("0", None, [1], None, [by_eos])], decode)
    assert decoded[0].text == decode([5, 6]) == "ef"


def test_missing_logprobs_and_bad_finish_reasons():
    plain = CompletionOutput(0, "ab", [1, 2], None, None, "length")
    assert completions_from_vllm([RequestOutput("0", None, [1], None, [plain])])[0].logprobs == ()
    aborted = CompletionOutput(0, "a", [1], None, None, "abort")
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        completions_from_vllm([RequestOutput("0", None, [1], None, [aborted])])


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here")
def test_constructor_names_the_extra_when_vllm_is_missing():
    with pytest.raises(MissingDependencyError, match=r"pip install 'passkt\[vllm\]'"):
        VLLMPolicy("some/model")


@pytest.mark.requires_vllm
@pytest.mark.skipif(not (HAS_VLLM and _has_cuda()), reason="needs vLLM and a CUDA GPU")
def test_vllm_engine_on_a_tiny_checkpoint(tmp_path):  # pragma: no cover - GPU only
    import torch
    from transformers import AutoModelForCausalLM

    from passkt.agents.hf import chat_prompt_ids
    from passkt.agents.tiny import make_tiny_checkpoint

    # head_dim 64: vLLM's attention kernels do not take the default tiny head_dim of 8
    checkpoint = make_tiny_checkpoint(tmp_path / "tiny", hidden_size=128, num_heads=2)
    policy = VLLMPolicy(str(checkpoint), gpu_memory_utilization=0.2, dtype="float32")
    convs = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a longer one"}]]
    params = SamplingParams(temperature=0.7, max_new_tokens=12, stop=("e",), n=3, seed=0)
    out = policy.generate(convs, params)
    assert len(out) == 6 and out == policy.generate(convs, params)
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    for i, completion in enumerate(out):
        assert completion.text == policy.decode(completion.token_ids)
        prompt = chat_prompt_ids(policy.tokenizer, convs[i // 3])
        full = torch.tensor([prompt + list(completion.token_ids)])
        with torch.no_grad():
            logits = model(input_ids=full).logits[0, len(prompt) - 1 : -1] / 0.7
        expected = torch.log_softmax(logits, -1).gather(
            -1, torch.tensor(completion.token_ids)[:, None]
        )
        assert torch.allclose(torch.tensor(completion.logprobs), expected.squeeze(-1), atol=1e-3)


@pytest.mark.parametrize(
    ("device", "message"),
    [("cuda:1", "CUDA_VISIBLE_DEVICES=1 passkt eval"), ("cpu", "CUDA GPUs only")],
)
def test_a_device_vllm_cannot_be_given_is_refused_before_vllm_loads(device, message):
    from passkt.agents.specs import load_policy
    from passkt.agents.vllm_policy import check_vllm_device

    with pytest.raises(ValueError, match=message):
        load_policy("vllm:some/model", device=device)  # refused before vLLM is imported
    for accepted in (None, "cuda", "auto"):
        check_vllm_device(accepted)
