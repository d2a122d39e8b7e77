"""Envs that fail on model text the way game engines, sandboxes and servers do (no passkt import).

``Crashy-v0`` is a word game: the question names a word; ``<answer>WORD</answer>`` ends the episode
(reward 1 when right); any other text is a move that shows the word again. ``fail=`` picks how the
engine breaks, each deterministic in the action, so a run and its replay break at the same turn:

- ``segv``: an action with the control character ``\\x11`` crashes the process (a real SIGSEGV, by
  reading address 0), as a game engine's C core does.
- ``hang``: an action with NUL never returns.
- ``raise``: about one action in 50 (by a hash of the action) raises ``RuntimeError``.
- ``none``: never fails (the control).

``every=N`` also breaks ``segv`` and ``hang`` on about one action in N (by the hash), so a model
that writes no control character still meets them; for ``raise`` it replaces the 50.

``make_agent`` (``--policy py:crashy:make_agent``) writes such text: per row and turn, from its own
seed, it answers right, answers wrong, or sends a move of random characters that include control
characters and NUL now and then.
"""

import ctypes
import time
import zlib

import gymnasium as gym
import numpy as np

from passkt.agents.policy import Completion

WORDS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heath", "inlet", "lotus"]
PROMPT = "Say the word back: reply <answer>word</answer>; anything else is a move."


class Crashy(gym.Env):
    def __init__(self, fail="segv", split="test", step_seconds=0.0, busy=False, every=0):
        self.fail, self.step_seconds, self.busy = fail, step_seconds, busy
        self.every = every or (50 if fail == "raise" else 0)
        self.tasks = WORDS[:6] if split == "test" else WORDS[6:]
        self.protocol = {"system_prompt": PROMPT, "stop": ["</answer>"]}
        self.observation_space = gym.spaces.Text(100_000)
        self.action_space = gym.spaces.Text(100_000)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if options and "task_id" in options:
            self.word = options["task_id"]
        else:
            self.word = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        return f"The word is {self.word}.", {}

    def step(self, action):
        self._work()
        hashed = bool(self.every and action) and self._hash(action) % self.every == 0
        if self.fail == "segv" and ("\x11" in action or hashed):
            ctypes.string_at(0)  # a segmentation fault, as a C engine's
        if self.fail == "hang" and ("\x00" in action or hashed):
            while True:
                time.sleep(0.05)
        if self.fail == "raise" and hashed:
            raise RuntimeError(f"engine error on {action[:20]!r}")
        if action.startswith("<answer>"):
            said = action.removeprefix("<answer>").removesuffix("</answer>").strip()
            right = said == self.word
            return "Done.", float(right), True, False, {"correct": right}
        return f"The word is {self.word}.", 0.0, False, False, {}

    @staticmethod
    def _hash(action):
        return zlib.crc32(action.encode("utf-8", "surrogatepass"))

    def _work(self):
        """``step_seconds`` of waiting (a server round trip) or, with ``busy``, of CPU."""
        if self.step_seconds <= 0:
            return
        if not self.busy:
            time.sleep(self.step_seconds)
            return
        end = time.process_time() + self.step_seconds
        while time.process_time() < end:
            pass


gym.register("Crashy-v0", entry_point=Crashy)

_ALPHABET = [*"abcxyz <>/", "\x11", "\x00", "\x07"]


class NoisyAgent:
    """Answers right with ``right``, wrong with ``wrong``, else moves with random characters."""

    seeds_each_row = True

    def __init__(self, seed=0, right=0.25, wrong=0.1):
        self.seed, self.right, self.wrong = seed, right, wrong

    def generate(self, conversations, params):
        out = []
        for row, messages in enumerate(conversations):
            own = [params.seeds[row]] if params.seeds is not None else [params.seed or 0, row]
            rng = np.random.default_rng([self.seed, *own])
            word = messages[-1]["content"].rsplit(" ", 1)[-1].rstrip(".")
            draw = rng.random()
            if draw < self.right:
                out.append(Completion(f"<answer>{word}</answer>"))
            elif draw < self.right + self.wrong:
                out.append(Completion("<answer>nope</answer>"))
            else:
                chars = rng.choice(len(_ALPHABET), size=int(rng.integers(3, 12)))
                out.append(Completion("".join(_ALPHABET[i] for i in chars)))
        return out


def make_agent(context, seed=0, right=0.25, wrong=0.1):
    """The ``py:`` factory passkt calls with the env's ``PolicyContext``."""
    return NoisyAgent(seed, right, wrong)
