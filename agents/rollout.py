"""The rollout engine: many episodes in lock-step, one batched ``generate`` per round.

Shared by the evaluator and the trainers. Each round collects every live episode (tasks x samples,
plus the budget branches described below), asks the policy for one completion each in a single
batched call, and steps every env with its completion.

Token bookkeeping. For a ``TokenPolicy`` (transformers, vLLM) an episode's token sequence is built
incrementally: the chat-templated prompt, then each turn's sampled ids exactly as the policy
returned them, then the template's tokens for the next observation. Generated text is never re-
tokenized, so ``policy_mask`` marks exactly the ids that were sampled and ``logprobs`` are their
sampling log-probabilities: what a trainer needs.

Budget branches (prefix sharing). With a hidden budget, an episode with budget t is, turn for turn,
the prefix of an episode with a larger budget until its t-th tool call, where it alone sees the
final notice. So one main episode runs at ``max(budgets)`` and, each time its call count reaches a
smaller budget t, the engine forks a branch that sees the notice and must answer in one more turn.
The outcome for T = t is that branch, or the main episode itself when it answered before making t
calls. Cost: O(T_max) turns per sample instead of O(T_max^2). When the env shows no final
notice (the budget wrapper of an env without ``max_tool_calls``), a branch's conversation is the
main episode's, so the branch takes the main episode's next completion rather than sampling its
own: the outcome at T is then the prefix of the outcome at every larger T (T = 0 included), and a
monotone agent gives a surface monotone in T by construction.

Any env. The engine steps each env as ``gym.make`` returns it (wrappers included) and follows the
env contract (``passkt.envs.contract``, run by ``passkt.agents.env_runtime``): the env's
``protocol`` gives the system prompt, stop strings and layout; a branch is the env's own ``fork``
(copied through its wrappers) or a checked replay of the actions on a fresh env; an episode's
``reward`` is its return (the sum of the rewards the wrapped env gave); ``correct`` is
``info["correct"]`` or, without it, the last reward at its maximum.
"""

from __future__ import annotations

import copy
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from passkt.agents.chat_tokens import ChatTokens, cut_turn, stream_piece
from passkt.agents.env_runtime import EnvRunner, History
from passkt.agents.env_workers import (
    DEFAULT_STEP_TIMEOUT,
    EnvFailure,
    StepResult,
    default_env_workers,
    make_envs,
)
from passkt.agents.episode import Episode, RolloutResult, RolloutStats, Turn
from passkt.agents.policy import (
    DEFAULT_STOP,
    Completion,
    Policy,
    SamplingParams,
    TokenPolicy,
)
from passkt.agents.progress import progress_bar
from passkt.envs.contract import AgentInterface, EnvContract
from passkt.envs.errors import PassktError, PolicyError

logger = logging.getLogger(__name__)


@dataclass
class _Live:
    """A running episode: its record, its env, and the observation it has yet to answer."""

    episode: Episode
    env: Any
    history: History
    pending_ids: list[int] = field(default_factory=list)
    """Ids to append before the next generation (the latest observation turn)."""
    is_branch: bool = False
    stream_tail: str = ""
    """``stream`` layout: the text the latest observation added to the assistant stream."""
    follows: _Live | None = None
    """A branch whose conversation is its main episode's (the env shows no final notice, e.g.
    under the budget wrapper): it takes the main episode's next completion instead of sampling
    its own, so the outcome at T is the prefix of the outcome at a larger T."""


def protocol_params(params: SamplingParams, protocol: AgentInterface) -> SamplingParams:
    """The sampling parameters an agent receives under ``protocol``: its stop strings unless
    ``params.stop`` was set to others, its tools, and ``max_new_tokens`` capped at its
    ``max_turn_tokens``."""
    if params.stop == DEFAULT_STOP:
        params = replace(params, stop=protocol.stop)
    if protocol.tools and not params.tools:
        params = replace(params, tools=tuple(dict(tool) for tool in protocol.tools))
    if protocol.max_turn_tokens is not None and params.max_new_tokens > protocol.max_turn_tokens:
        params = replace(params, max_new_tokens=protocol.max_turn_tokens)
    return params


