"""Policy specs: one string names a policy everywhere (CLI, manifests, configs).

``hf:PATH_OR_ID``, ``vllm:ID``, ``openai:URL#MODEL``, ``scripted:oracle``, ``scripted:heuristic``,
``lean:PATH_OR_ID`` (``HFPolicy`` with the testbed's lean CPU decoding loop for Llama / Qwen2
models: the same completions, several times faster; see ``passkt.agents.lean``),
and ``py:MODULE:FACTORY`` for your own agent: ``FACTORY(context, **options)`` is called with a
``PolicyContext`` (the env id and kwargs, its task ids and records, its protocol) and returns any
object with ``generate(conversations, params)``. ``hf:`` on a CPU (the default device) is
``lean:``: the lean loop falls back to ``HFPolicy``'s own for any model it does not support, so it
is never slower (``benchmarks/smollm_speed.py``).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from passkt.agents.hf import HFPolicy
from passkt.agents.lean import LeanPolicy
from passkt.agents.openai_policy import OpenAIPolicy
from passkt.agents.policy import Policy
from passkt.agents.scripted import HeuristicPolicy, OraclePolicy
from passkt.agents.vllm_policy import VLLMPolicy
from passkt.envs.contract import NEUTRAL, AgentInterface
from passkt.envs.tasks import Task

KINDS = ("hf", "lean", "vllm", "openai", "scripted", "py")
SCRIPTED = ("oracle", "heuristic")


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``kind:target`` and check the kind, suggesting a close one for typos."""
    kind, sep, target = spec.partition(":")
    if not sep or not target:
        raise ValueError(
            f"Bad policy spec {spec!r}: expected KIND:TARGET with KIND one of {', '.join(KINDS)}, "
            "e.g. hf:Qwen/Qwen2.5-7B-Instruct, openai:http://localhost:8000/v1#MODEL, "
            "scripted:heuristic."
        )
    if kind not in KINDS:
        close = difflib.get_close_matches(kind, KINDS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        known = ", ".join(KINDS)
        raise ValueError(f"Unknown policy kind {kind!r} in {spec!r}.{hint} Known: {known}.")
    if kind == "scripted" and target not in SCRIPTED:
        close = difflib.get_close_matches(target, SCRIPTED, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"Unknown scripted policy {target!r}.{hint} Known: {', '.join(SCRIPTED)}.")
    if kind == "py":
        module, sep, factory = target.rpartition(":")
        if not sep or not module or not factory.isidentifier():
            raise ValueError(
                f"Bad policy spec {spec!r}: your own agent is py:MODULE:FACTORY, e.g. "
                "py:my_agents:make_policy (FACTORY(context, **options) returns the policy)"
            )
    if kind == "openai" and "#" not in target:
        raise ValueError(
            f"Bad policy spec {spec!r}: an OpenAI-compatible server needs URL#MODEL, "
            "e.g. openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct"
        )
    return kind, target


@dataclass(frozen=True)
class PolicyContext:
    """What a ``py:`` policy factory is told about the env its policy will play."""

    env_id: str = ""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    task_ids: tuple[str, ...] = ()
    """The tasks of the run (``seed-N`` for an env without a task list)."""
    tasks: tuple[Any, ...] = ()
    """The env's task records (``passkt.envs.Task`` for passkt envs; empty for seed tasks)."""
    protocol: AgentInterface = NEUTRAL
    """The env's protocol (system prompt, stop strings, layout)."""


def resolve_factory(spec: str) -> Callable[..., Any]:
    """The factory a ``py:MODULE:FACTORY`` spec names (imported now, so errors come early)."""
    kind, target = parse_spec(spec)
    if kind != "py":
        raise ValueError(f"{spec!r} is not a py:MODULE:FACTORY spec")
    module_name, _, name = target.rpartition(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as e:  # a user module may raise anything, even exit
        raise ValueError(
            f"policy {spec!r}: cannot import module {module_name!r} ({type(e).__name__}: {e}); "
            "put it on PYTHONPATH "
            "(the CLI also looks in the current directory)"
        ) from e
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"policy {spec!r}: module {module_name!r} has no callable {name!r}")
    return factory


def load_policy(
    spec: str,
    *,
    tasks: Iterable[Task] | None = None,
    context: PolicyContext | None = None,
    **options: Any,
) -> Policy:
    """Build the policy a spec names. ``options`` go to the backend's constructor.

    Args:
        spec: ``hf:PATH_OR_ID``, ``lean:PATH_OR_ID``, ``vllm:ID``, ``openai:URL#MODEL``,
            ``scripted:oracle``, ``scripted:heuristic`` or ``py:MODULE:FACTORY``.
        tasks: The tasks an oracle may be asked about (required for ``scripted:oracle``).
        context: What a ``py:`` factory is told about the env (default: an empty context).
        **options: Backend options, e.g. ``device="cpu", dtype="float32"`` for ``hf``.
    """
    kind, target = parse_spec(spec)
    policy: Policy
    if kind == "py":
        if context is None:
            context = PolicyContext(tasks=tuple(tasks or ()))
        try:
            policy = resolve_factory(spec)(context, **options)
        except (Exception, SystemExit) as e:  # a wrong shape (py:os:system), a bug, an exit
            raise ValueError(
                f"policy {spec!r}: calling {target.rpartition(':')[2]}(context, **options) failed "
                f"({type(e).__name__}: {e}); a py: factory takes a PolicyContext and the policy "
                "options"
            ) from e
        if not callable(getattr(policy, "generate", None)):
            raise ValueError(
                f"policy {spec!r}: the factory returned a {type(policy).__name__}, which has no "
                "generate(conversations, params) method (see passkt.agents.policy.Policy)"
            )
        return policy
    _check_options(spec, kind, target, options)
    if kind == "hf" and options.get("device") in (None, "cpu"):
        # On a CPU the lean loop keeps each episode's KV cache between turns and is faster at
        # every batch size; it samples with HFPolicy's own code, and other models fall back.
        policy = LeanPolicy(target, **options)
    elif kind == "hf":
        policy = HFPolicy(target, **options)
    elif kind == "lean":
        policy = LeanPolicy(target, **options)
    elif kind == "vllm":
        policy = VLLMPolicy(target, **options)
    elif kind == "openai":
        url, _, model = target.partition("#")
        _check_url(spec, url)
        policy = OpenAIPolicy(url, model, **options)
    elif target == "oracle":
        if tasks is None:
            raise ValueError("scripted:oracle needs the task list (load_policy(..., tasks=...)).")
        policy = OraclePolicy(tasks, **options)
    else:
        policy = HeuristicPolicy(**options)
    return policy


def _check_url(spec: str, url: str) -> None:
    """Refuse a URL whose host or port cannot be read (``http://[::1``), in one line, before a
    client tries it and fails deep inside its retries."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (reading it validates it)
    except ValueError as e:
        raise ValueError(f"policy {spec!r}: the URL {url!r} is malformed ({e})") from None
    if not parts.hostname:
        raise ValueError(f"policy {spec!r}: the URL {url!r} names no host")


def _check_options(spec: str, kind: str, target: str, options: dict[str, Any]) -> None:
    """Refuse options the backend's constructor does not take, naming them, before it runs (a
    misspelled ``--policy-options`` key would otherwise be a ``TypeError`` deep in a backend)."""
    backends = {"hf": (LeanPolicy, HFPolicy), "lean": (LeanPolicy,), "vllm": (VLLMPolicy,)}
    backends["openai"] = (OpenAIPolicy,)
    classes = backends.get(kind) or ((OraclePolicy,) if target == "oracle" else (HeuristicPolicy,))
    signatures = [inspect.signature(cls.__init__).parameters.values() for cls in classes]
    closed = [ps for ps in signatures if not any(p.kind is p.VAR_KEYWORD for p in ps)]
    if not closed:  # every constructor forwards **kwargs: it checks them itself
        return
    taken = {p.name for ps in closed for p in ps if p.kind is not p.VAR_POSITIONAL}
    unknown = sorted(set(options) - taken)
    if unknown:
        known = ", ".join(sorted(taken - {"self", "model", "tasks", "base_url"})) or "(none)"
        raise ValueError(f"policy {spec!r} takes no option {', '.join(unknown)}; it takes {known}")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets, braces or quotes."""
    parts, depth, quote, current = [], 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return [p for p in (part.strip() for part in parts) if p]


