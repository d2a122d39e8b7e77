"""The TRL adapter's vLLM route: passkt's rollout engine on TRL's own vLLM (server or colocate).

With ``use_vllm=True`` TRL keeps a vLLM engine in step with the trained weights (it syncs them
before each call of the rollout function). Multi-turn episodes need one request per live episode
per round, with passkt's stop strings and exact token ids, so the adapter wraps that engine as a
passkt ``TokenPolicy``:

- colocate mode (``trainer.vllm_generation.llm``, a ``vllm.LLM`` in this process): the requests
  are built exactly as ``VLLMPolicy`` builds them (``to_vllm_sampling_kwargs``, one seed per
  request), and the outputs converted by ``completions_from_vllm``;
- server mode (``trl vllm-serve``): every process sends its own rounds to the server through
  TRL's ``VLLMClient.generate`` (token-id prompts); ``server_generate_kwargs`` builds the request
  and ``completions_from_server`` reads the answer (the client returns no finish reason, so it is
  recovered from the ids: EOS, a stop string, or the token limit).

vLLM needs a CUDA GPU: these classes are thin, and the request building and answer reading are
pure functions unit-tested here without vLLM. Not run on a GPU in this repository.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from passkt.agents.hf import chat_prompt_ids
from passkt.agents.policy import Completion, SamplingParams
from passkt.agents.vllm_policy import generate_with_engine


def server_generate_kwargs(params: SamplingParams) -> dict[str, Any]:
    """Keyword arguments of ``VLLMClient.generate`` (besides ``prompts``) for one round.

    One completion per prompt (the engine sends each live episode as its own prompt). No seed:
    the server seeds a whole request with one seed, which would give the G identical prompts of
    a task identical samples (``request_seeds`` explains the same trap offline).
    """
    return {
        "n": 1,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "max_tokens": params.max_new_tokens,
        "logprobs": 0,
        "generation_kwargs": {
            "stop": list(params.stop),
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "spaces_between_special_tokens": False,
        },
    }


def _sampled_logprob(
    position: Sequence[float], token_ids: Sequence[int] | None, token: int
) -> float:
    """The logprob of the sampled ``token`` at one position (ranked top-k lists; the sampled token
    is always among them, first when ``logprobs=0``)."""
    if token_ids is not None:
        for logprob, candidate in zip(position, token_ids, strict=True):
            if candidate == token:
                return float("nan") if logprob is None else float(logprob)
    value = position[0]
    return float("nan") if value is None else float(value)


def completions_from_server(
    output: Mapping[str, Any],
    params: SamplingParams,
    eos_ids: Sequence[int],
    decode: Callable[[Sequence[int]], str],
) -> list[Completion]:
    """Completions from a ``VLLMClient.generate`` answer (n = 1 per prompt).

    Args:
        output: ``{"completion_ids": [[id, ...], ...], "logprobs": [[[lp, ...], ...], ...],
            "logprob_token_ids": same shape or absent}``.
        params: The round's sampling parameters (stop strings, token limit).
        eos_ids: Ids that end a turn by themselves; one that ended a turn is dropped (the
            passkt contract: ids and logprobs exclude it).
        decode: The tokenizer's exact decoding (special tokens kept).
    """
    all_logprobs = output.get("logprobs")
    all_token_ids = output.get("logprob_token_ids")
    completions = []
    for row, ids in enumerate(output["completion_ids"]):
        ids = list(ids)
        if all_logprobs is None:
            raise RuntimeError("the vLLM server returned no logprobs; the adapter asks for them")
        ranked = all_token_ids[row] if all_token_ids is not None else [None] * len(ids)
        logprobs = [
            _sampled_logprob(position, candidates, token)
            for position, candidates, token in zip(all_logprobs[row], ranked, ids, strict=True)
        ]
        reason = "stop"
        if ids and ids[-1] in eos_ids:
            ids, logprobs = ids[:-1], logprobs[:-1]
        else:
            text = decode(ids)
            ended_by_stop = any(text.rstrip().endswith(stop) for stop in params.stop)
            if not ended_by_stop and len(ids) >= params.max_new_tokens:
                reason = "length"
        completions.append(
            Completion(decode(ids), tuple(ids), tuple(logprobs), finish_reason=reason)  # type: ignore[arg-type]
        )
    return completions


class ColocatedEnginePolicy:
    """TRL's colocated ``vllm.LLM`` as a passkt ``TokenPolicy`` (needs a CUDA GPU)."""

    def __init__(self, llm: Any, tokenizer: Any) -> None:
        import vllm  # optional: the vllm extra (CUDA only)

        self._vllm = vllm
        self.llm = llm
        self.tokenizer = tokenizer

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(
            list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False
        )

    def generate(self, conversations: Any, params: SamplingParams) -> list[Completion]:

        prompts = [chat_prompt_ids(self.tokenizer, c, owner="trl:vllm") for c in conversations]
        return self.generate_ids(prompts, params)

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        return generate_with_engine(self.llm, self._vllm, prompts, params, self.decode)


