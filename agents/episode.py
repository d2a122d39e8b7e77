"""What a rollout returns: episodes with their turns, transcript, outcome and token record, and
the rollout's cost (``passkt.agents.rollout`` fills them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from passkt.agents.policy import Completion, Message


@dataclass(frozen=True)
class Turn:
    """One agent turn: the completion, the action it was parsed as, and the env's reply."""

    completion: Completion
    action: str
    """The action's kind: ``info["action"]`` as the env reported it (passkt's envs: ``search``,
    ``answer`` or ``invalid``), else the tag of the protocol's stop string the text ends with
    (``</move>`` gives ``move``), else ``unknown`` (see :func:`action_kind`)."""
    observation: str
    """The env's reply; empty after the final action."""


@dataclass
class Episode:
    """One episode (or budget branch) with its transcript, outcome and token record."""

    task_id: str
    sample: int
    budget: int
    category: str
    messages: list[Message] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    tool_calls: int = 0
    answer: str | None = None
    reward: float = 0.0
    """The return: the sum of the rewards of every step (as the wrapped env gave them)."""
    correct: bool = False
    f1: float | None = None
    """``info["f1"]`` of the last step; ``None`` for an env that reports no F1."""
    terminated: bool = False
    truncated: bool = False
    token_ids: list[int] = field(default_factory=list)
    """The whole sequence (prompt, turns, observations); filled when token ids are known."""
    policy_mask: list[bool] = field(default_factory=list)
    """True exactly at policy tokens (trainable); prompt and observation tokens are False."""
    logprobs: list[float] = field(default_factory=list)
    """Sampling log-probability at policy tokens, 0.0 elsewhere."""
    generated_tokens: int = 0
    """Tokens this episode generated itself (a branch does not count its shared prefix). For a
    policy without token ids and no tokenizer, whitespace-separated words."""
    env_error: dict[str, Any] | None = None
    """Set when the env, not the agent, ended the episode: it raised, its worker died or hung
    (``passkt.agents.env_workers.EnvFailure.to_record``: kind, detail, turn). ``correct`` is
    then False; how evaluations count such episodes is the run's ``env_failures`` setting."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def actions(self) -> list[str]:
        return [turn.action for turn in self.turns]

    def to_record(self) -> dict[str, Any]:
        """A JSON-ready dict (no token arrays) for result files; ``env_error`` only when set."""
        record = {
            "task_id": self.task_id,
            "sample": self.sample,
            "budget": self.budget,
            "category": self.category,
            "correct": self.correct,
            "reward": self.reward,
            "f1": self.f1,
            "answer": self.answer,
            "tool_calls": self.tool_calls,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "actions": self.actions,
            "generated_tokens": self.generated_tokens,
            "messages": self.messages,
        }
        if self.env_error is not None:
            record["env_error"] = self.env_error
        return record


@dataclass(frozen=True)
class RolloutStats:
    """Cost of one rollout."""

    policy_calls: int
    generated_tokens: int
    generate_seconds: float
    wall_seconds: float
    episodes: int


@dataclass(frozen=True)
class RolloutResult:
    episodes: list[Episode]
    """One per (task_id, sample, budget): task-major, then sample, then budget."""
    stats: RolloutStats