def _parse_value(text: str) -> Any:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    try:
        return json.loads(text)  # ints, floats, lists, objects, "quoted strings"
    except json.JSONDecodeError:
        return text


def parse_env_kwargs(text: str | None, flag: str = "--env-kwargs") -> dict[str, Any]:
    """Parse ``--env-kwargs``: ``k=v,k=v`` (ints, floats, true/false, none, JSON lists) or JSON.

    Examples: ``hops=3,reveal_budget=true``, ``source=hotpotqa,path=data/dev.json``,
    ``{"hops": 3, "top_k": 5}``.

    Raises:
        ValueError: naming the bad item and the expected syntax.
    """
    if text is None or not text.strip():
        return {}
    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{flag} is not valid JSON ({e}): {text!r}") from e
        if not isinstance(value, dict):
            raise ValueError(f"{flag} JSON must be an object, got {text!r}")
        return value
    out: dict[str, Any] = {}
    for item in _split_top_level(text):
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(
                f"bad {flag} item {item!r}: expected key=value pairs separated by commas, "
                f'e.g. {flag} hops=3,reveal_budget=true (or a JSON object {{"hops": 3}})'
            )
        if key in out:
            raise ValueError(f"{flag} gives {key!r} twice")
        out[key] = _parse_value(raw.strip())
    return out
