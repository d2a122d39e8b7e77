"""The examples' READMEs run as written, each command in a fresh process, as a user would.

Every ``bash`` block of ``examples/<library>/README.md`` runs in a copy of that folder (the
adapter and the agent, nothing else), with a tiny local model in place of SmolLM2 so the
training commands take seconds. The library must be installed (the ``examples`` extra).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LIBRARIES = {"textarena": "textarena", "reasoning_gym": "reasoning_gym"}
"""Example folder -> the module its library installs."""


def commands(readme: Path) -> list[str]:
    """The ``passkt`` command lines of a README's bash blocks (continuation lines joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", readme.read_text(), re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.strip().startswith("passkt ")]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from passkt.agents.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", hidden_size=64)


def test_every_example_folder_is_tested():
    folders = {p.name for p in EXAMPLES.iterdir() if p.is_dir() and not p.name.startswith("_")}
    assert folders - {"__pycache__"} == set(LIBRARIES)
    for folder in LIBRARIES:
        assert len(commands(EXAMPLES / folder / "README.md")) >= 5, folder


@pytest.mark.slow
@pytest.mark.parametrize("folder", list(LIBRARIES))
def test_the_readme_commands_run(folder, tiny, tmp_path):
    pytest.importorskip(LIBRARIES[folder], reason="pip install -e '.[examples]'")
    work = tmp_path / folder
    shutil.copytree(EXAMPLES / folder, work, ignore=shutil.ignore_patterns("__pycache__", "runs"))
    script = Path(sys.executable).with_name("passkt")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    for line in commands(EXAMPLES / folder / "README.md"):
        argv = shlex.split(line.replace("hf:smollm2-135m-instruct", f"hf:{tiny}"))
        argv[0] = str(script) if script.exists() else f"{sys.executable} -m passkt.eval.cli"
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"
    runs = work / "runs"
    assert (runs / "grpo" / "checkpoint-2").is_dir() and (runs / "sft" / "checkpoint-2").is_dir()
    assert (runs / "grpo-eval" / "manifest.json").is_file()
    # the agents' own runs: successes rise with T, and a success is a win, not a shaped reward
    run = next(p for p in runs.iterdir() if p.name in ("random", "slips"))
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    rate = {}
    for row in rows:
        rate.setdefault(row["budget"], []).append(row["correct"])
        assert row["correct"] == (row["reward"] >= 1.0) or folder == "reasoning_gym"
        assert row["tool_calls"] <= row["budget"]
    means = [sum(v) / len(v) for _, v in sorted(rate.items())]
    assert means == sorted(means) and means[-1] > means[0], means
