"""Content-addressed blobs in the store: pictures and other bytes a run makes, kept out of its
state. A part's value holds the digest (``sha256:<hex>``), media type and size; the bytes are
written once here, whoever writes them again (same bytes, same digest: an ``INSERT`` that does
nothing). Both SQL stores keep them in one ``blobs`` table, so a dashboard on another host
reads them from the same PostgreSQL database as the runs.
"""

from __future__ import annotations

import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError

__all__ = ["BLOBS_PG", "BLOBS_SQLITE", "Blob", "Blobs", "blob_digest", "is_digest"]

# The table, in its own migration step (SQLite v6, PostgreSQL v5). A rowid table: a picture is
# far over a page, and a WITHOUT ROWID row that size would spill its whole key path.
BLOBS_SQLITE: list[str] = [
    """CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        media_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        created_at REAL NOT NULL,
        data BLOB NOT NULL
    )""",
]
BLOBS_PG: list[str] = [
    """CREATE TABLE blobs (
        digest TEXT PRIMARY KEY,
        media_type TEXT NOT NULL,
        size BIGINT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        data BYTEA NOT NULL
    )""",
]

_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_BLOB_BYTES = 64 * 1024 * 1024  # a picture, not a data set


def blob_digest(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    return isinstance(value, str) and _DIGEST.match(value) is not None


@dataclass(frozen=True, slots=True)
class Blob:
    digest: str
    media_type: str
    data: bytes


class Blobs:
    """Blobs of one store: ``put`` (idempotent) and ``get``. ``store`` is an SQL store
    (``loopwright.store.open_store``)."""

    def __init__(self, store: Any) -> None:
        for hook in ("_tx", "_conn", "_MARK"):
            if not hasattr(store, hook):
                raise ConfigError(
                    f"{type(store).__name__} keeps no blobs (an SQLite or PostgreSQL store does)",
                    field="store",
                )
        self.store = store
        mark = store._MARK
        self._insert = (
            "INSERT INTO blobs(digest, media_type, size, created_at, data) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(digest) DO NOTHING"
        ).replace("?", mark)
        self._select = "SELECT media_type, data FROM blobs WHERE digest=?".replace("?", mark)
        self._exists = "SELECT 1 FROM blobs WHERE digest=?".replace("?", mark)

    def put(self, data: bytes, media_type: str) -> str:
        """Store ``data`` once; its digest."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise TypeError(f"a blob is bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) > MAX_BLOB_BYTES:
            raise ConfigError(
                f"a blob of {len(data)} bytes is over the limit of {MAX_BLOB_BYTES}", field="blob"
            )
        digest = blob_digest(data)
        with self.store._tx() as conn:
            conn.execute(self._insert, (digest, media_type, len(data), time.time(), data))
        return digest

    def get(self, digest: str) -> Blob | None:
        """The blob with this digest, or ``None``."""
        if not is_digest(digest):
            return None
        with self.store._conn() as conn:
            row = conn.execute(self._select, (digest,)).fetchone()
        if row is None:
            return None
        return Blob(digest, str(row[0]), bytes(row[1]))

    def __contains__(self, digest: object) -> bool:
        if not isinstance(digest, str) or not is_digest(digest):
            return False
        with self.store._conn() as conn:
            return conn.execute(self._exists, (digest,)).fetchone() is not None
