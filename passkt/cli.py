"""The ``passkt`` command: ``eval``, ``report`` and ``compare`` (``passkt.eval.cli``), plus the
commands of the packages above it, loaded only when they run (``train``, ``analyze``, ``study``,
``testbed``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from passkt.eval import cli

cli.register_command("study", "passkt.study.cli", "run the matched-data study from a profile")
cli.register_command(
    "testbed", "passkt.study.testbed.cli", "small agent models trained from scratch (testbed)"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``passkt`` console script; returns the exit code."""
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
