"""System prompts per category and the conversation an agent starts from (passkt protocol).

The prompts belong to the envs now (``passkt.envs.protocol.SYSTEM_PROMPTS``, handed to agents as
``env.protocol``); this module keeps the old names for code that imports them.
"""

from __future__ import annotations

from passkt.agents.policy import Conversation
from passkt.envs.protocol import SYSTEM_PROMPTS

__all__ = ["SYSTEM_PROMPTS", "initial_conversation", "system_prompt"]


def system_prompt(category: str) -> str:
    """The system prompt of a category (``math``, ``comparison`` or ``bridge``)."""
    try:
        return SYSTEM_PROMPTS[category]
    except KeyError:
        known = ", ".join(sorted(SYSTEM_PROMPTS))
        raise ValueError(f"No system prompt for category {category!r}; known: {known}") from None


def initial_conversation(category: str, observation: str) -> Conversation:
    """The conversation at the first turn: system prompt plus the env's first observation."""
    return [
        {"role": "system", "content": system_prompt(category)},
        {"role": "user", "content": observation},
    ]
