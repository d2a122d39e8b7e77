"""LeanPolicy: the same completions as HFPolicy (and model.generate), faster.

Checked on the testbed's Llama model and on the tiny Qwen2 checkpoint (a byte-level BPE whose stop
strings span several tokens), greedy and sampled, with n > 1, across calls that reuse the prefix
cache, and after the weights change.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from passkt.agents.hf import HFPolicy
from passkt.agents.lean import LeanPolicy
from passkt.agents.lean_cache import (
    _Pool,
    _PrefixStore,
    _runs,
    decode_buckets,
    prefill_groups,
    shared_prefixes,
)
from passkt.agents.policy import SamplingParams
from passkt.study.testbed.model import build_model

PARAMS = (
    SamplingParams(temperature=0, max_new_tokens=10, seed=0),
    SamplingParams(temperature=1.0, max_new_tokens=10, seed=3),
    SamplingParams(temperature=0.8, top_k=40, top_p=0.9, max_new_tokens=8, n=3, seed=5),
)


@pytest.fixture(scope="module")
def loud_model(testbed_tokenizer):
    """A random nano model with large weights: peaked, varied next-token distributions."""
    model = build_model("nano", testbed_tokenizer, seed=1)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(8)
    return model.eval()


def _prompts(tokenizer, count: int = 9) -> list[list[int]]:
    texts = [
        "<|im_start|>user\nWho is older, Gafa Radu or Dorda Tabel?<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<|im_start|>user\nHow many books does Kelir have now?<|im_end|>\n<|im_start|>assistant\n<",
        "Fanima is a quiet city in Rossava. It was founded in 1898",
    ]
    return [tokenizer(texts[i % 3] + " x" * i)["input_ids"] for i in range(count)]


def _assert_same(expected, got) -> None:
    assert len(expected) == len(got)
    for a, b in zip(expected, got, strict=True):
        assert a.token_ids == b.token_ids and a.text == b.text
        assert a.finish_reason == b.finish_reason
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


@pytest.mark.parametrize("params", PARAMS, ids=["greedy", "sampled", "top-k-p-n3"])
def test_same_completions_as_hfpolicy(loud_model, testbed_tokenizer, params):
    prompts = _prompts(testbed_tokenizer)
    prompts[4] = prompts[3]  # identical prompts are prefilled once
    hf = HFPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=8)
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=8)
    assert lean.fallback_reason is None
    _assert_same(hf.generate_ids(prompts, params), lean.generate_ids(prompts, params))


def test_stop_strings_spanning_several_tokens(tiny_checkpoint):
    """The tiny Qwen2 checkpoint's BPE splits '</search>' into pieces; stops must still match."""
    hf = HFPolicy(tiny_checkpoint, batch_size=6)
    lean = LeanPolicy(tiny_checkpoint, batch_size=6)
    ids = [hf.tokenizer(t)["input_ids"] for t in ("<search>x</sea", "Hello", "Doc 1 (Title: A)")]
    stops = ("</search>", "rch>", "e", "l")  # short stops: many rows stop early
    for params in (
        SamplingParams(temperature=0, max_new_tokens=12, stop=stops),
        SamplingParams(temperature=1.0, max_new_tokens=12, stop=stops, n=2, seed=9),
    ):
        expected = hf.generate_ids(ids, params)
        assert any(c.finish_reason == "stop" for c in expected)
        _assert_same(expected, lean.generate_ids(ids, params))


def test_greedy_matches_model_generate(loud_model, testbed_tokenizer):
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer)
    prompt = _prompts(testbed_tokenizer, 1)[0]
    params = SamplingParams(temperature=0, max_new_tokens=12, stop=())
    got = lean.generate_ids([prompt], params)[0].token_ids
    reference = loud_model.generate(
        torch.tensor([prompt]), do_sample=False, max_new_tokens=12, min_new_tokens=12,
        eos_token_id=None, pad_token_id=0,
    )[0, len(prompt) :].tolist()  # fmt: skip
    assert list(got) == reference


