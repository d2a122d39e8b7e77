"""Exceptions raised by passkt (one module, like ``gymnasium.error``)."""

from __future__ import annotations


class PassktError(Exception):
    """Base class of every error passkt raises on purpose."""


class UnknownSourceError(PassktError, ValueError):
    """A task source name that is not registered."""


class DatasetFormatError(PassktError, ValueError):
    """A dataset file whose content is not what the loader expects.

    The message always names the file, the record and the key, and says how to fix it.
    """

    def __init__(self, path: object, record: object, key: object, problem: str) -> None:
        self.path, self.record, self.key = path, record, key
        super().__init__(f"{path}: record {record}: key {key!r}: {problem}")


class DatasetUnavailableError(PassktError, FileNotFoundError):
    """A hub dataset that could not be loaded (no network, unknown name); says how to get it."""


class ModelUnavailableError(PassktError, OSError):
    """A model that could not be loaded (no such folder, no network for a hub id)."""


class ModelFileError(PassktError, ValueError):
    """A damaged or refused file in a model or checkpoint folder; the message names the file."""


class UnknownTaskError(PassktError, KeyError):
    """A ``task_id`` that the env's task list does not contain."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


class MissingDependencyError(PassktError, ImportError):
    """An optional dependency is not installed; the message names the pip extra."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed. Install it with: pip install 'passkt[{extra}]'"
        )


class PolicyError(PassktError, RuntimeError):
    """A policy's ``generate`` raised, or returned something other than one completion per
    conversation: the agent's code failed, not passkt's (one line; ``--traceback`` for more)."""


class EnvServerError(PassktError, ConnectionError):
    """An env server (``passkt serve``) could not be reached, or answered a request with an
    error; the message names the server's URL and what it said."""


class EnvContractError(PassktError, ValueError):
    """An env lacks something passkt needs; the message names it and how to add it."""


class ReplayMismatchError(EnvContractError):
    """Replaying an episode's actions on a fresh env gave other observations."""
