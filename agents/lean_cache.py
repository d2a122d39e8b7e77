"""The lean decoder's cache bookkeeping and batch layout (``passkt.agents.lean``).

Pooled KV cache buffers (``_Pool``, ``_Cache``), the prefix store that keeps the previous call's
rows for the next turn (``_PrefixStore``), and the three layout choices made before a forward:
which rows prefill together (``prefill_groups``), which rows decode attention together
(``decode_buckets``) and which prompts copy a shared prefix from another (``shared_prefixes``).
Cache buffers are pooled across calls: a fresh buffer of a few hundred MB is zeroed page by page
on first touch, which cost a fifth of a BridgeQA chunk when every call and compaction allocated
one. Rows are laid out so that each prefill pass reads a contiguous range of them (its groups
chosen by their padded work) and decoding reads attention in ranges of rows of similar length,
each only as far as its own longest. All of it is bookkeeping on token ids and lengths: what
the model computes is ``passkt.agents.lean``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class _Cache:
    """Key and value slots of every layer: ``kv (2, layers, rows, kv_heads, capacity, head_dim)``,
    a view of the pooled buffer ``flat``; ``k[i]`` and ``v[i]`` are layer i's
    ``(rows, kv_heads, capacity, head_dim)``."""

    def __init__(self, kv: Any, flat: Any) -> None:
        self.kv, self.flat = kv, flat
        self.k, self.v = list(kv[0]), list(kv[1])

    @property
    def rows(self) -> int:
        return int(self.kv.shape[2])

    @property
    def capacity(self) -> int:
        return int(self.kv.shape[4])


def _runs(index: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(start, stop, index[start])`` for maximal runs of ``index`` that repeat one value or
    count up by one (so each run is one strided copy)."""
    runs: list[tuple[int, int, int]] = []
    start = 0
    for i in range(1, len(index) + 1):
        if i < len(index):
            step = index[i] - index[i - 1]
            first = index[start + 1] - index[start] if i - start > 1 else step
            if step in (0, 1) and step == first:
                continue
        runs.append((start, i, index[start]))
        start = i
    return runs


class _Pool:
    """Cache buffers kept for reuse. A fresh buffer of a few hundred MB is zeroed page by page on
    first touch, which cost as much as a fifth of a BridgeQA chunk's time when every call and
    every compaction allocated one; a reused buffer needs neither (its values are stale but
    finite, and every slot a row has not written is masked)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.free: list[Any] = []

    def take(self, numel: int, dtype: Any, device: Any) -> Any:
        """A flat buffer of at least ``numel`` elements (the smallest free one that fits)."""
        import torch  # optional: the hf extra (torch, transformers)

        fits = [i for i, b in enumerate(self.free) if b.numel() >= numel]
        if fits:
            return self.free.pop(min(fits, key=lambda i: self.free[i].numel()))
        return torch.zeros(numel + numel // 4, dtype=dtype, device=device)  # room to grow

    def give(self, buffers: Iterable[Any]) -> None:
        """Take back buffers no cache in use refers to; keep the largest up to ``max_bytes``."""
        free = {id(b): b for b in (*self.free, *buffers)}
        self.free, kept = [], 0
        for b in sorted(free.values(), key=lambda b: -b.numel()):
            if kept + b.numel() * b.element_size() <= self.max_bytes:
                self.free.append(b)
                kept += b.numel() * b.element_size()


# --------------------------------------------------------------------------- the prefix store


@dataclass
class _Entry:
    """The cached K/V of one finished row: slots ``0..len(ids)`` of ``cache`` row ``row``."""

    ids: np.ndarray
    cache: _Cache
    row: int


def _position_weights(length: int) -> np.ndarray:
    """Odd pseudo-random uint64 weights of positions ``0..length``: SplitMix64 of the position,
    so the first ``k`` weights are the same for every ``length >= k``."""
    with np.errstate(over="ignore"):
        z = (np.arange(length, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) | np.uint64(1)


class _PrefixStore:
    """The rows of one call, found again by the prompts of the next call that extend them."""

    def __init__(self, version: tuple[Any, ...]) -> None:
        self.version = version
        self.entries: list[_Entry] = []
        self._weights = np.zeros(0, dtype=np.uint64)
        self._lengths = np.zeros(0, dtype=np.int64)
        self._hashes = np.zeros(0, dtype=np.uint64)

    def _prefix_hashes(self, ids: np.ndarray) -> np.ndarray:
        """``h[i]``: a hash of ``ids[: i + 1]`` (pseudo-random per-position weights, wrapping
        sums). A position's weight is a function of the position alone, so hashes taken before
        the table grew stay valid."""
        if len(self._weights) < len(ids):
            self._weights = _position_weights(2 * len(ids))
        with np.errstate(over="ignore"):
            return np.cumsum(ids.astype(np.uint64) * self._weights[: len(ids)], dtype=np.uint64)

    def add(self, ids: np.ndarray, cache: _Cache, row: int) -> None:
        self.entries.append(_Entry(ids, cache, row))

    def buffers(self) -> list[Any]:
        """The cache buffers the entries hold (for the pool, once the store is dropped)."""
        return list({id(e.cache.flat): e.cache.flat for e in self.entries}.values())

    def freeze(self) -> None:
        """Index the entries (call once, after the last ``add``)."""
        self._lengths = np.array([len(e.ids) for e in self.entries], dtype=np.int64)
        self._hashes = np.array(
            [self._prefix_hashes(e.ids)[-1] for e in self.entries], dtype=np.uint64
        )

    def longest_prefix(self, prompt: np.ndarray) -> _Entry | None:
        """The entry whose ids are the longest prefix of ``prompt`` (None if none is)."""
        if not self.entries:
            return None
        fits = np.flatnonzero(self._lengths <= len(prompt))
        if not len(fits):
            return None
        hashes = self._prefix_hashes(prompt)
        hits = fits[hashes[self._lengths[fits] - 1] == self._hashes[fits]]
        for index in hits[np.argsort(-self._lengths[hits], kind="stable")]:
            entry = self.entries[index]
            if np.array_equal(entry.ids, prompt[: len(entry.ids)]):  # hashes can collide
                return entry
        return None


GROUP_MACS = 3 * 10**7
"""What one more prefill forward pass costs beyond its arithmetic, in multiply-adds: about a
millisecond of a CPU core (Python and the small per-layer ops)."""


def prefill_groups(
    new_lengths: Sequence[int],
    ends: Sequence[int],
    budget: int,
    token_macs: float,
    key_macs: float,
    group_macs: float = GROUP_MACS,
) -> list[list[int]]:
    """Rows to prefill together: runs of the rows sorted by new tokens (longest first; ties by
    prompt length) that minimise the padded work, at most ``budget`` padded tokens per group.

    A group of ``r`` rows pads each to its longest new part ``S`` and attends to as many keys as
    its longest prompt ``K``: it costs ``r * S * (token_macs + key_macs * K) + group_macs``.

    Args:
        new_lengths: Tokens each row prefills.
        ends: Each row's prompt length (the keys its last token attends to).
        budget: Most padded tokens (rows x ``S``) of a group (a single row may exceed it).
        token_macs: Multiply-adds per token outside attention.
        key_macs: Multiply-adds of attention per token and key.
        group_macs: The fixed cost of one more group.

    Returns:
        Groups of row indices, in the sorted order; each group's first row is its longest.
    """
    order = sorted(range(len(new_lengths)), key=lambda u: (-new_lengths[u], -ends[u]))
    count = len(order)
    new = np.array([new_lengths[u] for u in order], dtype=np.float64)
    end = np.array([ends[u] for u in order], dtype=np.float64)
    best = np.zeros(count + 1)
    cut = np.zeros(count + 1, dtype=np.int64)
    for j in range(1, count + 1):  # best[j]: the cheapest grouping of the first j rows
        first = np.arange(j)  # candidate first rows i of the last group i..j-1
        rows = j - first
        keys = np.maximum.accumulate(end[j - 1 :: -1])[::-1]  # longest prompt of i..j-1
        cost = best[:j] + rows * new[:j] * (token_macs + key_macs * keys) + group_macs
        cost[(rows * new[:j] > budget) & (rows > 1)] = np.inf
        cut[j] = int(np.argmin(cost))
        best[j] = cost[cut[j]]
    groups, j = [], count
    while j:
        groups.append(order[cut[j] : j])
        j = int(cut[j])
    return groups[::-1]


BUCKET_BYTES_PER_LAYER = 400_000
"""What one more range of rows costs a decoding step, per layer, in bytes of cache it could have
read instead: about 60 microseconds of small ops, at about 7 GB/s of one core's memory reads."""


