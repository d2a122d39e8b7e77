"""``AgentInterface``: how an agent talks to an env (system prompt, stop strings, layout, tools),
owned by the env as ``env.protocol`` and read by the rollout engine. ``passkt.envs.contract``
re-exports it with the rest of the env contract."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

from passkt.envs.errors import EnvContractError

__all__ = ["NEUTRAL", "AgentInterface", "Layout"]

Layout = Literal["chat", "stream"]


@dataclass(frozen=True)
class AgentInterface:
    """How an agent talks to an env: owned by the env (``env.protocol``), read by the rollout.

    An env may give this dataclass or a plain dict with the same keys (so it needs no passkt
    import). ``layout="chat"``: a system prompt (if any), the first observation as a user turn,
    then one user turn per observation. ``layout="stream"``: one user turn, then a single assistant
    turn that the model continues, with each observation appended to it as
    ``observation_template`` renders it (Search-R1's layout).
    """

    name: str = "neutral"
    """A label for manifests and logs."""
    system_prompt: str | None = None
    """The system message; ``None`` sends none (the chat template may add its default)."""
    stop: tuple[str, ...] = ()
    """Generation stops after any of these strings (kept in the action)."""
    layout: Layout = "chat"
    """``chat`` (one user turn per observation) or ``stream`` (one assistant stream)."""
    prompt_template: str = "{observation}"
    """The first user turn, from the reset observation."""
    observation_template: str = "{observation}"
    """``stream`` only: the text appended to the assistant stream for a later observation."""
    max_turn_tokens: int | None = None
    """At most this many tokens per turn (``SamplingParams.max_new_tokens`` is capped by it)."""
    max_observation_tokens: int | None = None
    """``stream`` only: an observation's tokens are clipped to this many (policies with a
    tokenizer; its decoded text is what the stream shows)."""
    cut_after_stop: bool = False
    """A turn's text ends right after its first stop string, in the order of ``stop`` (the first
    one found of ``stop[0]``, else ``stop[1]`` ...), and a token that runs past it (``>`` merged
    with newlines) is re-tokenized: the text Search-R1 keeps, and its ids."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The tool format (``passkt.envs.tool_calls``): the env's actions as JSON schemas in the
    OpenAI function format, which chat templates (``tools=``) and OpenAI servers take. With tools,
    every observation after the first is a ``tool`` message; an empty tuple keeps text actions."""

    def __post_init__(self) -> None:
        if self.layout not in ("chat", "stream"):
            raise EnvContractError(
                f"protocol layout must be 'chat' or 'stream', got {self.layout!r}"
            )
        stop = self.stop
        if isinstance(stop, str) or not all(isinstance(s, str) and s for s in stop):
            raise EnvContractError(
                f"protocol stop must be a list of non-empty strings, got {stop!r}"
            )
        object.__setattr__(self, "stop", tuple(stop))
        for name in ("prompt_template", "observation_template"):
            template = getattr(self, name)
            if not isinstance(template, str) or template.count("{observation}") != 1:
                raise EnvContractError(
                    f"protocol {name} must contain '{{observation}}' exactly once, got {template!r}"
                )
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise EnvContractError("protocol system_prompt must be a string or None")
        for name in ("max_turn_tokens", "max_observation_tokens"):
            value = getattr(self, name)
            positive = isinstance(value, int) and not isinstance(value, bool) and value >= 1
            if value is not None and not positive:
                raise EnvContractError(
                    f"protocol {name} must be a positive int or None, got {value!r}"
                )
        if self.max_observation_tokens is not None and self.layout != "stream":
            raise EnvContractError("protocol max_observation_tokens needs layout='stream'")
        object.__setattr__(self, "tools", _check_tools(self.tools))
        if self.tools and self.layout != "chat":
            raise EnvContractError("protocol tools need layout='chat' (a tool reply is a turn)")

    @property
    def observation_role(self) -> str:
        """The role of the messages that carry observations after the first: ``tool`` in the
        tool format (chat templates render it as the tool's reply), else ``user``."""
        return "tool" if self.tools else "user"

    def cut(self, text: str) -> str:
        """``cut_after_stop``: the text up to the end of its first stop string (see the field)."""
        if self.cut_after_stop:
            for stop in self.stop:
                at = text.find(stop)
                if at >= 0:
                    return text[: at + len(stop)]
        return text

    @classmethod
    def from_value(cls, value: Any, where: str) -> AgentInterface:
        """An ``AgentInterface`` from itself or a dict of its fields (unknown keys are errors)."""
        if isinstance(value, AgentInterface):
            return value
        if not isinstance(value, Mapping):
            raise EnvContractError(
                f"{where}: protocol must be a passkt AgentInterface or a dict with the keys "
                f"{[f.name for f in fields(cls)]}, got {type(value).__name__}"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise EnvContractError(
                f"{where}: protocol has unknown keys {unknown}; known: {sorted(known)}"
            )
        return cls(**value)

    def first_messages(self, observation: str) -> list[dict[str, str]]:
        """The conversation at the first turn."""
        messages = (
            []
            if self.system_prompt is None
            else [{"role": "system", "content": self.system_prompt}]
        )
        # str.replace, not str.format: observations may hold braces.
        messages.append(
            {"role": "user", "content": self.prompt_template.replace("{observation}", observation)}
        )
        return messages

    def stream_text(self, observation: str) -> str:
        """``stream`` layout: the text an observation adds to the assistant stream."""
        return self.observation_template.replace("{observation}", observation)


def _check_tools(tools: Any) -> tuple[Mapping[str, Any], ...]:
    """``AgentInterface.tools``: a list of ``{"type": "function", "function": {"name": ...,
    "parameters": {...}}}`` schemas with distinct names."""
    if isinstance(tools, (str, Mapping)) or not isinstance(tools, Sequence):
        raise EnvContractError(f"protocol tools must be a list of tool schemas, got {tools!r:.80}")
    names = []
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name or tool.get("type") != "function":
            raise EnvContractError(
                f"protocol tools[{i}] must be {{'type': 'function', 'function': {{'name': ..., "
                f"'description': ..., 'parameters': {{...}}}}}} (a JSON schema), got {tool!r:.120}"
            )
        names.append(name)
    if len(set(names)) != len(names):
        raise EnvContractError(f"protocol tools repeat a name: {names}")
    return tuple(tools)


NEUTRAL = AgentInterface()
"""The fallback when an env has no ``protocol``: no system prompt, no stop strings, chat layout."""
