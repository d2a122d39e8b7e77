"""Checks that run before anything is written: one rule for ``eval``, ``train`` and the study.

A job that is going to fail on a bad argument should fail before it creates a run directory, a
writer lock or a checkpoint folder, in one line that names the bad value. Each check here is
cheap (no model is loaded, no file is written) and raises ``ValueError`` (or
``FileNotFoundError`` for a missing model folder) with such a line:

- ``check_policy_spec``: the spec's kind and target (``hf:``/``lean:`` folder with a
  ``config.json``, vLLM installed for ``vllm:``, ``openai:URL#MODEL`` with an http(s) URL and a
  model, ``py:MODULE:FACTORY`` importable and callable).
- ``check_device``, ``check_dtype``: a device this torch build has, a dtype the loaders take.
- ``check_number``: finite, and within its range.
- ``parse_grid`` / ``check_grid``: a budget list strictly increasing as given (``5,3`` is an error,
  not sorted) and at most ``MAX_BUDGET``.
- ``check_resume``: ``--resume`` on a folder that holds no run says so instead of starting one
  (the command lines call it; the library's ``resume=True`` may also start a run).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import math
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from passkt.agents.hf import _resolve_model_name
from passkt.agents.smollm import SMOLLM2_ALIAS
from passkt.agents.specs import parse_spec, resolve_factory

__all__ = [
    "DTYPES",
    "MAX_BUDGET",
    "MAX_RESAMPLES",
    "MAX_SEED",
    "MAX_THREADS",
    "check_device",
    "check_dtype",
    "check_grid",
    "check_number",
    "check_policy_spec",
    "check_resume",
    "finite_float",
    "int_in",
    "missing_top",
    "nothing_to_resume",
    "parse_grid",
    "positive_float",
    "remove_created",
    "resamples",
    "seed_int",
    "threads_count",
    "unit_float",
]

MAX_BUDGET = 1000
"""Most tool calls per episode a budget grid may ask for. The study's largest is 5; an episode
that runs to T calls holds T observations in its context, so a mistyped ``1000000000`` would run
for hours or out of memory rather than fail."""

DTYPES = ("float32", "bfloat16", "float16", "auto")
"""The precisions the model loaders take (``--dtype``)."""

_DEVICE = re.compile(r"(cpu|cuda|mps)(?::(\d+))?")


def nothing_to_resume(directory: str | Path) -> str:
    """The one line for ``--resume`` on a folder without a run."""
    return f"nothing to resume at {directory}; leave out --resume to start"


def check_resume(directory: str | Path, holds_run: Callable[[Path], bool]) -> None:
    """Refuse ``--resume`` on a folder that does not exist or holds no run.

    Args:
        directory: The run (or output) directory named by ``--out``.
        holds_run: Whether an existing directory holds a run of this job's kind.

    Raises:
        ValueError: ``nothing_to_resume(directory)``.
    """
    path = Path(directory)
    if not path.is_dir() or not holds_run(path):
        raise ValueError(nothing_to_resume(directory))


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    exclusive_minimum: bool = False,
) -> float:
    """``value`` as a float when it is finite and in range; else a one-line ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and (value <= minimum if exclusive_minimum else value < minimum):
        relation = ">" if exclusive_minimum else ">="
        raise ValueError(f"{name} must be {relation} {minimum:g}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value!r}")
    return float(value)


def check_grid(values: Iterable[int], flag: str, *, maximum: int | None = None) -> tuple[int, ...]:
    """A grid of non-negative ints, strictly increasing as given and at most ``maximum``."""
    grid = tuple(values)
    if not grid:
        raise ValueError(f"{flag} is empty; give comma-separated integers")
    bad = [v for v in grid if isinstance(v, bool) or not isinstance(v, int)]
    if bad:
        raise ValueError(f"{flag} values must be integers, got {bad[0]!r}")
    if any(v < 0 for v in grid):
        raise ValueError(f"{flag} values must be non-negative, got {list(grid)}")
    if any(a >= b for a, b in itertools.pairwise(grid)):
        wanted = ",".join(map(str, sorted(set(grid))))
        raise ValueError(
            f"{flag} must be strictly increasing as given, got {','.join(map(str, grid))} "
            f"(did you mean {wanted}?)"
        )
    if maximum is not None and grid[-1] > maximum:
        raise ValueError(f"{flag} values must be at most {maximum}, got {grid[-1]}")
    return grid


def parse_grid(text: str, flag: str, *, maximum: int | None = None) -> tuple[int, ...]:
    """Parse ``0,1,2,3,5`` (``check_grid``); the error names ``flag`` and the bad text."""
    parts = text.replace(" ", "").split(",")
    if text.strip() and not all(parts):  # "0,,1" is a typo, not the grid 0,1
        raise ValueError(f"{flag} has an empty item: {text!r}; give e.g. {flag} 0,1,2,3,5")
    try:
        values = [int(part) for part in parts if part]
    except ValueError:
        raise ValueError(
            f"{flag} must be comma-separated integers, e.g. {flag} 0,1,2,3,5; got {text!r}"
        ) from None
    return check_grid(values, flag, maximum=maximum)


def check_dtype(dtype: str | None, flag: str = "--dtype") -> None:
    """Refuse a dtype the model loaders do not take."""
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"{flag} must be one of {', '.join(DTYPES)}; got {dtype!r}")


def check_device(device: str | None, flag: str = "--device") -> None:
    """Refuse a device that is malformed or that this torch build does not have."""
    if device is None:
        return
    match = _DEVICE.fullmatch(str(device))
    if match is None:
        raise ValueError(f"{flag} must be cpu, cuda, cuda:N or mps; got {device!r}")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        return
    import torch  # optional: the hf extra (torch, transformers)

    if kind == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"{flag} {device}: this machine has no MPS device; use --device cpu")
        return
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else "no GPU is visible"
        raise ValueError(f"{flag} {device}: CUDA is not available ({build}); use --device cpu")
    count = torch.cuda.device_count()
    if index is not None and int(index) >= count:
        raise ValueError(f"{flag} {device}: only {count} CUDA device(s) here (cuda:0..)")


