"""``evaluate``: the PASS@(k,T) surface of a policy on an env, from prefix-shared rollouts.

The run is a grid of (task, sample, T) episodes. Tasks are split into fixed chunks (the boundaries
depend only on the task order and the chunk size) and each chunk is one ``rollout()`` call with a
seed derived from the run seed and the chunk index. A chunk's samples therefore do not depend on
which chunks ran before it in this process, so a run resumed after a crash reproduces exactly the
samples of an uninterrupted one. Each finished chunk is appended to the result store
(``passkt.eval.store``) before the next one starts.

With a hidden budget (the default ``reveal_budget=False``) the rollout engine plays one episode per
sample at the largest T and forks a branch at every smaller T (see ``passkt.agents.rollout``); with
``reveal_budget=True`` (or ``share_prefix=False``) every T runs on its own.

Math tasks have no tools, so only T = 0 means anything for them: ``evaluate`` rejects any other
budget for a math env with a message saying to pass ``budgets=(0,)``; the CLI picks T = 0 itself
when ``--budgets`` is not given.

Any registered env can be evaluated (``module:Env-v0`` ids import their module): ``env_info``
inspects it once (``passkt.envs.contract.inspect_env``) before anything is written, so a missing
piece is reported, or its fallback announced, before the run directory exists. An env without a
task list is evaluated on seeds (``seed-0`` ... ``seed-{limit - 1}``; train seeds start at 10**6).
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from passkt.agents.env_workers import DEFAULT_STEP_TIMEOUT, default_env_workers
from passkt.agents.policy import Policy, SamplingParams, describe
from passkt.agents.preflight import (
    MAX_BUDGET,
    check_device,
    check_dtype,
    check_grid,
    check_number,
    check_policy_spec,
)
from passkt.agents.progress import progress_bar
from passkt.agents.rollout import (
    RolloutStats,
    check_env_workers,
    check_no_budget_kwarg,
    protocol_params,
    resolve_share_prefix,
    rollout,
)
from passkt.agents.specs import PolicyContext, load_policy
from passkt.envs.contract import (
    NEUTRAL,
    SEED_TASKS,
    EnvContract,
    check_replay,
    inspect_env,
    resolve_env_id,
    seed_task_ids,
    task_seed,
)
from passkt.envs.tasks import Task
from passkt.eval.chunking import (
    DEFAULT_CHUNK_EPISODES,
    DEFAULT_CHUNK_SECONDS,
    SEEDING,
    Batching,
    chunk_seed,
    default_chunk_tasks,
    sample_seed,
    stored_scheme,
)
from passkt.eval.env_failures import ENV_FAILURE_RULES
from passkt.eval.estimator import Surface, check_ks, default_ks, surface
from passkt.eval.outcomes import OutcomeTable
from passkt.eval.store import RunStore, chunk_bounds, load_run, make_manifest

__all__ = [
    "DEFAULT_BUDGETS",
    "DEFAULT_CHUNK_EPISODES",
    "DEFAULT_CHUNK_SECONDS",
    "SEEDING",
    "EnvInfo",
    "EvalRun",
    "check_env_id",
    "chunk_seed",
    "default_chunk_tasks",
    "env_info",
    "evaluate",
    "sample_seed",
    "select_tasks",
]

logger = logging.getLogger(__name__)

DEFAULT_BUDGETS: tuple[int, ...] = (0, 1, 2, 3, 5)
"""The study's T grid."""

_RUNTIME_OPTIONS = frozenset({"device", "batch_size"})
"""Policy options that do not change which samples are drawn (not checked on resume)."""

_OUTCOME_KEYS = ("task_id", "sample", "budget", "category", "correct", "env_error")


@dataclass(frozen=True)
class EvalRun:
    """The result of :func:`evaluate`.

    Attributes:
        outcomes: Success of every (task, sample, T).
        surface: PASS@(k,T) over the k grid.
        stats: Cost of the rollouts run by this call, summed over chunks (chunks skipped on
            resume cost nothing).
        out_dir: The run directory, or ``None`` when nothing was stored.
        manifest: The run's manifest (what was asked for, versions, seeds).
        chunks_run: Chunks rolled out by this call.
        chunks_skipped: Chunks found finished in ``out_dir`` and not run again.
    """

    outcomes: OutcomeTable
    surface: Surface
    stats: RolloutStats
    out_dir: Path | None
    manifest: Mapping[str, Any]
    chunks_run: int
    chunks_skipped: int


