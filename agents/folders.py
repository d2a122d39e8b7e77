"""Every folder passkt writes says which command made it, and no command writes into another's.

An evaluation run, a training run, a study, a study export, a testbed pretraining, a comparison
and a report are different things with some files of the same names (``config.json``,
``metrics.jsonl``, ``manifest.json``). A command pointed at another command's folder must not
take that folder's files for its own: ``passkt train sft --resume --out <a pretraining>`` once
read the pretraining's ``metrics.jsonl`` as its own and overwrote it.

So each command that creates a folder marks it (:func:`mark_folder`: ``.passkt-folder``, a line
of JSON naming the kind and the command), and every command first checks the folder it is about
to write or resume (:func:`claim_folder`): a folder of another kind is refused in one line that
names the folder and its kind, before anything is written, the lock file included. A folder made
before the marker existed is recognised by the files its kind writes (:func:`folder_kind`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from passkt.envs.errors import PassktError

__all__ = ["KINDS", "MARKER", "FolderKindError", "claim_folder", "folder_kind", "mark_folder"]

MARKER = ".passkt-folder"

KINDS: dict[str, tuple[str, str]] = {
    "eval-run": ("an evaluation run", "passkt eval"),
    "training-run": ("a training run", "passkt train"),
    "study": ("a study", "passkt study run"),
    "study-export": ("a study export", "passkt study export"),
    "pretraining": ("a testbed pretraining", "passkt testbed pretrain"),
    "comparison": ("a comparison", "passkt compare"),
    "report": ("a report", "passkt report"),
    "analysis": ("an analysis", "passkt analyze"),
}
"""Kind -> (what it is, the command that makes it)."""


class FolderKindError(PassktError, ValueError):
    """A command was pointed at a folder another kind of command made, or at a file."""


def _legacy_kind(folder: Path) -> str | None:
    """The kind of a folder made before markers, from the files only that kind writes."""
    names = {p.name for p in folder.iterdir()}
    if "manifest.json" in names and ({"results.jsonl", "digests.jsonl"} & names):
        return "eval-run"
    if "profile.json" in names and ({"splits", "base", "timings.jsonl"} & names):
        return "study"
    if {"data", "state"} <= names or (folder / "data" / "study.json").is_file():
        return "study-export"
    if "pretrain_config.json" in names or "corpus.npz" in names:
        return "pretraining"
    if "metrics.jsonl" in names or any(n.startswith("checkpoint-") for n in names):
        return "training-run"
    if "report.md" in names and "surface.md" in names:
        return "report"
    if any(n.startswith("gap_") and n.endswith(".md") for n in names):
        return "comparison"
    return None


def folder_kind(folder: str | Path) -> str | None:
    """The kind of a passkt folder (its marker, else its files), or None (not passkt's, empty,
    or missing). A marker that cannot be read counts as no marker."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    marker = folder / MARKER
    if marker.is_file():
        try:
            kind = json.loads(marker.read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        if kind in KINDS:
            return kind
    try:
        return _legacy_kind(folder)
    except OSError:
        return None


def claim_folder(folder: str | Path, kind: str, flag: str = "--out") -> None:
    """Refuse, in one line and before anything is written, a ``folder`` that is a file or that
    another kind of command made; any other folder (missing, empty, this kind's, or not
    passkt's) is left to the command's own checks."""
    folder = Path(folder)
    what, command = KINDS[kind]
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                what = (
                    "is a file, not a folder"
                    if parent == folder
                    else (f"cannot be a folder: {parent} is a file")
                )
                raise FolderKindError(f"{flag} {folder} {what}; choose another {flag}")
            break
    found = folder_kind(folder)
    if found is not None and found != kind:
        other, maker = KINDS[found]
        raise FolderKindError(
            f"{flag} {folder} is {other} (made by `{maker}`), and `{command}` writes {what}: "
            f"choose another {flag}"
        )


def mark_folder(folder: str | Path, kind: str) -> None:
    """Mark ``folder`` (which exists) as made by ``kind``'s command, unless it is marked."""
    marker = Path(folder) / MARKER
    if marker.exists():
        return
    command = KINDS[kind][1]
    tmp = marker.with_name(MARKER + ".tmp")
    tmp.write_text(json.dumps({"kind": kind, "command": command}) + "\n", encoding="utf-8")
    os.replace(tmp, marker)
