"""``VLLMPolicy``: the vLLM offline engine (``vllm.LLM``) behind the same completion contract.

vLLM needs a CUDA GPU; it cannot run on a CPU-only machine. It is imported only when a
``VLLMPolicy`` is built, so the rest of passkt never needs it. Install with
``pip install 'passkt[vllm]'`` on a GPU machine.

The request building (``to_vllm_sampling_kwargs``) and the output conversion
(``completions_from_vllm``) are pure functions, unit-tested without vLLM on stand-in objects with
the attribute shapes of vLLM's ``RequestOutput`` / ``CompletionOutput`` / ``Logprob``
(vllm-project/vllm: ``vllm/outputs.py`` and ``vllm/logprobs.py``).

Logprobs: by default the engine is built with ``logprobs_mode="processed_logprobs"``, so vLLM
reports each sampled token's log-probability after temperature and top-k/top-p, the same
quantity ``HFPolicy`` returns (vLLM's own default, ``raw_logprobs``, is the unscaled model
distribution). vLLM versions without ``logprobs_mode`` (< 0.10.2) only give raw logprobs: pass
``logprobs_mode=None`` there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from passkt.agents.hf import chat_prompt_ids
from passkt.agents.policy import Completion, Conversation, SamplingParams
from passkt.agents.smollm import SMOLLM2_ALIAS, smollm2_path
from passkt.envs.errors import MissingDependencyError

logger = logging.getLogger(__name__)

_SEED_MODULUS = 2**31 - 1


def request_seeds(
    seed: int | None, count: int, seeds: Sequence[int] | None = None
) -> list[int | None]:
    """One seed per request, distinct within a batch, reproducible from ``seed``.

    Identical prompts in one batch (the rollout engine repeats a task for its samples) must not
    share a seed, or an engine that seeds each request on its own would return identical samples.
    Per-request ``seeds`` (``SamplingParams.seeds``), when given, are used as they are.
    """
    if seeds is not None:
        if len(seeds) != count:
            raise ValueError(f"SamplingParams.seeds has {len(seeds)} seeds for {count} prompts")
        return [int(s) % _SEED_MODULUS for s in seeds]
    if seed is None:
        return [None] * count
    return [(seed + i) % _SEED_MODULUS for i in range(count)]


def generate_with_engine(
    llm: Any,
    vllm: Any,
    prompts: Sequence[Sequence[int]],
    params: SamplingParams,
    decode: Callable[[Sequence[int]], str],
    **generate_kwargs: Any,
) -> list[Completion]:
    """One ``llm.generate`` call over token-id prompts, a request each with its own seed
    (``request_seeds``), converted to completions; shared by every passkt caller of a vLLM engine
    (``generate_kwargs``: e.g. the step's ``lora_request``)."""
    if not prompts:
        return []
    base = to_vllm_sampling_kwargs(params)
    requests = [
        vllm.SamplingParams(**{**base, "seed": seed})
        for seed in request_seeds(params.seed, len(prompts), params.seeds)
    ]
    outputs = llm.generate(
        [{"prompt_token_ids": list(p)} for p in prompts],  # vllm.inputs.TokensPrompt
        sampling_params=requests,
        use_tqdm=False,
        **generate_kwargs,
    )
    return completions_from_vllm(outputs, decode=decode)


def to_vllm_sampling_kwargs(params: SamplingParams, *, logprobs: bool = True) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams`` equivalent to ``params``.

    Stop strings are kept in the output (``include_stop_str_in_output``); special tokens are kept
    in the text so that it decodes the ids exactly; top-k "off" is -1 (accepted by every vLLM
    version). The seed is set per request by the caller (see ``request_seeds``).
    """
    return {
        "n": params.n,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_tokens": params.max_new_tokens,
        "stop": list(params.stop),
        "include_stop_str_in_output": True,
        "logprobs": 0 if logprobs else None,
        "seed": params.seed,
        "skip_special_tokens": False,
        "spaces_between_special_tokens": False,
    }


def _completion_from_output(
    output: Any, decode: Callable[[Sequence[int]], str] | None
) -> Completion:
    """Convert one ``CompletionOutput`` (fields: text, token_ids, logprobs, finish_reason,
    stop_reason)."""
    reason = output.finish_reason
    if reason not in ("stop", "length"):
        raise RuntimeError(
            f"vLLM returned a completion with finish_reason={reason!r} (aborted or unfinished); "
            "expected 'stop' or 'length'"
        )
    ids = list(output.token_ids)
    logprobs = (
        [position[token].logprob for position, token in zip(output.logprobs, ids, strict=True)]
        if output.logprobs
        else []
    )
    text = output.text
    # A stop by EOS or a stop token id (stop_reason None or an int) leaves that token last in
    # token_ids (vllm/v1/core/sched/utils.py: check_stop); the contract excludes it.
    ended_by_token = reason == "stop" and not isinstance(getattr(output, "stop_reason", None), str)
    if ended_by_token and ids:
        del ids[-1]
        del logprobs[len(ids) :]
    if decode is not None:
        text = decode(ids)
    return Completion(
        text=text,
        token_ids=tuple(ids),
        logprobs=tuple(logprobs),
        finish_reason="length" if reason == "length" else "stop",
    )


def completions_from_vllm(
    outputs: Sequence[Any], decode: Callable[[Sequence[int]], str] | None = None
) -> list[Completion]:
    """Flatten vLLM ``RequestOutput`` objects into completions, request-major.

    Args:
        outputs: ``LLM.generate`` results, one per prompt, each with ``.outputs`` (its n
            ``CompletionOutput``; sorted here by ``.index``).
        decode: Turns ids into text. When given (``VLLMPolicy`` passes its tokenizer's exact
            decode), the text is the decoding of the returned ids, as with ``HFPolicy``; otherwise
            vLLM's own text is kept (cut right after the stop string).

    Returns:
        ``len(outputs) * n`` completions; an EOS or stop-token id that ended a turn is dropped
        from the ids and logprobs.
    """
    completions = []
    for request in outputs:
        for output in sorted(request.outputs, key=lambda o: o.index):
            completions.append(_completion_from_output(output, decode))
    return completions


def check_vllm_device(device: str | None) -> None:
    """Refuse a ``--device`` a vLLM engine cannot be given: vLLM takes no device argument (its
    workers use the GPUs ``CUDA_VISIBLE_DEVICES`` shows, set before the engine starts), and it
    needs a GPU.

    Raises:
        ValueError: One line saying what to run instead.
    """
    if device in (None, "cuda", "auto"):
        return
    if device.startswith("cuda:"):
        index = device.removeprefix("cuda:")
        raise ValueError(
            f"vllm: policies take no --device {device}: vLLM uses the GPUs CUDA_VISIBLE_DEVICES "
            f"shows; run CUDA_VISIBLE_DEVICES={index} passkt eval ... (without --device)"
        )
    raise ValueError(f"vllm: policies run on CUDA GPUs only, not --device {device}")


class VLLMPolicy:
    """The vLLM offline engine as a ``TokenPolicy`` (needs a CUDA GPU)."""

    seeds_each_row = True
    """Honours ``SamplingParams.seeds``: a row's completion does not depend on its batch."""

    def __init__(
        self,
        model: str | Path,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        dtype: str = "auto",
        enable_prefix_caching: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        logprobs_mode: str | None = "processed_logprobs",
        chat_template: str | None = None,
        engine_kwargs: dict[str, Any] | None = None,
        device: str | None = None,
    ) -> None:
        """Start a vLLM engine.

        Args:
            model: Checkpoint folder, hub id, or ``"smollm2-135m-instruct"``.
            tensor_parallel_size: GPUs to shard the model over.
            gpu_memory_utilization: Share of GPU memory vLLM may take (weights + KV cache).
            dtype: ``"auto"``, ``"bfloat16"``, ``"float16"`` or ``"float32"``.
            enable_prefix_caching: Reuse the KV cache of shared prompt prefixes (the n samples
                of a task and the turns of an episode share long prefixes).
            max_model_len: Context length limit; default the model's.
            seed: Engine seed (each request also gets its own seed from ``SamplingParams``).
            logprobs_mode: ``"processed_logprobs"`` (logprobs of the sampling distribution, the
                passkt contract) or None to leave vLLM's default.
            chat_template: A Jinja chat template replacing the tokenizer's own.
            engine_kwargs: Further ``vllm.LLM`` arguments, passed as they are.
            device: ``"cuda"`` or None (vLLM's GPUs); ``cuda:N`` and ``cpu`` are refused
                (``check_vllm_device``).

        Raises:
            MissingDependencyError: If vLLM is not installed.
            ValueError: For a device vLLM cannot be placed on from here.
        """
        check_vllm_device(device)
        try:
            import vllm  # optional: the vllm extra (CUDA only)
        except ImportError as e:
            raise MissingDependencyError("vllm", "vllm") from e

        self.spec = f"vllm:{model}"
        folder = smollm2_path() if str(model) == SMOLLM2_ALIAS else model
        options: dict[str, Any] = {
            "model": str(folder),
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            "enable_prefix_caching": enable_prefix_caching,
            "max_model_len": max_model_len,
            "seed": seed,
        }
        if logprobs_mode is not None:
            options["logprobs_mode"] = logprobs_mode
        options.update(engine_kwargs or {})
        self._vllm = vllm
        self.llm = vllm.LLM(**options)
        self.tokenizer = self.llm.get_tokenizer()
        if chat_template is not None:
            self.tokenizer.chat_template = chat_template

    def decode(self, ids: Sequence[int]) -> str:
        """Exact text of ``ids`` (special tokens kept, no clean-up of spaces)."""
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        """Sample ``params.n`` assistant turns per conversation (conversation-major)."""

        prompts = [
            chat_prompt_ids(self.tokenizer, c, owner=self.spec, tools=params.tools)
            for c in conversations
        ]
        return self.generate_ids(prompts, params)

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """Continue each token-id prompt ``params.n`` times (conversation-major)."""
        return generate_with_engine(self.llm, self._vllm, prompts, params, self.decode)
