"""TextArena's single-player games as a passkt env: a 25-line adapter, no passkt import.

``TextArena-v0`` plays one game of the TextArena library (``game=``, default
``GuessTheNumber-v0``; its ``-raw`` variant, so observations are the game's own messages):

- ``reset(seed=N)`` starts the game with seed N (passkt's seed tasks: test seed-0, seed-1, ...).
  TextArena draws its games from the global ``random`` module, seeded by that reset seed.
- ``step(text)`` plays the move; the observation is what the game answers.
- When the game ends, the reward is TextArena's: 1 for a win, and for a loss a shaped score in
  [0, 1) (GuessTheNumber: how close the last guess was). ``info["correct"]`` is the win, so a
  close loss is not counted as a success.

The game has no tools, so passkt's budget wrapper gives T its meaning: every turn that does not
end the game is a call, and the turn after the T-th call must end it (T + 1 moves in all).
"""

import gymnasium as gym
import textarena as ta

PROTOCOL = {
    "system_prompt": "You are playing a text game. Reply with your move only, in the format "
    "the game asks for (e.g. [10]).",
    "stop": ["]"],
}


class TextArenaEnv(gym.Env):
    def __init__(self, game="GuessTheNumber-v0"):
        self.game, self.protocol, self.category = game, PROTOCOL, game
        self.observation_space = self.action_space = gym.spaces.Text(65536)

    def reset(self, *, seed=None, options=None):
        self.env = ta.make(env_id=f"{self.game}-raw")
        self.env.reset(num_players=1, seed=seed)
        return self._messages(), {}

    def step(self, action):
        done, _ = self.env.step(action=action)
        if not done:
            return self._messages(), 0.0, False, False, {}
        rewards, _ = self.env.close()
        reward = float(rewards[0]) if rewards else 0.0
        return "Game over.", reward, True, False, {"correct": reward >= 1.0}

    def _messages(self):
        _, observation = self.env.get_observation()
        return "\n".join(text for sender, text, _ in observation if sender == ta.GAME_ID)


gym.register("TextArena-v0", entry_point=TextArenaEnv)