def test_next_turn_reuses_the_cache_and_matches_hfpolicy(loud_model, testbed_tokenizer):
    hf = HFPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=4)
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=4)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=2)
    prompts = _prompts(testbed_tokenizer, 6)
    first = lean.generate_ids(prompts, params)
    observation = testbed_tokenizer("<|im_end|>\n<|im_start|>user\nNo documents.")["input_ids"]
    # every row continues; rows 0 and 1 also get a branch (the same prefix, another suffix)
    extended = [p + list(c.token_ids) + observation for p, c in zip(prompts, first, strict=True)]
    extended += [extended[0][:-2], extended[1] + observation]
    before = lean.reused_tokens
    _assert_same(hf.generate_ids(extended, params), lean.generate_ids(extended, params))
    reused = lean.reused_tokens - before
    assert reused >= sum(len(p) for p in prompts)  # at least every first-turn prompt
    # a weight update invalidates the cache, even one that skips the version counter
    # (``.data`` writes, CPU fused AdamW)
    loud_model.model.norm.weight.data.mul_(1.5)
    try:
        again = lean.generate_ids(extended, params)
        assert lean.reused_tokens - before == reused
        _assert_same(hf.generate_ids(extended, params), again)
    finally:
        loud_model.model.norm.weight.data.div_(1.5)


def test_the_kept_cache_stops_at_its_byte_cap(loud_model, testbed_tokenizer):
    """Chunks are kept until the cap is reached: with room for about one chunk of 2 rows, the
    rows of the first chunk are reused next turn and those of the others prefill again."""
    params = SamplingParams(temperature=0.0, max_new_tokens=4, seed=0)
    prompts = _prompts(testbed_tokenizer, 6)
    reused = {}
    for cap in (2**40, 1):
        lean = LeanPolicy(
            loud_model, tokenizer=testbed_tokenizer, batch_size=2, prefix_cache_bytes=cap
        )
        first = lean.generate_ids(prompts, params)
        extended = [p + list(c.token_ids) + [5] for p, c in zip(prompts, first, strict=True)]
        lean.generate_ids(extended, params)
        reused[cap] = lean.reused_tokens
    assert reused[2**40] >= sum(map(len, prompts))  # every row found its prefix
    assert 0 < reused[1] < reused[2**40]  # only the first chunk's rows did
    assert reused[1] >= len(prompts[0]) + len(prompts[1])


def test_other_architectures_fall_back_to_hfpolicy(testbed_tokenizer):
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=len(testbed_tokenizer), n_embd=16, n_layer=1, n_head=2)
    model = GPT2LMHeadModel(config).eval()
    lean = LeanPolicy(model, tokenizer=testbed_tokenizer)
    hf = HFPolicy(model, tokenizer=testbed_tokenizer)
    assert "GPT2LMHeadModel" in lean.fallback_reason
    prompts = _prompts(testbed_tokenizer, 2)
    params = SamplingParams(max_new_tokens=4, seed=1)
    _assert_same(hf.generate_ids(prompts, params), lean.generate_ids(prompts, params))


def test_prefill_groups_trade_padding_against_passes():
    def groups(new, ends, budget=10**6, group=0.0, key=0.0):
        return prefill_groups(new, ends, budget, token_macs=1.0, key_macs=key, group_macs=group)

    # free passes: no padding at all; longest first
    assert groups([5, 100, 60, 100], [5, 100, 60, 100]) == [[1, 3], [2], [0]]
    # a pass costs as much as 80 padded tokens: short rows ride along with long ones, unless
    # that pads more than a pass costs
    assert groups([5, 100, 60, 100, 1], [0] * 5, group=80) == [[1, 3, 2], [0, 4]]
    # attention reads the longest prompt's keys for every row: ties go longest prompt first,
    # and rows far apart in length are split unless a pass costs more than the waste
    assert groups([10] * 4, [20, 1000, 30, 900], group=2000, key=1) == [[1, 3], [2, 0]]
    assert groups([10] * 4, [20, 1000, 30, 900], group=5, key=1) == [[1], [3], [2], [0]]
    # the budget caps rows x longest; one row may exceed it
    assert groups([10] * 5, [10] * 5, budget=25, group=1) == [[0], [1, 2], [3, 4]]
    assert groups([50], [50], budget=25) == [[0]]


def test_prefix_store_finds_the_longest_true_prefix():
    store = _PrefixStore(version=(0,))
    for ids in ([1, 2, 3], [1, 2, 3, 4, 5], [1, 2, 9, 9], [7]):
        store.add(np.array(ids), cache=None, row=len(ids))
    store.freeze()
    assert store.longest_prefix(np.array([1, 2, 3, 4, 5, 6])).row == 5
    assert store.longest_prefix(np.array([1, 2, 3, 4])).row == 3
    assert store.longest_prefix(np.array([1, 2, 9, 9])).row == 4  # a whole prompt may match
    assert store.longest_prefix(np.array([2, 2, 3])) is None
    store._hashes[:] = store._prefix_hashes(np.array([7]))[-1]  # forced collisions
    store._lengths[:] = 1
    assert store.longest_prefix(np.array([7, 1])).row == 1  # checked id by id
    assert store.longest_prefix(np.array([8, 1])) is None


