"""A user's whole journey with their own env, each command in a fresh process from a clean folder.

The folder holds only the user's files (copies of this directory's env and agent modules) and a
tiny model; every command is the ``passkt`` console script, so nothing an earlier command or test
imported can help a later one. The journey: evaluate the user's agent, report, evaluate the base
model, compare, train GRPO, train SFT on the user's agent's successful episodes (the env has no
passkt oracle), and evaluate the trained checkpoint. On four envs:

- ``KVLookupMinimal-v0``: only what the contract requires;
- ``KVLookup-v0``: every optional capability;
- ``KVLookupKwargs-v0``: a constructor that takes only ``**options`` (and ignores most);
- ``KVLookupShaped-v0``: Gymnasium wrappers (``TransformReward(r - 0.5)``, ``TimeLimit``).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from serving import stop, wait_until_healthy

HERE = Path(__file__).resolve().parent
USER_FILES = ("kv_lookup.py", "kv_variants.py", "kv_agents.py", "guess_number.py")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random Qwen2 checkpoint (width 64), made here so no download is needed."""
    from passkt.agents.tiny import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model", hidden_size=64)


def user_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    for name in USER_FILES:
        shutil.copy(HERE / name, folder / name)
    return folder


def passkt(folder: Path, *argv: str, ok: bool = True) -> subprocess.CompletedProcess:
    """``passkt ARGV`` in a fresh process in ``folder``, with no PYTHONPATH of ours."""
    script = Path(sys.executable).with_name("passkt")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "passkt.eval.cli"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["OMP_NUM_THREADS"] = "1"
    done = subprocess.run(
        [*command, *argv], cwd=folder, capture_output=True, text=True, timeout=600, env=env
    )
    if ok:
        assert done.returncode == 0, f"passkt {' '.join(argv)}\n{done.stderr[-3000:]}"
    return done


JOURNEYS = {
    "minimal": ("kv_lookup", "KVLookupMinimal-v0"),
    "every-capability": ("kv_lookup", "KVLookup-v0"),
    "kwargs-constructor": ("kv_variants", "KVLookupKwargs-v0"),
    "wrapped": ("kv_variants", "KVLookupShaped-v0"),
}


@pytest.mark.slow
@pytest.mark.parametrize("journey", list(JOURNEYS))
def test_eval_report_compare_train_and_eval_again(journey, tiny, tmp_path):
    module, env_id = JOURNEYS[journey]
    work = user_folder(tmp_path)
    env = ["--import", module, "--env", env_id]
    small = ["--n", "2", "--budgets", "0,1,2", "--limit", "3", "--no-progress"]
    tiny_decoding = ["--max-new-tokens", "8"]

    # 1. the user's agent, then its report
    passkt(
        work, "eval", *env, "--policy", "py:kv_agents:make_policy", *small, "--out", "runs/agent"
    )
    rows = [
        json.loads(line) for line in (work / "runs/agent/results.jsonl").read_text().splitlines()
    ]
    solved = {r["budget"]: r["correct"] for r in rows if r["sample"] == 0}
    assert solved == {0: False, 1: True, 2: True}, solved  # looks up once, then answers
    assert all(r["f1"] is None for r in rows)
    assert all(r["tool_calls"] <= r["budget"] for r in rows)
    report = passkt(work, "report", "runs/agent")
    assert "| 1 | 1.000 [" in report.stdout and (work / "runs/agent/report/heatmap.png").is_file()

    # 2. the base model (MODULE:ID form), and the comparison next to the runs
    base = ["--policy", f"hf:{tiny}", *tiny_decoding]
    passkt(work, "eval", "--env", f"{module}:{env_id}", *base, *small, "--out", "runs/base")
    passkt(work, "compare", "runs/agent", "runs/base")
    assert [p.name for p in (work / "runs").iterdir() if p.name.startswith("compare-")]
    assert sorted(p.name for p in work.iterdir() if p.is_dir()) == ["runs"]

    # 3. GRPO, and the same command without the import fails in one line before writing
    grpo = ["train", "grpo", *base, "--t-train", "1", "--group-size", "2"]
    grpo += ["--tasks-per-step", "2", "--max-steps", "2", "--no-progress"]
    failed = passkt(work, *grpo, "--env", env_id, "--out", "nothing", ok=False)
    assert failed.returncode == 2 and f"Unknown env id '{env_id}'" in failed.stderr
    assert not (work / "nothing").exists()
    trained = passkt(work, *grpo, *env, "--out", "grpo")
    checkpoint = Path(trained.stdout.strip().splitlines()[-1])
    assert (work / checkpoint / "model.safetensors").is_file() or any((work / checkpoint).iterdir())

    # 4. SFT (MODULE:ID form) on the user's agent's successful episodes (no passkt oracle here)
    sft = ["train", "sft", "--env", f"{module}:{env_id}", *base, "--expert"]
    sft += ["py:kv_agents:make_policy"]
    sft += ["--t-train", "1", "--limit", "4", "--batch-size", "2", "--max-steps", "2"]
    passkt(work, *sft, "--out", "sft", "--no-progress")
    data = [json.loads(line) for line in (work / "sft/expert_data.jsonl").read_text().splitlines()]
    assert len(data) == 4 and all(any(record["policy_mask"]) for record in data)

    # 5. the trained checkpoint, evaluated like any model
    after = ["--policy", f"hf:{work / checkpoint}", *tiny_decoding]
    passkt(work, "eval", *env, *after, *small, "--out", "runs/grpo")
    manifest = json.loads((work / "runs/grpo/manifest.json").read_text())
    assert manifest["env_id"] == env_id and manifest["policy"].endswith(str(checkpoint))


