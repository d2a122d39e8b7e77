"""System prompts, one per category, and the conversation an agent starts from.

The prompts explain the action protocol of ``passkt.envs`` (Search-R1 tags). They never mention the
budget: with a hidden budget the only word about it is the env's final notice, which is what makes
an episode with budget T a prefix of one with a larger budget.
"""

from __future__ import annotations

from passkt.agents.policy import Conversation

_PROTOCOL = (
    "You can search a document collection. To search, end your turn with "
    "<search>your query</search>; the results come back inside <information>...</information>. "
    "You may think first inside <think>...</think>. When you know the answer, end your turn with "
    "<answer>the answer</answer>. Each turn must end with exactly one <search> or one <answer>."
)

SYSTEM_PROMPTS: dict[str, str] = {
    "math": (
        "You are a careful problem solver. Reason step by step, then give only the final answer "
        "inside <answer>...</answer>, for example <answer>42</answer>. There are no tools."
    ),
    "comparison": (
        "You answer questions that compare two entities. "
        + _PROTOCOL
        + " Look up each entity, then compare. Answer with a short phrase: a name, or yes / no."
    ),
    "bridge": (
        "You answer questions that need several facts found one after another: a fact you find "
        "names the next thing to look up. "
        + _PROTOCOL
        + " Answer with a short phrase, for example a name, a place or a year."
    ),
}


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
