"""The layout a newcomer imports is the layout they read: ``passkt`` names the public API, each
layer imports only what it needs, and ``passkt study`` is a command of the installed package."""

from __future__ import annotations

import subprocess
import sys

import pytest

import passkt


def _fresh(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_version_is_the_installed_distributions():
    from importlib.metadata import version

    assert passkt.__version__ == version("passkt")


@pytest.mark.parametrize("name", passkt.__all__)
def test_public_names_resolve(name):
    assert getattr(passkt, name) is not None


def test_importing_passkt_loads_no_torch_and_the_agents_no_study():
    loaded = _fresh(
        "import sys, passkt, passkt.agents, passkt.agents.specs, passkt.eval.cli\n"
        "print(' '.join(m for m in sys.modules if m == 'torch' or m.startswith('passkt.study')))"
    )
    assert loaded == ""


def test_openenv_loads_only_for_a_served_env():
    """openenv (an extra, about 4 s to import) loads with ``passkt serve`` and the client env,
    not with the envs, the CLI or the help of ``passkt serve``."""
    script = (
        "import sys, passkt, passkt.envs\nfrom passkt.cli import main\n"
        "for argv in (['--help'], ['serve', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "sys.stderr.write(' '.join(m for m in sys.modules if m.split('.')[0] == 'openenv'))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "serve an env to OpenEnv's clients" in done.stdout  # both helps were printed
    assert "--max-sessions" in done.stdout
    assert done.returncode == 0 and done.stderr == "", done.stderr[-500:]


def test_trainers_load_on_first_use():
    assert (
        _fresh("import passkt; print(passkt.train_grpo.__module__)") == "passkt.agents.train.grpo"
    )
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        passkt.nope  # noqa: B018


def test_passkt_study_is_a_command():
    done = subprocess.run(
        [sys.executable, "-m", "passkt", "study", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "run" in done.stdout and "report" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "passkt", "study", "run", "nosuch", "--out", "x"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "Unknown profile 'nosuch'" in done.stderr


def test_the_package_docstring_example_runs(tmp_path):
    block = []
    for line in passkt.__doc__.split("::\n", 1)[1].split("\n"):
        if line and not line.startswith("    "):
            break
        block.append(line[4:])
    code = "\n".join(block)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "runs" / "heuristic" / "results.jsonl").is_file()