@dataclass(frozen=True)
class EnvInfo:
    """What the evaluator needs to know about an env before running it."""

    env_id: str
    tasks: tuple[Any, ...]
    """The env's task records (``Task`` for passkt envs); empty when tasks are seeds."""
    reveal_budget: bool
    has_tools: bool
    contract: EnvContract | None = None
    """Everything found out about the env (``passkt.envs.contract``)."""


def check_env_id(env_id: str) -> None:
    """Raise a ``ValueError`` naming close registered ids when ``env_id`` is not registered
    (a ``module:Env-v0`` id imports its module first)."""
    resolve_env_id(env_id)


def env_info(
    env_id: str, env_kwargs: Mapping[str, Any] | None = None, split: str = "test"
) -> EnvInfo:
    """What the env offers (task list for ``split``, protocol, fork ...) and whether it reveals
    its budget. Fallbacks for missing capabilities are announced here, once.

    Raises:
        ValueError: for an unknown env id, bad kwargs, or a capability passkt cannot use.
    """

    kwargs = _env_kwargs(env_kwargs, split)
    kwargs.pop("split")
    contract = inspect_env(env_id, kwargs, split)
    return EnvInfo(
        env_id,
        contract.tasks,
        reveal_budget=contract.reveal_budget,
        has_tools=contract.has_tools,
        contract=contract,
    )


def _env_kwargs(env_kwargs: Mapping[str, Any] | None, split: str) -> dict[str, Any]:
    kwargs = dict(env_kwargs or {})
    check_no_budget_kwarg(kwargs)
    if "split" in kwargs and kwargs["split"] != split:
        raise ValueError(
            f"env_kwargs has split={kwargs['split']!r} but split={split!r}; give the split once "
            "(--split)"
        )
    kwargs["split"] = split
    return kwargs


def select_tasks(
    tasks: Sequence[Task], task_ids: Sequence[str] | None = None, limit: int | None = None
) -> list[Task]:
    """The tasks of a run: ``task_ids`` in the given order (default: all), then the first ``limit``.

    Raises:
        ValueError: for an unknown or repeated task id (close ids are suggested) or a bad limit.
    """
    by_id = {getattr(task, "task_id", task): task for task in tasks}
    if task_ids is None:
        chosen = list(tasks)
    else:
        missing = [t for t in task_ids if t not in by_id]
        if missing:
            close = difflib.get_close_matches(missing[0], list(by_id), n=3)
            hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
            raise ValueError(
                f"Unknown task id(s) {missing[:5]} for this env and split.{hint} "
                f"It has {len(by_id)} tasks, e.g. {list(by_id)[:3]}."
            )
        if len(set(task_ids)) != len(task_ids):
            raise ValueError("task_ids repeats a task id; give each task once")
        chosen = [by_id[t] for t in task_ids]
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        chosen = chosen[:limit]
    if not chosen:
        raise ValueError("No tasks to evaluate: the env's split is empty")
    return chosen


MAX_N = 65_536
"""Most samples per (task, T) in one run: a chunk holds at least one task's n x budgets episodes
in memory, so a mistyped huge n would run out of memory rather than fail."""


def _check_budgets(budgets: Sequence[int], info: EnvInfo) -> list[int]:
    grid = list(check_grid(budgets, "budgets", maximum=MAX_BUDGET))
    if grid != [0] and not info.has_tools:
        raise ValueError(
            f"{info.env_id} has no tools (math), so only T = 0 is meaningful; "
            f"got budgets {grid}. Pass budgets=(0,) (CLI: --budgets 0)."
        )
    return grid


def _sum_stats(parts: Sequence[RolloutStats]) -> RolloutStats:
    return RolloutStats(
        policy_calls=sum(p.policy_calls for p in parts),
        generated_tokens=sum(p.generated_tokens for p in parts),
        generate_seconds=sum(p.generate_seconds for p in parts),
        wall_seconds=sum(p.wall_seconds for p in parts),
        episodes=sum(p.episodes for p in parts),
    )