def decode_buckets(lengths: Sequence[int], overhead: float, step: int = 8) -> list[tuple[int, int]]:
    """Ranges of cache rows that decode attention reads separately, each only as far as its
    longest row: the cuts (at multiples of ``step``) that minimise rows x longest summed over
    ranges, plus ``overhead`` (in rows x keys) per range. Rows should be about longest first.
    """
    count = len(lengths)
    if count == 0:
        return []
    cuts = np.array([*range(0, count, step), count])
    longest = np.maximum.reduceat(np.asarray(lengths, dtype=np.float64), cuts[:-1])
    before = cuts[:-1]  # rows before each block
    best = np.zeros(len(cuts))
    back = np.zeros(len(cuts), dtype=np.int64)
    for j in range(1, len(cuts)):  # best[j]: the cheapest split of the first j blocks
        reach = np.maximum.accumulate(longest[j - 1 :: -1])[::-1]  # longest of blocks i..j-1
        cost = best[:j] + (cuts[j] - before[:j]) * reach + overhead
        back[j] = int(np.argmin(cost))
        best[j] = cost[back[j]]
    ranges, j = [], len(cuts) - 1
    while j:
        ranges.append((int(cuts[back[j]]), int(cuts[j])))
        j = int(back[j])
    return ranges[::-1]


SHARED_PREFIX_TOKENS = 16
"""Least number of tokens, past what the store gives, that a prompt copies from another prompt of
the same call (a copy of fewer would split the prompt's prefill off into a later pass for little
saved work)."""


def _common_length(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def shared_prefixes(
    prompts: Sequence[Sequence[int]], starts: Sequence[int], least: int = SHARED_PREFIX_TOKENS
) -> dict[int, tuple[int, int]]:
    """Prompts that copy a prefix from another prompt of the call: ``{u: (leader, length)}``.

    The prompts are sorted; each run of neighbours that share more than ``least`` tokens past
    their own ``starts`` follows the run's first prompt (a leader, which follows none), for the
    prefix all of them share with it. At least the follower's last token is left to prefill.
    """
    arrays = [np.asarray(p, dtype=np.int64) for p in prompts]
    followers: dict[int, tuple[int, int]] = {}
    leader, common = -1, 0
    previous = -1
    for u in sorted(range(len(prompts)), key=lambda u: tuple(prompts[u])):
        if leader >= 0:
            adjacent = _common_length(arrays[previous], arrays[u])
            common = adjacent if previous == leader else min(common, adjacent)
            length = min(common, len(prompts[u]) - 1)
            if length >= starts[u] + least:
                followers[u] = (leader, length)
                previous = u
                continue
        leader, previous = u, u
    return followers
