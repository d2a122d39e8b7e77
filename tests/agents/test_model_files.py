"""A damaged or foreign file in a model or checkpoint folder is one line naming the file.

Each case copies the tiny checkpoint, damages one file the way a failed copy, a disk error or a
planted file would, and runs ``passkt eval --policy hf:COPY`` (and ``train --resume`` for the
trainer's own files): exit code 2, one line that names the file and says what is wrong, and no
run directory left behind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from passkt.agents.model_files import check_model_files
from passkt.envs.errors import ModelFileError
from passkt.eval.cli import main

EVAL = ["--env-kwargs", 'source_options={"num_tasks": 40}', "--limit", "1", "--n", "1"]


def _cli(capsys, *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _garble(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\x80\xff" + data[len(data) // 2 :])


DAMAGES = {
    "safetensors-header": (
        "model.safetensors",
        lambda p: p.write_bytes(b"\xff" * 8 + p.read_bytes()[8:]),
        "corrupt safetensors file",
    ),
    "safetensors-cut": (
        "model.safetensors",
        lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
        "corrupt safetensors file",
    ),
    "pickle-weights": (
        "pytorch_model.bin",
        lambda p: p.write_bytes(b"\x80\x04\x95planted pickle"),
        "pickle-format weights are refused",
    ),
    "pickle-model-pt": ("model.pt", lambda p: p.write_bytes(b"\x80\x04"), "can run arbitrary"),
    "tokenizer-json": ("tokenizer.json", _garble, "not UTF-8 text"),
    "tokenizer-config": ("tokenizer_config.json", lambda p: p.write_text("{,"), "not valid JSON"),
    "config-json": ("config.json", lambda p: p.write_text("[1, 2]"), "wrong shape"),
    "generation-config": (
        "generation_config.json",
        lambda p: p.write_text(p.read_text()[:-5]),
        "not valid JSON",
    ),
    "generation-config-bytes": ("generation_config.json", _garble, "not UTF-8 text"),
    "chat-template": ("chat_template.jinja", _garble, "not UTF-8 text"),
}


@pytest.fixture
def model(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, copy)
    return copy


def test_the_tiny_checkpoint_passes(tiny_checkpoint):
    check_model_files(tiny_checkpoint)


@pytest.mark.parametrize("case", DAMAGES)
def test_a_damaged_model_file_is_one_line_naming_it(case, model, tmp_path, capsys, monkeypatch):
    name, damage, what = DAMAGES[case]
    damage(model / name)
    with pytest.raises(ModelFileError, match=rf"{name}: .*{what}"):
        check_model_files(model)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, err = _cli(capsys, "eval", "--policy", f"hf:{model}", *EVAL, "--out", "run")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert str(model / name) in lines[0] and what in lines[0]
    assert list(work.iterdir()) == []


def test_other_pickles_of_a_trainers_checkpoint_are_not_weights(model):
    (model / "optimizer.pt").write_bytes(b"\x80\x04")
    (model / "training_args.bin").write_bytes(b"\x80\x04")
    check_model_files(model)  # never read by passkt: not refused


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        ("trainer_state.json", b"\x80garbled", "not UTF-8 text"),
        ("trainer_state.json", b'{"step": ', "not valid JSON"),
        ("optimizer_state.json", b"[]", "wrong shape"),
        ("optimizer_state.safetensors", b"\x00" * 4, "not a safetensors file"),
        ("trainer_state.pt", b"\x80\x04", "pickle-format"),
    ],
)
def test_a_damaged_checkpoint_is_refused_before_a_resume_loads_it(
    name, content, what, model, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "out"
    checkpoint = out / "checkpoint-1"
    shutil.copytree(model, checkpoint)
    (checkpoint / "trainer_state.json").write_text(json.dumps({"step": 1}))
    (checkpoint / name).write_bytes(content)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in out.rglob("*"))
    code, err = _cli(
        capsys, "train", "grpo", "--policy", f"hf:{model}", "--out", str(out), "--resume"
    )
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert str(checkpoint / name) in lines[0] and what in lines[0]
    assert sorted(p.name for p in out.rglob("*")) == before
