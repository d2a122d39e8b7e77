"""Fixtures shared by the eval tests: real run directories and the ``passkt`` command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def heuristic_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Makes a real run directory: the heuristic agent on synthetic BridgeQA, 4 tasks x n = 4.

    Call it as ``heuristic_run(folder_name, **evaluate_options)`` (e.g. ``policy_options=``,
    ``name=``); it evaluates budgets T = 0, 2, 4 on a 40-task world and returns the folder.
    """
    from passkt.eval.evaluate import evaluate

    def make(folder_name: str, **options: Any) -> Path:
        out = tmp_path_factory.mktemp("runs") / folder_name
        evaluate(
            "BridgeQA-v0",
            "scripted:heuristic",
            env_kwargs={"source_options": {"num_tasks": 40}},
            n=4,
            budgets=(0, 2, 4),
            limit=4,
            out_dir=out,
            progress=False,
            **options,
        )
        return out

    return make


@pytest.fixture(scope="session")
def run_dir(heuristic_run: Callable[..., Path]) -> Path:
    """A real run directory: the heuristic agent (default seed and name), made once per session."""
    return heuristic_run("heuristic")


@pytest.fixture
def passkt_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[Any, str, str]]:
    """Runs ``passkt`` in this process: ``passkt_cli(*argv)`` -> (exit code, stdout, stderr)."""
    from passkt.eval import cli

    def run(*argv: str) -> tuple[Any, str, str]:
        try:
            code = cli.main(list(argv))
        except SystemExit as e:
            code = e.code
        out, err = capsys.readouterr()
        return code, out, err

    return run