def check_model_folder(target: str) -> None:
    """Refuse an ``hf:``/``lean:`` target that names a missing folder or one without a model
    (a hub id ``org/name`` and the built-in alias are left to the loader)."""

    if target != SMOLLM2_ALIAS:
        _resolve_model_name(target)


def check_policy_spec(spec: str, *, trainable: bool = False) -> tuple[str, str]:
    """Check a policy spec without loading it; return ``(kind, target)``.

    Args:
        spec: ``hf:PATH_OR_ID``, ``lean:PATH``, ``vllm:ID``, ``openai:URL#MODEL``,
            ``scripted:NAME`` or ``py:MODULE:FACTORY``.
        trainable: Only ``hf:`` and ``lean:`` (a transformers model) are allowed.

    Raises:
        ValueError: a malformed spec, a missing backend, an unusable URL or factory.
        FileNotFoundError: a model folder that does not exist or holds no ``config.json``.
    """

    kind, target = parse_spec(spec)
    if trainable and kind not in ("hf", "lean"):
        raise ValueError(
            f"policy {spec!r} cannot be trained: the trainers need a transformers model, "
            "hf:PATH_OR_ID or lean:PATH_OR_ID"
        )
    if kind in ("hf", "lean"):
        check_model_folder(target)
    elif kind == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ValueError(
            f"policy {spec!r}: vllm is not installed. Install it with: pip install 'passkt[vllm]'"
        )
    elif kind == "openai":
        url, _, model = target.rpartition("#")
        if not re.match(r"https?://[^/\s]+", url) or not model.strip():
            raise ValueError(
                f"Bad policy spec {spec!r}: an OpenAI-compatible server needs URL#MODEL with an "
                "http(s) URL, e.g. openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-7B-Instruct"
            )
    elif kind == "py":
        factory = resolve_factory(spec)
        if not callable(factory):
            raise ValueError(f"policy {spec!r}: {target} is not callable")
    return kind, target


def missing_top(directory: Path) -> Path | None:
    """The outermost of ``directory`` and its parents that does not exist yet (None: it exists).

    Taken before a job creates its folder, so that a job that fails before it has written
    anything of value can take back exactly what it made (``remove_created``)."""
    top = None
    for path in (directory, *directory.parents):
        if path.exists():
            break
        top = path
    return top


def remove_created(directory: Path, top: Path | None, lock_name: str = "writer.lock") -> None:
    """Remove the folders from ``directory`` up to ``top`` (``missing_top``) with the writer lock
    in ``directory``, as long as nothing else was written in them."""
    if top is None:
        return
    for name in (lock_name, ".passkt-folder"):  # the lock, and the kind marker of a new folder
        if (directory / name).is_file():
            (directory / name).unlink()
    for path in (directory, *directory.parents):
        try:
            path.rmdir()
        except OSError:  # something else was written there: keep it
            return
        if path == top:
            return


# ---------------------------------------------------------------------- argparse types

MAX_THREADS = 1024
"""Bound of ``--threads``: more than any machine has cores (a typo, not a wish)."""
MAX_RESAMPLES = 1_000_000
"""Bound of ``--n-boot`` and ``power --sims``: a million resamples pin a 95% interval's ends to
about 0.0005; more only spends memory (``--n-boot 1e12`` would ask for terabytes)."""
MAX_SEED = 2**32 - 1
"""Seeds are non-negative and fit numpy's ``SeedSequence`` words."""


ENV_KWARGS_HELP = (
    "gym.make kwargs: k=v pairs (ints, floats, true/false, none, JSON lists) or a JSON object, "
    "e.g. source=hotpotqa,path=dev.json or hops=3,reveal_budget=true"
)


def add_env_arguments(
    parser: argparse.ArgumentParser, *, default: str | None = None, kwargs_note: str = ""
) -> None:
    """The env a command makes, declared alike by every command that makes one: the env id
    (positional ``ENV_ID``, or ``--env`` when it has a ``default``; ``MODULE:ID`` imports
    MODULE first), ``--import MODULE`` (repeatable) and ``--env-kwargs``. Parsed into ``env``,
    ``imports`` and ``env_kwargs``."""
    env_help = "env id, or MODULE:ID to import the module that registers it"
    if default is None:
        parser.add_argument("env", metavar="ENV_ID", help=env_help)
    else:
        parser.add_argument("--env", default=default, help=env_help + " (default %(default)s)")
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first, e.g. the one that registers your env or defines your agent "
        "(repeatable; the current directory is searched too)",
    )
    parser.add_argument("--env-kwargs", metavar="K=V,...", help=ENV_KWARGS_HELP + kwargs_note)


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An ``argparse`` type for an integer in ``[low, high]``: sizes get documented bounds, so a
    typo (``0``, twenty digits) is refused at once instead of hanging or allocating terabytes."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer in [{low}, {high}], got {text!r}"
            )
        return value

    return parse


def unit_float(text: str) -> float:
    """An ``argparse`` type for a level or a power: a finite number strictly between 0 and 1."""
    value = finite_float(text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def finite_float(text: str) -> float:
    """An ``argparse`` type for a finite number (``nan`` and ``inf`` parse, but mean nothing)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """An ``argparse`` type for a finite number > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


threads_count = int_in(1, MAX_THREADS)
seed_int = int_in(0, MAX_SEED)
resamples = int_in(1, MAX_RESAMPLES)