def round_seed(seed: int, round_index: int) -> int:
    """``SamplingParams.seed`` of round ``round_index`` of a rollout seeded ``seed`` (the whole
    batch's seed, for policies that draw one stream per call)."""
    return (seed * 1_000_003 + round_index * 7919) % (2**31 - 1)


def turn_seed(seed: int, budget: int, turn: int) -> int:
    """The seed of one turn of one episode (or budget branch), from its own (task, sample) seed
    (``passkt.eval.seeds.sample_seed``): independent of which other episodes share the batch.

    Turn ``t`` (0 for the first completion) of the episode with budget ``budget`` is sampled with
    ``SamplingParams.seeds[row] == turn_seed(seed, budget, t)``; its env was reset with
    ``seed=turn_seed(seed, budget, -1)`` (seed tasks; task-list envs are reset by task id). A
    branch forked at T = t keeps the main episode's budget for the turns it shares with it and
    uses its own budget from the turn it answers the final notice."""
    return (seed * 1_000_003 + budget * 7919 + turn * 104_729) % (2**31 - 1)


def recorded_turn_seed(
    seed: int, budget: int, budgets: Sequence[int], turn: int, share_prefix: bool
) -> int:
    """The ``SamplingParams.seeds`` entry turn ``turn`` of a recorded episode was sampled with.

    ``seed`` is the episode's own seed (in ``passkt eval``: ``passkt.eval.chunking.sample_seed(
    run seed, task_id, sample)``), ``budget`` the record's T and ``budgets`` the run's T grid.
    With prefix sharing, the turns an episode shares with the main episode (every turn before
    its ``budget``-th) were sampled by the main episode, at the largest T; the rest at its own.
    The env was reset with ``seed=recorded_turn_seed(seed, budget, budgets, -1, share_prefix)``.
    """
    top = max(budgets)
    own = top if share_prefix and turn < budget else budget
    return turn_seed(seed, own, turn)


_TAG = re.compile(r"</([A-Za-z_][\w.-]*)>")


def action_kind(info: Mapping[str, Any], text: str, stop: Sequence[str]) -> str:
    """What a turn's action was: the env's ``info["action"]`` when it reports one; else the tag
    of the stop string the text ends with (a protocol whose stop strings are closing tags, such
    as ``</search>``, names its actions by them); else ``unknown``."""
    reported = info.get("action")
    if isinstance(reported, str) and reported:
        return reported
    stripped = text.rstrip()
    for string in stop:
        tag = _TAG.fullmatch(string)
        if tag and stripped.endswith(string):
            return tag.group(1)
    return "unknown"