def test_lean_spec_loads_a_lean_policy_with_hfpolicy_outputs(nano_checkpoint, testbed_tokenizer):
    from passkt.agents.specs import load_policy

    lean = load_policy(f"lean:{nano_checkpoint}", batch_size=4)
    hf = HFPolicy(nano_checkpoint, batch_size=4)
    assert isinstance(lean, LeanPolicy) and type(hf) is HFPolicy
    assert lean.fallback_reason is None  # a testbed model takes the lean loop
    prompts = _prompts(testbed_tokenizer, count=4)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=11)
    _assert_same(hf.generate_ids(prompts, params), lean.generate_ids(prompts, params))


def test_hf_spec_takes_the_lean_loop_on_a_cpu_only(nano_checkpoint):
    from passkt.agents.specs import load_policy

    on_cpu = load_policy(f"hf:{nano_checkpoint}", batch_size=4)
    assert isinstance(on_cpu, LeanPolicy) and on_cpu.fallback_reason is None
    assert on_cpu.spec == f"hf:{nano_checkpoint}"  # manifests still name the spec given
    assert type(load_policy(f"hf:{nano_checkpoint}", device="meta")) is HFPolicy


def test_per_row_seeds_make_a_row_independent_of_its_batch(loud_model, testbed_tokenizer):
    """With ``SamplingParams.seeds`` a prompt's two samples are the same alone, in a batch at
    another position, and in smaller chunks (rows dropped and the cache compacted at other
    steps), and still those of ``HFPolicy`` token for token."""
    prompts = _prompts(testbed_tokenizer, count=5)
    seeds = (3, 14, 15, 92, 65)
    params = SamplingParams(temperature=1.0, max_new_tokens=10, stop=("<",), n=2, seed=1)
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=10)
    assert LeanPolicy.seeds_each_row and lean.fallback_reason is None
    batched = lean.generate_ids(prompts, replace(params, seeds=seeds))
    assert len({len(c.token_ids) for c in batched}) > 1  # rows finished at different steps
    small = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=4, prefix_cache=False)
    for i in (0, 3):
        alone = small.generate_ids([prompts[i]], replace(params, seed=7, seeds=(seeds[i],)))
        _assert_same(batched[2 * i : 2 * i + 2], alone)
    order = [4, 1, 2, 0, 3]
    shuffled = small.generate_ids(
        [prompts[i] for i in order], replace(params, seeds=tuple(seeds[i] for i in order))
    )
    _assert_same([c for i in order for c in batched[2 * i : 2 * i + 2]], shuffled)
    hf = HFPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=4)
    _assert_same(batched, hf.generate_ids(prompts, replace(params, seeds=seeds)))
    assert batched[0].token_ids != batched[1].token_ids  # the seeds do choose the draws


def test_prefix_store_finds_prefixes_whatever_the_lengths_seen_before():
    # the hash weights of a position must not depend on the longest prompt hashed so far: an
    # entry indexed before a longer one, or a query longer than every entry, still matches
    store = _PrefixStore(version=(0,))
    short, long = np.arange(3), np.arange(100, 150)
    store.add(short, cache=None, row=0)
    store.add(long, cache=None, row=1)
    store.freeze()
    assert store.longest_prefix(np.arange(40)).row == 0
    assert store.longest_prefix(np.arange(100, 400)).row == 1


def test_runs_split_an_index_into_repeats_and_ranges():
    assert _runs([0, 0, 0, 1, 1, 1]) == [(0, 3, 0), (3, 6, 1)]
    assert _runs([0, 1, 2, 5, 6, 9]) == [(0, 3, 0), (3, 5, 5), (5, 6, 9)]
    assert _runs([0, 1, 1, 3]) == [(0, 2, 0), (2, 3, 1), (3, 4, 3)]
    assert _runs([4]) == [(0, 1, 4)] and _runs([]) == []


def test_stale_values_in_a_reused_cache_buffer_change_nothing(loud_model, testbed_tokenizer):
    """Cache buffers come back from the pool holding the values of earlier calls (not zeros);
    every slot a row has not written is masked, so outputs are bit for bit those of fresh,
    zeroed buffers. The pool keeps the largest free buffers up to its byte cap."""
    params = SamplingParams(temperature=1.0, max_new_tokens=8, seed=4, n=3)
    prompts = _prompts(testbed_tokenizer, 5)
    fresh = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=8)
    expected = fresh.generate_ids(prompts, params)
    stale = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=8)
    stale.generate_ids(prompts[:1], params)  # builds the net and its pool
    junk = [torch.randn(2**20) * 1e4 for _ in range(3)]  # large but finite
    stale._net.pool.give(junk)
    got = stale.generate_ids(prompts, params)
    for a, b in zip(expected, got, strict=True):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    pool = _Pool(max_bytes=3 * 4 * 100)
    pool.give([torch.zeros(100), torch.zeros(50), torch.zeros(200), torch.zeros(100)])
    assert sorted(b.numel() for b in pool.free) == [100, 200]  # the largest within 1,200 bytes
    assert pool.take(90, torch.float32, "cpu").numel() == 100  # the smallest that fits
    assert pool.take(500, torch.float32, "cpu").numel() >= 500  # none fits: a new one


