"""Every bad invocation fails before it writes: exit code 2, one line naming the bad value.

A table of malformed command lines across ``eval``, ``report``, ``compare``, ``train`` and
``analyze``. Each row runs ``passkt`` in a fresh working folder (in-process through ``main``, and
a few as real subprocesses) and asserts: exit code 2, exactly one line on stderr that starts with
``passkt: error:`` and contains the bad value, no traceback, and no file or folder created.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from passkt.eval.cli import main

SMALL = 'source_options={"num_tasks": 40}'
NO_CUDA = not torch.cuda.is_available()
NO_MPS = not torch.backends.mps.is_available()
MODEL = "{model}"  # a folder with a config.json (no weights: nothing may get to loading them)
NO_MODEL = "{nomodel}"  # a folder without one
A_FILE = "{afile}"

EVAL_ROWS: list[tuple[list[str], str]] = [
    # policy specs
    (["--policy", "hf:"], "'hf:'"),
    (["--policy", "lean:"], "'lean:'"),
    (["--policy", "nope:x"], "'nope'"),
    (["--policy", "heuristic"], "'heuristic'"),
    (["--policy", "scripted:orakle"], "'orakle'"),
    (["--policy", "py:passkt_no_such_module:f"], "passkt_no_such_module"),
    (["--policy", "py:os:no_such_factory"], "no_such_factory"),
    (["--policy", "py:os"], "'py:os'"),
    (["--policy", "py:os:system", "--limit", "1", "--n", "1"], "py:os:system"),
    (["--policy", "py:os:getcwd", "--limit", "1", "--n", "1"], "py:os:getcwd"),
    (["--policy", "openai:#m"], "openai:#m"),
    (["--policy", "openai:ftp://host/v1#m"], "ftp://host/v1#m"),
    (["--policy", "openai:http://127.0.0.1:9/v1"], "openai:http://127.0.0.1:9/v1"),
    (["--policy", "openai:http://127.0.0.1:9/v1#"], "openai:http://127.0.0.1:9/v1#"),
    (["--policy", "vllm:some/model"], "vllm:some/model"),
    (["--policy", "hf:/nonexistent/model"], "/nonexistent/model"),
    (["--policy", "hf:./missing-model"], "./missing-model"),
    (["--policy", "lean:/nonexistent/model"], "/nonexistent/model"),
    (["--policy", f"hf:{NO_MODEL}"], "no config.json"),
    (["--policy", f"lean:{NO_MODEL}"], "no config.json"),
    (["--policy", f"hf:{A_FILE}"], "no config.json"),
    # device and dtype
    (["--policy", f"hf:{MODEL}", "--device", "cuda:99"], "cuda:99"),
    (["--policy", f"hf:{MODEL}", "--device", "gpu"], "'gpu'"),
    (["--policy", f"hf:{MODEL}", "--device", "cuda:x"], "'cuda:x'"),
    (["--policy", f"hf:{MODEL}", "--device", "tpu:0"], "'tpu:0'"),
    *([(["--policy", f"hf:{MODEL}", "--device", "cuda"], "cuda")] if NO_CUDA else []),
    *([(["--policy", f"hf:{MODEL}", "--device", "mps"], "mps")] if NO_MPS else []),
    (["--policy", f"hf:{MODEL}", "--dtype", "float8"], "'float8'"),
    (["--policy", f"hf:{MODEL}", "--dtype", "int8"], "'int8'"),
    (["--policy", f"hf:{MODEL}", "--dtype", "bf16"], "'bf16'"),
    (["--device", "cpu"], "scripted:heuristic"),
    (["--dtype", "float32"], "scripted:heuristic"),
    # numbers
    (["--n", "0"], "'0'"),
    (["--n", "-1"], "'-1'"),
    (["--n", "many"], "'many'"),
    (["--n", "1.5"], "'1.5'"),
    (["--n", "100000"], "100000"),
    (["--budgets", "5,3"], "5,3"),
    (["--budgets", "1000000000"], "1000000000"),
    (["--budgets", "0,1001"], "1001"),
    (["--budgets", "1,1"], "1,1"),
    (["--budgets", "-1"], "[-1]"),
    (["--budgets", "a"], "'a'"),
    (["--budgets", ""], "--budgets is empty"),
    (["--budgets", "0,1.5"], "'0,1.5'"),
    (["--env-workers", "-1"], "'-1'"),
    (["--env-workers", "65"], "'65'"),
    (["--env-workers", "two"], "'two'"),
    (["--env-step-timeout", "0"], "'0'"),
    (["--env-step-timeout", "nan"], "'nan'"),
    (["--env-failures", "ignore"], "'ignore'"),
    (["--ks", "4,2"], "4,2"),
    (["--ks", "0"], "0"),
    (["--ks", "x"], "'x'"),
    (["--ks", "1,1000"], "1000"),
    (["--limit", "0"], "'0'"),
    (["--limit", "-3"], "'-3'"),
    (["--limit", "many"], "'many'"),
    (["--temperature", "nan"], "'nan'"),
    (["--temperature", "inf"], "'inf'"),
    (["--temperature", "-1"], "-1"),
    (["--temperature", "hot"], "'hot'"),
    (["--top-p", "nan"], "'nan'"),
    (["--top-p", "2"], "2"),
    (["--top-p", "0"], "0"),
    (["--max-new-tokens", "0"], "'0'"),
    (["--max-new-tokens", "x"], "'x'"),
    (["--chunk-tasks", "0"], "'0'"),
    (["--chunk-tasks", "x"], "'x'"),
    (["--chunk-seconds", "nan"], "'nan'"),
    (["--chunk-seconds", "inf"], "'inf'"),
    (["--chunk-seconds", "0"], "'0'"),
    (["--chunk-seconds", "-5"], "'-5'"),
    (["--chunk-seconds", "soon"], "'soon'"),
    (["--seed", "x"], "'x'"),
    (["--seed", "1.5"], "'1.5'"),
    (["--split", "dev"], "'dev'"),
    # envs and their kwargs
    (["--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["--env", "passkt_no_such_module:Foo-v0"], "passkt_no_such_module"),
    (["--env-kwargs", "{bad json"], "{bad json"),
    (["--env-kwargs", "max_tool_calls=3"], "max_tool_calls"),
    (["--env-kwargs", "split=train"], "split"),
    (["--env-kwargs", "source=nosuchsource"], "nosuchsource"),
    (["--env-kwargs", "source=hotpotqa,path=/nonexistent/dev.json"], "/nonexistent/dev.json"),
    (["--env-kwargs", "source=hotpotqa,path=/"], "/: record (folder)"),
    (["--task-ids", "@/nonexistent/ids.txt"], "/nonexistent/ids.txt"),
    (["--task-ids", "no-such-task"], "no-such-task"),
    (["--task-ids", ","], "--task-ids is empty"),
    (["--import", "passkt_no_such_module"], "passkt_no_such_module"),
    # run directories
    (["--resume"], "--resume needs --out"),
    (["--resume", "--out", "nonexistent"], "nothing to resume at nonexistent"),
    (["--resume", "--out", "empty"], "nothing to resume at empty"),
    (["--out", "afile"], "afile"),
    (["--out", "afile/run"], "afile"),
    (["--out", "notarun"], "notarun"),
    (["--bogus-flag"], "--bogus-flag"),
]
"""(arguments after ``passkt eval``, a fragment of the one error line). The working folder holds
``afile`` (a file), ``empty`` (an empty folder) and ``notarun`` (a folder with a file)."""

OTHER_ROWS: list[tuple[list[str], str]] = [
    (["report", "nonexistent"], "nonexistent"),
    (["report", "afile"], "afile"),
    (["report", "empty"], "empty"),
    (["report", "notarun"], "notarun"),
    (["report", "empty", "--ks", "4,2"], "4,2"),
    (["report", "empty", "--n-boot", "0"], "'0'"),
    (["report", "empty", "--level", "nan"], "'nan'"),
    (["report", "empty", "--method", "guess"], "'guess'"),
    (["compare", "nonexistent", "other"], "nonexistent"),
    (["compare", "empty", "notarun"], "empty"),
    (["compare", "empty", "empty", "--budget", "x"], "'x'"),
    (["analyze", "diversity", "nonexistent"], "nonexistent"),
    (["analyze", "diversity", "empty", "--budget", "x"], "'x'"),
    (["analyze", "ppl", "nonexistent", "--model", "hf:/nonexistent/model"], "nonexistent"),
    *(
        [(["analyze", "ppl", "empty", "--model", f"hf:{MODEL}", "--device", "cuda:3"], "cuda:3")]
        if NO_CUDA
        else []
    ),
    (["analyze", "ppl", "empty", "--model", f"hf:{MODEL}", "--dtype", "fp9"], "'fp9'"),
    (["bogus-command"], "bogus-command"),
]

TRAIN_ROWS: list[tuple[list[str], str]] = [
    (["grpo", "--policy", "hf:"], "'hf:'"),
    (["sft", "--policy", "hf:"], "'hf:'"),
    (["grpo", "--policy", "scripted:heuristic"], "scripted:heuristic"),
    (["grpo", "--policy", "vllm:some/model"], "vllm:some/model"),
    (["grpo", "--policy", "hf:/nonexistent/model"], "/nonexistent/model"),
    (["sft", "--policy", f"hf:{NO_MODEL}"], "no config.json"),
    (["grpo", "--policy", f"hf:{MODEL}", "--dtype", "float8"], "float8"),
    (["grpo", "--policy", f"hf:{MODEL}", "--learning-rate", "nan"], "nan"),
    (["sft", "--policy", f"hf:{MODEL}", "--learning-rate", "nan"], "nan"),
    (["sft", "--policy", f"hf:{MODEL}", "--learning-rate", "inf"], "inf"),
    (["sft", "--policy", f"hf:{MODEL}", "--learning-rate", "-1"], "-1"),
    (["sft", "--policy", f"hf:{MODEL}", "--learning-rate", "fast"], "'fast'"),
    (["grpo", "--policy", f"hf:{MODEL}", "--max-grad-norm", "nan"], "nan"),
    (["grpo", "--policy", f"hf:{MODEL}", "--temperature", "nan"], "nan"),
    (["grpo", "--policy", f"hf:{MODEL}", "--kl-coef", "-1"], "-1"),
    (["grpo", "--policy", f"hf:{MODEL}", "--clip-low", "2"], "2"),
    (["grpo", "--policy", f"hf:{MODEL}", "--group-size", "1"], "1"),
    (["grpo", "--policy", f"hf:{MODEL}", "--epochs", "0"], "0"),
    (["sft", "--policy", f"hf:{MODEL}", "--lora-dropout", "1.5"], "1.5"),
    (["grpo", "--policy", f"hf:{MODEL}", "--resume"], "nothing to resume at r"),
    (["sft", "--policy", f"hf:{MODEL}", "--resume"], "nothing to resume at r"),
    (["grpo", "--policy", f"hf:{MODEL}", "--env", "NoSuchEnv-v0"], "NoSuchEnv-v0"),
    (["grpo", "--config", "/nonexistent/config.json"], "/nonexistent/config.json"),
    (["grpo", "--policy", f"hf:{MODEL}", "--t-train", "1000000"], "1000000"),
    (["grpo", "--policy", f"hf:{MODEL}", "--t-train", "-1"], "-1"),
]
"""(arguments after ``passkt train``, fragment); ``--out r`` is added to each."""

ROWS = (
    [(["eval", *args], fragment) for args, fragment in EVAL_ROWS]
    + OTHER_ROWS
    + [(["train", *args, "--out", "r"], fragment) for args, fragment in TRAIN_ROWS]
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("models")
    (root / "model").mkdir()
    (root / "model" / "config.json").write_text("{}")
    (root / "nomodel").mkdir()
    (root / "nomodel" / "weights.txt").write_text("x")
    (root / "afile").write_text("x")
    return {
        "model": str(root / "model"),
        "nomodel": str(root / "nomodel"),
        "afile": str(root / "afile"),
    }


def _fill(text: str, folders: dict[str, str]) -> str:
    for name, path in folders.items():
        text = text.replace("{" + name + "}", path)
    return text


def _workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("x")
    (work / "empty").mkdir()
    (work / "notarun").mkdir()
    (work / "notarun" / "notes.txt").write_text("x")
    return work


def _tree(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def _check(code: object, err: str, fragment: str, created: set[str]) -> None:
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("passkt: error: "), err
    assert fragment in lines[0], lines[0]
    assert created == set(), created


def test_the_table_has_at_least_a_hundred_rows():
    assert len(ROWS) >= 100
    assert len({tuple(args) for args, _ in ROWS}) == len(ROWS)


@pytest.mark.parametrize(("argv", "fragment"), ROWS, ids=[" ".join(a) for a, _ in ROWS])
def test_bad_invocation_is_one_line_and_writes_nothing(
    argv, fragment, folders, tmp_path, monkeypatch, capsys
):
    work = _workdir(tmp_path)
    monkeypatch.chdir(work)
    argv = [_fill(a, folders) for a in argv]
    if argv[0] == "eval" and "--env-kwargs" not in argv:
        argv += ["--env-kwargs", SMALL]
    before = _tree(work)
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    _check(code, err, _fill(fragment, folders), _tree(work) - before)


SUBPROCESS_ROWS = [
    (["eval", "--budgets", "5,3"], "5,3"),
    (["eval", "--policy", "py:os:system", "--limit", "1", "--n", "1"], "py:os:system"),
    (["eval", "--resume", "--out", "nonexistent"], "nothing to resume at nonexistent"),
    (["eval", "--env-kwargs", "source=hotpotqa,path=/"], "/: record (folder)"),
    (["train", "sft", "--policy", "hf:", "--out", "r"], "'hf:'"),
]


@pytest.mark.parametrize(("argv", "fragment"), SUBPROCESS_ROWS)
def test_bad_invocation_in_a_real_process(argv, fragment, tmp_path):
    work = _workdir(tmp_path)
    before = _tree(work)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "passkt.eval.cli", *argv],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    _check(proc.returncode, proc.stderr, fragment, _tree(work) - before)
