"""Episodes the env failed, not the agent: how many, which tasks, and how a run counts them.

An env that raised, or whose worker crashed or hung (``passkt.agents.env_workers``), ends its
episode with ``env_error`` set in the record (kind, detail, turn) and ``correct`` false. Whether
the surface reads such an episode as the agent's failure is the run's choice, recorded in its
manifest (``runtime.env_failures``):

- ``count`` (the default): the episode counts as a failure, as any unsolved episode does. The
  surface then describes the agent *with this env*, crashes included; ``report`` and ``compare``
  print how many episodes that concerns, so it is never silent.
- ``drop``: every task with at least one env failure leaves the surface (all its samples, at
  every T, so each remaining task still has n samples and the estimator stays unbiased for the
  tasks that remain). A comparison keeps the tasks both runs kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ENV_FAILURE_RULES", "EnvFailures", "env_failure_rule"]

ENV_FAILURE_RULES = ("count", "drop")


def env_failure_rule(manifest: Mapping[str, Any]) -> str:
    """The run's rule (``count`` for a run made before the setting existed)."""
    return str((manifest.get("runtime") or {}).get("env_failures", "count"))


@dataclass
class EnvFailures:
    """The env failures of a run's finished chunks (a sink for the result store's scan)."""

    rule: str = "count"
    kinds: Counter = field(default_factory=Counter)
    tasks: dict[str, int] = field(default_factory=dict)
    """Task id -> episodes of it that the env failed."""
    _journal: list[tuple[str, str]] = field(default_factory=list)

    @property
    def episodes(self) -> int:
        return sum(self.tasks.values())

    def add(self, record: Mapping[str, Any]) -> None:
        error = record.get("env_error")
        if not error:
            return
        task, kind = str(record.get("task_id")), str(error.get("kind", "unknown"))
        self.tasks[task] = self.tasks.get(task, 0) + 1
        self.kinds[kind] += 1
        self._journal.append((task, kind))

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, point: int) -> None:
        for task, kind in self._journal[point:]:
            self.tasks[task] -= 1
            if not self.tasks[task]:
                del self.tasks[task]
            self.kinds[kind] -= 1
        del self._journal[point:]

    def line(self, name: str) -> str | None:
        """One line for a report (``None`` without env failures)."""
        if not self.tasks:
            return None
        kinds = ", ".join(f"{count} {kind}" for kind, count in sorted(self.kinds.items()) if count)
        how = (
            "counted as failures of the agent (env_failures=count)"
            if self.rule == "count"
            else "their tasks left out of the surface (env_failures=drop)"
        )
        return (
            f"{name}: {self.episodes} episode(s) in {len(self.tasks)} task(s) ended by the env, "
            f"not the agent ({kinds}); {how}"
        )
