"""Token ids of chat-templated prompts and observation turns, taken from the tokenizer's own chat
template (the rollout engine builds every episode's token sequence from them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from passkt.agents.policy import Conversation
from passkt.envs.contract import AgentInterface

_SENTINEL = "\u2063PASSKT_SENTINEL\u2063"


class ChatTokens:
    """Token ids of chat-templated prompts and of observation turns, for one tokenizer."""

    def __init__(
        self, tokenizer: Any, tools: Sequence[Mapping[str, Any]] = (), role: str = "user"
    ) -> None:
        """``tools``: rendered into every prompt (the tool format); ``role``: the role of the
        messages that carry observations (``AgentInterface.observation_role``)."""
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"Tokenizer {type(tokenizer).__name__} has no chat template; set "
                "tokenizer.chat_template (or pass chat_template= to HFPolicy)."
            )
        self.tokenizer = tokenizer
        self.tools = [dict(tool) for tool in tools] or None
        self.role = role
        self._suffix_cache: dict[str, list[int]] = {}
        self._prompt_cache: dict[tuple[tuple[str, str], ...], list[int]] = {}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Conversation) -> list[int]:
        """Ids of ``messages`` followed by the assistant generation prompt.

        Remembered per conversation: the n samples of a task and its T = 0 branches start from
        the same first prompt, which is rendered and tokenized once (0.4-0.7 ms a time).
        """
        key = tuple((m["role"], m["content"]) for m in messages)
        cached = self._prompt_cache.get(key)
        if cached is None:
            text = self.tokenizer.apply_chat_template(
                messages, tools=self.tools, tokenize=False, add_generation_prompt=True
            )
            cached = self.encode(text)
            if len(self._prompt_cache) < 4096:
                self._prompt_cache[key] = cached
        return list(cached)

    def observation_ids(self, observation: str) -> list[int]:
        """Ids that follow an assistant turn: end of turn, the user observation, generation prompt.

        Taken from the template itself by rendering a conversation whose assistant turn is a
        sentinel, so it is right for any chat template (ChatML, Llama 3, SmolLM2 ...).
        """
        cached = self._suffix_cache.get(observation)
        if cached is not None:
            return cached
        messages = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _SENTINEL},
            {"role": self.role, "content": observation},
        ]
        text = self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=True
        )
        cut = text.find(_SENTINEL)
        if cut < 0:
            raise ValueError("The chat template dropped the assistant message; cannot build turns.")
        ids = self.encode(text[cut + len(_SENTINEL) :])
        if len(self._suffix_cache) < 4096:
            self._suffix_cache[observation] = ids
        return ids


def stream_piece(
    chat: ChatTokens | None, protocol: AgentInterface, observation: str
) -> tuple[str, list[int]]:
    """The text (and ids, with a tokenizer) an observation appends to the stream, clipped to the
    protocol's ``max_observation_tokens``."""
    text = protocol.stream_text(observation)
    if chat is None:
        return text, []
    ids = chat.encode(text)
    limit = protocol.max_observation_tokens
    if limit is not None and len(ids) > limit:
        ids = ids[:limit]
        text = chat.tokenizer.decode(ids)
    return text, ids


def cut_turn(
    chat: ChatTokens | None, ids: list[int], logprobs: list[float], text: str
) -> tuple[list[int], list[float]]:
    """Ids of ``text``, a prefix of what ``ids`` decode to: the longest prefix of ``ids`` whose
    text starts ``text``, then the rest of ``text`` re-tokenized (logprob 0.0: not sampled)."""
    if chat is None:
        return ids, logprobs
    decode = chat.tokenizer.decode
    keep = len(ids)
    while keep and not text.startswith(decode(ids[:keep])):
        keep -= 1
    rest = text[len(decode(ids[:keep])) :]
    extra = chat.encode(rest) if rest else []
    return ids[:keep] + extra, logprobs[:keep] + [0.0] * len(extra)
