"""``passkt train grpo|sft``: the trainers on the command line.

Every field of ``GRPOConfig`` / ``SFTConfig`` is a flag (``group_size`` -> ``--group-size``), with
the field's docstring as help; ``--env``, ``--env-kwargs`` and ``--policy`` read like
``passkt eval``'s. Values come from, in increasing precedence: the dataclass defaults, a
``--config`` JSON file, the flags. ``passkt eval`` (``passkt.eval.cli``) loads this module on
demand through ``add_parser``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from passkt.agents.folders import claim_folder
from passkt.agents.preflight import check_resume, int_in, positive_float
from passkt.agents.specs import parse_env_kwargs
from passkt.agents.train import versions
from passkt.agents.train.config import GRPOConfig, SFTConfig, TrainConfig, field_docs, plain
from passkt.agents.train.plan import Launch, PlanReport, check_plan
from passkt.envs.contract import import_modules, inspect_env
from passkt.envs.errors import MissingDependencyError

_RENAMED = {"env_id": "--env", "output_dir": "--out", "imports": "--import"}
"""Fields whose flag is named like ``passkt eval``'s rather than after the field."""

EXAMPLES = """\
examples:
  passkt train grpo --env BridgeQA-v0 --policy hf:Qwen/Qwen2.5-7B-Instruct --limit 200 \\
      --group-size 8 --t-train 5 --epochs 10 --out runs/grpo
  passkt train sft --env BridgeQA-v0 --policy hf:Qwen/Qwen2.5-7B-Instruct --limit 200 \\
      --finetune lora --t-train 5 --out runs/sft
  passkt train grpo --config grpo.json --learning-rate 2e-6      (flags override the file)
  passkt train grpo --out runs/grpo --resume                     (continue from the last checkpoint)
  passkt train grpo --config grpo.json --print-config            (show the resolved config)
  passkt train grpo --backend trl ...                            (TRL's GRPOTrainer instead)
  passkt train grpo --backend trl --rollout-engine vllm ...      (TRL with a colocated vLLM)
  passkt train grpo ... --check --world-size 8 --sharding zero3 --gpu-memory 80
                                         (will it split and fit on 8 x 80 GB? prints the sums)
  torchrun --nproc_per_node 8 -m passkt.eval.cli train grpo ...  (several processes)
"""


