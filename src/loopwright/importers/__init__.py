"""Importers: recorded runs of other systems turned into loopwright tasks."""

from __future__ import annotations

from .ldb import (
    USD_PER_TOKEN,
    LdbFormatError,
    LdbImport,
    convert_record,
    import_ldb,
    import_ldb_report,
    read_ldb,
    read_ldb_report,
)

__all__ = [
    "USD_PER_TOKEN",
    "LdbFormatError",
    "LdbImport",
    "convert_record",
    "import_ldb",
    "import_ldb_report",
    "read_ldb",
    "read_ldb_report",
]
