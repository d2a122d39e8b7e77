"""passkt.agents: policies, prompts, the rollout engine and trainers."""
