"""A ``Runtime`` and a ``Store`` say which store they are in their repr (outside probe
pyapi47: both were ``<… object at 0x…>``, useless in a log or a debugger), and never its
password."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw
from loopwright.store import open_store


def test_the_repr_names_the_store_and_the_owner(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with lw.Runtime(str(db), owner="probe-owner") as rt:
        shown = repr(rt)
        assert shown.startswith("Runtime(") and "object at" not in shown
        assert str(db) in shown and "probe-owner" in shown
        assert str(db) in repr(rt.store) and "object at" not in repr(rt.store)
    with open_store(str(db)) as st:
        assert repr(st) == f"<SQLiteStore {st.url}>"


@pytest.mark.postgres
def test_a_postgres_password_is_not_in_the_repr(pg_url: str) -> None:
    password = "hunter2-pyapi47-secret"
    scheme, rest = pg_url.split("://", 1)
    user_host = rest.split("@", 1)
    if len(user_host) == 2:
        user = user_host[0].split(":", 1)[0]
        url = f"{scheme}://{user}:{password}@{user_host[1]}"
    else:
        url = f"{scheme}://postgres:{password}@{rest}"
    with lw.Runtime(url) as rt:
        assert password not in repr(rt) and password not in repr(rt.store)
        assert "schema=lw_" in repr(rt) and "PostgresStore" in repr(rt.store)
