"""``LeanPolicy``: ``HFPolicy`` with a lean decoding loop for small Llama / Qwen2 models on a CPU.

For a model of a few million parameters, ``HFPolicy``'s time goes almost entirely to three things
that do not depend on the model's size (measured in ``benchmarks/testbed_speed.py``):

1. *Re-prefilling the conversation every turn.* The rollout engine calls ``generate_ids`` with the
   whole episode so far (system prompt, question, every turn and search result): a T = 5 episode
   re-reads about 800 tokens at its last turn. ``LeanPolicy`` keeps the KV cache of every row of
   its previous call and, when a new prompt extends one of those rows (the next turn of the same
   episode, or a budget branch forked from it), prefills only the new tokens. Identical prompts in
   one call (the n samples of a task at the first turn) are prefilled once, and a prompt that
   shares a longer prefix with another prompt of the call than with the previous call (a budget
   branch and its main episode read the same search results; only the branch's ends with the
   final notice) copies that part from the other's row once it is prefilled.
2. *A growing cache and a dense padding mask.* ``DynamicCache`` concatenates every step and
   attention builds a ``(B, 1, L, L)`` float mask; here each chunk gets one preallocated cache, rows
   keep their own positions (no left padding) and the mask is a boolean ``key <= position``.
   Cache buffers are pooled across calls, and rows are laid out for prefill and decoding by
   ``passkt.agents.lean_cache``.
3. *Python per row and step.* Stop strings are matched on decoded text only for rows whose new
   token contains the last character of a stop string (the others cannot have completed one);
   finished rows stay in the batch until at most half are left, then the cache is compacted once.

Everything that decides the output is ``HFPolicy``'s own: the chunking of rows, the order in
which rows are sampled and dropped, ``sample_next`` with the same generator (or each row's own,
given ``SamplingParams.seeds``), and the stop rules. So for the same seed the completions are
those of ``HFPolicy`` token for token (up to float rounding in near-ties), and the logprobs agree
to about 1e-6 (``tests/agents/test_lean.py``).
Other models (peft wrappers, other architectures, RoPE scaling) fall back to ``HFPolicy``'s loop.

The prefix cache (and the fused weights) are rebuilt whenever a weight changes (checked at every
call by parameter identity, version counters and a checksum of the values), so a trainer may
update the model between calls.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passkt.agents.hf import HFPolicy, _Row, completed_stop, sample_next
from passkt.agents.lean_cache import (
    BUCKET_BYTES_PER_LAYER,
    _Cache,
    _Pool,
    _PrefixStore,
    _runs,
    decode_buckets,
    prefill_groups,
    shared_prefixes,
)
from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.row_seeds import chunk_generators, live_generators

logger = logging.getLogger(__name__)

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen2ForCausalLM")
PREFIX_CACHE_BYTES = 4 * 2**30
"""Default most bytes of KV cache ``LeanPolicy`` keeps between calls (``prefix_cache_bytes``)."""
POOL_BYTES = 2**31
"""Most bytes of free cache buffers kept for reuse (on a micro testbed model and BridgeQA chunks
of 4 tasks x n = 64, 2 GiB gave the speed and the peak memory of 4 GiB, 1 GiB about 4% more CPU;
the pool, with its buffers a quarter larger than asked for, raises peak memory from 2.3 to
3.8 GB there)."""
PREFILL_SCORES = 2**24
"""Most attention scores (rows x heads x new tokens x keys) one prefill forward may hold."""


def lean_supported(model: Any) -> str | None:
    """Why ``model`` cannot use the lean loop, or None if it can."""
    name = type(model).__name__
    if name not in SUPPORTED_ARCHITECTURES:
        return f"{name} is not one of {SUPPORTED_ARCHITECTURES} (or is wrapped, e.g. by peft)"
    config = model.config
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        return f"RoPE type {rope.get('rope_type')!r} is not supported"
    if getattr(config, "use_sliding_window", False) or getattr(config, "hidden_act", "") != "silu":
        return "sliding-window attention or an activation other than SiLU"
    return None


def weights_version(model: Any) -> tuple[Any, ...]:
    """Changes whenever a parameter changes: its identity, its version counter (in-place ops),
    and a checksum of its values (fused optimizers and ``.data`` writes skip the counter)."""
    import torch  # optional: the hf extra (torch, transformers)

    params = list(model.parameters())
    with torch.no_grad():
        # two reductions without temporaries (``abs()`` would copy every weight: 0.2 s a call
        # for SmolLM2-135M, against 0.05 s for these)
        sums = torch.stack([torch.stack((p.sum(), torch.linalg.vector_norm(p))) for p in params])
    ids = tuple(x for p in params for x in (id(p), p.data_ptr(), p._version))
    return (*ids, *sums.double().flatten().tolist())


# --------------------------------------------------------------------------- the forward pass


def _rms(x: Any, weight: Any, eps: float) -> Any:
    import torch  # optional: the hf extra (torch, transformers)

    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def _rotate(x: Any, cos: Any, sin: Any) -> Any:
    import torch  # optional: the hf extra (torch, transformers)

    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _fused(*linears: Any) -> tuple[Any, Any]:
    """One weight (and bias) for several linear layers applied to the same input."""
    import torch  # optional: the hf extra (torch, transformers)

    weight = torch.cat([m.weight for m in linears], dim=0)
    if all(m.bias is None for m in linears):
        return weight, None
    biases = [m.bias if m.bias is not None else weight.new_zeros(m.out_features) for m in linears]
    return weight, torch.cat(biases)


def _attention(q: Any, k: Any, v: Any, mask: Any) -> Any:
    """Grouped-query attention ``(B, H, S, D)`` over ``k, v (B, G, keys, D)``, additive mask.

    One new token per row (decoding) reads the cache once per group with a small matmul, which
    is faster on a CPU than the fused kernel's blocked path; longer inputs use the fused kernel.
    ``mask=None`` means plain causal attention from position 0 (a prefill that reuses nothing):
    the fused kernel then skips the blocks above the diagonal and reads no mask, which made a
    1,500-token SmolLM2 prefill about 1.4x cheaper (``benchmarks/smollm_speed.py``).
    """
    import torch.nn.functional as F  # optional: the hf extra (torch, transformers)

    B, H, S, D = q.shape
    G = k.shape[1]
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if S > 1:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    grouped = q.reshape(B, G, H // G, D)  # heads of a group share their keys and values
    scores = grouped @ k.transpose(-1, -2) * D**-0.5 + mask[:, :, 0, None, :]  # (B, G, H/G, keys)
    return (scores.softmax(dim=-1) @ v).reshape(B, H, 1, D)


@dataclass
class _Layer:
    ln1: Any
    qkv: tuple[Any, Any]
    out: tuple[Any, Any]
    ln2: Any
    gate_up: tuple[Any, Any]
    down: tuple[Any, Any]


class _Net:
    """A model's weights laid out for a lean forward pass over a preallocated KV cache."""

    def __init__(self, model: Any, pool_bytes: int | None = None) -> None:
        config, inner = model.config, model.model
        attention = inner.layers[0].self_attn
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = attention.head_dim
        self.eps = config.rms_norm_eps
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.device, self.dtype = self.embed.device, self.embed.dtype
        self.token_bytes = (
            2 * config.num_hidden_layers * self.kv_heads * self.head_dim * self.embed.element_size()
        )
        """Bytes of KV cache per token of a row."""
        rotary = inner.rotary_emb
        self.inv_freq = rotary.inv_freq.float()
        self.rope_scale = getattr(rotary, "attention_scaling", 1.0)
        self._extend(config.max_position_embeddings)
        self.pool = _Pool(POOL_BYTES if pool_bytes is None else pool_bytes)
        """Free cache buffers (``new_cache`` takes from it)."""
        self.layers = [
            _Layer(
                ln1=layer.input_layernorm.weight,
                qkv=_fused(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj),
                out=(layer.self_attn.o_proj.weight, layer.self_attn.o_proj.bias),
                ln2=layer.post_attention_layernorm.weight,
                gate_up=_fused(layer.mlp.gate_proj, layer.mlp.up_proj),
                down=(layer.mlp.down_proj.weight, layer.mlp.down_proj.bias),
            )
            for layer in inner.layers
        ]
        weights = (
            w for layer in self.layers for w in (layer.qkv, layer.out, layer.gate_up, layer.down)
        )
        self.token_macs = sum(w[0].numel() for w in weights)
        """Multiply-adds of the linear layers per token."""
        self.key_macs = 2 * len(self.layers) * self.heads * self.head_dim
        """Multiply-adds of attention per token and key (scores and values)."""

    def _extend(self, length: int) -> None:
        """RoPE tables (as transformers computes them) and key indices for ``length`` positions."""
        import torch  # optional: the hf extra (torch, transformers)

        positions = torch.arange(length, device=self.device).float()
        angles = positions[:, None] * self.inv_freq[None, :]  # (P, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (P, D)
        self.cos = (angles.cos() * self.rope_scale).to(self.dtype)
        self.sin = (angles.sin() * self.rope_scale).to(self.dtype)
        self.key_index = torch.arange(length, device=self.device)

    def new_cache(self, rows: int, capacity: int) -> _Cache:
        """A cache of ``rows`` x ``capacity`` slots on a buffer from the pool (its slots hold
        finite values, not necessarily zeros: every slot a row has not written is masked)."""
        shape = (2, len(self.layers), rows, self.kv_heads, capacity, self.head_dim)
        flat = self.pool.take(math.prod(shape), self.dtype, self.device)
        return _Cache(flat[: math.prod(shape)].view(shape), flat)

    def select(self, cache: _Cache, index: Sequence[int], upto: int) -> _Cache:
        """A new cache whose row i holds slots ``0..upto`` of ``cache`` row ``index[i]``."""
        new = self.new_cache(len(index), cache.capacity)
        for start, stop, source in _runs(index):  # one copy per run, no temporary
            src = source if stop - start > 1 and index[start] == index[start + 1] else None
            if src is None:
                block = cache.kv[:, :, source : source + stop - start, :, :upto]
            else:
                block = cache.kv[:, :, src : src + 1, :, :upto]  # broadcast to the run
            new.kv[:, :, start:stop, :, :upto] = block
        return new

    def forward(
        self,
        ids: Any,
        positions: Any,
        cache: _Cache,
        first: int = 0,
        buckets: Sequence[tuple[int, int]] = (),
    ) -> Any:
        """Hidden states ``(B, S, d)`` of ``ids`` at ``positions``; their K/V go into ``cache``.

        Batch row b is cache row ``first + b`` (rows of a cache are laid out so that the rows of
        one forward pass are contiguous: their keys and values are read as a view, not gathered).
        It attends to its cache slots ``0..positions[b, s]``: slots before the new tokens must
        hold that row's earlier tokens (a prefill or a reused prefix). ``buckets``: ranges of
        batch rows whose attention reads keys only as far as the range's own longest row
        (default: one range).
        """
        import torch  # optional: the hf extra (torch, transformers)
        import torch.nn.functional as F  # optional: the hf extra (torch, transformers)

        B, S = ids.shape
        H, G, D = self.heads, self.kv_heads, self.head_dim
        keys = int(positions.max()) + 1
        if keys > len(self.key_index):
            self._extend(2 * keys)
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]  # (B, S, 1, D)
        parts = []  # (start, stop, keys, mask) of each range of rows, masks once for all layers
        for start, stop in buckets or [(0, B)]:
            at = positions[start:stop]
            reach = keys if not buckets else int(at.max()) + 1
            mask = None  # rows that all start at position 0 and run S > 1 tokens: plain causal
            if S == 1 or bool(at[:, 0].any()) or reach != S:
                visible = self.key_index[:reach][None, None, None, :] <= at[:, None, :, None]
                mask = torch.zeros(visible.shape, dtype=self.dtype, device=self.device)
                mask.masked_fill_(~visible, float("-inf"))  # (b, 1, S, reach)
            parts.append((first + start, first + stop, reach, mask))
        slots = torch.arange(first, first + B, device=self.device)[:, None]  # (B, 1)
        h = F.embedding(ids, self.embed)  # (B, S, d)
        for layer, k_cache, v_cache in zip(self.layers, cache.k, cache.v, strict=True):
            qkv = F.linear(_rms(h, layer.ln1, self.eps), *layer.qkv)  # (B, S, (H + 2G) D)
            qk = _rotate(qkv[..., : (H + G) * D].view(B, S, H + G, D), cos, sin)
            q = qk[:, :, :H].transpose(1, 2)  # (B, H, S, D)
            k_cache[slots, :, positions] = qk[:, :, H:]  # slots (B, S) <- (B, S, G, D)
            v_cache[slots, :, positions] = qkv[..., (H + G) * D :].view(B, S, G, D)
            attended = torch.cat(
                [  # (b, G, reach, D) views of the cache
                    _attention(
                        q[a - first : b - first], k_cache[a:b, :, :n], v_cache[a:b, :, :n], m
                    )
                    for a, b, n, m in parts
                ]
            )  # (B, H, S, D)
            h = h + F.linear(attended.transpose(1, 2).reshape(B, S, H * D), *layer.out)
            gate, up = F.linear(_rms(h, layer.ln2, self.eps), *layer.gate_up).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, *layer.down)
        return h

    def logits(self, hidden: Any) -> Any:
        """Next-token logits ``(B, V)`` (float32) from final hidden states ``(B, d)``."""
        import torch.nn.functional as F  # optional: the hf extra (torch, transformers)

        return F.linear(_rms(hidden, self.norm, self.eps), self.lm_head).float()