def rollout(
    policy: Policy,
    env_id: str,
    task_ids: Sequence[str],
    *,
    n: int = 1,
    budgets: Sequence[int] = (5,),
    env_kwargs: Mapping[str, Any] | None = None,
    params: SamplingParams | None = None,
    seed: int = 0,
    share_prefix: bool | None = None,
    tokenizer: Any = None,
    progress: bool = False,
    contract: EnvContract | None = None,
    episode_seeds: Mapping[tuple[str, int], int] | None = None,
    env_workers: int | None = None,
    env_step_timeout: float = DEFAULT_STEP_TIMEOUT,
) -> RolloutResult:
    """Run ``n`` episodes of every task at every budget and return them with their cost.

    Args:
        policy: Any ``Policy``; a ``TokenPolicy`` also gets exact token records.
        env_id: A registered env id, e.g. ``"BridgeQA-v0"`` or ``"mymodule:MyEnv-v0"``.
        task_ids: Tasks to run (ids of the env's task list).
        n: Samples per task.
        budgets: The T values (``max_tool_calls``) to produce episodes for.
        env_kwargs: Extra ``gym.make`` kwargs (not ``max_tool_calls``: use ``budgets``).
        params: Sampling parameters; ``n`` must be 1 (samples are separate episodes). The default
            stop strings are replaced by the env protocol's; set others to override them.
        seed: Seeds env resets and each round's sampling, so a run reproduces.
        share_prefix: Fork budget branches from one main episode (default: whenever the env
            hides its budget). ``False`` runs every budget on its own.
        tokenizer: For a policy without token ids (scripted experts), tokenize its text with this
            tokenizer to fill the token record (used for SFT data).
        progress: Show a progress bar over finished episodes.
        contract: The env's contract if the caller already inspected it (saves one env).
        episode_seeds: ``(task_id, sample) -> seed``. When given, each episode's env reset and
            each of its turns (``SamplingParams.seeds``) are seeded from its own seed instead of
            from ``seed`` and its position in the batch, so an episode's outcome does not depend
            on which other tasks run with it (for policies that honour per-row seeds).
        env_workers: Run the envs in this many worker processes (``passkt.agents.env_workers``):
            an env that crashes, hangs or raises ends its episode as an env failure
            (``Episode.env_error``) instead of the run, and a slow env steps in parallel.
            ``0`` keeps every env in this process; ``None``: none for passkt's own envs, else
            one per core up to 4 (``default_env_workers``).
        env_step_timeout: With workers, the seconds one reset, fork or step may take before its
            episode is an env failure of kind ``timeout``.
    """
    params = params or SamplingParams()
    kwargs = dict(env_kwargs or {})
    budgets = sorted({int(b) for b in budgets})
    _check_rollout_args(kwargs, budgets, params, n)
    check_env_workers(env_workers, env_step_timeout)
    t_start = time.perf_counter()

    runner = EnvRunner(env_id, kwargs, contract)
    protocol = runner.protocol
    params = protocol_params(params, protocol)
    # One env instance makes every episode of a forkable env (in each worker): reset it on a task,
    # then fork a copy per episode. The copies share the task list and the search indexes, so each
    # task's index is built once. Other envs are made fresh per episode.
    workers = default_env_workers(env_id) if env_workers is None else int(env_workers)
    envs = make_envs(runner, budgets[-1], workers, env_step_timeout)
    try:
        return _run(
            policy, runner, envs, task_ids, n, budgets, params, seed, share_prefix, tokenizer,
            progress, episode_seeds, t_start,
        )  # fmt: skip
    finally:
        envs.shutdown()


def _run(
    policy: Policy,
    runner: EnvRunner,
    envs: Any,
    task_ids: Sequence[str],
    n: int,
    budgets: list[int],
    params: SamplingParams,
    seed: int,
    share_prefix: bool | None,
    tokenizer: Any,
    progress: bool,
    episode_seeds: Mapping[tuple[str, int], int] | None,
    t_start: float,
) -> RolloutResult:
    protocol = runner.protocol
    share_prefix = resolve_share_prefix(share_prefix, runner.contract.reveal_budget)

    token_policy = isinstance(policy, TokenPolicy)
    chat = None
    if token_policy or tokenizer is not None:
        own = policy.tokenizer if token_policy else tokenizer  # type: ignore[attr-defined]
        chat = ChatTokens(own, protocol.tools, protocol.observation_role)

    main_budgets = [budgets[-1]] if share_prefix else budgets
    fork_at = set(budgets[:-1]) if share_prefix else set()
    live: list[_Live] = []
    mains: dict[tuple[str, int, int], Episode] = {}
    branches: dict[tuple[str, int, int], Episode] = {}
    for index, (task_id, sample, budget) in enumerate(
        (t, s, b) for t in task_ids for s in range(n) for b in main_budgets
    ):
        own = None if episode_seeds is None else episode_seeds[task_id, sample]
        reset_seed = seed + index if own is None else turn_seed(own, budget, -1)
        started = envs.start(index, budget, task_id, reset_seed)
        if isinstance(started, EnvFailure):  # the reset itself crashed or hung
            episode = Episode(task_id, sample, budget, _task_category(runner, task_id))
            _fail(episode, started)
            mains[(task_id, sample, budget)] = episode
            continue
        env, observation, info, attribute, history = started
        episode = Episode(task_id, sample, budget, runner.category(info, attribute))
        episode.messages = protocol.first_messages(observation)
        item = _Live(episode, env, history)
        if chat is not None:
            item.pending_ids = chat.prompt_ids(episode.messages)
        mains[(task_id, sample, budget)] = episode
        live.append(item)
        if 0 in fork_at:
            live.extend(_fork(item, 0, chat, branches, runner, envs))

    calls = 0
    generated = 0
    gen_seconds = 0.0
    bar = progress_bar(total=len(mains), desc="episodes", disable=not progress, leave=False)
    round_index = 0
    while live:
        bar.set_postfix_str(f"round {round_index + 1}, {len(live)} live", refresh=True)
        round_params = replace(params, seed=round_seed(seed, round_index))
        leaders = [item for item in live if item.follows is None]
        if episode_seeds is not None:
            row_seeds = tuple(
                turn_seed(
                    episode_seeds[item.episode.task_id, item.episode.sample],
                    item.episode.budget,
                    len(item.episode.turns),
                )
                for item in leaders
            )
            round_params = replace(round_params, seeds=row_seeds)
        started = time.perf_counter()
        completions = _generate(policy, leaders, chat, round_params, token_policy)
        gen_seconds += time.perf_counter() - started
        calls += 1
        sampled = {id(item): c for item, c in zip(leaders, completions, strict=True)}
        turns: list[tuple[_Live, Completion, str]] = []
        for item in live:
            completion = sampled[id(item.follows or item)]
            shared = item.follows is not None
            item.follows = None  # a branch follows for the one turn in which it must answer
            text, count = _record_tokens(item, completion, chat, token_policy, runner, shared)
            generated += count
            turns.append((item, completion, text))
        # every env steps once (in parallel across env workers), then the episodes read replies
        replies = envs.step(
            [(item.env, text, item.history, len(item.episode.turns)) for item, _, text in turns]
        )
        still: list[_Live] = []
        for (item, completion, text), reply in zip(turns, replies, strict=True):
            if isinstance(reply, EnvFailure):
                _record_failure(item, completion, text, reply, runner)
            else:
                _record_step(item, completion, text, reply, chat, runner)
            if item.episode.done:
                if not item.is_branch:
                    bar.update(1)
                envs.close(item.env)
                continue
            still.append(item)
            calls_made = item.episode.tool_calls
            if not item.is_branch and calls_made in fork_at:
                still.extend(_fork(item, calls_made, chat, branches, runner, envs))
        live = still
        round_index += 1
    bar.close()

    episodes = _collect(task_ids, n, budgets, share_prefix, mains, branches)
    stats = RolloutStats(
        policy_calls=calls,
        generated_tokens=generated,
        generate_seconds=gen_seconds,
        wall_seconds=time.perf_counter() - t_start,
        episodes=len(episodes),
    )
    return RolloutResult(episodes, stats)


