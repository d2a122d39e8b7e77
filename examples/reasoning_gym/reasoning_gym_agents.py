"""An agent for reasoning-gym's ``chain_sum``: ``--policy py:reasoning_gym_agents:make_policy``.

It computes the sum exactly, but with probability ``slip`` a turn forgets the answer tags (a
format slip, which costs one call of the budget T) and with probability ``error`` it is off by
one. Options reach it from the command line: ``--policy-options slip=0.5,error=0``. With
``slip=0,error=0`` it is the expert of ``passkt train sft --expert``.
"""

import random
import re

from passkt.agents.policy import Completion

EXPRESSION = re.compile(r"(-?\d+(?:\s*[-+]\s*\d+)*)\s*=")


class ChainSummer:
    def __init__(self, slip=0.5, error=0.2, seed=0):
        self.slip, self.error, self.seed = slip, error, seed

    def generate(self, conversations, params):
        out = []
        for row, messages in enumerate(conversations):
            question = next(m["content"] for m in messages if m["role"] == "user")
            terms = re.findall(r"[-+]?\s*\d+", EXPRESSION.search(question).group(1))
            total = sum(int(term.replace(" ", "")) for term in terms)
            seed = params.seeds[row] if params.seeds else (params.seed or 0) + row
            rng = random.Random(f"{self.seed}-{seed}-{len(messages)}")
            if rng.random() < self.error:
                total += rng.choice((-1, 1))
            slipped = rng.random() < self.slip
            out.append(
                Completion(f"The sum is {total}." if slipped else f"<answer>{total}</answer>")
            )
        return out


def make_policy(context, slip=0.5, error=0.2, seed=0):
    """passkt calls this with the env's ``PolicyContext`` and the ``--policy-options``."""
    return ChainSummer(slip, error, seed)


def make_expert(context):
    """The solver without slips or errors: the expert of ``passkt train sft --expert``."""
    return ChainSummer(slip=0.0, error=0.0)
