"""vLLM rollouts in passkt's GRPO: what is sent to the engine (names, tensors, LoRA requests).

The engine itself needs a CUDA GPU; these are the pure functions that decide what it receives.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from passkt.agents.train.config import GRPOConfig
from passkt.agents.train.vllm_sync import (
    adapter_folder,
    full_weights,
    lora_request_args,
    stale_adapter_folders,
    vllm_weight_name,
)


@pytest.mark.parametrize(
    ("trained", "loaded"),
    [
        ("model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.weight"),
        ("module.model.norm.weight", "model.norm.weight"),  # DDP
        ("_orig_mod.module.lm_head.weight", "lm_head.weight"),  # compiled DDP
        (
            "base_model.model.model.layers.1.self_attn.q_proj.base_layer.weight",
            "model.layers.1.self_attn.q_proj.weight",
        ),  # peft
        (
            "model.layers.0._checkpoint_wrapped_module.mlp.down_proj.weight",
            "model.layers.0.mlp.down_proj.weight",
        ),  # activation checkpointing wrapper
        ("base_model.model.model.layers.1.self_attn.q_proj.lora_A.default.weight", None),
        ("base_model.model.model.layers.1.self_attn.q_proj.lora_B.default.weight", None),
    ],
)
def test_training_names_map_to_the_checkpoint_names_vllm_loads(trained, loaded):
    assert vllm_weight_name(trained) == loaded


def test_full_weights_of_a_real_peft_model_are_the_base_checkpoint_weights(tiny64):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny64)
    checkpoint_names = set(base.state_dict())
    model = get_peft_model(base, LoraConfig(r=4, target_modules="all-linear"))
    weights = full_weights(model.named_parameters())
    names = [name for name, _ in weights]
    assert len(names) == len(set(names))
    assert set(names) <= checkpoint_names  # every name is one vLLM's loader knows
    assert not any("lora" in name for name in names)
    # the tensors are the live parameters (detached), not copies of stale values
    by_name = dict(weights)
    q = "model.layers.0.self_attn.q_proj.weight"
    with torch.no_grad():
        base.model.layers[0].self_attn.q_proj.base_layer.weight.add_(1.0)
    assert torch.equal(by_name[q], base.model.layers[0].self_attn.q_proj.base_layer.weight)


def test_unsharded_parameters_are_given_as_they_are(tiny64):
    from transformers import AutoModelForCausalLM

    from passkt.agents.train.vllm_sync import gathered_parameters

    model = AutoModelForCausalLM.from_pretrained(tiny64)
    gathered = list(gathered_parameters(model))
    expected = list(model.named_parameters())
    assert [n for n, _ in gathered] == [n for n, _ in expected]
    assert all(a is b for (_, a), (_, b) in zip(gathered, expected, strict=True))


def test_each_step_gets_a_fresh_lora_name_and_id_because_vllm_caches_adapters_by_id(tmp_path):
    requests = [lora_request_args(step, adapter_folder(tmp_path, 0, step)) for step in range(4)]
    names, ids, paths = zip(*requests, strict=True)
    assert len(set(names)) == 4 and len(set(paths)) == 4
    assert list(ids) == [1, 2, 3, 4]  # vLLM wants positive ids
    assert paths[2] == str(tmp_path / "vllm-lora" / "rank-0" / "step-2")
    assert adapter_folder(tmp_path, 1, 2) != adapter_folder(tmp_path, 0, 2)  # one engine per rank
    with pytest.raises(ValueError, match="step"):
        lora_request_args(-1, tmp_path)


def test_old_adapter_folders_are_deleted_but_never_the_current_one():
    folders = [Path(f"/r/step-{i}") for i in (3, 1, 10, 2)]
    assert stale_adapter_folders(folders, Path("/r/step-10")) == [
        Path("/r/step-1"),
        Path("/r/step-2"),
    ]
    assert stale_adapter_folders(folders[:2], Path("/r/step-3")) == []
    # after a resume the current step may sort first: it survives
    assert Path("/r/step-1") not in stale_adapter_folders(folders, Path("/r/step-1"))


def test_the_vllm_rollout_engine_is_a_config_choice_with_checks():
    config = GRPOConfig(policy="hf:/m", rollout_engine="vllm", vllm_gpu_memory_utilization=0.4)
    assert config.rollout_engine == "vllm"
    with pytest.raises(ValueError, match="lean"):
        GRPOConfig(policy="lean:/m", rollout_engine="vllm")
    with pytest.raises(ValueError, match="vllm_gpu_memory_utilization"):
        GRPOConfig(policy="hf:/m", rollout_engine="vllm", vllm_gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="rollout_engine"):
        GRPOConfig(policy="hf:/m", rollout_engine="sglang")


class StandInEngine:
    """Stands in for the vLLM engine (vLLM needs a CUDA GPU): samples with its own copy of the
    starting model and, like ``VLLMTrainingPolicy.sync``, loads ``full_weights`` by name."""

    def __init__(self, checkpoint: Path) -> None:
        from passkt.agents.hf import HFPolicy

        self.inner = HFPolicy(checkpoint)
        self.tokenizer = self.inner.tokenizer
        self.pad_token_id = self.inner.pad_token_id
        self.synced_steps: list[int] = []

    def generate_ids(self, prompts, params):
        return self.inner.generate_ids(prompts, params)

    def generate(self, conversations, params):
        return self.inner.generate(conversations, params)

    def sync(self, model, step: int) -> None:
        state = self.inner.model.state_dict()
        with torch.no_grad():
            for name, tensor in full_weights(model.named_parameters()):
                state[name].copy_(tensor)
        self.synced_steps.append(step)


def test_grpo_gives_the_rollout_engine_the_weights_after_every_optimizer_step(
    format_checkpoint, digit_tasks, tmp_path, monkeypatch
):
    from passkt.agents.train import loop
    from passkt.agents.train.grpo import train_grpo

    engines = []

    def stand_in(config, rank, world_size=1):
        engines.append(StandInEngine(Path(config.policy.removeprefix("hf:"))))
        return engines[-1]

    monkeypatch.setattr(loop, "_vllm_policy", stand_in)
    config = GRPOConfig(
        policy=f"hf:{format_checkpoint}",
        env_id="Math-v0",
        env_kwargs={"source": "digits"},
        t_train=0,
        group_size=4,
        tasks_per_step=2,
        micro_batch_size=8,
        num_iterations=2,
        learning_rate=1e-3,
        max_new_tokens=12,
        max_steps=2,
        rollout_engine="vllm",
        output_dir=str(tmp_path / "run"),
        progress=False,
    )
    result = train_grpo(config)
    (engine,) = engines
    assert engine.synced_steps == [1, 2, 3, 4]  # 2 steps x 2 iterations
    trained = result.model.state_dict()
    sampled = engine.inner.model.state_dict()
    assert all(torch.equal(trained[name], sampled[name]) for name in trained)


def test_lora_ranks_are_rounded_up_to_one_vllm_accepts_with_a_warning(caplog):
    from passkt.agents.train.vllm_sync import VLLM_LORA_RANKS, vllm_lora_rank

    assert [vllm_lora_rank(r) for r in VLLM_LORA_RANKS] == list(VLLM_LORA_RANKS)
    assert not caplog.records  # accepted ranks pass silently
    assert vllm_lora_rank(4) == 8 and vllm_lora_rank(300) == 320 and vllm_lora_rank(2) == 8
    assert "max_lora_rank=8" in caplog.text
    for bad in (0, 513):
        with pytest.raises(ValueError, match="1 to 512"):
            vllm_lora_rank(bad)


def test_an_engine_per_training_process_joins_the_launcher_as_trl_colocates_it():
    from passkt.agents.train.vllm_sync import engine_placement

    # vLLM's EngineArgs field (documented for torchrun / TRL colocate); not inspected here:
    # vLLM is not installed on the CPU test machines.
    assert engine_placement(8) == {"distributed_executor_backend": "external_launcher"}
    # one process too: vLLM's default engine subprocess would have to pickle the weight loader
    assert engine_placement(1) == {"distributed_executor_backend": "external_launcher"}


def test_a_process_no_launcher_started_gets_the_variables_external_launcher_reads():
    from passkt.agents.train.vllm_sync import launcher_environment

    alone = launcher_environment(0, 1, {}, 29512)
    assert alone == {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                     "MASTER_ADDR": "localhost", "MASTER_PORT": "29512"}  # fmt: skip
    torchrun = {"RANK": "3", "LOCAL_RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "node0",
                "MASTER_PORT": "29500"}  # fmt: skip
    assert launcher_environment(3, 8, torchrun, 1234) == {}  # a launcher's variables stay


class ApplyModelEngine:
    """A stand-in ``vllm.LLM`` with only the public API the sync may use: ``apply_model`` (run a
    function on every worker's model) and ``reset_prefix_cache``; no ``llm_engine``."""

    def __init__(self, model) -> None:
        self.model, self.calls, self.resets = model, 0, 0

    def apply_model(self, func):
        self.calls += 1
        return [func(self.model)]

    def reset_prefix_cache(self) -> None:
        self.resets += 1


class LoadsByName:
    def __init__(self) -> None:
        self.loaded: dict[str, torch.Tensor] = {}

    def load_weights(self, weights) -> None:
        self.loaded.update(dict(weights))


def test_full_weight_sync_goes_through_apply_model_not_the_driver_worker(tiny64):
    from transformers import AutoModelForCausalLM

    from passkt.agents.train.vllm_sync import VLLMTrainingPolicy

    trained = AutoModelForCausalLM.from_pretrained(tiny64)
    policy = object.__new__(VLLMTrainingPolicy)  # the engine itself needs a GPU
    policy.lora, policy.llm = False, ApplyModelEngine(LoadsByName())
    policy.sync(trained, step=1)
    state = trained.state_dict()
    loaded = policy.llm.model.loaded
    assert policy.llm.calls == len(loaded) and policy.llm.resets == 1
    for name, tensor in loaded.items():
        assert torch.equal(tensor, state[name]), name


def test_no_vllm_call_reaches_the_in_process_driver_worker():
    package = Path(__file__).resolve().parents[3]
    for folder in ("agents", "eval", "study", "envs", "passkt"):
        for source in (package / folder).rglob("*.py"):
            assert ".driver_worker" not in source.read_text(), source
