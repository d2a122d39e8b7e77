"""Where a rollout's envs live: in this process, or in worker processes that may crash.

A rollout asks its env backend for four things: start an episode on a task, fork a budget branch,
step many episodes with one action each, and close an episode. ``LocalEnvs`` does them in this
process, as passkt always has; ``WorkerEnvs`` spreads the episodes over worker processes, so that

- a slow env steps in parallel (each worker steps its episodes of a round while the others do
  theirs), and
- an env that crashes (any signal: a game engine's segfault), hangs (no reply within the step time
  limit) or raises ends that one episode as an **env failure**, recorded with the exception or
  signal and the turn, instead of ending the run. The worker is replaced, and the other episodes
  it held are rebuilt in the new one by replaying their actions on fresh envs (checked as a
  replay fork is, ``passkt.agents.env_runtime.check_replayed``); an episode whose replay fails
  is an env failure of kind ``lost``.

Results do not depend on the number of workers: every episode sees the same reset seed, actions
and observations wherever it runs, and the rollout reads the replies in its own order.

Workers are forked from this process (``multiprocessing``'s ``fork`` start method), so an env
registered by an ``--import`` module or a ``py:`` factory is there without pickling anything; only
actions go to a worker and only observations, rewards and ``info`` come back (an ``info`` value
that cannot be pickled is dropped, and a warning names its key once).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import multiprocessing
import os
import pickle
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import gymnasium as gym

from passkt.agents.env_runtime import EnvRunner, History, check_replayed
from passkt.envs.contract import EnvContractError, ReplayMismatchError

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_STEP_TIMEOUT",
    "ENV_FAILURE_KINDS",
    "EnvFailure",
    "LocalEnvs",
    "StepResult",
    "WorkerEnvs",
    "default_env_workers",
    "make_envs",
]

DEFAULT_STEP_TIMEOUT = 120.0
"""Seconds a worker may take for one reset, fork or step before its episode is an env failure."""

ENV_FAILURE_KINDS = ("exception", "signal", "timeout", "lost")
"""``exception``: the env raised; ``signal``: its worker died (the signal's name, or the exit
code); ``timeout``: no reply within the step time limit; ``lost``: the episode shared a worker
that died and replaying it on a fresh env failed."""


@dataclass(frozen=True)
class EnvFailure:
    """Why an episode ended without the env's verdict: its kind, the detail, and the turn."""

    kind: str
    detail: str
    turn: int
    """The index of the turn whose step failed; -1 for the reset (or a branch's fork)."""

    def to_record(self) -> dict[str, Any]:
        return {"kind": self.kind, "detail": self.detail, "turn": self.turn}


@dataclass(frozen=True)
class StepResult:
    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: Mapping[str, Any]


def describe_exception(error: BaseException) -> str:
    """``Type: message`` on one line, at most 300 characters."""
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= 300 else text[:297] + "..."


def default_env_workers(env_id: str) -> int:
    """The number of env workers when none is asked for: none for passkt's own envs (they are
    fast and tested not to crash), otherwise one per core, up to 4, so a third-party env that
    crashes or hangs ends an episode rather than the run."""
    spec = gym.spec(env_id.rpartition(":")[2])  # "module:Env-v0": the module is imported by now
    entry = spec.entry_point if isinstance(spec.entry_point, str) else ""
    if entry.startswith("passkt."):
        return 0
    return max(1, min(4, os.cpu_count() or 1))


class LocalEnvs:
    """Every env in this process (no time limit: a crash or hang here ends the run). An exception
    from ``step`` still ends only its episode, recorded as an env failure, as in a worker."""

    def __init__(self, runner: EnvRunner, top_budget: int) -> None:
        self.runner = runner
        self.base = runner.make(top_budget)

    def start(self, slot: int, budget: int, task_id: str, seed: int):
        """An episode on ``task_id``: ``(handle, observation, info, category attribute, history)``.
        ``slot`` (its position in the rollout) picks a worker; here it is unused."""
        env, observation, info, history = self.runner.start(self.base, budget, task_id, seed)
        return env, observation, info, getattr(env.unwrapped, "category", None), history

    def fork(self, handle: Any, history: History, budget: int) -> tuple[Any, Any]:
        return self.runner.fork(handle, history, budget)

    def step(self, pairs: Sequence[tuple[Any, str, History, int]]) -> list[StepResult | EnvFailure]:
        """Step each ``(handle, action, history, turn)``; an exception is that episode's failure."""
        results: list[StepResult | EnvFailure] = []
        for env, action, _, turn in pairs:
            try:
                results.append(StepResult(*env.step(action)))
            except Exception as error:  # the env's own bug, on model text: this episode only
                results.append(EnvFailure("exception", describe_exception(error), turn))
        return results

    def close(self, handle: Any) -> None:
        try:
            handle.close()
        except Exception as error:  # an env that raised may fail to close too
            logger.debug("%s: close failed: %s", self.runner.env_id, describe_exception(error))

    def shutdown(self) -> None:
        self.base.close()


