"""``passkt train grpo --backend trl --rollout-engine vllm|vllm-server``, up to the engine call.

vLLM needs CUDA, so TRL's engine is the strict stand-in of ``tests/agents/test_vllm_api.py``
(every ``vllm.LLM(...)`` bound to the signature of the release read into ``vllm_api.json``) and
TRL's server client a recorder. The command line builds the config, TRL's own ``GRPOTrainer``
builds its ``VLLMGeneration`` from it, and the test checks what reached the engine.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("trl", reason="the TRL route needs the trl extra")
pytest.importorskip("datasets", reason="the TRL route needs the trl extra")

from passkt.agents.train import versions
from passkt.agents.train.trl_vllm import SYNC_PATHS
from passkt.cli import main

API_TEST = Path(__file__).resolve().parents[1] / "test_vllm_api.py"


def strict_vllm() -> Any:
    spec = importlib.util.spec_from_file_location("vllm_api_test", API_TEST)
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_api_test"] = module
    spec.loader.exec_module(module)
    return module


def command(model: Path, out: Path, monkeypatch: Any, *engine: str) -> Any:
    """Run ``passkt train grpo --backend trl ...`` until TRL's trainer is built; return it."""
    from passkt.agents.train import trl as adapter

    built = []

    def build_only(config: Any, *, resume: bool = False) -> Any:
        built.append(adapter.make_trl_trainer(config))
        return types.SimpleNamespace(checkpoint=None)

    monkeypatch.setattr(adapter, "train_grpo_trl", build_only)
    monkeypatch.setattr(versions, "installed_vllm", lambda: versions.PINNED_VLLM)
    argv = ["train", "grpo", "--backend", "trl", "--policy", f"hf:{model}", "--env",
            "BridgeQA-v0", "--env-kwargs", "source=people", "--t-train", "2", "--group-size",
            "2", "--tasks-per-step", "2", "--micro-batch-size", "2", "--max-new-tokens", "8",
            "--no-progress", "--out", str(out), *engine]  # fmt: skip
    assert main(argv) == 0
    (trainer,) = built
    return trainer


def test_colocated_vllm_from_the_command_line_reaches_the_engine_as_vllm_takes_it(
    tiny64, people, tmp_path, monkeypatch
):
    from trl.generation import vllm_generation

    api = strict_vllm()
    calls = api.Recorder()
    stand_in = api.strict_module(calls)["vllm"]
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(key, "")  # TRL sets them for the engine; restored after the test
        monkeypatch.delenv(key)
    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "LLM", stand_in.LLM, raising=False)
    trainer = command(tiny64, tmp_path / "out", monkeypatch, "--rollout-engine", "vllm",
                      "--vllm-gpu-memory-utilization", "0.4")  # fmt: skip
    (options,) = calls.of("LLM")  # bound to the release's LLM signature by the stand-in
    assert options["model"] == str(tiny64)
    assert options["gpu_memory_utilization"] == 0.4
    assert options["distributed_executor_backend"] == "external_launcher"
    assert options["tensor_parallel_size"] == 1
    assert trainer.vllm_generation.mode == "colocate"


class RecordingClient:
    """TRL's ``VLLMClient`` as ``VLLMGeneration`` constructs it on the main process."""

    made: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, **kwargs: Any) -> None:
        import requests

        RecordingClient.made.append(kwargs)
        self.session = requests.Session()

    def init_communicator(self, device: Any) -> None:
        pass

    def get_server_info(self) -> dict[str, Any]:
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}


def test_a_vllm_server_from_the_command_line_gets_its_url_and_a_checked_sync(
    tiny64, people, tmp_path, monkeypatch
):
    from trl.generation import vllm_generation

    monkeypatch.setattr(vllm_generation, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vllm_generation, "VLLMClient", RecordingClient)
    RecordingClient.made.clear()
    url = "http://127.0.0.1:8111"
    trainer = command(tiny64, tmp_path / "out", monkeypatch, "--rollout-engine", "vllm-server",
                      "--vllm-server-url", url)  # fmt: skip
    assert RecordingClient.made == [
        {"base_url": url, "group_port": 51216, "connection_timeout": 240.0}
    ]
    assert trainer.vllm_generation.mode == "server"
    hooks = trainer.vllm_generation.vllm_client.session.hooks["response"]
    refused = types.SimpleNamespace(
        url=f"{url}{SYNC_PATHS[-1]}", status_code=200, json=lambda: {"success": False}
    )
    with pytest.raises(RuntimeError, match="at step 0"):
        for hook in hooks:
            hook(refused)
