"""Stores made by earlier releases (``tests/data/vN_store``), copied for a test to open."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path


def copied_store(fixture: Path, tmp_path: Path, version: str) -> Path:
    """A copy of the committed store ``fixture`` in ``tmp_path``, checked to be at schema
    ``version`` (really the release's layout, not one a test run migrated in place)."""
    db = tmp_path / "loopwright.db"
    shutil.copy(fixture, db)
    raw = sqlite3.connect(db)
    try:
        (found,) = raw.execute(
            "SELECT value FROM loopwright_meta WHERE key='schema_version'"
        ).fetchone()
    finally:
        raw.close()
    assert found == version, f"{fixture} is at schema {found}, not {version}"
    return db
