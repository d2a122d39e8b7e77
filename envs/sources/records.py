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
``ORG/NAME`` (and does not end in a file suffix), is a hub name. A folder is read only when it is a
dataset folder, which ``dataset_folder_kind`` tells from marker files at its top (and in ``data/``
or the config's folder) without walking it: ``datasets`` would otherwise search a whole tree such
as ``/`` or ``$HOME`` for data files, for minutes, and load whatever it finds.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from passkt.envs.errors import DatasetFormatError, DatasetUnavailableError, MissingDependencyError

__all__ = ["dataset_folder_kind", "is_hub_name", "read_records", "records_from"]

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
    if Path(name).is_dir() and dataset_folder_kind(Path(name), hf_config) is None:
        raise DatasetFormatError(
            name,
            "(folder)",
            "path",
            "a folder but not a dataset folder (no dataset_dict.json or state.json from "
            "save_to_disk, no .parquet files at its top, in data/ or in a config folder, no "
            "README.md with configs); give a JSON or JSON Lines file, or a dataset folder",
        )
    rows = _dataset_rows(name, hf_config, hf_split, hint)
    origin = f"hub:{name}" + (f"/{hf_config}" if hf_config else "") + f"[{hf_split}]"
    return origin, ((str(index), dict(row)) for index, row in enumerate(rows))


def _dataset_rows(name: str, config: str | None, split: str, hint: str) -> Any:
    """The rows of one split of a dataset folder or hub dataset, through ``datasets``."""
    try:
        import datasets  # optional: the hub extra
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

_LISTED = 10_000
"""Most entries of one folder looked at: a dataset folder's markers are near the top of a small
listing; a huge folder is not searched further."""
_DATA_SUFFIXES = (".parquet", ".arrow")


def _names(folder: Path) -> list[str]:
    """The names in ``folder`` (not its subfolders), at most ``_LISTED`` of them."""
    try:
        with os.scandir(folder) as entries:
            return [entry.name for _, entry in zip(range(_LISTED), entries, strict=False)]
    except OSError:
        return []


def dataset_folder_kind(folder: Path, config: str | None = None) -> str | None:
    """``"saved"`` (a ``save_to_disk`` folder), ``"repository"`` (a dataset repository's
    parquet layout) or None (not a dataset folder), from marker files only.

    Looks at the folder's own entries, then at most ``data/`` and ``config``'s folder, never
    deeper: the answer takes milliseconds for any folder, ``/`` included.
    """
    names = _names(folder)
    if any(marker in names for marker in _SAVED_MARKERS):
        return "saved"
    if any(name.endswith(_DATA_SUFFIXES) for name in names):
        return "repository"
    if "README.md" in names:
        try:
            with (folder / "README.md").open("rb") as f:
                head = f.read(1 << 16)
        except OSError:
            head = b""
        if head.startswith(b"---") and b"\nconfigs:" in head:
            return "repository"
    for sub in ("data", config):
        if (
            sub
            and sub in names
            and (folder / sub).is_dir()
            and any(name.endswith(_DATA_SUFFIXES) for name in _names(folder / sub))
        ):
            return "repository"
    return None