@pytest.mark.slow
def test_train_grpo_through_trl_on_a_plain_env_then_eval_its_checkpoint(tiny, tmp_path):
    """``--backend trl`` on an env with nothing but ``reset`` / ``step`` (no category, tasks or
    budget argument): TRL's GRPOTrainer trains it 2 steps, and ``passkt eval`` loads the result."""
    pytest.importorskip("trl", reason="--backend trl needs the trl extra")
    work = user_folder(tmp_path)
    env = ["--import", "kv_lookup", "--env", "KVLookupMinimal-v0"]
    grpo = ["train", "grpo", "--backend", "trl", *env, "--policy", f"hf:{tiny}"]
    grpo += ["--t-train", "1", "--group-size", "2", "--tasks-per-step", "2", "--limit", "4"]
    grpo += ["--max-new-tokens", "8", "--max-steps", "2", "--no-progress", "--out", "trl"]
    trained = passkt(work, *grpo)
    checkpoint = work / trained.stdout.strip().splitlines()[-1]
    assert checkpoint == work / "trl" / "final" and (checkpoint / "config.json").is_file()
    assert "trained 2 steps" in trained.stderr
    small = ["--n", "2", "--budgets", "0,1", "--limit", "2", "--max-new-tokens", "8"]
    small += ["--no-progress"]
    passkt(work, "eval", *env, "--policy", f"hf:{checkpoint}", *small, "--out", "runs/trl")
    rows = (work / "runs/trl/results.jsonl").read_text().splitlines()
    assert len(rows) == 2 * 2 * 2


@pytest.mark.slow
def test_guess_the_number_behind_kwargs_reads_its_random_rate_at_t0(tmp_path):
    work = user_folder(tmp_path)
    done = passkt(
        work, "eval", "--env", "guess_number:GuessNumber-v0", "--policy",
        "py:kv_agents:make_guesser", "--n", "20", "--limit", "20", "--budgets", "0,1,3",
        "--ks", "1", "--out", "runs/guess", "--no-progress", "--no-report",
    )  # fmt: skip
    assert "takes **kwargs, but an env made with max_tool_calls=0" in done.stderr
    rows = [
        json.loads(line) for line in (work / "runs/guess/results.jsonl").read_text().splitlines()
    ]
    rate = {t: sum(r["correct"] for r in rows if r["budget"] == t) / 400 for t in (0, 1, 3)}
    assert 0.05 <= rate[0] <= 0.17 and rate[0] < rate[1] < rate[3], rate


DOCS = HERE.parents[1] / "docs" / "env-contract.md"


def command_lines(page: Path) -> list[str]:
    """The ``passkt`` command lines of a page's bash blocks (continuation lines joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), re.DOTALL)
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [" ".join(line.split()) for line in lines if line.strip().startswith("passkt ")]


@pytest.mark.slow
def test_the_env_contract_page_runs_as_written(tiny, tmp_path):
    """Every command of docs/env-contract.md, in order, in a folder with the user's files (the
    tiny model in place of SmolLM2)."""
    work = user_folder(tmp_path)
    lines = command_lines(DOCS)
    assert any(" train grpo " in line for line in lines)
    assert any(" train sft " in line for line in lines)
    assert any(line.startswith("passkt serve ") for line in lines)
    ports: dict[str, str] = {}  # a documented port -> a free one here
    servers: list[subprocess.Popen] = []
    try:
        for line in lines:
            for documented, free in ports.items():
                line = line.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{free}")
            argv = shlex.split(
                line.replace("hf:smollm2-135m-instruct", f"hf:{tiny}"), comments=True
            )
            if argv[1] == "serve":  # a server runs until stopped: start it, go on when it answers
                servers.append(serve_in_background(work, argv, ports))
                continue
            quiet = [] if argv[1] == "check-env" else ["--no-progress"]  # it draws no bar
            passkt(work, *argv[1:], *quiet)
    finally:
        for server in servers:
            stop(server)
    assert (work / "runs" / "grpo-eval" / "results.jsonl").is_file()
    assert len(servers) == sum(line.startswith("passkt serve ") for line in lines)


def serve_in_background(work: Path, argv: list[str], ports: dict[str, str]) -> subprocess.Popen:
    """``passkt serve ...`` as documented, on a free port (recorded in ``ports``), once its
    /health answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free = str(probe.getsockname()[1])
    where = argv.index("--port") + 1
    ports[argv[where]], argv = free, [*argv[:where], free, *argv[where + 1 :]]
    script = Path(sys.executable).with_name("passkt")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "passkt.eval.cli"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    log = work / f"serve-{free}.log"  # a file, not a pipe: a server's request log never blocks it
    with log.open("w") as err:
        server = subprocess.Popen(
            [*command, *argv[1:]], cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    wait_until_healthy(server, lambda: f"http://127.0.0.1:{free}", log)
    return server