def resolve_share_prefix(share_prefix: bool | None, reveal_budget: bool) -> bool:
    """Whether budget branches fork from one main episode: by default whenever the env hides its
    budget (then an episode with budget T is the prefix of one with a larger budget)."""
    if share_prefix is None:
        return not reveal_budget
    if share_prefix and reveal_budget:
        raise ValueError("share_prefix=True needs a hidden budget; the env has reveal_budget=True")
    return bool(share_prefix)


def check_no_budget_kwarg(env_kwargs: Mapping[str, Any]) -> None:
    """The budget is given as ``budgets`` (``--budgets``), never as an env kwarg."""
    if "max_tool_calls" in env_kwargs:
        raise ValueError(
            "Give the budgets with budgets= (--budgets), not env_kwargs['max_tool_calls']."
        )


MAX_ENV_WORKERS = 64


def check_env_workers(workers: int | None, step_timeout: float) -> None:
    """``env_workers``: ``None`` or an int in 0..``MAX_ENV_WORKERS``; ``env_step_timeout``: a
    finite number of seconds > 0."""
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= 64
    ):
        raise ValueError(f"env_workers must be an int in 0..{MAX_ENV_WORKERS}, got {workers!r}")
    if not isinstance(step_timeout, (int, float)) or not 0 < step_timeout < float("inf"):
        raise ValueError(f"env_step_timeout must be a finite number > 0, got {step_timeout!r}")


def _check_rollout_args(
    kwargs: dict[str, Any], budgets: list[int], params: SamplingParams, n: int
) -> None:
    check_no_budget_kwarg(kwargs)
    if not budgets or budgets[0] < 0:
        raise ValueError(f"budgets must be non-negative integers, got {budgets}")
    if params.n != 1:
        raise ValueError("rollout() draws samples as separate episodes: use n=, keep params.n=1.")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")


def _task_category(runner: EnvRunner, task_id: str) -> str:
    """The category of a task whose reset failed: its record's, else the env id's name."""
    for task in runner.contract.tasks:
        if getattr(task, "task_id", None) == task_id and getattr(task, "category", None):
            return str(task.category)
    return runner.env_id.rpartition(":")[2]


