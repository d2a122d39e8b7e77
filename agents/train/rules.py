"""What the plan check's rules give back: a ``Check`` per rule, a ``PlanError`` for the first
that fails (``passkt.agents.train.plan``, ``options``, ``versions``)."""

from __future__ import annotations

from dataclasses import dataclass


class PlanError(ValueError):
    """A run that cannot start or fit: the message names the rule and the setting that fixes it."""


@dataclass(frozen=True)
class Check:
    """One rule the engines enforce, with the arithmetic that decided it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    warning: bool = False

    def line(self) -> str:
        mark = "ok" if self.ok else ("warn" if self.warning else "FAIL")
        return f"[{mark}] {self.name}: {self.detail}" + (f"; fix: {self.fix}" if self.fix else "")
