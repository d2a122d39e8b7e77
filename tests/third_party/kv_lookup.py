"""A key-value lookup env written from docs/env-contract.md alone (no passkt import).

Two envs, registered on import:

- ``KVLookupMinimal-v0``: only what the contract requires (a ``gymnasium.Env`` with text actions
  and observations). passkt falls back for everything else: tasks are reset seeds, the budget is
  enforced by a wrapper, branches are replayed, success is the last reward at its maximum (1.0).
- ``KVLookup-v0``: the same game with every optional capability: a task list with ``task_id``
  reset options and splits, ``max_tool_calls`` with a final notice, ``fork`` for prefix sharing,
  ``info["correct"]`` and ``info["tool_calls"]``, a category and its own protocol (tags
  ``<get>`` / ``<answer>``).

The question names a key; ``<get>KEY</get>`` shows its value; ``<answer>VALUE</answer>`` ends the
episode with reward 1 when right. ``digits`` sets which digits the values are drawn from.
"""

import copy
import re

import gymnasium as gym

KEYS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heath", "inlet", "juniper"]
ACTION = re.compile(r"<(get|answer)>(.*?)</\1>", re.DOTALL)


def value_of(key, digits):
    return digits[sum(map(ord, key)) % len(digits)]


class KVLookupMinimal(gym.Env):
    def __init__(self, digits="0123456789"):
        self.digits = digits
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.key = KEYS[int(self.np_random.integers(len(KEYS)))]
        return f"What is the value of key {self.key}?", {}

    def step(self, action):
        match = ACTION.search(action)
        if match and match.group(1) == "answer":
            right = match.group(2).strip() == value_of(self.key, self.digits)
            return "Done.", float(right), True, False, {}
        if match:
            return self.lookup(match.group(2).strip()), 0.0, False, False, {}
        return "Write <get>key</get> or <answer>value</answer>.", 0.0, False, False, {}

    def lookup(self, key):
        return f"{key} = {value_of(key, self.digits) if key in KEYS else 'unknown'}"


gym.register("KVLookupMinimal-v0", entry_point=KVLookupMinimal)

PROMPT = "Find the value of a key: look it up with <get>key</get>, reply <answer>value</answer>."


class KVLookup(gym.Env):
    def __init__(self, digits="0123456789", split="test", max_tool_calls=2):
        self.digits, self.max_tool_calls = digits, max_tool_calls
        self.tasks = KEYS[:5] if split == "test" else KEYS[5:]
        self.protocol = {"system_prompt": PROMPT, "stop": ["</get>", "</answer>"]}
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "task_id" in options:
            self.key = options["task_id"]
        else:
            self.key = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self.calls, self.last = 0, f"What is the value of key {self.key}?"
        return self._shown(), self._info(False)

    def step(self, action):
        match = ACTION.search(action)
        if match and match.group(1) == "answer":
            right = match.group(2).strip() == value_of(self.key, self.digits)
            return "Done.", float(right), True, False, self._info(right)
        if self.calls >= self.max_tool_calls:
            return "No answer.", 0.0, False, True, self._info(False)
        self.calls += 1
        if match is None:
            self.last = "Write <get>key</get> or <answer>value</answer>."
        else:
            key = match.group(2).strip()
            self.last = f"{key} = {value_of(key, self.digits) if key in KEYS else 'unknown'}"
        return self._shown(), 0.0, False, False, self._info(False)

    def fork(self, max_tool_calls):
        clone = copy.copy(self)
        clone.max_tool_calls = max_tool_calls
        return clone, clone._shown()

    def _shown(self):
        if self.calls >= self.max_tool_calls:
            return self.last + "\nNo lookups left: answer now."
        return self.last

    def _info(self, correct):
        return {"correct": correct, "tool_calls": self.calls, "category": "lookup"}


gym.register("KVLookup-v0", entry_point=KVLookup)
