"""The Python examples of the README and of every page in docs/ run as written, each alone in a
fresh process, as a user would.

Each block runs in its own interpreter (an example that forgets an import fails here) in an empty
folder holding the data files the page tells the user to download, linked to the tests' copies
in ``tests/data`` (HotpotQA: the dev subset stands in for the full dev file). A block with no
``import`` line is an excerpt of a larger example (a method, a dict) and is not run alone.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from real_data import DATA

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (page.relative_to(ROOT).as_posix(), block)
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    if re.search(r"^(import|from) ", block, re.MULTILINE)
]
DOWNLOADS = {"hotpot_dev_distractor_v1.json": DATA / "hotpotqa_dev_distractor_subset.json"}
"""File name in a page -> the tests' copy that stands in for it."""


def test_readme_has_examples():
    assert sum(page == "README.md" for page, _ in BLOCKS) >= 2
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize(
    ("page", "block"), BLOCKS, ids=[f"{page}-{i}" for i, (page, _) in enumerate(BLOCKS)]
)
def test_example_runs(page, block, tmp_path):
    for name, copy in DOWNLOADS.items():
        if name in block:
            (tmp_path / name).symlink_to(copy)
    done = subprocess.run(
        [sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{page} example:\n{block}\n{done.stderr[-3000:]}"


SKIPPED_DIRS = {".git", ".venv", "runs", "node_modules", ".pytest_cache", ".hypothesis"}


def _markdown_pages() -> list[Path]:
    """The repository's Markdown pages, not descending into run output or environments."""
    pages = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]
        pages += [Path(folder) / f for f in files if f.endswith(".md")]
    return sorted(pages)


MARKDOWN = _markdown_pages()


def _prose(text: str) -> str:
    """A page without its fenced code (a ``# comment`` in a shell block is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation but ``-`` and ``_``
    dropped, spaces to ``-``; a repeated heading gets ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(page.read_text(encoding="utf-8")),
                              re.MULTILINE):  # fmt: skip
        slug = re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-")
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_anchors_follow_githubs_rule():
    assert "passk-t-need-not-grow-with-t" in anchors(ROOT / "docs" / "statistics.md")
    assert "plug-in-an-env" in anchors(ROOT / "README.md")


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_links_and_anchors_resolve(page):
    """Every relative link of every Markdown page names a file that exists and, with
    ``#anchor``, a heading of that file."""
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)",
                                     _prose(page.read_text(encoding="utf-8"))):  # fmt: skip
        if "://" in target or target.startswith("mailto:"):
            continue
        linked = (page.parent / target) if target else page
        name = page.relative_to(ROOT).as_posix()
        assert linked.exists(), f"{name} links to missing {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{name} links to {target}#{anchor}: no such heading"


@pytest.mark.slow
def test_the_plug_in_block_runs_as_printed(tmp_path):
    """The README's "Plug in an env" commands, as printed, in a fresh shell from the repository
    root (only the /tmp/ folders are moved into this test's own folder): eval, train grpo with
    SmolLM2, train sft, eval of the checkpoint, compare."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Plug in an env") :]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL).group(1)
    assert "passkt train grpo" in block and "passkt train sft" in block
    script = "set -e\n" + block.replace("/tmp/", f"{tmp_path}/")
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "OMP_NUM_THREADS": "1",  # the other pytest worker has the other core
    }
    done = subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "kv-grpo" / "checkpoint-2").is_dir()
    assert (tmp_path / "kv-rl" / "results.jsonl").is_file()
    assert list(tmp_path.glob("compare-*"))  # compare writes next to the first run
