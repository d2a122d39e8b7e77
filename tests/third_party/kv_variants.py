"""Two more ways a third party writes the key-value env (no passkt import), registered on import.

- ``KVLookupKwargs-v0``: the constructor takes ``**options``, as an adapter that forwards them
  to its library's ``make`` does. It knows ``digits`` and quietly ignores every other option, so
  a ``max_tool_calls`` or ``split`` passed to it would do nothing: passkt must not count them as
  taken (it enforces T with its budget wrapper and names tasks by seed).
- ``KVLookupShaped-v0``: the minimal env under Gymnasium wrappers: ``TransformReward(r - 0.5)``
  (a penalty-shaped reward: a right answer pays 0.5, a wrong one -0.5, every other turn -0.5) and
  ``TimeLimit``. The spec's ``reward_threshold`` says what success is.
"""

import gymnasium as gym
from kv_lookup import KEYS, KVLookupMinimal, value_of


class KVLookupKwargs(gym.Env):
    def __init__(self, **options):
        self.game = KVLookupMinimal(digits=options.get("digits", "0123456789"))
        self.observation_space = gym.spaces.Text(4096)
        self.action_space = gym.spaces.Text(4096)

    def reset(self, *, seed=None, options=None):
        return self.game.reset(seed=seed, options=options)

    def step(self, action):
        return self.game.step(action)


gym.register("KVLookupKwargs-v0", entry_point=KVLookupKwargs)


def make_shaped(digits="0123456789"):
    env = gym.wrappers.TimeLimit(KVLookupMinimal(digits), max_episode_steps=50)
    return gym.wrappers.TransformReward(env, lambda r: r - 0.5)


gym.register("KVLookupShaped-v0", entry_point=make_shaped, reward_threshold=0.5)

__all__ = ["KEYS", "KVLookupKwargs", "make_shaped", "value_of"]
