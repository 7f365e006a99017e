"""Importers: recorded runs of other systems turned into loopwright tasks."""

from __future__ import annotations

from .ldb import USD_PER_TOKEN, LdbFormatError, convert_record, import_ldb, read_ldb

__all__ = ["USD_PER_TOKEN", "LdbFormatError", "convert_record", "import_ldb", "read_ldb"]
