"""Where the tests find real data, and the skip that says where to get it when it is absent.

The tests read small copies of the public data sets from ``../shared/data`` beside the checkout
(the project's shared folder; never copied into the repo). A user without that folder gets the
same files as the README's "Real data" section says; tests that need them skip, naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

WHERE = {
    "hotpotqa": "HotpotQA: hotpot_dev_distractor_v1.json from https://hotpotqa.github.io/ "
    "or the hub dataset hotpotqa/hotpot_qa",
    "math500": "MATH-500: prm800k/math_splits/test.jsonl in github.com/openai/prm800k "
    "or the hub dataset HuggingFaceH4/MATH-500",
    "gsm8k": "GSM8K: grade_school_math/data/test.jsonl in github.com/openai/grade-school-math "
    "or the hub dataset openai/gsm8k",
}


def reason(path: Path) -> str:
    """The skip reason for a missing data file: the file, the folder and the public source."""
    kind = next((k for k in WHERE if k in path.name.replace("_", "")), "hotpotqa")
    return (
        f"needs {path.name} in {path.parent} (the project's shared data folder beside the "
        f"checkout; see README 'Real data'); the public source is {WHERE[kind]}"
    )


def needs(path: Path) -> pytest.MarkDecorator:
    """Skip the test unless ``path`` exists."""
    return pytest.mark.skipif(not path.exists(), reason=reason(path))


def require(path: Path) -> Path:
    """``path``, or skip the calling test with ``reason(path)``."""
    if not path.exists():
        pytest.skip(reason(path))
    return path
