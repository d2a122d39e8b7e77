"""A folder given as ``path=`` is read only when it is a dataset folder, told by marker files.

``/``, ``$HOME`` or any large tree must fail at once in one line, never be walked by ``datasets``
(which searches a whole tree for data files and may load any it finds).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import gymnasium as gym
import pytest

import passkt.envs  # noqa: F401  (registers the envs)
from passkt.envs.errors import DatasetFormatError
from passkt.envs.sources.records import dataset_folder_kind


def _big_tree(root: Path, folders: int = 40, files: int = 50) -> Path:
    """A tree of 2,000 files with data-looking files deep inside (none at the top)."""
    for i in range(folders):
        sub = root / f"dir{i}" / "nested"
        sub.mkdir(parents=True)
        for j in range(files):
            (sub / f"file{j}.txt").write_text("x")
        (sub / "dev.json").write_text(json.dumps([{"question": "q", "answer": "a"}]))
        (sub / "part.parquet").write_bytes(b"PAR1")
    return root


@pytest.mark.parametrize(
    ("env_id", "source"), [("BridgeQA-v0", "hotpotqa"), ("Math-v0", "math500")]
)
def test_the_root_folder_fails_in_under_a_second(env_id, source):
    started = time.perf_counter()
    with pytest.raises(DatasetFormatError, match="not a dataset folder") as caught:
        gym.make(env_id, source=source, path="/")
    assert time.perf_counter() - started < 1.0
    assert len(str(caught.value).splitlines()) == 1


def test_a_large_tree_is_refused_without_being_walked(tmp_path, monkeypatch):
    tree = _big_tree(tmp_path / "home")
    listed: list[str] = []
    real_scandir = os.scandir

    def counting_scandir(path):
        listed.append(os.fspath(path))
        return real_scandir(path)

    def no_walk(*args, **kwargs):
        raise AssertionError("a folder tree was walked")

    monkeypatch.setattr(os, "scandir", counting_scandir)
    monkeypatch.setattr(os, "walk", no_walk)
    monkeypatch.setattr(Path, "rglob", no_walk)
    started = time.perf_counter()
    with pytest.raises(DatasetFormatError, match=f"{tree}.*not a dataset folder"):
        gym.make("BridgeQA-v0", source="hotpotqa", path=str(tree))
    assert time.perf_counter() - started < 1.0
    assert listed == [str(tree)]  # its own entries only


def test_dataset_folders_are_told_by_their_markers(tmp_path):
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "dataset_dict.json").write_text("{}")
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "validation.parquet").write_bytes(b"PAR1")
    nested = tmp_path / "nested"
    (nested / "data").mkdir(parents=True)
    (nested / "data" / "test-00000.parquet").write_bytes(b"PAR1")
    by_config = tmp_path / "by_config"
    (by_config / "distractor").mkdir(parents=True)
    (by_config / "distractor" / "validation-0.parquet").write_bytes(b"PAR1")
    card = tmp_path / "card"
    card.mkdir()
    (card / "README.md").write_text("---\nconfigs:\n- config_name: default\n---\n")
    assert dataset_folder_kind(saved) == "saved"
    assert dataset_folder_kind(flat) == "repository"
    assert dataset_folder_kind(nested) == "repository"
    assert dataset_folder_kind(by_config) is None  # without naming the config
    assert dataset_folder_kind(by_config, "distractor") == "repository"
    assert dataset_folder_kind(card) == "repository"
    assert dataset_folder_kind(_big_tree(tmp_path / "tree", folders=3, files=3)) is None
    assert dataset_folder_kind(Path("/")) is None