def test_shared_prefixes_follow_the_first_of_each_sorted_run():
    prompts = [
        [1, 2, 3, 4, 5, 6, 7, 8, 9],  # a main episode
        [9, 9, 9],
        [1, 2, 3, 4, 5, 6, 7, 0, 0, 0],  # its branch: shares 7 tokens
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 1],  # another, sharing the whole main prompt
        [1, 2, 3, 4, 5, 6, 7, 8],  # shares all but its last token, which is left to prefill
    ]
    starts = [2, 0, 2, 2, 2]
    assert shared_prefixes(prompts, starts, least=3) == {0: (2, 7), 3: (2, 7), 4: (2, 7)}
    # the branch's 7 shared tokens are not 3 past its store prefix of 5: the next prompt of the
    # run leads instead, for the 8 tokens it shares with the main episode and its extension
    assert shared_prefixes(prompts, [2, 0, 5, 5, 5], least=3) == {0: (4, 8), 3: (4, 8)}
    assert shared_prefixes(prompts[:1] + prompts[3:4], [0, 0], least=3) == {1: (0, 9)}


def test_prompts_sharing_a_prefix_in_one_call_prefill_it_once(loud_model, testbed_tokenizer):
    """A main episode and its branch (the same observation, then the final notice on the
    branch alone) copy their shared part; completions are still HFPolicy's."""
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=2)
    prompts = _prompts(testbed_tokenizer, 3)
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=6)
    first = lean.generate_ids(prompts, params)
    observation = testbed_tokenizer(
        "<|im_end|>\n<|im_start|>user\n<information>Doc 1 (Title: Fanima) Fanima is a quiet "
        "city in Rossava. It was founded in 1898 by Gafa Radu.</information>"
    )["input_ids"]
    notice = testbed_tokenizer(" You have no tool calls left.")["input_ids"]
    mains = [p + list(c.token_ids) + observation for p, c in zip(prompts, first, strict=True)]
    branches = [m + notice for m in mains]
    extended = [x for pair in zip(mains, branches, strict=True) for x in pair]
    got = lean.generate_ids(extended, params)
    assert lean.shared_tokens >= 3 * (len(observation) - 1)
    hf = HFPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=6)
    _assert_same(hf.generate_ids(extended, params), got)


def test_decode_buckets_split_rows_where_lengths_drop():
    lengths = [600] * 16 + [300] * 16 + [290] * 16
    # reading 600 keys for the 32 short rows costs more than one more range
    assert decode_buckets(lengths, overhead=1000) == [(0, 16), (16, 48)]
    assert decode_buckets(lengths, overhead=10**6) == [(0, 48)]
    assert decode_buckets(lengths, overhead=0) == [(0, 16), (16, 32), (32, 48)]
    assert decode_buckets([5, 4, 3], overhead=0, step=8) == [(0, 3)]  # cuts at multiples of 8
    assert decode_buckets([], overhead=0) == []


def test_decoding_in_buckets_gives_hfpolicys_completions(
    loud_model, testbed_tokenizer, monkeypatch
):
    """With a free extra range, decoding attention splits the rows at every 8 whose lengths
    differ; each range reads its own keys only, and the completions stay HFPolicy's."""
    import passkt.agents.lean as lean_module

    monkeypatch.setattr(lean_module, "BUCKET_BYTES_PER_LAYER", 0)
    split = []
    real = lean_module.decode_buckets
    monkeypatch.setattr(
        lean_module, "decode_buckets", lambda *a, **k: split.append(real(*a, **k)) or split[-1]
    )
    prompts = [p + [20] * (7 * i) for i, p in enumerate(_prompts(testbed_tokenizer, 9))]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, n=2, seed=6)
    lean = LeanPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=18)
    got = lean.generate_ids(prompts, params)
    assert len(split[0]) > 1  # the first step's rows were read in several ranges
    hf = HFPolicy(loud_model, tokenizer=testbed_tokenizer, batch_size=18)
    _assert_same(hf.generate_ids(prompts, params), got)
