"""Where multi-hop episodes stop: how far along the gold chain each episode of a run got.

pass@1 says how often a base succeeds, not why it fails. For a run of a retrieval env (``passkt
eval --out DIR``), this reads every episode's transcript and follows the task's gold paragraphs
(``Task.gold_titles``, in chain order): an episode *reached* hop i when the i-th gold paragraph
came back in one of its observations (``Doc k (Title: T) ...``, the passkt protocol). Each
episode ends in exactly one stage:

- ``stopped after hop i`` (i = 0 .. hops - 1): it read the first i gold paragraphs and not the
  next one, split by what it did right after reading the i-th (or after the question, for i = 0):
  a search copied from the conversation (a wrong name it had seen), a search of something that
  appears nowhere in the conversation (invented), an answer, or nothing well formed;
- ``read all``: every gold paragraph came back; then it answered right, answered wrong, or never
  answered.

The fractions say which skill a base lacks (copying the bridge entity, reading the answer off
the last paragraph, ...) and what a change of recipe moved. The run's manifest names the env, its
kwargs and split, so the tasks are rebuilt exactly::

    python -m passkt.study.chain_stages runs/cal/s0-final/eval-final-C \\
        runs/cal/g-final/eval-final-C --out runs/cal/chain_stages.md
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import gymnasium as gym

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.scoring import normalize_answer
from passkt.study.testbed.corpus import _SEARCH, _TITLE  # the corpus agent reads them so too

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def episode_stage(messages: Sequence[Mapping[str, str]], gold_titles: Sequence[str], golds) -> str:
    """The stage one episode ended in (see the module docstring); ``golds``: accepted answers,
    normalised."""
    reached = 0  # gold paragraphs read so far, in chain order
    first_action: dict[int, str] = {}  # what the agent did first after reaching each hop
    seen = ""  # what the agent had in front of it before its current turn
    answers: list[str] = []
    for message in messages[1:]:  # the system prompt names no entity
        content = message["content"]
        if message["role"] == "assistant":
            first_action.setdefault(reached, _action(content, seen, answers))
        else:
            titles = set(_TITLE.findall(content))
            while reached < len(gold_titles) and gold_titles[reached] in titles:
                reached += 1
        seen += content + "\n"
    if reached == len(gold_titles):
        if not answers:
            return "read all: no answer"
        right = normalize_answer(answers[-1]) in golds
        return "read all: answered right" if right else "read all: answered wrong"
    return f"stopped after hop {reached}: {first_action.get(reached, 'no action')}"


def _action(content: str, seen: str, answers: list[str]) -> str:
    """What one turn did, for the stage names; records an answer in ``answers``."""
    search, answer = _SEARCH.search(content), _ANSWER.search(content)
    if answer and not search:
        answers.append(answer.group(1).strip())
        return "answered"
    if search and not answer:
        query = search.group(1).strip()
        if query and query in seen:
            return "searched a name it had read"
        return "searched something not in the conversation"
    return "no well-formed action"


def stages(run: Path) -> collections.Counter:
    """Stage counts of every episode in the run folder ``run``."""
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    env = gym.make(manifest["env_id"], split=manifest["split"], **manifest["env_kwargs"])
    tasks = {t.task_id: t for t in env.unwrapped.tasks}
    env.close()
    counts: collections.Counter = collections.Counter()
    with (run / "transcripts.jsonl").open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            record = json.loads(line)
            task = tasks.get(record["task_id"])
            if task is None:
                raise SystemExit(
                    f"{run / 'transcripts.jsonl'}:{number}: task {record['task_id']!r} is not in "
                    f"{manifest['env_id']} {manifest['env_kwargs']} ({manifest['split']} split); "
                    "was the run made with another version of the env?"
                )
            if not task.gold_titles:
                raise SystemExit(
                    f"{run}: task {task.task_id!r} has no gold_titles; chain stages need a "
                    "retrieval env whose tasks name their gold paragraphs"
                )
            golds = {normalize_answer(a) for a in (task.answer, *task.aliases)}
            counts[episode_stage(record["messages"], task.gold_titles, golds)] += 1
    return counts


def table(runs: Mapping[str, collections.Counter]) -> str:
    """A markdown table: one row per stage, one column per run, the share of its episodes."""
    keys = sorted({k for c in runs.values() for k in c}, key=_stage_order)
    lines = ["| stage | " + " | ".join(runs) + " |", "|---|" + "---:|" * len(runs)]
    for key in keys:
        cells = [f"{c[key] / max(1, sum(c.values())):.3f}" for c in runs.values()]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines.append("| episodes | " + " | ".join(str(sum(c.values())) for c in runs.values()) + " |")
    return "\n".join(lines) + "\n"


def _stage_order(key: str) -> tuple:
    return (key.startswith("read all"), key)


def main(argv: Iterable[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("runs", nargs="+", type=Path, help="eval run folders (passkt eval --out)")
    p.add_argument("--out", type=Path, help="also write the table here")
    args = p.parse_args(list(argv) if argv is not None else None)
    for run in args.runs:
        if not (run / "manifest.json").is_file() or not (run / "transcripts.jsonl").is_file():
            p.error(f"{run}: not an eval run folder (needs manifest.json and transcripts.jsonl)")
    text = table({str(run): stages(run) for run in args.runs})
    sys.stdout.write(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