def _fail(episode: Episode, failure: EnvFailure) -> None:
    """End ``episode`` as an env failure: not correct, truncated, with the failure recorded."""
    episode.env_error = failure.to_record()
    episode.correct = False
    episode.truncated = True


def _fork(
    item: _Live,
    budget: int,
    chat: ChatTokens | None,
    branches: dict[tuple, Episode],
    runner: EnvRunner,
    envs: Any,
) -> list[_Live]:
    """A branch of ``item`` that sees the final notice now: the episode with budget ``budget``
    (none to run when the env failed to fork: the branch is then recorded as an env failure)."""
    main = item.episode
    forked = envs.fork(item.env, item.history, budget)
    if isinstance(forked, EnvFailure):
        episode = copy.copy(main)
        episode.budget = budget
        episode.turns = list(main.turns)
        episode.messages = list(main.messages)
        episode.generated_tokens = 0
        _fail(episode, replace(forked, turn=len(main.turns)))
        branches[(main.task_id, main.sample, budget)] = episode
        return []
    env, observation = forked
    episode = copy.copy(main)
    episode.budget = budget
    episode.turns = list(main.turns)
    episode.token_ids = list(main.token_ids)
    episode.policy_mask = list(main.policy_mask)
    episode.logprobs = list(main.logprobs)
    episode.generated_tokens = 0
    protocol = runner.protocol
    history = item.history.copy()
    history.observations[-1] = observation
    branch = _Live(episode, env, history, is_branch=True)
    if not main.turns:
        episode.messages = protocol.first_messages(observation)
        if chat is not None:
            branch.pending_ids = chat.prompt_ids(episode.messages)
    elif protocol.layout == "stream":
        # The stream's last piece is the main episode's observation: swap in the branch's.
        stream = main.messages[-1]["content"]
        branch.stream_tail, branch.pending_ids = stream_piece(chat, protocol, observation)
        content = stream[: len(stream) - len(item.stream_tail)] + branch.stream_tail
        episode.messages = [*main.messages[:-1], {"role": "assistant", "content": content}]
    else:
        role = protocol.observation_role
        episode.messages = [*main.messages[:-1], {"role": role, "content": observation}]
        if chat is not None:
            branch.pending_ids = chat.observation_ids(observation)
    if episode.messages == main.messages and branch.pending_ids == item.pending_ids:
        branch.follows = item
    branches[(main.task_id, main.sample, budget)] = episode
    return [branch]


def _generate(
    policy: Policy,
    live: list[_Live],
    chat: ChatTokens | None,
    params: SamplingParams,
    token_policy: bool,
) -> list[Completion]:
    name = type(policy).__name__
    try:
        if token_policy:
            prompts = [item.episode.token_ids + item.pending_ids for item in live]
            completions = policy.generate_ids(prompts, params)  # type: ignore[attr-defined]
        else:
            completions = policy.generate([item.episode.messages for item in live], params)
    except PassktError:
        raise
    except Exception as error:  # the agent's own code: one line, --traceback for the rest
        text = str(error).splitlines()[0] if str(error) else ""
        raise PolicyError(f"{name}.generate raised {type(error).__name__}: {text}") from error
    if not isinstance(completions, (list, tuple)) or len(completions) != len(live):
        got = len(completions) if isinstance(completions, (list, tuple)) else type(completions)
        raise PolicyError(
            f"{name}.generate returned {got!r} for {len(live)} conversations (expected a list "
            "of one Completion each with params.n=1)."
        )
    for completion in completions:
        if not isinstance(getattr(completion, "text", None), str):
            raise PolicyError(
                f"{name}.generate returned a {type(completion).__name__}, not a "
                "passkt.agents.policy.Completion (with its text)"
            )
    return completions


