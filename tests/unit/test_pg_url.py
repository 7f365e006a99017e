"""How a PostgreSQL store URL is split into libpq's conninfo, what is shown and loopwright's own
options (no server needed)."""

from __future__ import annotations

import pytest

pytest.importorskip("psycopg")

from psycopg.conninfo import conninfo_to_dict

from loopwright.store.postgres import _split_url


def test_an_empty_host_keeps_its_slashes() -> None:
    """`postgresql:///db` (libpq: the local socket) became `postgresql:/db`, which libpq
    refuses ("invalid connection option")."""
    conninfo, shown, own = _split_url(
        "postgresql:///test?host=/var/run/postgresql&user=ann&password=pw&schema=s&pool_max=3"
    )
    assert conninfo == "postgresql:///test?host=%2Fvar%2Frun%2Fpostgresql&user=ann&password=pw"
    assert conninfo_to_dict(conninfo) == {
        "dbname": "test", "host": "/var/run/postgresql", "user": "ann", "password": "pw"
    }  # fmt: skip
    assert own == {"schema": "s", "pool_max": "3"}
    assert shown.startswith("postgresql:///test?") and "pw" not in shown
    assert _split_url("postgresql://")[0] == "postgresql://"


def test_a_url_with_a_host_is_unchanged() -> None:
    url = "postgresql://ann:pw@db.internal:5433/agents?sslmode=require&schema=prod"
    conninfo, shown, own = _split_url(url)
    assert conninfo == "postgresql://ann:pw@db.internal:5433/agents?sslmode=require"
    assert shown == "postgresql://ann:***@db.internal:5433/agents?sslmode=require&schema=prod"
    assert own == {"schema": "prod"}
