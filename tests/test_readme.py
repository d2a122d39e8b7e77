"""The README's Python examples run as written, each alone in a fresh process, as a user would.

Each block runs in its own interpreter (an example that forgets an import fails here) in an empty
folder holding the data files the README tells the user to download, linked to the tests' copies
in ``tests/data`` (HotpotQA: the dev subset stands in for the full dev file).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from real_data import DATA

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)
DOWNLOADS = {"hotpot_dev_distractor_v1.json": DATA / "hotpotqa_dev_distractor_subset.json"}
"""File name in the README -> the tests' copy that stands in for it."""


def test_readme_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    for name, copy in DOWNLOADS.items():
        if name in BLOCKS[index]:
            (tmp_path / name).symlink_to(copy)
    done = subprocess.run(
        [sys.executable, "-c", BLOCKS[index]],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"README example {index}:\n{BLOCKS[index]}\n{done.stderr[-3000:]}"
