"""The ``Policy`` protocol: what every agent backend provides.

A policy turns a batch of conversations into a batch of completions. Backends: transformers
(``HFPolicy``), the vLLM offline engine (``VLLMPolicy``), any OpenAI-compatible server
(``OpenAIPolicy``) and scripted policies (``OraclePolicy``, ``HeuristicPolicy``). To plug in
your own agent, implement ``generate``; nothing else is required.

Policies that can continue an exact token sequence also implement ``TokenPolicy``: the rollout
engine then builds each episode's tokens incrementally, so the ids it trains on are exactly the ids
that were sampled (generated text is never re-tokenized).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

Message = dict[str, str]
"""A chat message: ``{"role": "system" | "user" | "assistant" | "tool", "content": "..."}``. In
the tool format (``passkt.envs.tool_calls``) an assistant turn's call is part of its text and the
env's reply is a ``tool`` message."""

Conversation = list[Message]

DEFAULT_STOP: tuple[str, ...] = ("</search>", "</answer>")


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings shared by every backend (names follow vLLM)."""

    temperature: float = 1.0
    """0 means greedy decoding."""
    top_p: float = 1.0
    top_k: int = 0
    """0 (or -1) disables top-k filtering."""
    max_new_tokens: int = 256
    stop: tuple[str, ...] = DEFAULT_STOP
    """Generation stops after any of these strings; the stop string is kept in the text."""
    n: int = 1
    """Completions per conversation; results are conversation-major (all n of the first, ...)."""
    seed: int | None = None
    """Same seed, same batch, same completions."""
    seeds: tuple[int, ...] | None = None
    """One seed per conversation of the call (overrides ``seed`` where a backend honours it).
    A backend that seeds each row from its own seed (scripted, vLLM, OpenAI-compatible,
    ``HFPolicy`` and ``LeanPolicy``, which seed sample ``j`` of conversation ``i`` from
    ``(seeds[i], j)``) gives a row the same completion whatever else is in the batch, so the
    evaluator's results do not depend on how it batches episodes; such a policy says so with a
    class attribute ``seeds_each_row = True``. Without ``seeds``, ``HFPolicy`` samples a call
    from one generator seeded with ``seed``."""
    tools: tuple[dict[str, Any], ...] = ()
    """The env's tools (``AgentInterface.tools``, JSON schemas): a chat template renders them
    (``tools=``), an OpenAI server gets them as ``tools``, and a turn's action is a tool call
    written as ``<tool_call>{...}</tool_call>`` (``passkt.envs.tool_calls``). Empty: text tags."""

    def __post_init__(self) -> None:
        if not self.temperature >= 0 or self.temperature == float("inf"):  # also refuses NaN
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (off) or positive, got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if isinstance(self.stop, str):
            raise TypeError("stop must be a tuple of strings, e.g. stop=('</answer>',)")


@dataclass(frozen=True)
class Completion:
    """One sampled assistant turn."""

    text: str
    token_ids: tuple[int, ...] = ()
    """Exactly the sampled ids (empty for scripted policies and servers without ids)."""
    logprobs: tuple[float, ...] = ()
    """Log-probability of each sampled id under the sampling distribution (aligned with ids)."""
    finish_reason: Literal["stop", "length"] = "stop"
    """``stop``: a stop string or EOS ended the turn; ``length``: ``max_new_tokens`` was hit."""


@runtime_checkable
class Policy(Protocol):
    """Anything that answers a batch of conversations."""

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams
    ) -> list[Completion]:
        """Return ``len(conversations) * params.n`` completions, conversation-major."""
        ...


@runtime_checkable
class TokenPolicy(Policy, Protocol):
    """A policy with a tokenizer that can continue exact token sequences (trainable backends)."""

    tokenizer: Any
    """A Hugging Face tokenizer with a chat template."""

    def generate_ids(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams
    ) -> list[Completion]:
        """Like ``generate`` but from token ids that already include the chat template."""
        ...


def describe(policy: Policy) -> str:
    """A short, stable description of a policy for manifests and logs."""
    spec = getattr(policy, "spec", None)
    return str(spec) if spec else type(policy).__name__