# ------------------------------------------------------------------------------------ workers


def _picklable(info: Mapping[str, Any], dropped: set[str]) -> dict[str, Any]:
    """``info`` without the values that cannot be pickled (their keys are added to ``dropped``)."""
    info = dict(info)
    with contextlib.suppress(Exception):
        pickle.dumps(info)
        return info
    kept = {}
    for key, value in info.items():
        try:
            pickle.dumps(value)
            kept[key] = value
        except Exception:
            dropped.add(str(key))
    return kept


def _die_with(parent: int) -> None:
    """Linux: have the kernel kill this worker when the process that made it dies (a SIGKILL of
    ``passkt eval`` must not leave a hung env step running). Elsewhere the worker ends when it
    next reads from its closed pipe."""
    with contextlib.suppress(Exception):
        import ctypes  # optional: Linux's prctl, through the C library

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _serve(conn: Connection, runner: EnvRunner, top_budget: int, parent: int) -> None:
    """A worker's loop: make its own base env, then answer the rollout's requests in order."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the rollout's to handle
    faulthandler.disable()  # an env's crash is recorded as an env failure, not dumped to stderr
    _die_with(parent)
    base = None
    envs: dict[int, Any] = {}
    dropped: set[str] = set()
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        op = request[0]
        if op == "stop":
            return
        if op == "close":
            env = envs.pop(request[1], None)
            if env is not None:
                with contextlib.suppress(Exception):
                    env.close()
            continue
        if op == "step":
            for key, action in request[1]:
                try:
                    result = envs[key].step(action)
                    observation, reward, terminated, truncated, info = result
                    reply = ("ok", key, observation, reward, terminated, truncated)
                    conn.send((*reply, _picklable(info, dropped), sorted(dropped)))
                except Exception as error:
                    envs.pop(key, None)
                    conn.send(("error", key, describe_exception(error)))
            continue
        try:
            if op == "start":
                _, key, budget, task_id, seed = request
                if base is None:
                    base = runner.make(top_budget)
                env, observation, info, history = runner.start(base, budget, task_id, seed)
                envs[key] = env
                category = getattr(env.unwrapped, "category", None)
                reply = (observation, _picklable(info, dropped), category, history)
            elif op == "fork":
                _, source, key, budget, history = request
                envs[key], observation = runner.fork(envs[source], history, budget)
                reply = (observation,)
            elif op == "replay":
                _, key, budget, history = request
                envs[key] = _replay(runner, budget, history)
                reply = ()
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", *reply))
        except EnvContractError as error:  # the env breaks the contract: the run's error
            conn.send(("contract", type(error).__name__, str(error)))
        except Exception as error:
            conn.send(("error", describe_exception(error)))


def _replay(runner: EnvRunner, budget: int, history: History) -> Any:
    """A fresh env in the state ``history`` reached (checked observation by observation)."""
    env = runner.make(budget)
    observation, _ = env.reset(seed=history.reset_seed, options=history.options)
    replayed = [observation]
    for action in history.actions:
        observation, *_ = env.step(action)
        replayed.append(observation)
    # every observation but the last (a branch's fork notice) must be the original's
    check_replayed(runner.env_id, history.observations, replayed)
    return env


def _death(process: multiprocessing.Process) -> str:
    """How a worker ended: the signal's name (``SIGSEGV``), or its exit code."""
    process.join(timeout=5)
    code = process.exitcode
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class _Worker:
    def __init__(self, context: Any, runner: EnvRunner, top_budget: int) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_serve,
            args=(child, runner, top_budget, os.getpid()),
            daemon=True,
            name="passkt-env",
        )
        self.process.start()
        child.close()
        self.keys: dict[int, tuple[int, History]] = {}
        """The episodes it holds: key -> (budget, history), enough to rebuild them elsewhere."""

    def kill(self) -> str:
        """Kill it (if alive) and say how it ended."""
        if self.process.is_alive():
            self.process.kill()
        how = _death(self.process)
        self.conn.close()
        return how


