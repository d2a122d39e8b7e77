"""Hostile text for a new env: does it survive what a model may write?

A model samples any string: control characters, NUL, lone surrogates, 100 kB of one letter, half
an action tag. A game engine may segfault on one of them and a sandbox hang on another, and an RL
run samples millions of actions, so it meets them. :func:`probe_env` steps a fresh episode of the
env with each text of :func:`hostile_actions` in an env worker (``passkt.agents.env_workers``)
and reports what raised, crashed or hung, before any run (``passkt check-env ID``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from passkt.agents.env_runtime import EnvRunner
from passkt.agents.env_workers import EnvFailure, WorkerEnvs
from passkt.envs.contract import EnvContract

__all__ = ["ProbeResult", "hostile_actions", "probe_env"]

_CLOSING = re.compile(r"</([A-Za-z_][\w.-]*)>")


def hostile_actions(stop: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: control characters, NUL, lone surrogates, very long text, format
    and markup characters, and every action tag of the protocol (its stop strings ``</tag>``)
    malformed: opened only, closed only, unclosed, nested, doubled, empty, with a space."""
    cases = [
        ("empty", ""),
        ("NUL", "\x00"),
        ("NUL inside", "a\x00b"),
        ("control characters", "".join(chr(c) for c in range(1, 32))),
        ("DEL and C1", "\x7f\x80\x85\x9f"),
        ("control inside", "a\x11b"),
        ("escape sequence", "\x1b[2J\x1b[H"),
        ("lone surrogate", "\ud800"),
        ("surrogate pair halves", "a\udfff\ud800b"),
        ("BOM and zero-width", "\ufeff\u200b\u200d"),
        ("right-to-left", "\u202eabc"),
        ("emoji", "\U0001f600" * 8),
        ("newlines", "\r\n\r\n\n"),
        ("only spaces", " " * 64),
        ("format braces", "{0} {} %s %(x)s {{"),
        ("markup", "<b><i>&amp;&#0;<![CDATA[x]]>"),
        ("100 kB", "a" * 100_000),
        ("100 kB of lines", "a\n" * 50_000),
    ]
    for stop_string in stop:
        match = _CLOSING.fullmatch(stop_string)
        if not match:
            continue
        tag = match.group(1)
        opened, closed = f"<{tag}>", f"</{tag}>"
        cases += [
            (f"<{tag}> only", opened),
            (f"</{tag}> only", closed),
            (f"<{tag}> unclosed", f"{opened}x"),
            (f"<{tag}> empty", opened + closed),
            (f"<{tag}> nested", f"{opened}{opened}x{closed}{closed}"),
            (f"<{tag}> doubled", f"{opened}x{closed}{opened}y{closed}"),
            (f"<{tag}> spaced", f"< {tag} >x</ {tag} >"),
            (f"<{tag}> with NUL", f"{opened}\x00{closed}"),
            (f"<{tag}> 100 kB", opened + "x" * 100_000 + closed),
        ]
    return cases


@dataclass(frozen=True)
class ProbeResult:
    label: str
    text: str
    outcome: str
    """``ok``, or an env failure kind: ``exception``, ``signal``, ``timeout``."""
    detail: str


def probe_env(
    env_id: str,
    env_kwargs: Mapping[str, Any],
    contract: EnvContract,
    *,
    split: str = "test",
    timeout: float = 10.0,
    budget: int = 3,
) -> list[ProbeResult]:
    """Step the env's first task with each hostile action, each on a fresh episode, in one env
    worker (replaced whenever the env kills it); what happened to each."""
    runner = EnvRunner(env_id, {**env_kwargs, "split": split}, contract)
    task = contract.task_ids[0] if contract.task_ids else "seed-0"
    envs = WorkerEnvs(runner, budget, workers=1, step_timeout=timeout)
    results = []
    try:
        for label, text in hostile_actions(contract.protocol.stop):
            started = envs.start(0, budget, task, 0)
            if isinstance(started, EnvFailure):
                results.append(ProbeResult(label, text, started.kind, f"reset: {started.detail}"))
                continue
            handle, _, _, _, history = started
            (reply,) = envs.step([(handle, text, history, 0)])
            if isinstance(reply, EnvFailure):
                results.append(ProbeResult(label, text, reply.kind, reply.detail))
            else:
                results.append(ProbeResult(label, text, "ok", ""))
            envs.close(handle)
    finally:
        envs.shutdown()
    return results
