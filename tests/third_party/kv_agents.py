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
