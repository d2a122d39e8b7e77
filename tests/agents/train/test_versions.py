"""The vLLM release the ``vllm`` extra pins lies inside the installed TRL's supported range, and
the plan check warns on a vLLM outside it."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from passkt.agents.train import versions

ROOT = Path(__file__).resolve().parents[3]


def test_the_extra_pins_the_release_the_check_names():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    (line,) = [x for x in text.splitlines() if x.startswith("vllm = [")]
    assert re.search(r'"vllm==([\d.]+)"', line).group(1) == versions.PINNED_VLLM


def test_the_pin_is_inside_the_installed_trls_range():
    pytest.importorskip("trl", reason="the range is the installed TRL's")
    low, high = versions.trl_vllm_range()
    release = versions._release
    assert release(low) <= release(versions.PINNED_VLLM) <= release(high)


@pytest.mark.parametrize("version", ["0.21.0", "0.22.0", "0.24.0+cu129", "0.31.0", "0.34.0"])
def test_the_range_read_is_the_one_trl_warns_on(version, monkeypatch):
    """TRL's own check, run on a stand-in version, warns exactly outside the range read."""
    pytest.importorskip("trl", reason="the range is the installed TRL's")
    from trl import import_utils

    monkeypatch.setattr(import_utils, "_is_package_available", lambda *a, **k: (True, version))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import_utils.is_vllm_available()
    trl_warns = any("supports vLLM versions" in str(w.message) for w in caught)
    monkeypatch.setattr(versions, "installed_vllm", lambda: version)
    check = versions.vllm_version_check()
    assert trl_warns == (not check.ok) and check.warning == trl_warns
    if trl_warns:
        assert "fix: pip install 'vllm==" in check.line()


def test_the_api_file_names_the_release_it_was_read_from():
    """``tests/agents/vllm_api.json`` was read from the pinned release, inside TRL 1.16's range:
    passkt's own vLLM calls (``LLM``, ``SamplingParams``, ``LoRARequest``, ``apply_model``) are
    checked against the vLLM that ``passkt[vllm]`` installs."""
    api = json.loads((ROOT / "tests" / "agents" / "vllm_api.json").read_text(encoding="utf-8"))
    assert api["vllm_version"] == versions.API_VLLM
