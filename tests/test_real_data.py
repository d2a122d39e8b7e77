"""The real-data fixtures in ``tests/data`` are the files ``tests/data/SOURCES.md`` describes."""

from __future__ import annotations

import hashlib
import re

import pytest
from real_data import DATA

ROWS = re.findall(
    r"^\| `([^`]+)` \|.*\| `([0-9a-f]{64})` \|$",
    (DATA / "SOURCES.md").read_text(encoding="utf-8"),
    re.MULTILINE,
)


def test_every_data_file_is_listed_with_its_checksum():
    listed = {name for name, _ in ROWS}
    present = {p.name for p in DATA.iterdir() if p.name != "SOURCES.md"}
    assert listed == present


@pytest.mark.parametrize(("name", "sha256"), ROWS, ids=[name for name, _ in ROWS])
def test_data_file_matches_its_recorded_checksum(name, sha256):
    assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == sha256
