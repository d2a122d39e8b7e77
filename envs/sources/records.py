"""Records of the file-based task sources: a local file, a saved dataset folder or the hub.

Every real-data source (``hotpotqa``, ``math500``, ``gsm8k``) reads its records here, from one of:

* a JSON list or JSON Lines file (the official downloads);
* a folder of a Hugging Face dataset: one written by ``Dataset.save_to_disk`` / ``DatasetDict``'s,
  or a dataset repository's layout (parquet files, with the configs in its ``README.md``);
* a hub name (``ORG/NAME``, e.g. ``hotpotqa/hotpot_qa``), through ``datasets.load_dataset``,
  which needs the ``hub`` extra and, the first time, network; afterwards ``datasets``' cache
  serves it offline (``HF_DATASETS_OFFLINE=1``). A hub name is only read when the user names one:
  nothing is downloaded otherwise.

A path that exists is always read as a local file or folder; one that does not, but looks like
``ORG/NAME`` (and does not end in a file suffix), is a hub name.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from passkt.envs.errors import DatasetFormatError, DatasetUnavailableError, MissingDependencyError

__all__ = ["is_hub_name", "read_records", "records_from"]

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
_FILE_SUFFIXES = (".json", ".jsonl", ".gz", ".parquet", ".arrow", ".txt", ".csv")


def is_hub_name(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a hub dataset (``ORG/NAME``) rather than a local file.

    Only a path that does not exist counts, and never one with a file suffix, so a mistyped
    ``data/dev.json`` still gets the file-not-found message.
    """
    text = os.fspath(path)
    return (
        not Path(text).exists()
        and _HUB_NAME.fullmatch(text) is not None
        and not text.lower().endswith(_FILE_SUFFIXES)
    )


def read_records(path: str | os.PathLike[str], *, hint: str = "") -> list[tuple[str, Any]]:
    """Read a JSON list of records or a JSON Lines file.

    A file whose first non-blank character is ``[`` is read as one JSON list; anything else as
    JSON Lines (one record per non-blank line).

    Args:
        path: The file.
        hint: Appended to the ``FileNotFoundError`` message (where to get the file).

    Returns:
        ``(label, record)`` pairs; the label names the record in error messages: its index in the
        list, and for JSON Lines also its 1-based line number.

    Raises:
        FileNotFoundError: If the file does not exist (the message includes ``hint``).
        DatasetFormatError: If the file is not valid JSON / JSON Lines or not a list of records.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Dataset file not found: {path}. {hint}".strip())
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DatasetFormatError(
            path, "(file)", "(encoding)", f"not UTF-8 text: {error}"
        ) from error
    if text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise DatasetFormatError(
                path, "(file)", "(json)", f"invalid JSON at line {error.lineno}: {error.msg}"
            ) from error
        return [(str(index), record) for index, record in enumerate(records)]
    pairs = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        label = f"{len(pairs)} (line {lineno})"
        try:
            pairs.append((label, json.loads(line)))
        except json.JSONDecodeError as error:
            raise DatasetFormatError(
                path,
                label,
                "(json)",
                f"invalid JSON ({error.msg}); expected a JSON list of records or JSON Lines",
            ) from error
    return pairs


def records_from(
    path: str | os.PathLike[str] | None,
    dataset: str | None,
    *,
    hf_config: str | None,
    hf_split: str,
    hint: str,
) -> tuple[str, Iterator[tuple[str, Any]]]:
    """Records from a local file or dataset folder (``path``) or a hub dataset.

    Args:
        path: A JSON / JSON Lines file, a dataset folder, or a hub name (``is_hub_name``).
        dataset: Instead of ``path``, a hub name (or a dataset folder).
        hf_config: The dataset configuration (hub names and repository-layout folders).
        hf_split: The dataset split to read.
        hint: Where to get the data, for the error messages.

    Returns:
        The origin (the file path, or ``hub:<name>[/<config>][<split>]``) for error messages, and
        the ``(label, record)`` pairs.

    Raises:
        ValueError: If neither or both of ``path`` and ``dataset`` are given.
        FileNotFoundError: A missing file (the message includes ``hint``).
        MissingDependencyError: A dataset folder or hub name without ``datasets`` installed.
        DatasetUnavailableError: A hub dataset that could not be loaded (offline, unknown name).
    """
    if (path is None) == (dataset is None):
        given = "both" if path is not None else "neither"
        raise ValueError(
            f"Pass exactly one of path= (a local file, dataset folder or hub name) or dataset= "
            f"(a hub name); "
            f"got {given}. {hint}"
        )
    if path is not None and not Path(path).is_dir() and not is_hub_name(path):
        return str(path), iter(read_records(path, hint=hint))
    name = os.fspath(path if path is not None else dataset)  # type: ignore[arg-type]
    rows = _dataset_rows(name, hf_config, hf_split, hint)
    origin = f"hub:{name}" + (f"/{hf_config}" if hf_config else "") + f"[{hf_split}]"
    return origin, ((str(index), dict(row)) for index, row in enumerate(rows))


def _dataset_rows(name: str, config: str | None, split: str, hint: str) -> Any:
    """The rows of one split of a dataset folder or hub dataset, through ``datasets``."""
    try:
        import datasets
    except ImportError as error:
        raise MissingDependencyError("datasets", "hub") from error
    folder = Path(name)
    if folder.is_dir() and any((folder / f).is_file() for f in _SAVED_MARKERS):
        loaded = datasets.load_from_disk(str(folder))
        if isinstance(loaded, datasets.DatasetDict):
            if split not in loaded:
                raise ValueError(
                    f"{folder}: no split {split!r} in this saved dataset; it has "
                    f"{', '.join(loaded)}. Pass hf_split=<one of them> in source_options."
                )
            return loaded[split]
        return loaded
    if folder.is_dir():
        # A plain folder of data files has one config, "default": the source's hub config
        # (e.g. "distractor") then names nothing, so it is dropped.
        if config is not None and config not in datasets.get_dataset_config_names(name):
            config = None
        # datasets keys its cache of a local folder by the folder's name and configs, not its
        # content: two folders named alike would share (stale) rows, so always rebuild.
        return datasets.load_dataset(name, config, split=split, download_mode="force_redownload")
    try:
        return datasets.load_dataset(name, config, split=split)
    except (ConnectionError, FileNotFoundError) as error:
        cached = f"datasets.load_dataset({name!r}" + (f", {config!r}" if config else "") + ")"
        raise DatasetUnavailableError(
            f"Could not load the Hugging Face dataset {name!r} (config {config!r}, split "
            f"{split!r}): {str(error).splitlines()[0] if str(error) else type(error).__name__}. "
            f"To use it without network, download it once on a machine with network "
            f'(python -c "import datasets; {cached}"), copy its cache '
            f"(~/.cache/huggingface) here and set HF_DATASETS_OFFLINE=1; or save it with "
            f"save_to_disk(DIR) and pass path=DIR. {hint}"
        ) from error


_SAVED_MARKERS = ("dataset_dict.json", "state.json")
"""Files that ``save_to_disk`` writes at the top of a saved ``DatasetDict`` / ``Dataset``."""
