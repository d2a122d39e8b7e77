"""Where the tests find real data: small copies of public data sets kept in ``tests/data``.

The files, their sources, licences and checksums are listed in ``tests/data/SOURCES.md``;
``tests/test_real_data.py`` checks the checksums, so a changed or missing file fails loudly.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"
