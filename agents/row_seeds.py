"""Per-row sampling seeds for the transformers backends (``HFPolicy``, ``LeanPolicy``).

Given ``SamplingParams.seeds``, row ``(i, j)`` of a call (conversation ``i``, sample ``j``) draws
every token from its own ``torch.Generator`` seeded from ``(seeds[i], j)``, so its completion does
not depend on which other rows share its batch, chunk or position. The decoding loops keep the
generator list aligned with the rows still decoding (``live_generators``) as finished rows are
dropped. Without per-row seeds the loops pass one shared generator, and these helpers hand it
through unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def sample_rows(probs: Any, generators: Sequence[Any]) -> Any:
    """One token per row of ``probs`` ``(B, V)``, row ``b`` drawn with ``generators[b]`` alone:
    one uniform from each row's generator, inverted through the row's cumulative distribution
    (a tenth of the cost of one ``torch.multinomial`` call per row)."""
    import torch  # optional: the hf extra (torch, transformers)

    if len(generators) != probs.shape[0]:
        raise ValueError(f"{len(generators)} generators for {probs.shape[0]} rows")
    uniforms = torch.cat(
        [torch.rand(1, generator=g, dtype=torch.float64, device=g.device) for g in generators]
    )  # (B,)
    cdf = probs.double().cumsum(dim=-1)  # (B, V)
    targets = (uniforms.to(cdf.device) * cdf[:, -1])[:, None]  # (B, 1), in [0, mass)
    tokens = torch.searchsorted(cdf, targets, right=True).squeeze(-1)  # first cdf > target
    # a target rounded up to the total mass would fall past the end: take the last likely token
    last = probs.shape[-1] - 1 - torch.argmax((probs.flip(-1) > 0).int(), dim=-1)
    return torch.minimum(tokens, last)


def row_generators(seeds: Sequence[int], n: int, device: Any) -> list[Any]:
    """One ``torch.Generator`` per row of a call (conversation-major: conversation ``i``, sample
    ``j``), seeded from ``(seeds[i], j)`` through numpy's ``SeedSequence`` (as the scripted
    heuristic mixes its row seeds), so nearby seeds and samples still get unrelated streams.

    Raises:
        ValueError: If a seed is negative (``SeedSequence`` takes non-negative entropy).
    """
    import torch  # optional: the hf extra (torch, transformers)

    generators = []
    for seed in seeds:
        if int(seed) < 0:
            raise ValueError(f"SamplingParams.seeds must be >= 0, got {seed}")
        for j in range(n):
            state = np.random.SeedSequence([int(seed), j]).generate_state(1, np.uint64)[0]
            generators.append(torch.Generator(device=device).manual_seed(int(state)))
    return generators


def live_generators(generator: Any, live: Sequence[int]) -> Any:
    """The generators of the rows still decoding: a shared generator as it is, else each live
    row's own (``live`` holds the rows' indices, in batch order)."""
    return generator if not isinstance(generator, list) else [generator[r] for r in live]


def chunk_generators(generator: Any, start: int, count: int, n: int) -> Any:
    """The generators of the ``count`` prompts from prompt ``start`` (``n`` rows each)."""
    return (
        generator if not isinstance(generator, list) else generator[start * n : (start + count) * n]
    )
