"""Wrappers passkt puts around other people's envs (``passkt.envs.contract`` re-exports them)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

__all__ = ["ToolBudget"]


class ToolBudget(gym.Wrapper):
    """T for an env that does not take ``max_tool_calls``: every turn that does not end the
    episode is a tool call (unless the env reports ``info["tool_calls"]``); the turn after the
    T-th call must end the episode, else it is truncated.

    The cut-off turn is not a call (the episode records T calls), it is a failure
    (``info["correct"]`` is False), and its reward is the env's
    reward for that turn but at most ``reward_floor`` (0 unless the env declares a lower
    ``reward_range``): running out of budget never pays more than finishing, also under a
    penalty-shaped reward such as ``TransformReward(r - 0.5)``.
    """

    def __init__(self, env: gym.Env, max_tool_calls: int, reward_floor: float = 0.0) -> None:
        super().__init__(env)
        self.max_tool_calls = max_tool_calls
        self.reward_floor = reward_floor
        self._calls = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        self._calls = 0
        observation, info = self.env.reset(**kwargs)
        return observation, {"tool_calls": 0, **info}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        over = self._calls >= self.max_tool_calls
        observation, reward, terminated, truncated, info = self.env.step(action)
        if not (terminated or truncated):
            if over:
                cut = min(float(reward), self.reward_floor)
                cut_info = {**info, "tool_calls": self._calls, "correct": False}
                return observation, cut, False, True, cut_info
            self._calls = int(info.get("tool_calls", self._calls + 1))
        return observation, reward, terminated, truncated, {"tool_calls": self._calls, **info}
