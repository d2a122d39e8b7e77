"""``python -m passkt``: the ``passkt`` command."""

import sys

from passkt.cli import main

sys.exit(main())
