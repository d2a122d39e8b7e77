"""The README's Python examples run as written (from the repo root, as a user would)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL)


def test_readme_has_examples():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, monkeypatch):
    if "../shared/data" in BLOCKS[index] and not (ROOT.parent / "shared" / "data").is_dir():
        pytest.skip("needs ../shared/data beside the checkout")
    monkeypatch.chdir(ROOT)
    code = compile(BLOCKS[index], f"README.md example {index}", "exec")
    exec(code, {"__name__": f"readme_example_{index}"})
