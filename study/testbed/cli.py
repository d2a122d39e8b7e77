"""``passkt testbed pretrain``: pretrain a testbed base policy from the command line.

Every field of ``PretrainConfig`` is a flag (``episodes_per_category`` ->
``--episodes-per-category``, ``output_dir`` -> ``--out``) with the field's docstring as help.
``passkt`` loads this module on demand through ``add_parser``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import typing
from typing import Any, Literal

from passkt.agents.folders import claim_folder
from passkt.agents.preflight import check_resume
from passkt.agents.train.cli import _converter as train_converter
from passkt.agents.train.config import field_docs, plain
from passkt.study.testbed.model import MODEL_SIZES
from passkt.study.testbed.pretrain import CHECKPOINT_DIR, PretrainConfig, pretrain

EXAMPLES = """\
examples:
  passkt testbed pretrain --out runs/testbed/base              (nano, ~0.2M parameters)
  passkt testbed pretrain --size micro --max-minutes 10 --threads 1 --out runs/testbed/micro
  passkt testbed pretrain --out runs/testbed/base --resume     (continue from the checkpoint)
  passkt eval --env BridgeQA-v0 --policy hf:runs/testbed/base/model --n 64
"""

_RENAMED = {"output_dir": "--out"}


def _converter(kind: Any, name: str) -> Any:
    """``passkt train``'s flag converter, except that tuple items get the field's item type."""
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        return lambda text: tuple(item(part) for part in text.split(",") if part.strip())
    return train_converter(kind, name)


def add_parser(subparsers: Any) -> None:
    """Add ``testbed`` (with ``pretrain``) to the ``passkt`` command line."""
    testbed = subparsers.add_parser(
        "testbed",
        help="small agent models trained from scratch on the synthetic world",
        description="The laptop-scale testbed: tokenizer, model family and base pretraining.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = testbed.add_subparsers(dest="testbed_command", metavar="COMMAND", required=True)
    parser = commands.add_parser(
        "pretrain",
        help="pretrain a base policy on noisy episodes and world paragraphs",
        description=plain((PretrainConfig.__doc__ or "").strip()),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument("--resume", action="store_true", help="continue from --out's checkpoint")
    parser.add_argument("--print-config", action="store_true", help="print the config and exit")
    hints = typing.get_type_hints(PretrainConfig)
    docs = field_docs(PretrainConfig)
    for f in dataclasses.fields(PretrainConfig):
        flag = _RENAMED.get(f.name, "--" + f.name.replace("_", "-"))
        kind = hints[f.name]
        kwargs: dict[str, Any] = {"dest": f.name, "help": docs.get(f.name, "").replace("%", "%%")}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(kind) is Literal:
            kwargs["choices"] = typing.get_args(kind)
        elif f.name == "size":
            kwargs["choices"] = tuple(MODEL_SIZES)
        else:
            kwargs.update(type=_converter(kind, f.name), metavar=f.name.upper())
        parser.add_argument(flag, **kwargs)
    parser.set_defaults(func=run_pretrain)


def config_from_args(args: argparse.Namespace) -> PretrainConfig:
    """The config the flags ask for (unset flags keep the defaults)."""
    names = {f.name for f in dataclasses.fields(PretrainConfig)}
    return PretrainConfig(**{k: v for k, v in vars(args).items() if k in names})


def run_pretrain(args: argparse.Namespace) -> int:
    """Run ``passkt testbed pretrain`` (prints only here, in the CLI)."""
    config = config_from_args(args)
    if getattr(args, "print_config", False):
        print(json.dumps(config.to_dict(), indent=2, sort_keys=True))
        return 0
    resume = bool(getattr(args, "resume", False))
    claim_folder(config.output_dir, "pretraining")
    if resume:
        check_resume(config.output_dir, lambda d: (d / CHECKPOINT_DIR / "state.json").is_file())
    result = pretrain(config, resume=resume)
    losses = ", ".join(f"{k}={v:.4g}" for k, v in result.last_metrics.items() if "loss" in k)
    print(f"passkt: pretrained {result.steps} steps; {losses}", file=sys.stderr)
    print(result.model_dir)
    return 0