class WorkerEnvs:
    """The envs of one rollout spread over ``workers`` processes (see the module docstring).

    A handle is ``(worker index, key)``. An episode started in slot ``s`` lives in worker
    ``s % workers``; its budget branches live beside it.
    """

    def __init__(
        self,
        runner: EnvRunner,
        top_budget: int,
        workers: int,
        step_timeout: float = DEFAULT_STEP_TIMEOUT,
    ) -> None:
        self.runner = runner
        self.top_budget = top_budget
        self.timeout = float(step_timeout)
        self._context = multiprocessing.get_context("fork")
        self.workers = [self._spawn() for _ in range(workers)]
        self._next_key = 0
        self._warned: set[str] = set()
        self._lost: dict[int, EnvFailure] = {}
        """Episodes whose worker died and whose replay failed: they fail at their next request."""
        self.restarts = 0

    def _spawn(self) -> _Worker:
        return _Worker(self._context, self.runner, self.top_budget)

    def _key(self) -> int:
        self._next_key += 1
        return self._next_key

    # -------------------------------------------------------------- one request, one reply

    def _ask(self, index: int, request: tuple) -> tuple | str:
        """Send one request to a worker and wait for its reply; on a death or time-out, replace
        the worker (rebuilding its episodes) and return how it failed, as a string. A contract
        error in the worker (a replay that differs, say) is raised here, as in-process."""
        worker = self.workers[index]
        try:
            worker.conn.send(request)
            if worker.conn.poll(self.timeout):
                reply = worker.conn.recv()
                if reply[0] == "contract":
                    error = ReplayMismatchError if reply[1] == "ReplayMismatchError" else None
                    raise (error or EnvContractError)(reply[2])
                return reply
            how = f"no reply in {self.timeout:g} s"
            worker.kill()
        except (EOFError, OSError):
            how = worker.kill()
        self._rebuild(index, how)
        return how

    def _rebuild(self, index: int, how: str, skip: int | None = None) -> None:
        """Worker ``index`` died (``how``): start a new one and replay its episodes there (all but
        ``skip``, the one it died on). An episode whose replay fails is marked lost."""
        old = self.workers[index]
        pending = {key: held for key, held in old.keys.items() if key != skip}
        self.restarts += 1
        logger.warning(
            "%s: an env worker ended (%s); a new one takes its place%s",
            self.runner.env_id,
            how,
            f" and replays its {len(pending)} other episodes" if pending else "",
        )
        while True:
            new = self._spawn()
            self.workers[index] = new
            for key, (budget, history) in list(pending.items()):
                status, detail = self._replay(new, key, budget, history)
                del pending[key]
                if status == "ok":
                    new.keys[key] = (budget, history)
                    continue
                self._lost[key] = EnvFailure("lost", f"replay after a worker ended: {detail}", -1)
                if status == "dead":  # it took the episodes rebuilt so far with it
                    new.kill()
                    pending = {**new.keys, **pending}
                    break
            else:
                return

    def _replay(self, worker: _Worker, key: int, budget: int, history: History) -> tuple[str, str]:
        """``("ok", "")``, ``("error", why)`` (the worker lives) or ``("dead", how)``."""
        try:
            worker.conn.send(("replay", key, budget, history.copy()))
            if worker.conn.poll(self.timeout):
                reply = worker.conn.recv()
                return ("ok", "") if reply[0] == "ok" else ("error", reply[1])
            return "dead", f"no reply in {self.timeout:g} s"
        except (EOFError, OSError):
            return "dead", _death(worker.process)

    # -------------------------------------------------------------------------- the backend

    @staticmethod
    def _failure(how: str, turn: int) -> EnvFailure:
        return EnvFailure("timeout" if how.startswith("no reply") else "signal", how, turn)

    def start(self, slot: int, budget: int, task_id: str, seed: int):
        index = slot % len(self.workers)
        key = self._key()
        reply = self._ask(index, ("start", key, budget, task_id, seed))
        if isinstance(reply, str):
            return self._failure(reply, -1)
        if reply[0] == "error":
            raise RuntimeError(f"{self.runner.env_id}: reset of task {task_id} failed: {reply[1]}")
        _, observation, info, category, history = reply
        self.workers[index].keys[key] = (budget, history)
        return (index, key), observation, info, category, history

    def fork(self, handle: tuple[int, int], history: History, budget: int):
        index, source = handle
        if source in self._lost:
            return self._lost[source]
        key = self._key()
        reply = self._ask(index, ("fork", source, key, budget, history.copy()))
        if isinstance(reply, str):
            return self._lost.pop(source, None) or self._failure(reply, -1)
        if reply[0] == "error":
            return EnvFailure("exception", reply[1], -1)
        branch = history.copy()
        branch.observations[-1] = reply[1]
        self.workers[index].keys[key] = (budget, branch)
        return (index, key), reply[1]

    def step(self, pairs: Sequence[tuple[Any, str, History, int]]) -> list[StepResult | EnvFailure]:
        """Step every ``(handle, action, history, turn)``: each worker steps its own episodes, in
        parallel with the others; replies are read as they come, in each worker's order."""
        results: list[StepResult | EnvFailure | None] = [None] * len(pairs)
        queues: dict[int, list[int]] = {}
        for position, ((index, key), _, _, turn) in enumerate(pairs):
            lost = self._lost.pop(key, None)
            if lost is not None:
                results[position] = EnvFailure(lost.kind, lost.detail, turn)
            else:
                queues.setdefault(index, []).append(position)
        for index, positions in queues.items():
            self._send_steps(index, [pairs[p] for p in positions])
        deadline = {index: time.monotonic() + self.timeout for index in queues}
        while queues:
            ready = wait(
                [self.workers[i].conn for i in queues],
                timeout=max(0.0, min(deadline.values()) - time.monotonic()),
            )
            for index in list(queues):
                worker = self.workers[index]
                how = None
                if worker.conn in ready:
                    try:
                        reply = worker.conn.recv()
                    except (EOFError, OSError):
                        how = worker.kill()
                    else:
                        self._take(reply, pairs, queues[index].pop(0), results)
                        deadline[index] = time.monotonic() + self.timeout
                elif time.monotonic() >= deadline[index]:
                    worker.kill()
                    how = f"no reply in {self.timeout:g} s"
                if how is not None:
                    self._fail_step(index, how, queues[index], pairs, results)
                    deadline[index] = time.monotonic() + self.timeout
                if not queues[index]:
                    del queues[index]
                    del deadline[index]
        return results  # type: ignore[return-value]

    def _send_steps(self, index: int, pairs: Sequence[tuple[Any, str, History, int]]) -> None:
        request = ("step", [(key, action) for (_, key), action, *_ in pairs])
        with contextlib.suppress(OSError):  # a dead worker shows when its replies are read
            self.workers[index].conn.send(request)

    def _take(self, reply: tuple, pairs: Sequence, position: int, results: list) -> None:
        (index, key), action, _, turn = pairs[position]
        held = self.workers[index].keys
        if reply[0] == "error":
            results[position] = EnvFailure("exception", reply[2], turn)
            held.pop(key, None)
            return
        _, _, observation, reward, terminated, truncated, info, dropped = reply
        for name in dropped:
            if name not in self._warned:
                self._warned.add(name)
                logger.warning(
                    "%s: info[%r] cannot be pickled and is dropped on its way from an env worker",
                    self.runner.env_id,
                    name,
                )
        results[position] = StepResult(observation, reward, terminated, truncated, info)
        budget, before = held[key]
        after = before.copy()
        after.actions.append(action)
        after.observations.append(observation)
        held[key] = (budget, after)

    def _fail_step(
        self, index: int, how: str, positions: list[int], pairs: Sequence, results: list
    ) -> None:
        """Worker ``index`` died or hung on the step at ``positions[0]``: that episode fails, the
        worker's other episodes are rebuilt in a new one, and its unanswered steps sent there."""
        failing = positions.pop(0)
        (_, key), _, _, turn = pairs[failing]
        results[failing] = self._failure(how, turn)
        self._rebuild(index, how, skip=key)
        for position in list(positions):
            (_, other), _, _, other_turn = pairs[position]
            lost = self._lost.pop(other, None)
            if lost is not None:
                results[position] = EnvFailure(lost.kind, lost.detail, other_turn)
                positions.remove(position)
        if positions:
            self._send_steps(index, [pairs[p] for p in positions])

    def close(self, handle: tuple[int, int]) -> None:
        index, key = handle
        worker = self.workers[index]
        worker.keys.pop(key, None)
        with contextlib.suppress(OSError, BrokenPipeError):
            worker.conn.send(("close", key))

    def shutdown(self) -> None:
        for worker in self.workers:
            with contextlib.suppress(OSError, BrokenPipeError):
                worker.conn.send(("stop",))
        for worker in self.workers:
            worker.process.join(timeout=2)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.conn.close()


def make_envs(
    runner: EnvRunner, top_budget: int, workers: int, step_timeout: float = DEFAULT_STEP_TIMEOUT
) -> LocalEnvs | WorkerEnvs:
    """The env backend of one rollout: in this process (``workers == 0``) or in workers."""
    if workers <= 0:
        return LocalEnvs(runner, top_budget)
    return WorkerEnvs(runner, top_budget, workers, step_timeout)
