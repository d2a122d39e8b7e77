"""SmolLM2-135M decoding speed on long contexts: ``model.generate``, ``HFPolicy``'s loop, lean loop.

One process, one torch thread, the same inputs for every method: ``batch`` rows made of
``batch / samples`` distinct prompts of exactly ``--context`` tokens (HotpotQA paragraphs and a
question under the chat template), each continued ``samples`` times, as the evaluator asks for the
n samples of a task. Decoding is greedy with no end-of-sequence token and no stop string, so every
method generates exactly ``--new-tokens`` per row and the ids can be compared. Each figure is one
whole call, timed in CPU seconds (``time.process_time``) as well as wall seconds, so a loaded
machine changes neither the ratios nor the tokens per CPU-second much.

Methods:

- ``generate``: ``model.generate(do_sample=False)`` on the prompts' KV cache, prefilled once per
  distinct prompt and repeated for its samples (the prefill is part of the call's time). This is
  stronger than calling ``generate`` on the repeated prompts, which prefills every row.
- ``hf-loop``: ``HFPolicy.generate_ids`` with its own loop (``DynamicCache``, dense masks): what
  ``hf:`` ran before the lean loop became its CPU default.
- ``lean``: ``LeanPolicy.generate_ids`` (what ``hf:`` and ``lean:`` run on a CPU now).
- ``lean-bf16`` (only when named in ``--methods``): the lean loop over bfloat16 weights.

    python benchmarks/smollm_speed.py                              # batches 1, 8, 64
    python benchmarks/smollm_speed.py --batches 1,8 --context 300 --methods lean,lean-bf16
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch

from passkt.agents.hf import HFPolicy
from passkt.agents.lean import LeanPolicy
from passkt.agents.policy import SamplingParams

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
HOTPOT = DATA / "hotpotqa_dev_distractor_subset.json"


def long_prompts(policy: HFPolicy, count: int, context: int) -> list[list[int]]:
    """``count`` chat prompts of exactly ``context`` ids: a question's paragraphs, cut to fit."""
    records = json.loads(HOTPOT.read_text(encoding="utf-8"))
    prompts = []
    for record in records[:count]:
        paragraphs = " ".join(f"{title}: {''.join(s)}" for title, s in record["context"])
        while len(policy.tokenizer(paragraphs)["input_ids"]) < context:
            paragraphs += " " + paragraphs
        question = f"\nQuestion: {record['question']}"
        words = paragraphs.split()
        low, high = 0, len(words)  # the most words whose prompt fits in `context` ids
        while low < high:
            mid = (low + high + 1) // 2
            ids = policy.encode_chat(
                [{"role": "user", "content": " ".join(words[:mid]) + question}]
            )
            low, high = (mid, high) if len(ids) <= context else (low, mid - 1)
        ids = policy.encode_chat([{"role": "user", "content": " ".join(words[:low]) + question}])
        # pad the front with the paragraph text's first ids so every prompt has the same length
        filler = policy.tokenizer(paragraphs)["input_ids"]
        prompts.append(filler[: context - len(ids)] + ids)
    return prompts


def run_generate(model, prompts: list[list[int]], samples: int, new_tokens: int) -> list[list[int]]:
    """Greedy ``model.generate`` continuing each prompt ``samples`` times (prefilled once)."""
    from transformers import DynamicCache

    ids = torch.tensor(prompts)  # (P, L): equal lengths, no padding
    cache = DynamicCache(config=model.config)
    model(input_ids=ids[:, :-1], past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(samples)
    rows = ids.repeat_interleave(samples, dim=0)  # (P*samples, L)
    out = model.generate(
        input_ids=rows,
        attention_mask=torch.ones_like(rows),
        past_key_values=cache,
        do_sample=False,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        eos_token_id=None,
        pad_token_id=0,
    )
    return out[:, rows.shape[1] :].tolist()


def run_policy(policy: HFPolicy, prompts, samples: int, new_tokens: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_new_tokens=new_tokens, stop=(), n=samples)
    return [list(c.token_ids) for c in policy.generate_ids(prompts, params)]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", default="1,8,64", help="rows per call")
    p.add_argument("--samples", type=int, default=16, help="rows per distinct prompt (at most)")
    p.add_argument("--context", type=int, default=1500, help="prompt length in ids")
    p.add_argument("--new-tokens", type=int, default=32, help="generated per row")
    p.add_argument("--methods", default="generate,hf-loop,lean")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    base = HFPolicy("smollm2-135m-instruct", dtype=args.dtype, batch_size=512)
    base.eos_token_ids = frozenset()  # fixed length: every method does the same work
    lean = LeanPolicy(base.model, base.tokenizer, batch_size=512)
    lean.eos_token_ids = frozenset()
    methods = {
        "generate": lambda ps, n: run_generate(base.model, ps, n, args.new_tokens),
        "hf-loop": lambda ps, n: run_policy(base, ps, n, args.new_tokens),
        "lean": lambda ps, n: run_policy(lean, ps, n, args.new_tokens),
    }
    chosen = args.methods.split(",")
    lean_policies = [lean]
    if "lean-bf16" in chosen:  # the same loop over a bfloat16 copy of the weights
        half = copy.deepcopy(base.model).to(torch.bfloat16)
        lean_bf16 = LeanPolicy(half, base.tokenizer, batch_size=512)
        lean_bf16.eos_token_ids = frozenset()
        methods["lean-bf16"] = lambda ps, n: run_policy(lean_bf16, ps, n, args.new_tokens)
        lean_policies.append(lean_bf16)
    batches = [int(b) for b in args.batches.split(",")]
    prompts = long_prompts(base, max(-(-b // min(b, args.samples)) for b in batches), args.context)
    print(
        f"SmolLM2-135M-Instruct {args.dtype}, {args.threads} thread(s), {args.context}-token "
        f"prompts, {args.new_tokens} new tokens per row, greedy; tokens/CPU-s = generated "
        "tokens / CPU seconds of the whole call (prefill included)"
    )
    print(
        "| batch | prompts x samples | method | CPU s | wall s | tokens/CPU-s | vs generate | ids |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---|")
    with torch.inference_mode():  # one-off costs (lean's fused weights, lazy inits) go first
        for name in chosen:
            methods[name]([prompts[0][-16:]], 1)
    for batch in batches:
        samples = min(batch, args.samples)
        chunk = prompts[: batch // samples]
        results = {}
        for name in chosen:
            for policy in lean_policies:
                policy._store = None  # no reuse from an earlier call: each call starts cold
            wall, cpu = time.perf_counter(), time.process_time()
            with torch.inference_mode():
                ids = methods[name](chunk, samples)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            results[name] = (ids, cpu)
            rate = sum(map(len, ids)) / cpu
            ref = results.get("generate")
            ratio = f"{ref[1] / cpu:.2f}x" if ref else ""
            same = "" if not ref else ("same" if ids == ref[0] else "differ")
            print(
                f"| {batch} | {len(chunk)} x {samples} | {name} | {cpu:.1f} | {wall:.1f} | "
                f"{rate:.1f} | {ratio} | {same} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
