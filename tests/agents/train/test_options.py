"""No ``passkt train`` option is silently ignored by a backend.

Every option is set away from its default on both backends (``--check``, nothing trained): the
run is refused in one line naming the option, or the option is read by the code of that route
(an attribute of that name is read in the route's functions, followed through the calls they
make inside their own modules).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import types
import typing
from typing import Any, Literal

import pytest

from passkt.agents.train import common, grpo, loop, report, sft, trl, trl_sft, vllm_sync
from passkt.agents.train.config import GRPOConfig, SFTConfig
from passkt.agents.train.options import refused_options
from passkt.cli import main

pytest.importorskip("trl", reason="the TRL backend needs the trl extra")

ROUTES: dict[tuple[str, str], list[tuple[types.ModuleType, str]]] = {
    ("grpo", "passkt"): [(grpo, "train_grpo"), (loop, "TrainingRun"), (loop, "_vllm_policy"),
                         (common, "load_model"), (common, "make_optimizer")],
    ("sft", "passkt"): [(sft, "train_sft"), (loop, "TrainingRun"), (common, "load_model"),
                        (common, "make_optimizer")],
    ("grpo", "trl"): [(trl, "train_grpo_trl"), (trl, "PassktRollout"), (trl, "task_rows")],
    ("sft", "trl"): [(trl_sft, "train_sft_trl")],
}  # fmt: skip
"""Entry points of each route; the functions they call in their own modules are followed."""
MODULES = (common, grpo, loop, report, sft, trl, trl_sft, vllm_sync)
CONFIG_LEVEL = {"tensorboard": "report_to"}
CONFIG_LEVEL.update(
    dict.fromkeys(("temperature", "top_p", "top_k", "max_new_tokens"), "sampling_params")
)
"""Fields read through another: ``tensorboard`` folds into ``report_to`` in ``__post_init__``;
the sampling fields reach the rollouts through ``GRPOConfig.sampling_params()``."""


def reads(entries: list[tuple[types.ModuleType, str]]) -> set[str]:
    """Attribute names read in ``entries`` and in the functions of ``MODULES`` they call."""
    names = {
        name: module
        for module in MODULES
        for name, obj in vars(module).items()
        if getattr(obj, "__module__", None) == module.__name__
    }
    seen: set[str] = set()
    found: set[str] = set()
    todo = [(module, name) for module, name in entries]
    while todo:
        module, name = todo.pop()
        if name in seen or not hasattr(module, name):
            continue
        seen.add(name)
        obj = getattr(module, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                found.add(node.attr)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)  # getattr(config, "rollout_engine", ...)
            if isinstance(node, ast.Name) and node.id in names:
                todo.append((names[node.id], node.id))
    return found


@functools.cache
def route_reads(trainer: str, backend: str) -> frozenset[str]:
    return frozenset(reads(ROUTES[(trainer, backend)]))


def changed(cls: type, name: str, default: Any, kind: Any) -> str | None:
    """A valid command-line value other than ``default`` (None: the field has no flag here)."""
    special = {
        "policy": None, "env_id": "Math-v0", "env_kwargs": "hops=2", "imports": "json",
        "task_ids": "a,b", "output_dir": None, "expert": "self", "data_path": "x.jsonl",
        "vllm_server_url": "http://127.0.0.1:9000", "clip_low": "0.3", "top_p": "0.9",
        "vllm_gpu_memory_utilization": "0.4", "lora_dropout": "0.1", "temperature": "0.7",
        "advantage_eps": "0.001", "lora_target_modules": "q_proj", "report_to": "tensorboard",
        "env_step_timeout": "30", "self_temperature": "0.7", "micro_batch_size": "2",
        "batch_size": "16",
    }  # fmt: skip
    if name in special:
        return special[name]
    if kind is bool:
        return "--no" if default else "--yes"
    if typing.get_origin(kind) is Literal:
        return next(str(v) for v in typing.get_args(kind) if v != default)
    if default is None or isinstance(default, int):
        return str((default or 0) + 2)
    if isinstance(default, float):
        return str(default * 2)
    raise AssertionError(f"no value for {cls.__name__}.{name}")


def cases() -> list[tuple[str, str, str, str | None]]:
    out = []
    for trainer, cls in (("grpo", GRPOConfig), ("sft", SFTConfig)):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            value = changed(cls, f.name, f.default if f.default is not dataclasses.MISSING
                            else f.default_factory(), hints[f.name])  # type: ignore[misc]  # fmt: skip
            if value is None:
                continue
            for backend in ("passkt", "trl"):
                out.append((trainer, backend, f.name, value))
    return out


@pytest.mark.parametrize(("trainer", "backend", "name", "value"), cases())
def test_every_option_is_honoured_or_refused(trainer, backend, name, value, capsys):
    flag = {"env_id": "--env", "imports": "--import"}.get(name, "--" + name.replace("_", "-"))
    if value in ("--no", "--yes"):
        option = [flag if value == "--yes" else "--no-" + flag[2:]]
    else:
        option = [flag, value]
    argv = ["train", trainer, "--backend", backend, "--policy", "hf:m", *option, "--check"]
    if name in ("tasks_per_step", "group_size", "micro_batch_size", "batch_size"):
        argv += ["--world-size", "1"]
    try:
        code = main(argv)
    except SystemExit as e:
        code = int(e.code or 0)
    err = capsys.readouterr().err
    if code == 2 and "option not honoured" in err:
        assert err.count("\n") == 1 and flag in err, err
        return
    assert code == 0, err
    read = route_reads(trainer, backend)
    assert name in read or CONFIG_LEVEL.get(name) in read, (
        f"{flag} is accepted by --backend {backend} but nothing on that route reads it: refuse "
        "it in passkt.agents.train.options or honour it"
    )


def test_each_backend_refuses_what_only_the_other_honours():
    server = GRPOConfig(policy="hf:m", rollout_engine="vllm-server")
    assert [name for name, _ in refused_options(server, "passkt")] == ["rollout_engine"]
    assert refused_options(server, "trl") == []
    capped = GRPOConfig(policy="hf:m", micro_batch_tokens=4096)
    assert refused_options(capped, "passkt") == []
    assert [name for name, _ in refused_options(capped, "trl")] == ["micro_batch_tokens"]