def _record_tokens(
    item: _Live,
    completion: Completion,
    chat: ChatTokens | None,
    token_policy: bool,
    runner: EnvRunner,
    shared: bool = False,
) -> tuple[str, int]:
    """Append the completion's tokens to the episode's record; return the action text the env
    will be stepped with and the tokens generated (none for a ``shared`` completion: the main
    episode's, taken by a following branch)."""
    episode = item.episode
    n_generated = len(completion.token_ids) or len(completion.text.split())
    text = runner.protocol.cut(completion.text)
    if chat is not None:
        ids = list(completion.token_ids) if token_policy else chat.encode(text)
        logprobs = list(completion.logprobs) if token_policy else [0.0] * len(ids)
        if len(logprobs) != len(ids):
            raise RuntimeError(
                f"Completion has {len(ids)} token ids but {len(logprobs)} logprobs; a "
                "TokenPolicy must return one logprob per sampled id."
            )
        if token_policy and text != completion.text:
            ids, logprobs = cut_turn(chat, ids, logprobs, text)
        prefix = item.pending_ids
        episode.token_ids += prefix + ids
        episode.policy_mask += [False] * len(prefix) + [True] * len(ids)
        episode.logprobs += [0.0] * len(prefix) + logprobs
        item.pending_ids = []
        n_generated = len(ids)
    if shared:
        n_generated = 0
    episode.generated_tokens += n_generated
    return text, n_generated


def _append_action(item: _Live, text: str, runner: EnvRunner) -> None:
    episode = item.episode
    if runner.protocol.layout == "stream" and episode.messages[-1]["role"] == "assistant":
        last = episode.messages[-1]
        episode.messages[-1] = {"role": "assistant", "content": last["content"] + text}
    else:
        episode.messages.append({"role": "assistant", "content": text})


def _record_failure(
    item: _Live, completion: Completion, text: str, failure: EnvFailure, runner: EnvRunner
) -> None:
    """The env failed on this turn's action: keep the action in the transcript, end the episode."""
    _append_action(item, text, runner)
    kind = action_kind({}, text, runner.protocol.stop)
    item.episode.turns.append(Turn(completion, kind, ""))
    _fail(item.episode, failure)


def _record_step(
    item: _Live,
    completion: Completion,
    text: str,
    step: StepResult,
    chat: ChatTokens | None,
    runner: EnvRunner,
) -> None:
    """Append the action and the env's reply to the episode."""
    episode = item.episode
    observation, reward, terminated, truncated, info = (
        step.observation, step.reward, step.terminated, step.truncated, step.info,
    )  # fmt: skip
    done = terminated or truncated
    item.history.actions.append(text)
    item.history.observations.append(observation)
    _append_action(item, text, runner)
    kind = action_kind(info, text, runner.protocol.stop)
    episode.turns.append(Turn(completion, kind, "" if done else observation))
    episode.tool_calls = runner.tool_calls(info, episode.tool_calls, done)
    if not done and episode.tool_calls > episode.budget:
        runner.over_budget(episode.tool_calls, episode.budget)
    episode.reward += float(reward)
    episode.terminated, episode.truncated = bool(terminated), bool(truncated)
    if done:
        episode.answer = info.get("answer")
        episode.correct = runner.success(info, float(reward))
        episode.f1 = float(info["f1"]) if "f1" in info else None
    elif runner.protocol.layout == "stream":
        item.stream_tail, item.pending_ids = stream_piece(chat, runner.protocol, observation)
        last = episode.messages[-1]
        episode.messages[-1] = {"role": "assistant", "content": last["content"] + item.stream_tail}
    else:
        episode.messages.append({"role": runner.protocol.observation_role, "content": observation})
        if chat is not None:
            item.pending_ids = chat.observation_ids(observation)


def _collect(
    task_ids: Sequence[str],
    n: int,
    budgets: list[int],
    share_prefix: bool,
    mains: dict[tuple, Episode],
    branches: dict[tuple, Episode],
) -> list[Episode]:
    """One episode per (task, sample, budget), resolving budgets the main episode never reached."""
    out: list[Episode] = []
    top = budgets[-1]
    for task_id in task_ids:
        for sample in range(n):
            for budget in budgets:
                if not share_prefix or budget == top:
                    out.append(mains[(task_id, sample, budget if not share_prefix else top)])
                elif (task_id, sample, budget) in branches:
                    out.append(branches[(task_id, sample, budget)])
                else:  # answered before making `budget` calls: identical to the main episode
                    main = mains[(task_id, sample, top)]
                    out.append(replace(main, budget=budget, generated_tokens=0))
    return out
