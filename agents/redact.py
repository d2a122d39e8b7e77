"""No secret on disk or in logs: credentials are masked in any text passkt writes or logs.

A key can reach a command line in a URL (``http://sk-...@host/v1``, ``...?api_key=...``) or in a
value that has the shape of a known key (``sk-...``, ``hf_...``). ``redact`` masks each of them
with ``***`` and leaves the rest of the text as it was, so a manifest, a report or a log line
still says which server and model a run used. The manifest (``passkt.eval.manifest``), the
OpenAI policy's messages and every log line of the ``passkt`` command (``RedactingFilter``) go
through it. Keys given the recommended way, in an environment variable named by ``api_key_env``
or in ``OPENAI_API_KEY``, are never written at all.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MASK", "RedactingFilter", "redact", "redact_value"]

MASK = "***"

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@#?]+@")
_SECRET_PARAM = re.compile(
    r"(?i)([?&;#](?:[\w.-]*(?:api[_-]?key|token|secret|passw(?:or)?d|pwd|auth|signature|"
    r"credentials?)[\w.-]*|key|sig)=)[^&#\s\"']+"
)
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{8,}|hf_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{16,}|"
    r"github_pat_\w{16,}|xox[abprs]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|AIza[\w-]{20,})"
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[\w.~+/=-]{8,}")


def redact(text: str) -> str:
    """``text`` with URL userinfo, secret query parameters, bearer tokens and key-shaped words
    (``sk-...``, ``hf_...``, ``ghp_...``, ``AKIA...``) replaced by ``***``."""
    if not isinstance(text, str):
        return text
    text = _USERINFO.sub(rf"\1{MASK}@", text)
    text = _SECRET_PARAM.sub(rf"\1{MASK}", text)
    text = _BEARER.sub(rf"\1{MASK}", text)
    return _KEY_SHAPES.sub(MASK, text)


def redact_value(value: Any) -> Any:
    """``redact`` applied to every string inside ``value`` (dicts, lists and tuples, keys too)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {redact_value(k): redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(v) for v in value)
    return value


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in each record's message (install on handlers)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to the handler
            return True
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_text is None and record.exc_info[1] is not None:
            exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(exc_text)
        return True
