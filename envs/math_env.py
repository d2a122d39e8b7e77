"""Math-v0: pure reasoning, no tools (the study's category A)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from passkt.envs.base import ProtocolName, ToolUseEnv
from passkt.envs.tasks import Task

__all__ = ["MathEnv"]


class MathEnv(ToolUseEnv):
    """Solve a math problem in one turn and give the final answer in ``<answer>...</answer>``.

    ## Description
    A math word problem: from the synthetic source (default; integer problems of several steps,
    made by this project), MATH-500 (``source="math500"``) or GSM8K (``source="gsm8k"``), both
    read from their JSONL files via ``path=``. There are no tools: the budget T is 0, so the
    first turn must be the answer (the study evaluates math at T = 0 only).

    ## Action Space
    Any Unicode string (``passkt.envs.spaces.ActionText``; ``sample()`` gives
    ``<answer>...</answer>``). The turn may reason freely, optionally in
    ``<think>...</think>``, and must end in ``<answer>text</answer>``; the first complete action
    counts and text after its closing tag is ignored. A ``<search>`` is not an answer.

    ## Observation Space
    Any Unicode string of at most 131,072 characters (``passkt.envs.spaces.UnicodeText``).
    Reset: the problem, then ``\\n\\nYou have no tool calls left. Answer now with <answer>your
    answer</answer>.``. The last observation is ``Episode over: your answer was recorded.``, or
    when the turn is not an answer, ``Episode over: no tool calls were left and the turn did not
    end in <answer>...</answer>.``

    ## Starting State
    A problem drawn uniformly from the split with ``self.np_random``, or the one named by
    ``reset(options={"task_id": ...})``.

    ## Rewards
    1.0 if the answer is mathematically equivalent to the gold answer, else 0.0. MATH-500 answers
    are compared as values (``passkt.envs.scoring.math_equal``: after documented normalizations
    the whole final answer must be one object of the gold's kind, so ``\\frac{1}{2}`` equals
    ``0.5`` and ``2\\,220`` equals ``2220``, but ``2 +``, ``$2**100$`` or ``2\\text{ cm} + 1``
    is not ``2``; numbers exactly, bases and equations as written) in a worker process
    limited to ``passkt.envs.math_worker.DEFAULT_CPU_LIMIT_S`` seconds of CPU; an answer that
    is too costly to compare (a power tower, a huge factorial, a high power of a sum) scores 0.0
    and ``info["score_note"]`` says why. Synthetic problems (integer answers) and GSM8K compare
    the last number of the answer exactly (``passkt.envs.scoring.number_equal``).

    ## Episode End
    After one turn: terminated if it is an answer, else truncated (reward 0).

    ## Information
    ``task_id``, ``category`` (``"math"``), ``tool_calls`` (always 0), ``turns``, ``budget``
    (0), ``depth`` (0), ``action`` (``"answer"``, ``"invalid"``, or ``None`` at reset),
    ``answer`` (``None`` until answered), ``correct``, ``f1``, ``score_note`` (why the answer
    was not compared, else ``None``).

    ## Arguments
    - ``source``: ``"synthetic"``, ``"math500"``, ``"gsm8k"``, or a source added with
      ``passkt.envs.register_source``.
    - ``split``: ``"train"`` or ``"test"`` (disjoint).
    - ``path``: the JSONL file (or hub dataset name) for ``math500`` and ``gsm8k``.
    - ``source_options``: further keyword arguments for the source (e.g. ``{"seed": 1}``).
    - ``tasks``: your own list of math ``Task`` objects instead of a source.
    - ``max_tool_calls``: must be 0 (kept so that code passing T to every env works).
    - ``reveal_budget``: accepted for symmetry; with T = 0 every observation already ends with
      the final notice.
    - ``render_mode``: ``None`` or ``"ansi"``.
    - ``protocol``: ``"passkt"`` only (``"search-r1"`` needs a search tool).

    ## Version History
    - v0: initial version. The MATH-500 reward was made strict (whole answer, exact numbers,
      bases, equations) without a version bump: it only stopped rewarding wrong answers. It
      then read every answer by one grammar (``passkt.envs.math_grammar``): hedges after a
      unit, numbers side by side and words left of ``=`` stopped being rewarded, and thousands
      separators, Unicode, word units, repeating decimals and long prose before the box started
      to be.
    """

    category = "math"
    has_tools = False

    def __init__(
        self,
        *,
        source: str = "synthetic",
        split: str = "test",
        path: str | None = None,
        source_options: dict[str, Any] | None = None,
        tasks: Sequence[Task] | None = None,
        max_tool_calls: int = 0,
        reveal_budget: bool = False,
        render_mode: str | None = None,
        protocol: ProtocolName = "passkt",
    ) -> None:
        super().__init__(
            source=source,
            split=split,
            path=path,
            source_options=source_options,
            tasks=tasks,
            max_tool_calls=max_tool_calls,
            reveal_budget=reveal_budget,
            render_mode=render_mode,
            protocol=protocol,
        )