class ServerEnginePolicy(ColocatedEnginePolicy):
    """A ``trl vllm-serve`` server as a passkt ``TokenPolicy`` (each process sends its rounds)."""

    def __init__(self, client: Any, tokenizer: Any, eos_ids: Sequence[int]) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.eos_ids = list(eos_ids)

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        if not prompts:
            return []
        output = self.client.generate(
            prompts=[list(p) for p in prompts], **server_generate_kwargs(params)
        )
        return completions_from_server(output, params, self.eos_ids, self.decode)


SYNC_PATHS = (
    "/init_communicator",
    "/start_weight_update",
    "/update_weights",
    "/finish_weight_update",
    "/reset_prefix_cache",
)
"""Server endpoints of TRL's weight sync whose ``{"success": false}`` answer TRL ignores."""


class ServerSyncError(RuntimeError):
    """The vLLM server refused a step of the weight sync: it would sample with stale weights."""


def refused_sync(path: str, status: int, body: Any) -> bool:
    """Whether a sync endpoint's answer says it failed. vLLM answers a failed prefix-cache reset
    (requests in flight) or weight update with HTTP 200 and ``{"success": false}``; before vLLM
    0.26 the reset answered an empty body, which is not a refusal."""
    return (
        status == 200
        and path.endswith(SYNC_PATHS)
        and isinstance(body, dict)
        and body.get("success") is False
    )


def guard_sync_answers(session: Any, step: Callable[[], int]) -> None:
    """Make a ``requests`` session (TRL's ``VLLMClient.session``) raise ``ServerSyncError`` on a
    refused sync, naming the training step (``step()``), instead of going on with stale weights.

    A response hook sees every answer the client reads, whichever TRL method posted it.
    """

    def check(response: Any, *args: Any, **kwargs: Any) -> Any:
        path = urlparse(response.url).path
        if not path.endswith(SYNC_PATHS):
            return response
        try:
            body = response.json()
        except ValueError:  # an empty body: vLLM before 0.26
            return response
        if refused_sync(path, response.status_code, body):
            raise ServerSyncError(
                f"the vLLM server answered {body} to {path} at step {step()}: its weights or "
                "prefix cache are stale, so the step's rollouts would sample the old policy; "
                "see the server's log"
            )
        return response

    session.hooks["response"].append(check)


def trl_vllm_policy(trainer: Any) -> Any:
    """The passkt policy over a ``GRPOTrainer``'s vLLM engine (``use_vllm=True``)."""
    generation = trainer.vllm_generation
    tokenizer = trainer.processing_class
    if generation.mode == "colocate":
        return ColocatedEnginePolicy(generation.llm, tokenizer)
    client = getattr(generation, "vllm_client", None) or getattr(generation, "_passkt_client", None)
    if client is None:  # TRL connects only the main process; the others open their own, once
        from trl.generation.vllm_client import VLLMClient

        base_url = generation.server_base_url or (
            f"http://{generation.server_host}:{generation.server_port}"
        )
        client = VLLMClient(base_url=base_url, connection_timeout=generation.server_timeout)
        generation._passkt_client = client
    eos_ids = list(getattr(trainer, "eos_token_ids", None) or [tokenizer.eos_token_id])
    return ServerEnginePolicy(client, tokenizer, eos_ids)