@dataclass(frozen=True)
class _Plan:
    info: EnvInfo
    task_ids: list[str]
    budgets: list[int]
    ks: tuple[int, ...]
    share_prefix: bool


def _plan(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None,
    split: str,
    task_ids: Sequence[str] | None,
    limit: int | None,
    n: int,
    budgets: Sequence[int],
    ks: Sequence[int] | None,
    share_prefix: bool | None,
) -> _Plan:
    """Check the request against the env and fix the tasks, grids and sharing mode."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_N:
        raise ValueError(
            f"n must be an int from 1 to {MAX_N} (samples per (task, T)), got {n!r}; for more "
            "samples, make several runs with different seeds"
        )
    ks = default_ks(n) if ks is None else check_ks(ks, n)
    info = env_info(env_id, env_kwargs, split)
    ids = _task_ids(info, split, task_ids, limit)
    grid = _check_budgets(budgets, info)
    share = resolve_share_prefix(share_prefix, info.reveal_budget)
    if share and len(grid) > 1 and info.contract is not None and info.contract.replays:
        check_replay(info.contract, env_kwargs, split)  # before the run directory exists
    return _Plan(info, ids, grid, ks, share)


def _task_ids(
    info: EnvInfo, split: str, task_ids: Sequence[str] | None, limit: int | None
) -> list[str]:
    """The run's task ids: from the env's task list, or seeds for an env without one."""
    if info.contract is None or info.contract.task_ids is not None:
        return [getattr(t, "task_id", t) for t in select_tasks(info.tasks, task_ids, limit)]
    if task_ids is None:
        return seed_task_ids(split, SEED_TASKS if limit is None else limit)
    for task_id in task_ids:
        task_seed(task_id)  # names the expected form on a bad id
    return select_tasks(list(task_ids), task_ids, limit)


def evaluate(
    env_id: str,
    policy: Policy | str,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    n: int = 16,
    budgets: Sequence[int] = DEFAULT_BUDGETS,
    ks: Sequence[int] | None = None,
    split: str = "test",
    task_ids: Sequence[str] | None = None,
    limit: int | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    seed: int = 0,
    params: SamplingParams | None = None,
    chunk_tasks: int | None = None,
    chunk_seconds: float = DEFAULT_CHUNK_SECONDS,
    share_prefix: bool | None = None,
    progress: bool = True,
    policy_options: Mapping[str, Any] | None = None,
    name: str | None = None,
    on_open: Callable[[Path, int, int], None] | None = None,
    env_workers: int | None = None,
    env_step_timeout: float = DEFAULT_STEP_TIMEOUT,
    env_failures: str = "count",
) -> EvalRun:
    """Evaluate a policy on an env over the (k, T) grid.

    Args:
        env_id: A registered env id, e.g. ``"BridgeQA-v0"``.
        policy: A ``Policy``, or a spec (``hf:PATH_OR_ID``, ``scripted:heuristic`` ...) loaded
            with ``passkt.agents.specs.load_policy`` (with the env's tasks and ``policy_options``).
        env_kwargs: ``gym.make`` kwargs (``source=``, ``path=``, ``hops=``, ``reveal_budget=`` ...);
            not ``max_tool_calls`` (use ``budgets``) or ``split`` (use ``split``).
        n: Samples per (task, T).
        budgets: The T grid (max tool calls). Math envs accept only ``(0,)``.
        ks: The k grid of the surface; default powers of two up to ``n``.
        split: Task split, ``"test"`` or ``"train"``.
        task_ids: Evaluate only these tasks, in this order.
        limit: Evaluate only the first ``limit`` tasks (after ``task_ids``).
        out_dir: Run directory for the manifest and ``results.jsonl``; ``None`` keeps nothing.
        resume: Continue the run in ``out_dir``, skipping its finished chunks.
        seed: Run seed; sample s of task t draws from ``sample_seed(seed, t, s)``.
        params: Sampling parameters (``params.n`` must stay 1; use ``n``).
        chunk_tasks: Tasks per stored chunk, the unit of saving and resuming (default 1; a
            resumed run keeps its own). Chunking never changes which samples are drawn.
        chunk_seconds: Rollout batches (one or more chunks, at most ``ceil(256 / n)`` tasks) are
            sized from the measured seconds per task to take about this long.
        share_prefix: Prefix sharing across budgets (default: whenever the env hides its budget).
        progress: Show a progress bar (stderr) with an ETA.
        policy_options: Backend options for a spec (``device=``, ``dtype=`` ...); recorded in the
            manifest and, except ``device`` and ``batch_size``, checked on resume (give a scripted
            policy's ``seed`` here to have resumes check it).
        name: Run name for tables and legends (default: the policy spec).
        on_open: Called as ``on_open(out_dir, finished_chunks, num_chunks)`` once the run
            directory is open and the policy loaded, after every argument was checked (the CLI
            prints it).
        env_workers: Env worker processes (``passkt.agents.rollout.rollout``): ``None`` runs
            passkt's own envs in this process and other envs in one worker per core (up to 4),
            where a crash, hang or exception ends one episode as an env failure, not the run.
        env_step_timeout: With workers, seconds a reset, fork or step may take.
        env_failures: How the surface counts an episode the env failed (``Episode.env_error``):
            ``count`` it as a failure of the agent (the default; the report says how many), or
            ``drop`` every task with an env failure from the surface. Recorded in the manifest
            (``runtime``) and used by ``report`` and ``compare``.

    Returns:
        An :class:`EvalRun`.

    Raises:
        ValueError: for a bad argument (unknown env or task id, bad budgets or ks, ...).
        passkt.eval.store.RunDirError: when ``out_dir`` cannot be used (see ``RunStore.open``).
    """
    params = params or SamplingParams()
    options = dict(policy_options or {})
    # Every argument is checked before anything is written (passkt.agents.preflight).
    if isinstance(policy, str):
        check_policy_spec(policy)
        check_device(options.get("device"), "device")
        check_dtype(options.get("dtype"), "dtype")
    check_number("chunk_seconds", chunk_seconds, minimum=0, exclusive_minimum=True)
    check_env_workers(env_workers, env_step_timeout)
    if env_failures not in ENV_FAILURE_RULES:
        raise ValueError(f"env_failures must be one of {ENV_FAILURE_RULES}, got {env_failures!r}")
    plan = _plan(env_id, env_kwargs, split, task_ids, limit, n, budgets, ks, share_prefix)
    if resume and out_dir is None:
        raise ValueError("resume=True needs out_dir (the run directory to continue)")
    seeding, stored_chunk = stored_scheme(out_dir, resume)
    if chunk_tasks is None:
        chunk_tasks = stored_chunk or (1 if seeding == SEEDING else default_chunk_tasks(n))
    chunk_tasks = int(chunk_tasks)
    if plan.info.contract is not None:
        # what the rollout does, so the manifest holds the stop strings the agent receives
        params = protocol_params(params, plan.info.contract.protocol)
    manifest = make_manifest(
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        split=split,
        policy=policy if isinstance(policy, str) else describe(policy),
        # Where the model runs may change between a crash and its resume; the rest may not.
        policy_options={k: v for k, v in options.items() if k not in _RUNTIME_OPTIONS},
        runtime={
            **{k: v for k, v in options.items() if k in _RUNTIME_OPTIONS},
            "env_workers": (
                default_env_workers(env_id) if env_workers is None else int(env_workers)
            ),
            "env_step_timeout": float(env_step_timeout),
            "env_failures": env_failures,
        },
        # No tools (the text tags) is left out, so runs written before the tool format resume.
        sampling={k: v for k, v in asdict(params).items() if k != "seeds" and (k != "tools" or v)},
        n=n,
        budgets=plan.budgets,
        seed=seed,
        share_prefix=plan.share_prefix,
        chunk_tasks=chunk_tasks,
        task_ids=plan.task_ids,
        name=name,
        seeding=seeding,
    )
    # Open (or refuse) the run directory before loading a model, which may take minutes.
    store = None if out_dir is None else RunStore.open(out_dir, manifest, resume=resume)
    try:
        if store is not None:
            manifest = store.manifest
        if isinstance(policy, str):
            context = PolicyContext(
                env_id=env_id,
                env_kwargs=dict(env_kwargs or {}),
                task_ids=tuple(plan.task_ids),
                tasks=plan.info.tasks,
                protocol=plan.info.contract.protocol if plan.info.contract else NEUTRAL,
            )
            policy = load_policy(policy, tasks=plan.info.tasks, context=context, **options)
        if store is not None and on_open is not None:  # once the policy is loaded
            on_open(store.directory, len(store.finished_chunks), int(manifest["num_chunks"]))
        bounds = chunk_bounds(len(plan.task_ids), chunk_tasks)
        skipped = frozenset() if store is None else store.finished_chunks
        rollout_kwargs = dict(
            n=n,
            budgets=plan.budgets,
            env_kwargs=_env_kwargs(env_kwargs, split),
            params=params,
            share_prefix=plan.share_prefix,
            contract=plan.info.contract,
            env_workers=env_workers,
            env_step_timeout=env_step_timeout,
        )
        adaptive = bool(getattr(policy, "seeds_each_row", False))
        batching = Batching(
            seed, seeding == SEEDING, chunk_seconds, default_chunk_tasks(n), adaptive
        )
        records, parts = _run_chunks(
            policy, env_id, plan.task_ids, bounds, skipped, batching, store, rollout_kwargs,
            progress,
        )  # fmt: skip
        if store is not None:
            _, table = load_run(store.directory, name=manifest["name"])
        else:
            if env_failures == "drop":
                failed = {r["task_id"] for r in records if r.get("env_error")}
                records = [r for r in records if r["task_id"] not in failed]
            table = OutcomeTable.from_records(records, name=manifest["name"])
    except Exception:  # not on Ctrl-C, after which the CLI says to --resume
        if store is not None:
            store.discard_if_empty()  # a model that failed to load leaves nothing behind
        raise
    finally:
        if store is not None:
            store.close()  # the writer lock: another process may resume the run now
    return EvalRun(
        outcomes=table,
        surface=surface(table, plan.ks),
        stats=_sum_stats(parts),
        out_dir=None if store is None else store.directory,
        manifest=manifest,
        chunks_run=len(bounds) - len(skipped),
        chunks_skipped=len(skipped),
    )


def _run_chunks(
    policy: Policy,
    env_id: str,
    ids: Sequence[str],
    bounds: Sequence[tuple[int, int]],
    skipped: frozenset[int],
    batching: Batching,
    store: RunStore | None,
    rollout_kwargs: Mapping[str, Any],
    progress: bool,
) -> tuple[list[dict[str, Any]], list[RolloutStats]]:
    """Roll out every unfinished chunk, a batch of chunks at a time; store each chunk, or keep
    its outcomes when there is no store."""
    records: list[dict[str, Any]] = []
    parts: list[RolloutStats] = []
    done = sum(stop - start for i, (start, stop) in enumerate(bounds) if i in skipped)
    todo = [i for i in range(len(bounds)) if i not in skipped]
    bar = progress_bar(
        total=len(ids), initial=done, desc=f"{env_id} tasks", unit="task", disable=not progress
    )
    try:
        while todo:
            group = batching.take(todo, bounds)
            todo = todo[len(group) :]
            start, stop = bounds[group[0]][0], bounds[group[-1]][1]
            started = time.perf_counter()
            seeds = batching.rollout_seeds(ids[start:stop], rollout_kwargs["n"], group[0])
            result = rollout(  # progress: its own bar of episodes and rounds within the batch
                policy, env_id, ids[start:stop], progress=progress, **seeds, **rollout_kwargs
            )
            batching.measured(stop - start, time.perf_counter() - started)
            parts.append(result.stats)
            for chunk in group:  # episodes are task-major: split them back into chunks
                chunk_ids = set(ids[bounds[chunk][0] : bounds[chunk][1]])
                episodes = [ep for ep in result.episodes if ep.task_id in chunk_ids]
                if store is not None:
                    store.append_chunk(chunk, [ep.to_record() for ep in episodes])
                else:
                    records.extend({k: getattr(ep, k) for k in _OUTCOME_KEYS} for ep in episodes)
            bar.update(stop - start)
    finally:
        bar.close()
    return records, parts
