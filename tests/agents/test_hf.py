"""HFPolicy on the tiny checkpoint: batching, padding, stopping, seeds and exact logprobs."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from passkt.agents.hf import (  # noqa: E402
    HFPolicy,
    completed_stop,
    filter_logits,
    truncate_at_stop,
)
from passkt.agents.policy import SamplingParams, TokenPolicy  # noqa: E402

NO_STOP = SamplingParams(temperature=0.0, max_new_tokens=12, stop=())


def fresh_logprobs(policy: HFPolicy, prompt: list[int], ids: tuple[int, ...], temperature: float):
    """log_softmax(logits / temperature) at the completion's positions, one unpadded forward."""
    full = torch.tensor([prompt + list(ids)])
    with torch.no_grad():
        logits = policy.model(input_ids=full).logits[0].float()  # (L, V)
    scores = logits[len(prompt) - 1 : -1] / (temperature or 1.0)  # (len(ids), V)
    return torch.log_softmax(scores, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


# --------------------------------------------------------------------------- pure helpers


def test_filter_logits_top_p_and_top_k_by_hand():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    logits = probs.log()
    # top_p = 0.7: 0.5 < 0.7 so the second token is still needed; after it the mass is 0.8.
    kept = torch.softmax(filter_logits(logits, top_k=0, top_p=0.7), dim=-1)
    assert torch.allclose(kept, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # top_p = 0.5: the first token alone reaches the mass.
    kept = torch.softmax(filter_logits(logits, top_k=0, top_p=0.5), dim=-1)
    assert torch.allclose(kept, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    kept = torch.softmax(filter_logits(logits, top_k=3, top_p=1.0), dim=-1)
    assert torch.allclose(kept, torch.tensor([[0.5, 0.3, 0.15, 0.0]]) / 0.95)
    assert torch.equal(filter_logits(logits, top_k=0, top_p=1.0), logits)


def test_completed_stop_and_truncate_on_a_character_decoder():
    def decode(ids):
        return "".join(map(chr, ids))

    ids = [ord(c) for c in "go <search>q</search> extra"]
    end, stop = truncate_at_stop(decode, ids, ("</search>", "</answer>"))
    assert (decode(ids[:end]), stop) == ("go <search>q</search>", "</search>")
    assert truncate_at_stop(decode, ids, ("</answer>",)) == (len(ids), None)
    assert completed_stop(decode, ids[:end], ("</search>",)) == "</search>"
    assert completed_stop(decode, ids[: end - 1], ("</search>",)) is None


@pytest.mark.parametrize(
    "text, stop",
    [
        ("I think <answer>Port Hollis</answer>.\n trailing", "</answer>"),
        ("日本語のテキスト 終わり。 more", "終わり"),
        ("emoji 🌍🌍 stop🌍here", "stop🌍"),
    ],
)
def test_truncate_at_stop_with_the_byte_level_tokenizer(tiny_policy, text, stop):
    ids = tiny_policy.tokenizer(text, add_special_tokens=False)["input_ids"]
    end, matched = truncate_at_stop(tiny_policy.decode, ids, ("</search>", stop))
    assert matched == stop
    assert stop in tiny_policy.decode(ids[:end])
    assert stop not in tiny_policy.decode(ids[: end - 1])


# --------------------------------------------------------------------------- the policy


def test_is_a_token_policy_with_spec(tiny_policy, tiny_checkpoint):
    assert isinstance(tiny_policy, TokenPolicy)
    assert tiny_policy.spec == f"hf:{tiny_checkpoint}"
    assert tiny_policy.model.config.model_type == "qwen2"


def test_greedy_batch_with_left_padding_equals_one_at_a_time(tiny_policy, conversations):
    batched = tiny_policy.generate(conversations, NO_STOP)
    single = [tiny_policy.generate([c], NO_STOP)[0] for c in conversations]
    assert len({len(tiny_policy.encode_chat(c)) for c in conversations}) == 3  # really padded
    for b, s in zip(batched, single, strict=True):
        assert b.token_ids == s.token_ids
        assert b.text == s.text
        assert max(abs(x - y) for x, y in zip(b.logprobs, s.logprobs, strict=True)) < 1e-4


def test_greedy_matches_model_generate_token_for_token(tiny_policy, conversations):
    prompts = [tiny_policy.encode_chat(c) for c in conversations]
    ours = tiny_policy.generate_ids(prompts, NO_STOP)
    width = max(map(len, prompts))
    pad = tiny_policy.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    eos = sorted(tiny_policy.eos_token_ids)
    with torch.no_grad():
        out = tiny_policy.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=NO_STOP.max_new_tokens,
            eos_token_id=eos,
            pad_token_id=pad,
        )
    for completion, row in zip(ours, out[:, width:].tolist(), strict=True):
        ids = list(completion.token_ids)
        assert row[: len(ids)] == ids
        if completion.finish_reason == "stop":  # ended by EOS: generate emitted it next
            assert row[len(ids)] in tiny_policy.eos_token_ids


def test_reserved_cache_writes_in_place_and_equals_the_dynamic_cache(tiny_policy, conversations):
    """The decoding cache allocates once per turn (no concatenation per token) and gives the
    logits a plain ``DynamicCache`` gives, through prefill, repeats, dropped rows and steps."""
    from transformers import DynamicCache

    from passkt.agents.hf import _reserved_layer_type

    prompts = [tiny_policy.encode_chat(c) for c in conversations]
    room = 6
    ours = tiny_policy._new_cache(room)
    layers = ours.layers
    assert layers and all(type(layer) is _reserved_layer_type() for layer in layers)
    plain = DynamicCache(config=tiny_policy.model.config)
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        a = tiny_policy._forward(ids, mask, positions, ours)
        b = tiny_policy._forward(ids, mask, positions, plain)
        assert torch.equal(a, b)
        for cache in (ours, plain):
            cache.batch_repeat_interleave(2)
            cache.batch_select_indices(torch.tensor([0, 2, 3, 5]))
        mask = mask.repeat_interleave(2, dim=0)[[0, 2, 3, 5]]
        next_pos = positions.repeat_interleave(2, dim=0)[[0, 2, 3, 5], -1] + 1
        buffers = [layer._keys.data_ptr() for layer in layers]
        tokens = a.repeat_interleave(2, dim=0)[[0, 2, 3, 5]].argmax(-1)
        for _ in range(room):
            mask = torch.cat([mask, mask.new_ones((4, 1))], dim=-1)
            a = tiny_policy._forward(tokens[:, None], mask, next_pos[:, None], ours)
            b = tiny_policy._forward(tokens[:, None], mask, next_pos[:, None], plain)
            assert torch.equal(a, b)
            tokens, next_pos = a.argmax(-1), next_pos + 1
    assert [layer._keys.data_ptr() for layer in layers] == buffers  # written in place
    assert ours.get_seq_length() == plain.get_seq_length() == width + room


def test_greedy_logprobs_are_under_the_unscaled_distribution(tiny_policy, conversations):
    prompt = tiny_policy.encode_chat(conversations[1])
    completion = tiny_policy.generate_ids([prompt], NO_STOP)[0]
    expected = fresh_logprobs(tiny_policy, prompt, completion.token_ids, 0.0)
    assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-4)


def test_sampled_logprobs_match_a_fresh_forward_pass(tiny_policy, conversations):
    params = SamplingParams(temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=10, stop=(), n=2)
    prompts = [tiny_policy.encode_chat(c) for c in conversations]
    completions = tiny_policy.generate_ids(
        prompts,
        params,
    )
    assert len(completions) == 6
    for i, completion in enumerate(completions):
        prompt = prompts[i // params.n]
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        expected = fresh_logprobs(tiny_policy, prompt, completion.token_ids, 0.7)
        assert torch.allclose(torch.tensor(completion.logprobs), expected, atol=1e-4)


def test_top_k_samples_stay_in_the_top_k_and_logprobs_renormalize(tiny_policy, conversations):
    params = SamplingParams(temperature=1.0, top_k=3, max_new_tokens=6, stop=(), seed=1, n=4)
    prompt = tiny_policy.encode_chat(conversations[0])
    for completion in tiny_policy.generate_ids([prompt], params):
        full = torch.tensor([prompt + list(completion.token_ids)])
        with torch.no_grad():
            logits = tiny_policy.model(input_ids=full).logits[0, len(prompt) - 1 : -1]
        for pos, (token, logprob) in enumerate(
            zip(completion.token_ids, completion.logprobs, strict=True)
        ):
            top = torch.topk(logits[pos], 3)
            assert token in top.indices.tolist()
            expected = torch.log_softmax(top.values, -1)[top.indices.tolist().index(token)]
            assert math.isclose(logprob, expected.item(), abs_tol=1e-4)


def test_seed_reproduces_and_leaves_global_rng_alone(tiny_policy, conversations):
    params = SamplingParams(max_new_tokens=8, stop=(), seed=123, n=2)
    state = torch.get_rng_state()
    first = tiny_policy.generate(conversations, params)
    assert torch.equal(torch.get_rng_state(), state)
    assert tiny_policy.generate(conversations, params) == first
    other = tiny_policy.generate(
        conversations, SamplingParams(max_new_tokens=8, stop=(), seed=7, n=2)
    )
    assert [c.token_ids for c in other] != [c.token_ids for c in first]
    # the n samples of one conversation differ from each other
    assert first[0].token_ids != first[1].token_ids


def test_n_results_are_conversation_major(tiny_policy, conversations):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6, stop=(), n=3)
    out = tiny_policy.generate(conversations[:2], greedy)
    assert len(out) == 6
    assert out[0] == out[1] == out[2] != out[3]
    assert out[3] == out[4] == out[5]
    assert out[0].token_ids == tiny_policy.generate(conversations[:1], NO_STOP)[0].token_ids[:6]


def test_length_finish_reason_when_max_new_tokens_is_hit(tiny_policy, conversations):
    out = tiny_policy.generate(conversations, SamplingParams(max_new_tokens=4, stop=(), seed=0))
    assert [c.finish_reason for c in out] == ["length"] * 3
    assert all(len(c.token_ids) == len(c.logprobs) == 4 for c in out)


def test_stop_strings_end_the_turn_and_are_kept(tiny_policy, conversations):
    stops = ("e", "a")  # single common characters: the random model emits them often
    params = SamplingParams(temperature=1.0, max_new_tokens=40, stop=stops, seed=3, n=4)
    out = tiny_policy.generate(conversations, params)
    stopped = [c for c in out if c.finish_reason == "stop" and any(s in c.text for s in stops)]
    assert len(stopped) >= len(out) // 2
    for c in out:
        assert c.text == tiny_policy.decode(c.token_ids)
        # no stop string before the last token: the ids are cut exactly where one completes
        assert not any(s in tiny_policy.decode(c.token_ids[:-1]) for s in stops)
        if c.finish_reason == "length":
            assert len(c.token_ids) == 40 and not any(s in c.text for s in stops)


def test_eos_ends_the_turn_and_is_not_returned(tiny_checkpoint, conversations):
    policy = HFPolicy(tiny_checkpoint)
    free = policy.generate(conversations[:1], NO_STOP)[0].token_ids
    cut = next(i for i in range(1, len(free)) if free[i] not in free[:i])
    policy.eos_token_ids = frozenset({free[cut]})
    completion = policy.generate(conversations[:1], NO_STOP)[0]
    assert completion.token_ids == free[:cut]
    assert completion.finish_reason == "stop"
    assert completion.text == policy.decode(free[:cut])


def test_wraps_a_loaded_model_and_restores_its_training_mode(tiny_policy, conversations):
    policy = HFPolicy(tiny_policy.model, tiny_policy.tokenizer)
    policy.model.train()
    try:
        out = policy.generate(conversations[:1], NO_STOP)
        assert policy.model.training
    finally:
        policy.model.eval()
    assert out == tiny_policy.generate(conversations[:1], NO_STOP)


def test_generate_ids_equals_generate_on_templated_ids(tiny_policy, conversations):
    params = SamplingParams(max_new_tokens=6, stop=(), seed=5)
    ids = [tiny_policy.encode_chat(c) for c in conversations]
    assert tiny_policy.generate_ids(ids, params) == tiny_policy.generate(conversations, params)
    assert tiny_policy.tokenizer.decode(ids[0]).endswith("<|im_start|>assistant\n")


def test_errors_name_the_problem(tiny_checkpoint, tiny_policy, tmp_path):
    with pytest.raises(ValueError, match="dtype must be one of"):
        HFPolicy(tiny_checkpoint, dtype="fp8")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        HFPolicy(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"no config\.json"):
        HFPolicy(tmp_path)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        tiny_policy.generate_ids([[1, 2], []], NO_STOP)
    with pytest.raises(ValueError, match="device= applies only when HFPolicy loads"):
        HFPolicy(tiny_policy.model, tiny_policy.tokenizer, device="cpu")
    bare = HFPolicy(tiny_policy.model, tiny_policy.tokenizer)
    bare.tokenizer = type(bare.tokenizer).from_pretrained(tiny_checkpoint)
    bare.tokenizer.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        bare.generate([[{"role": "user", "content": "hi"}]], NO_STOP)


def test_per_row_seeds_make_a_row_independent_of_its_batch(tiny_checkpoint, conversations):
    """With ``SamplingParams.seeds`` each (conversation, sample) row draws from its own
    generator: a conversation gets the same completions alone, at another batch position, and
    in chunks of other sizes, while short stops drop rows mid-decode at different steps."""
    assert HFPolicy.seeds_each_row
    wide, narrow = HFPolicy(tiny_checkpoint, batch_size=8), HFPolicy(tiny_checkpoint, batch_size=2)
    params = SamplingParams(temperature=1.0, max_new_tokens=10, stop=("e", "l"), n=2, seed=1)
    batched = wide.generate(conversations, replace(params, seeds=(5, 11, 7)))
    assert len({len(c.token_ids) for c in batched}) > 1  # rows finished at different steps
    for i, seed in enumerate((5, 11, 7)):
        alone = wide.generate([conversations[i]], replace(params, seed=2, seeds=(seed,)))
        _assert_same_rows(alone, batched[2 * i : 2 * i + 2])
    reordered = narrow.generate(conversations[::-1], replace(params, seeds=(7, 11, 5)))
    _assert_same_rows(reordered, batched[4:6] + batched[2:4] + batched[0:2])
    assert batched[0].token_ids != batched[1].token_ids  # the two samples of a row differ
    other = wide.generate([conversations[1]], replace(params, seeds=(12,)))
    assert other != batched[2:4]  # the seed chooses the draws
    with pytest.raises(ValueError, match="2 seeds for 3 prompts"):
        wide.generate(conversations, replace(params, seeds=(1, 2)))


def _assert_same_rows(expected, got) -> None:
    assert [c.token_ids for c in expected] == [c.token_ids for c in got]
    assert [c.text for c in expected] == [c.text for c in got]
    for a, b in zip(expected, got, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_per_row_draws_follow_each_rows_distribution():
    """Each row draws from its own generator by inverting its CDF: the empirical frequencies
    match the probabilities (within 4 standard errors) and masked tokens are never drawn."""
    from passkt.agents.hf import sample_next
    from passkt.agents.row_seeds import row_generators

    probs = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3, 0.0])
    rows = 4000
    logits = torch.log(probs).expand(rows, -1)  # -inf where masked
    generators = row_generators(range(rows), 1, "cpu")
    tokens, logprobs = sample_next(logits, SamplingParams(temperature=1.0), generators)
    counts = torch.bincount(tokens, minlength=6).double() / rows
    assert counts[probs == 0].sum() == 0
    assert torch.all((counts - probs).abs() <= 4 * (probs * (1 - probs) / rows).sqrt())
    assert torch.allclose(logprobs, torch.log(probs)[tokens])
    again, _ = sample_next(logits, SamplingParams(), row_generators(range(rows), 1, "cpu"))
    assert torch.equal(again, tokens)  # the seeds alone decide the draws
    with pytest.raises(ValueError, match="3 generators for 4000 rows"):
        sample_next(logits, SamplingParams(), generators[:3])
    with pytest.raises(ValueError, match="seeds must be >= 0"):
        row_generators([-1], 2, "cpu")