def add_parser(subparsers: Any) -> None:
    """Add ``train`` (with ``grpo`` and ``sft``) to the ``passkt`` command line."""
    train = subparsers.add_parser(
        "train",
        help="train a policy with GRPO or SFT on any registered env",
        description="GRPO (multi-turn, group advantages, clipped token-level surrogate) or SFT "
        "on oracle trajectories of the same tasks (the matched-data control).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = train.add_subparsers(dest="trainer", metavar="TRAINER", required=True)
    for name, cls, help_text in (
        ("grpo", GRPOConfig, "Group Relative Policy Optimization"),
        ("sft", SFTConfig, "supervised fine-tuning on expert (oracle) trajectories"),
    ):
        parser = kinds.add_parser(
            name,
            help=help_text,
            description=plain((cls.__doc__ or "").strip()),
            epilog=EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            argument_default=argparse.SUPPRESS,
        )
        parser.add_argument("--config", metavar="FILE.json", help="config fields as a JSON object")
        parser.add_argument(
            "--resume", action="store_true", help="continue from the last checkpoint in --out"
        )
        parser.add_argument(
            "--print-config", action="store_true", help="print the resolved config and exit"
        )
        parser.add_argument(
            "--backend",
            choices=("passkt", "trl"),
            help="which trainer runs: passkt's own (default; one process, or DDP under "
            f"torchrun / accelerate launch) or TRL's {'GRPO' if cls is GRPOConfig else 'SFT'}"
            "Trainer through passkt's adapter (the trl extra; the route for DeepSpeed ZeRO / "
            "FSDP sharding). An option the chosen backend cannot honour is an error.",
        )
        add_plan_flags(parser)
        add_config_flags(parser, cls)
        parser.set_defaults(func=run_command, config_class=cls)


def add_plan_flags(parser: argparse.ArgumentParser) -> None:
    """``--check`` and what it needs to know about the launch (``passkt.agents.train.plan``)."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="check the plan (batch splits, engine rules, memory per GPU, with the arithmetic) "
        "and exit: 0 when the run can start, 2 naming the first rule it breaks and its fix. "
        "Every training run makes the same check first.",
    )
    parser.add_argument(
        "--world-size",
        type=int_in(1, 4096),
        metavar="N",
        help="training processes to check for (default: $WORLD_SIZE, set by torchrun and "
        "accelerate launch, else 1); a vLLM server's GPUs are not counted",
    )
    parser.add_argument(
        "--gpu-memory",
        type=positive_float,
        metavar="GB",
        help="memory of each GPU to check against (default: the visible GPU's, else unchecked)",
    )
    parser.add_argument(
        "--sharding",
        choices=("ddp", "zero3", "fsdp"),
        help="how the model is split over processes (default: what accelerate launch's "
        "config says, else ddp)",
    )


def add_config_flags(parser: argparse.ArgumentParser, cls: type[TrainConfig]) -> None:
    """One flag per dataclass field; unset flags are absent from the namespace."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        flag = _RENAMED.get(f.name, "--" + f.name.replace("_", "-"))
        kind = hints[f.name]
        help_text = docs.get(f.name, "").replace("%", "%%")
        kwargs: dict[str, Any] = {"dest": f.name, "help": help_text}
        args = typing.get_args(kind)
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is Literal:
            kwargs["choices"] = args
        elif f.name == "env_kwargs":
            kwargs.update(type=parse_kwargs, metavar="K=V,...")
        elif f.name == "imports":
            kwargs.update(action="append", metavar="MODULE")
        else:
            kwargs.update(type=_converter(kind, f.name), metavar=f.name.upper())
        names = (
            [flag]
            if flag == "--" + f.name.replace("_", "-")
            else [flag, "--" + f.name.replace("_", "-")]
        )
        parser.add_argument(*names, **kwargs)


def _converter(kind: Any, name: str) -> Any:
    """A string -> value function for a field type (``int``, ``float | None``, tuples...)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    optional = type(None) in typing.get_args(kind)
    base = args[0] if optional and args else kind
    if typing.get_origin(base) is tuple:

        def items(text: str) -> Any:
            if optional and text.lower() in ("none", "null", ""):
                return None
            return tuple(part.strip() for part in text.split(",") if part.strip())

        return items

    def convert(text: str) -> Any:
        if optional and text.lower() in ("none", "null"):
            return None
        try:
            value = base(text)
        except ValueError:
            value = None
        if value is None or (base is float and not math.isfinite(value)):
            # nan and inf parse as floats but no setting can take them.
            finite = "a finite " if base is float else ""
            raise argparse.ArgumentTypeError(
                f"--{name.replace('_', '-')} expects {finite}{getattr(base, '__name__', base)}"
                f"{' or none' if optional else ''}, got {text!r}"
            )
        return value

    return convert


def parse_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs`` exactly as ``passkt eval`` reads it (``specs.parse_env_kwargs``)."""
    try:
        return parse_env_kwargs(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The config the command line asks for: defaults < ``--config`` file < flags."""
    cls: type[TrainConfig] = args.config_class
    values: dict[str, Any] = {}
    config_file = getattr(args, "config", None)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise FileNotFoundError(f"--config file {path} does not exist")
        values.update(cls.load(path).to_dict())
    names = {f.name for f in dataclasses.fields(cls)}
    values.update({k: v for k, v in vars(args).items() if k in names})
    return cls.from_dict(values)


def _check_env(config: TrainConfig) -> None:
    """Inspect the env as ``passkt eval`` does (``passkt.envs.contract.inspect_env``: the
    ``--import`` modules, which constructor arguments it takes, text on its first task) and fail
    in one line before the model, which may take minutes to load, is loaded."""

    import_modules(config.imports)
    kwargs = {k: v for k, v in config.env_kwargs.items() if k != "split"}
    inspect_env(config.env_id, kwargs, config.split)


def launch_from(args: argparse.Namespace, backend: str) -> Launch:
    """The launch the plan check assumes: the flags, else what the launcher says
    (``Launch.from_environment``); ``--check`` alone never probes a GPU."""
    return Launch.from_environment(
        backend,
        world_size=getattr(args, "world_size", None),
        sharding=getattr(args, "sharding", None),
        gpu_memory_gb=getattr(args, "gpu_memory", None),
        probe_gpu=not getattr(args, "check", False),
    )


def check_command(config: TrainConfig, args: argparse.Namespace, backend: str) -> PlanReport:
    """The plan check of ``config`` as launched; ``--check`` prints every line."""
    report = check_plan(config, launch_from(args, backend))
    if getattr(args, "check", False):
        print("\n".join(report.lines()))
    else:
        for check in report.checks:
            if check.warning and not check.ok:
                print(f"passkt: warning: {check.name}: {check.detail}", file=sys.stderr)
    report.raise_on_failure()
    return report


def run_command(args: argparse.Namespace) -> int:
    """Run ``passkt train grpo|sft`` (prints only here, in the CLI)."""
    config = config_from_args(args)
    if getattr(args, "print_config", False):
        print(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    backend = getattr(args, "backend", "passkt")
    claim_folder(config.output_dir, "training-run")  # before any check reads or writes it
    check_command(config, args, backend)  # seconds, before the env and the model
    if getattr(args, "check", False):
        return 0
    if getattr(config, "rollout_engine", "hf") != "hf" and versions.installed_vllm() is None:
        raise MissingDependencyError("vllm", "vllm")  # TRL would say so only after loading
    resume = bool(getattr(args, "resume", False))
    if resume:  # before the env and the model; the library's resume=True may also start a run
        from passkt.agents.train.loop import holds_training_run  # start-up cost: torch, 1 s

        check_resume(config.output_dir, holds_training_run)
    _check_env(config)
    if isinstance(config, GRPOConfig) and backend == "trl":
        from passkt.agents.train.trl import train_grpo_trl  # start-up cost: torch, 1 s

        result = train_grpo_trl(config, resume=resume)
    elif backend == "trl":
        from passkt.agents.train.trl_sft import train_sft_trl  # start-up cost: torch, 1 s

        result = train_sft_trl(config, resume=resume)
    elif isinstance(config, GRPOConfig):
        from passkt.agents.train.grpo import train_grpo  # start-up cost: torch, 1 s

        result = train_grpo(config, resume=resume)
    else:
        from passkt.agents.train.sft import train_sft  # start-up cost: torch, 1 s

        result = train_sft(config, resume=resume)
    if result.checkpoint is not None:
        metrics = ", ".join(
            f"{k}={v:.4g}" for k, v in result.last_metrics.items() if isinstance(v, float)
        )
        print(f"passkt: trained {result.steps} steps; last step: {metrics}", file=sys.stderr)
        print(result.checkpoint)
    return 0