# --------------------------------------------------------------------------- the policy


class LeanPolicy(HFPolicy):
    """``HFPolicy`` with the lean decoding loop (same arguments, same outputs, much faster).

    Example:
        >>> policy = LeanPolicy("runs/testbed/base/model")  # doctest: +SKIP
        >>> rollout(policy, "BridgeQA-v0", ids, n=64, budgets=(0, 1, 2, 3, 5))  # doctest: +SKIP

    Args:
        *args: As for ``HFPolicy``.
        prefix_cache: Reuse the KV cache of the previous call's rows (on by default).
        prefix_cache_bytes: Most bytes of KV cache kept for the next call. Rows are kept chunk
            by chunk until this is reached; the others prefill again. A SmolLM2-135M row holds
            46 KB per token in float32, so 256 episodes of 2,000 tokens would hold 23 GB.
        **kwargs: As for ``HFPolicy``.
    """

    def __init__(
        self,
        *args: Any,
        prefix_cache: bool = True,
        prefix_cache_bytes: int = PREFIX_CACHE_BYTES,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.prefix_cache = prefix_cache
        self.prefix_cache_bytes = prefix_cache_bytes
        self.fallback_reason = lean_supported(self.model)
        if self.fallback_reason is not None:
            logger.info("LeanPolicy uses HFPolicy's loop: %s", self.fallback_reason)
        self._net: _Net | None = None
        self._store: _PrefixStore | None = None
        self._stop_chars: dict[tuple[str, ...], Any] = {}
        self.reused_tokens = 0
        """Prompt tokens taken from the prefix cache instead of being prefilled (a counter)."""
        self.prefilled_tokens = 0
        """Prompt tokens run through the model (a counter)."""
        self.shared_tokens = 0
        """Prompt tokens copied from another prompt of the same call (a counter)."""

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """As ``HFPolicy.generate_ids``; see the module docstring for what is faster."""
        if self.fallback_reason is not None:
            return super().generate_ids(prompts, params)
        torch = self._torch
        generator = self._start(prompts, params)
        version = weights_version(self.model)
        if self._net is None or self._store is None or self._store.version != version:
            self._net = _Net(self.model)
            self._store = _PrefixStore(version)
        store = _PrefixStore(version)
        per_chunk = max(1, self.batch_size // params.n)
        rows: list[_Row] = []
        kept = 0  # bytes of KV cache the store holds
        with torch.inference_mode():
            for start in range(0, len(prompts), per_chunk):
                chunk = [list(p) for p in prompts[start : start + per_chunk]]
                keep = self.prefix_cache and kept < self.prefix_cache_bytes
                own = chunk_generators(generator, start, len(chunk), params.n)
                rows.extend(self._lean_chunk(chunk, params, own, store if keep else None))
                if keep:  # the chunk's cache: rows x slots x (layers x K and V x heads x dims)
                    slots = max(map(len, chunk)) + params.max_new_tokens
                    kept += len(chunk) * params.n * slots * self._net.token_bytes
        store.freeze()
        self._net.pool.give(self._store.buffers())  # the previous call's rows: read, done with
        self._store = store if self.prefix_cache else _PrefixStore(version)
        return self._completions(rows)

    # ------------------------------------------------------------------ internals

    def _lean_prefill(
        self, prompts: list[tuple[int, ...]], capacity: int
    ) -> tuple[_Cache, Any, list[int]]:
        """Fill a cache with ``prompts`` (reusing stored prefixes).

        Prompts that share a longer prefix with another prompt of the call than with the store
        (a budget branch and its main episode share the search results before the final notice)
        are prefilled after it and copy the shared part from its row. The cache's rows are laid
        out group by group (``prefill_groups``), so that each forward pass reads a contiguous
        range of them.

        Returns:
            The cache, the next-token logits of its rows, and each prompt's cache row.
        """
        torch, net, store = self._torch, self._net, self._store
        assert net is not None and store is not None
        arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
        entries = [store.longest_prefix(a) for a in arrays]
        # at least the prompt's last token is left to prefill (its logits start the decoding)
        starts = [
            0 if e is None else min(len(e.ids), len(p) - 1)
            for e, p in zip(entries, prompts, strict=True)
        ]
        followers = shared_prefixes(prompts, starts)
        shared = {u: length for u, (_, length) in followers.items()}
        waves = [[u for u in range(len(prompts)) if u not in followers], list(followers)]
        budget = PREFILL_SCORES // (net.heads * capacity)
        planned = [
            prefill_groups(
                [len(prompts[u]) - shared.get(u, starts[u]) for u in wave],
                [len(prompts[u]) for u in wave],
                budget,
                net.token_macs,
                net.key_macs,
            )
            for wave in waves
        ]
        # groups of both waves, longest prompt first, and so their rows (decoding reads the rows
        # in ranges of similar length, decode_buckets)
        groups = [
            sorted((wave[g] for g in group), key=lambda u: -len(prompts[u]))
            for wave, wave_groups in zip(waves, planned, strict=True)
            for group in wave_groups
        ]
        firsts, first = {}, 0
        for g in sorted(range(len(groups)), key=lambda g: -len(prompts[groups[g][0]])):
            firsts[g], first = first, first + len(groups[g])
        row_of = [0] * len(prompts)
        for g, rows in enumerate(groups):
            for i, u in enumerate(rows):
                row_of[u] = firsts[g] + i
        cache = net.new_cache(len(prompts), capacity)
        for u, entry in enumerate(entries):
            if starts[u]:  # every layer's keys and values in one copy
                cache.kv[:, :, row_of[u], :, : starts[u]] = entry.cache.kv[
                    :, :, entry.row, :, : starts[u]
                ]
        self.reused_tokens += sum(starts)
        logits = torch.empty((len(prompts), net.lm_head.shape[0]), device=net.device)
        for g, rows in enumerate(groups):  # the leaders' groups come first: in wave order
            for u in rows:
                if u in followers:  # its leader's group has run
                    leader, s, length = row_of[followers[u][0]], starts[u], shared[u]
                    cache.kv[:, :, row_of[u], :, s:length] = cache.kv[:, :, leader, :, s:length]
                    self.shared_tokens += length - s
                    starts[u] = length
            self._prefill_rows(
                [prompts[u] for u in rows], [starts[u] for u in rows], cache, firsts[g], logits
            )
        return cache, logits, row_of

    def _prefill_rows(
        self,
        prompts: list[tuple[int, ...]],
        starts: list[int],
        cache: _Cache,
        first: int,
        logits: Any,
    ) -> None:
        """Run ``prompts`` from their ``starts`` into cache rows ``first...``; set their logits."""
        torch, net = self._torch, self._net
        assert net is not None
        new_lengths = [len(p) - s for p, s in zip(prompts, starts, strict=True)]
        self.prefilled_tokens += sum(new_lengths)
        width = max(new_lengths)
        ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        positions = torch.empty((len(prompts), width), dtype=torch.long)
        for g, (prompt, start) in enumerate(zip(prompts, starts, strict=True)):
            ids[g, : len(prompt) - start] = torch.tensor(prompt[start:], dtype=torch.long)
            # padding past a row's end writes junk into slots that decoding overwrites before
            # reading them; clamped so it stays inside the cache
            positions[g] = torch.arange(start, start + width).clamp(max=cache.capacity - 1)
        hidden = net.forward(ids.to(net.device), positions.to(net.device), cache, first)
        last = torch.tensor([n - 1 for n in new_lengths])
        logits[first : first + len(prompts)] = net.logits(hidden[torch.arange(len(prompts)), last])

    def _may_stop(self, stops: tuple[str, ...]) -> Any:
        """``(V,)`` bool: tokens whose text contains the last character of a stop string.

        Only such a token can complete a stop string (its last character is in the newest token).
        None when a stop string ends in a non-ASCII character (then every token is checked).
        """
        if stops not in self._stop_chars:
            torch, size = self._torch, self._net.lm_head.shape[0]
            ends = {s[-1] for s in stops}
            if not all(c.isascii() for c in ends):
                self._stop_chars[stops] = None
            else:
                texts = [self.decode([t]) for t in range(size)]
                flags = [any(c in text for c in ends) for text in texts]
                self._stop_chars[stops] = torch.tensor(flags, dtype=torch.bool)
        return self._stop_chars[stops]

    def _lean_chunk(
        self,
        prompts: list[list[int]],
        params: SamplingParams,
        generator: Any,
        store: _PrefixStore | None,
    ) -> list[_Row]:
        """Decode ``len(prompts) * n`` rows exactly as ``HFPolicy._decode_chunk`` does; keep the
        finished rows' caches in ``store`` (None: keep nothing)."""
        torch, net = self._torch, self._net
        assert net is not None
        row_prompts = [p for p in prompts for _ in range(params.n)]
        unique: dict[tuple[int, ...], int] = {}
        row_unique = [unique.setdefault(tuple(p), len(unique)) for p in row_prompts]
        capacity = max(map(len, row_prompts)) + params.max_new_tokens
        cache, logits, row_of = self._lean_prefill(list(unique), capacity)
        # decoding lays the rows out longest prompt first, so that attention reads each bucket
        # of rows (decode_buckets) only as far as its own longest
        if len(unique) == len(row_prompts):  # the prefill's layout is already so
            order = sorted(range(len(row_prompts)), key=lambda r: row_of[row_unique[r]])
        else:  # the samples of a prompt: copies of its row
            order = sorted(range(len(row_prompts)), key=lambda r: -len(row_prompts[r]))
            source = [row_of[row_unique[r]] for r in order]  # cache row c <- prefill row
            expanded = net.select(cache, source, max(map(len, unique)))
            net.pool.give([cache.flat])  # no row retires into the prefill's own cache
            cache, logits = expanded, logits[torch.tensor(source, device=net.device)]
        may_stop = self._may_stop(tuple(params.stop)) if params.stop else None
        rows = [_Row([], []) for _ in row_prompts]
        live = list(range(len(rows)))  # rows still decoding, in order
        slot = [0] * len(rows)  # their cache rows
        for c, r in enumerate(order):
            slot[r] = c
        filled = torch.tensor([len(row_prompts[r]) for r in order])  # tokens in each cache row
        overhead = len(net.layers) * BUCKET_BYTES_PER_LAYER / net.token_bytes
        buckets = decode_buckets(filled.tolist(), overhead)
        for step in range(params.max_new_tokens):
            in_order = slot == list(range(cache.rows))
            picked = logits if in_order else logits[torch.tensor(slot)]
            own = live_generators(generator, live)
            tokens, logprobs = sample_next(picked, params, own)  # (B,), (B,)
            check = None if may_stop is None else may_stop[tokens].tolist()
            keep = []
            for b, (token, logprob) in enumerate(
                zip(tokens.tolist(), logprobs.tolist(), strict=True)
            ):
                row = rows[live[b]]
                row.finish_reason = self._append_row(row, token, logprob, params.stop, check, b)
                if row.finish_reason is None:
                    keep.append(b)
                else:
                    self._retire(store, cache, slot[b], row_prompts[live[b]], row, filled)
            if not keep or step == params.max_new_tokens - 1:
                break
            live, slot, tokens = [live[b] for b in keep], [slot[b] for b in keep], tokens[keep]
            if 2 * len(live) <= cache.rows:  # compact: drop the finished rows' slots
                kept = sorted(slot)  # in cache order: still longest first
                rank = {c: i for i, c in enumerate(kept)}
                filled = filled[torch.tensor(kept)]
                compact = net.select(cache, kept, int(filled.max()))
                if store is None:  # else the finished rows' entries still read the old cache
                    net.pool.give([cache.flat])
                cache, slot = compact, [rank[c] for c in slot]
                buckets = decode_buckets(filled.tolist(), overhead)
            ids = torch.full((cache.rows, 1), self.pad_token_id, dtype=torch.long)
            where = torch.tensor(slot)
            ids[where, 0] = tokens
            # finished rows still in the cache write at their first free slot: no harm done
            positions = filled[:, None].to(net.device)
            hidden = net.forward(ids.to(net.device), positions, cache, buckets=buckets)
            logits = net.logits(hidden[:, -1])
            filled[where] += 1
        for b, r in enumerate(live):
            rows[r].finish_reason = rows[r].finish_reason or "length"
            if rows[r].finish_reason == "length":
                self._retire(store, cache, slot[b], row_prompts[r], rows[r], filled)
        if store is None:
            net.pool.give([cache.flat])
        return rows

    def _append_row(
        self,
        row: _Row,
        token: int,
        logprob: float,
        stops: Sequence[str],
        check: list[bool] | None,
        b: int,
    ) -> str | None:
        """``HFPolicy._append``, skipping the text match for tokens that cannot end a stop."""
        if token in self.eos_token_ids:
            return "stop"
        row.ids.append(token)
        row.logprobs.append(logprob)
        text_check = stops and (check is None or check[b])
        if text_check and completed_stop(self.decode, row.ids, stops) is not None:
            return "stop"
        return None

    def _retire(
        self,
        store: _PrefixStore | None,
        cache: _Cache,
        slot: int,
        prompt: list[int],
        row: _Row,
        filled: Any,
    ) -> None:
        """Keep a finished row's K/V for the next call (the tokens it has run through)."""
        if store is None:
            return
        count = int(filled[slot])
        ids = np.asarray((prompt + row.ids)[:count], dtype=np.int64)
        store.add(ids, cache, slot)
