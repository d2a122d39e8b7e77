"""No command writes into a folder another kind of command made.

One real folder of every kind is made once (an evaluation run, its report, a comparison, a
training run, a testbed pretraining, a study, a study export, an analysis); then every command
that writes a folder is pointed at a fresh copy of each folder of another kind (and, for the
commands that resume, with ``--resume``), and at an existing file. Each must exit 2 with one line
that names the folder (or file) and its kind, print no traceback, and leave every file of the
target byte for byte as it was, the lock file included, and the working folder empty.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from passkt.agents.folders import KINDS, folder_kind
from passkt.cli import main

ROOT = Path(__file__).resolve().parents[1]
PRETRAIN = [
    "--size", "nano", "--episodes-per-category", "12", "--paragraph-repeats", "0",
    "--block-size", "64", "--batch-size", "2", "--max-steps", "2", "--warmup-steps", "1",
    "--eval-every", "2", "--save-every", "2", "--log-every", "2", "--no-progress",
    "--threads", "1",
]  # fmt: skip
EVAL = ["--limit", "2", "--n", "2", "--budgets", "0,1", "--no-progress", "--no-report"]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One folder of each kind, made by its own command (the export: the committed one's data)."""
    from passkt.agents.tiny import make_tiny_checkpoint
    from passkt.study.profile import pin, resolve

    root = tmp_path_factory.mktemp("kinds")
    tiny = make_tiny_checkpoint(root / "model", hidden_size=32)
    folders = {"eval-run": root / "eval", "other-eval": root / "eval2"}
    assert main(["eval", *EVAL, "--out", str(folders["eval-run"])]) == 0
    assert main(["eval", *EVAL, "--seed", "1", "--out", str(folders["other-eval"])]) == 0
    folders["report"] = root / "report"
    assert main(["report", str(folders["eval-run"]), "--out", str(folders["report"])]) == 0
    folders["comparison"] = root / "cmp"
    runs = [str(folders["eval-run"]), str(folders["other-eval"])]
    assert main(["compare", *runs, "--out", str(folders["comparison"])]) == 0
    folders["analysis"] = root / "analysis"
    assert main(["analyze", "diversity", *runs, "--out", str(folders["analysis"])]) == 0
    folders["training-run"] = root / "train"
    train = ["train", "grpo", "--policy", f"hf:{tiny}", "--limit", "2", "--group-size", "2"]
    train += ["--tasks-per-step", "1", "--max-steps", "1", "--max-new-tokens", "4"]
    assert (
        main([*train, "--t-train", "1", "--no-progress", "--out", str(folders["training-run"])])
        == 0
    )
    folders["pretraining"] = root / "pretrain"
    assert main(["testbed", "pretrain", "--out", str(folders["pretraining"]), *PRETRAIN]) == 0
    folders["study"] = root / "study"
    pin(folders["study"], resolve("tiny", []), "tiny")
    folders["study-export"] = root / "export"
    shutil.copytree(ROOT / "results" / "powered" / "data", folders["study-export"] / "data")
    state = folders["study-export"] / "state"
    state.mkdir()
    shutil.copy2(ROOT / "results" / "powered" / "state" / "profile.json", state / "profile.json")
    for kind, folder in folders.items():
        if kind != "other-eval":
            assert folder_kind(folder) == kind, folder
    folders["tiny"] = tiny
    return folders


def commands(made: dict[str, Path]) -> dict[str, tuple[str, list[str], str, bool]]:
    """Command -> (the kind it writes, its argv with TARGET for the folder, the flag, resumes)."""
    tiny, runs = made["tiny"], [str(made["eval-run"]), str(made["other-eval"])]
    train = ["--policy", f"hf:{tiny}", "--limit", "2", "--max-steps", "1", "--no-progress"]
    return {
        "eval": ("eval-run", ["eval", *EVAL, "--out", "TARGET"], "--out", True),
        "train grpo": ("training-run", ["train", "grpo", *train, "--out", "TARGET"], "--out", True),
        "train sft": ("training-run", ["train", "sft", *train, "--out", "TARGET"], "--out", True),
        "testbed pretrain": (
            "pretraining", ["testbed", "pretrain", *PRETRAIN, "--out", "TARGET"], "--out", True,
        ),
        "study run": ("study", ["study", "run", "tiny", "--out", "TARGET"], "--out", False),
        "study export": (
            "study-export", ["study", "export", str(made["study"]), "--to", "TARGET"], "--to",
            False,
        ),
        "study restore": (
            "study", ["study", "restore", str(made["study-export"]), "--out", "TARGET"], "--out",
            False,
        ),
        "compare": ("comparison", ["compare", *runs, "--out", "TARGET"], "--out", False),
        "report": ("report", ["report", runs[0], "--out", "TARGET"], "--out", False),
        "analyze diversity": (
            "analysis", ["analyze", "diversity", *runs, "--out", "TARGET"], "--out", False,
        ),
    }  # fmt: skip


CASES = [
    (command, target, resume)
    for command, (kind, _, _, resumes) in commands(
        {k: Path(k) for k in (*KINDS, "other-eval", "tiny")}
    ).items()
    for target in [*sorted(k for k in KINDS if k != kind), "a file"]
    for resume in ((False, True) if resumes else (False,))
]


def listing(folder: Path) -> dict[str, str]:
    if folder.is_file():
        return {".": hashlib.sha1(folder.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(folder)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "/"
        for p in sorted(folder.rglob("*"))
    }


def test_every_writing_command_and_kind_is_covered():
    assert len(CASES) >= 90
    assert {c for c, _, _ in CASES} == set(
        commands({k: Path(k) for k in (*KINDS, "other-eval", "tiny")})
    )


@pytest.mark.slow
@pytest.mark.parametrize(("command", "target", "resume"), CASES)
def test_a_command_refuses_another_kinds_folder_and_changes_nothing(
    made, command, target, resume, tmp_path, monkeypatch, capsys
):
    kind, argv, flag, _ = commands(made)[command]
    place = tmp_path / "target"
    if target == "a file":
        place.write_text("a file, not a folder\n")
    else:
        shutil.copytree(made[target], place)
    before = listing(place)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    argv = [str(place) if a == "TARGET" else a for a in argv] + (["--resume"] if resume else [])
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert f"{flag} {place}" in err[0]
    if target == "a file":
        assert "is a file" in err[0]
    else:
        assert KINDS[target][0] in err[0] and KINDS[kind][1] in err[0]
    assert listing(place) == before
    assert list(work.iterdir()) == []
