"""What keeps a run directory honest: per-field manifest digests, no secrets, encodable text.

- Each chunk's first record carries ``manifest_digest``: a short hash of each request field of
  the manifest it was written under. A manifest edited by hand afterwards (another seed, policy
  or budget grid) would relabel the data in a report, or let a resume mix two requests' chunks;
  ``changed_fields`` finds the edited fields so the store can refuse and name them.
- Policy options that look like secrets (``api_key``, ``token``, ...) are refused before the
  manifest is written, since it holds options in plain text (``check_no_secrets``).
- Text that UTF-8 cannot encode (a lone surrogate in a model's text) is written with
  ``SURROGATES`` error handling (see its docstring).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "DIGEST_KEY",
    "SURROGATES",
    "changed_fields",
    "check_no_secrets",
    "escape_surrogates",
    "field_digests",
]

DIGEST_KEY = "manifest_digest"
"""Key of the first record of each chunk: the ``field_digests`` of the manifest it was written
under."""

SURROGATES = "backslashreplace"
"""How text that UTF-8 cannot encode is written: a lone surrogate (which a model's text may hold,
e.g. from a JSON ``\\ud800`` escape) only ever occurs inside a JSON string, where Python's
``\\udXXX`` backslash form is exactly JSON's escape for it, so it reads back as the same
string. (Two surrogates that form a pair read back as the one character they encode.)"""

_SECRET_OPTION = re.compile(r"(?i)(^|_)(api_?key|token|secret|password|passwd|credentials?)($|_)")


def escape_surrogates(text: str) -> str:
    """``text`` with each lone surrogate written as ``\\udXXX`` (so that it encodes as UTF-8)."""
    return text.encode("utf-8", SURROGATES).decode("utf-8")


def field_digests(manifest: Mapping[str, Any], keys: Sequence[str]) -> dict[str, str]:
    """A short hash of each of the manifest's ``keys``, by key."""
    return {
        key: hashlib.sha256(
            json.dumps(manifest.get(key), sort_keys=True, ensure_ascii=True).encode("ascii")
        ).hexdigest()[:16]
        for key in keys
    }


def changed_fields(
    record: Mapping[str, Any],
    manifest: Mapping[str, Any],
    keys: Sequence[str],
    optional: Sequence[str] = (),
) -> list[str]:
    """The ``keys`` whose value in ``manifest`` differs from the one ``record`` was written under.

    A record without a digest (an older passkt, or not the first of its chunk) changes nothing,
    nor does a key of ``optional`` that the record's digest lacks (written before it was covered).

    Raises:
        ValueError: the record's digest is not an object (a corrupt file).
    """
    stored = record.get(DIGEST_KEY)
    if stored is None:
        return []
    if not isinstance(stored, dict):
        raise ValueError(f"{DIGEST_KEY} is not an object; the file is corrupt")
    current = field_digests(manifest, keys)
    return [
        key
        for key in keys
        if stored.get(key) != current[key] and not (key in optional and key not in stored)
    ]


def check_no_secrets(options: Iterable[str], where: str) -> None:
    """Refuse option names that look like secrets (``NAME_env`` is the way to give one).

    Raises:
        ValueError: naming the option and what to pass instead.
    """
    for key in map(str, options):
        if _SECRET_OPTION.search(key) and not key.endswith("_env"):
            raise ValueError(
                f"policy option {key!r} looks like a secret and would be written in plain text "
                f"to {where}; pass {key}_env='NAME' (the environment variable that holds it) "
                "instead"
            )
