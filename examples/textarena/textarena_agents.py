"""An agent for TextArena's GuessTheNumber: ``--policy py:textarena_agents:make_policy``.

It reads the range from the game's prompt and every ``higher`` / ``lower`` hint, and guesses a
number that is still possible: uniformly at random (``strategy="random"``, the default: pass@k
grows with k and T) or the middle one (``strategy="bisect"``: the game's expert, which wins in at
most 5 moves on 1-20). Options reach it from the command line: ``--policy-options
strategy=bisect``.
"""

import random
import re

from passkt.agents.policy import Completion


class NumberGuesser:
    def __init__(self, strategy="random", seed=0):
        if strategy not in ("random", "bisect"):
            raise ValueError(f"strategy must be 'random' or 'bisect', got {strategy!r}")
        self.strategy, self.seed = strategy, seed

    def generate(self, conversations, params):
        out = []
        for row, messages in enumerate(conversations):
            users = [m["content"] for m in messages if m["role"] == "user"]
            low, high = map(int, re.search(r"between (\d+) and (\d+)", users[0]).groups())
            guesses = [m["content"] for m in messages if m["role"] == "assistant"]
            for guess, hint in zip(guesses, users[1:], strict=False):
                number = int(re.search(r"\d+", guess).group())
                if "higher" in hint:
                    low = max(low, number + 1)
                elif "lower" in hint:
                    high = min(high, number - 1)
            high = max(low, high)
            if self.strategy == "bisect":
                guess = (low + high) // 2
            else:
                seed = params.seeds[row] if params.seeds else (params.seed or 0) + row
                guess = random.Random(f"{self.seed}-{seed}-{len(guesses)}").randint(low, high)
            out.append(Completion(f"[{guess}]"))
        return out


def make_policy(context, strategy="random", seed=0):
    """passkt calls this with the env's ``PolicyContext`` and the ``--policy-options``."""
    return NumberGuesser(strategy, seed)


def make_expert(context):
    """The bisecting guesser: the expert of ``passkt train sft --expert``."""
    return NumberGuesser("bisect")
