"""reasoning-gym's procedural tasks as a passkt env: a 25-line adapter, no passkt import.

``ReasoningGym-v0`` serves one reasoning-gym dataset (``task=``, default ``chain_sum``):

- ``tasks``: ``size`` generated problems per split; test and train are drawn with different
  dataset seeds, so they never share a problem. ``reset(options={"task_id": ...})`` picks one.
- ``step(text)``: a turn with ``<answer>...</answer>`` is scored by the dataset's own
  ``score_answer`` and ends the episode; any other turn is answered with a reminder of the format.
- The reward is reasoning-gym's score, in [0, 1] (some datasets give partial credit);
  ``info["correct"]`` is a full score, so partial credit is never counted as a success.

The tasks have no tools, so passkt's budget wrapper gives T its meaning: every turn that does not
answer is a call (a format slip the agent may recover from), and the turn after the T-th call must
answer.
"""

import re

import gymnasium as gym
import reasoning_gym

ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
PROTOCOL = {
    "system_prompt": "Solve the problem. Give the final answer as <answer>ANSWER</answer>.",
    "stop": ["</answer>"],
}


class ReasoningGymEnv(gym.Env):
    def __init__(self, task="chain_sum", size=50, seed=0, split="test"):
        seed = seed if split == "test" else seed + 1_000_003
        self.dataset = reasoning_gym.create_dataset(task, size=size, seed=seed)
        self.tasks = [f"{task}-{split}-{i}" for i in range(size)]
        self.protocol, self.category = PROTOCOL, task
        self.observation_space = self.action_space = gym.spaces.Text(65536)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id", self.tasks[0])
        self.entry = self.dataset[self.tasks.index(task_id)]
        return self.entry["question"], {}

    def step(self, action):
        match = ANSWER.search(action)
        if match is None:
            return "Give the final answer as <answer>ANSWER</answer>.", 0.0, False, False, {}
        score = float(self.dataset.score_answer(match.group(1).strip(), self.entry))
        return "Done.", score, True, False, {"correct": score >= 1.0, "answer": match.group(1)}


gym.register("ReasoningGym-v0", entry_point=ReasoningGymEnv)
