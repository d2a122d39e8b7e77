"""A user's own agent for the KV lookup envs, loaded with ``--policy py:kv_agents:make_policy``.

It follows the protocol of docs/env-contract.md: ``generate(conversations, params)`` returns one
completion per conversation (``params.n`` is always 1 in passkt's rollouts). It looks the key up,
then answers with the value it read; ``lookups=0`` makes it answer at once with a guess.
"""

import re

from passkt.agents.policy import Completion


class LookupAgent:
    def __init__(self, stop, lookups=1):
        self.stop, self.lookups = stop, lookups

    def generate(self, conversations, params):
        out = []
        for messages in conversations:
            question = next(m["content"] for m in messages if m["role"] == "user")
            key = re.search(r"key (\w+)", question).group(1)
            seen = [m["content"] for m in messages[1:] if m["role"] == "user"]
            values = re.findall(rf"{key} = (\w+)", "\n".join(seen))
            done = sum(m["role"] == "assistant" for m in messages) >= self.lookups
            if values:
                out.append(Completion(f"<answer>{values[-1]}</answer>"))
            elif done:
                out.append(Completion("<answer>0</answer>"))
            else:
                out.append(Completion(f"<get>{key}</get>"))
        return out


def make_policy(context, lookups=1):
    """The factory passkt calls with the env's ``PolicyContext``."""
    return LookupAgent(context.protocol.stop, lookups=lookups)


class RandomGuesser:
    """Guesses uniformly among the numbers still possible (reads ``higher`` / ``lower``)."""

    def __init__(self, low, high, seed):
        self.low, self.high, self.seed = low, high, seed

    def generate(self, conversations, params):
        import random

        out = []
        for row, messages in enumerate(conversations):
            low, high, guess = self.low, self.high, None
            for message in messages:
                found = re.search(r"<guess>(\d+)</guess>", message["content"])
                if message["role"] == "assistant" and found:
                    guess = int(found.group(1))
                elif message["role"] == "user" and guess is not None:
                    low, high = (
                        (guess + 1, high) if message["content"] == "higher" else (low, guess - 1)
                    )
            seed = params.seeds[row] if params.seeds else (params.seed or 0) + row
            rng = random.Random(f"{self.seed}-{seed}-{len(messages)}")
            out.append(Completion(f"<guess>{rng.randint(low, max(low, high))}</guess>"))
        return out


def make_guesser(context, low=1, high=10, seed=0):
    """The factory of ``RandomGuesser`` (``--policy py:kv_agents:make_guesser``)."""
    return RandomGuesser(low, high, seed)
