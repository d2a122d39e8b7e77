"""A guess-the-number game behind a ``**kwargs`` adapter (no passkt import), registered on import.

``NumberGame`` stands for a game library: its constructor takes the options it knows and, like
many libraries, ignores the rest. ``GuessNumber`` is the natural adapter: it forwards every
constructor keyword to the library. So ``max_tool_calls`` is swallowed, and only passkt's budget
wrapper limits the guesses: at T = 0 one guess (a random guesser solves 1 in 10), at T = t,
t + 1 guesses.

Action: ``<guess>N</guess>``. A right guess ends the episode with reward 1; a wrong one is
answered ``higher`` or ``lower`` and the game goes on.
"""

import re

import gymnasium as gym

GUESS = re.compile(r"<guess>\s*(\d+)\s*</guess>")


class NumberGame:
    def __init__(self, low=1, high=10, **unused):
        self.low, self.high = low, high

    def new_secret(self, rng):
        return int(rng.integers(self.low, self.high + 1))


class GuessNumber(gym.Env):
    def __init__(self, **kwargs):
        self.game = NumberGame(**kwargs)
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.secret = self.game.new_secret(self.np_random)
        return f"Guess my number from {self.game.low} to {self.game.high}: <guess>N</guess>.", {}

    def step(self, action):
        match = GUESS.search(action)
        if match is None:
            return "Write <guess>N</guess>.", 0.0, False, False, {}
        guess = int(match.group(1))
        if guess == self.secret:
            return "Right!", 1.0, True, False, {}
        return ("higher" if guess < self.secret else "lower"), 0.0, False, False, {}


gym.register("GuessNumber-v0", entry_point=GuessNumber)
