"""Integration fixtures: a PostgreSQL schema of its own for each test that asks for one.

PostgreSQL tests read the server's URL from ``LOOPWRIGHT_TEST_PG`` (for example
``postgresql://postgres@127.0.0.1:5432/test``). Unset, they skip, except under ``CI=true``
(``.ci/run`` sets both), where a PostgreSQL test that cannot run fails instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_ENV = "LOOPWRIGHT_TEST_PG"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}; PostgreSQL tests must run on CI", pytrace=False)
    pytest.skip(reason)


def pg_base_url() -> str:
    """The test server's URL, or skip (fail under ``CI=true``) when there is none."""
    url = os.environ.get(PG_ENV, "")
    if not url:
        _unavailable(f"{PG_ENV} is not set (e.g. postgresql://postgres@127.0.0.1:5432/test)")
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install 'loopwright[postgres]'")
    return url


def pg_drop_schema(base_url: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(base_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pg_create_schema(base_url: str, schema: str) -> str:
    """Create ``schema`` (as a person starting a store there does: ``Runtime`` and the CLI
    refuse a ``?schema=`` that does not exist) and return its store URL."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(base_url, autocommit=True, connect_timeout=10) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
    return f"{base_url}{'&' if '?' in base_url else '?'}schema={schema}"


@pytest.fixture
def pg_schema() -> Iterator[tuple[str, str]]:
    """``(base_url, schema)``: a fresh schema name (not created yet), dropped afterwards."""
    base = pg_base_url()
    schema = f"lw_{uuid.uuid4().hex[:16]}"
    try:
        yield base, schema
    finally:
        pg_drop_schema(base, schema)


@pytest.fixture
def pg_url(pg_schema: tuple[str, str]) -> str:
    """A store URL (``…?schema=lw_…``) for a schema of this test's own, created empty (as a
    person starting a store creates it) and dropped afterwards."""
    base, schema = pg_schema
    return pg_create_schema(base, schema)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL, once for an SQLite file and once for a PostgreSQL schema of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 's.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many times a stored head is resolved into a full state (every part's versions)."""

    from loopwright import _state_codec as codec

    calls = [0]
    real = codec.resolve

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(codec, "resolve", counting)
    yield calls


@pytest.fixture
def no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` from the environment: nothing reaches a
    real endpoint, and no key of the machine's is registered as a secret."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture
def fake_openai() -> Iterator[Any]:
    """A scripted OpenAI-compatible server on loopback (``loopwright.testing.FakeOpenAI``)."""
    from loopwright.testing import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def older_release(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loop and project names checked as before names48: a run made under it is stored as an
    earlier release stored it (``test_names_rule``)."""
    from loopwright import _loop, _run_create, _task_parts

    for module in (_loop, _run_create, _task_parts):
        monkeypatch.setattr(module, "check_name", lambda *a, **k: None, raising=False)
