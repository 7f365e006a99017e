"""A store's list search is bounded in Python as in the dashboard: ``Store.list_runs``,
``count_runs``, ``page_approvals`` and ``count_approvals`` refuse a search over 1,000
characters (or one holding a NUL) with a ``ConfigError`` naming ``search``. SQLite refused a
LIKE pattern over 50,000 bytes with a raw ``sqlite3.OperationalError`` ("LIKE or GLOB pattern
too complex"), and PostgreSQL's text refuses a NUL with a driver error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loopwright import ConfigError
from loopwright.store import NewApproval, Store, open_store

LIMIT = 1000  # store MAX_SEARCH (not imported: the test runs on the tree before it)


def _filled(url: str) -> Store:
    """A store with a run and its pending request (an empty table never evaluates the LIKE)."""
    store = open_store(url)
    rec, _ = store.create_run(
        run_id="run-a", task_key="a", loop_name="l", project="p", spec_ref=None,
        loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
    )  # fmt: skip
    token = store.acquire_lease(rec.run_id, "me", 60)
    store.commit(
        rec.run_id, token, seq=1, cycle=1, state={"cycle": 1}, record=None, events=[],
        run={"status": "awaiting_approval"},
        approvals=[NewApproval(
            approval_id="ap-a", cycle=1, kind="effect", rule=None, what="pay", why="w",
            evidence={}, diff=None, action_hash="h", expires_at=None,
        )],
    )  # fmt: skip
    return store


_CALLS: dict[str, Callable[[Store, str], Any]] = {
    "list_runs": lambda s, q: s.list_runs(search=q),
    "count_runs": lambda s, q: s.count_runs(search=q),
    "page_approvals": lambda s, q: s.page_approvals(search=q, limit=10),
    "count_approvals": lambda s, q: s.count_approvals(search=q),
}


@pytest.mark.parametrize("call", sorted(_CALLS))
@pytest.mark.parametrize("q", ["x" * 60_000, "%" * (LIMIT + 1), "a\x00b"])
def test_a_search_the_store_cannot_take_is_a_config_error_naming_it(
    url: str, call: str, q: str
) -> None:
    store = _filled(url)
    try:
        with pytest.raises(ConfigError) as e:
            _CALLS[call](store, q)
        assert e.value.field == "search"
    finally:
        store.close()


@pytest.mark.parametrize("call", sorted(_CALLS))
def test_a_search_at_the_limit_is_searched(url: str, call: str) -> None:
    store = _filled(url)
    try:
        # the worst case: every character escaped, doubling the pattern
        assert _CALLS[call](store, "%" * LIMIT) in ([], 0)
        assert _CALLS[call](store, "é" * LIMIT) in ([], 0)
    finally:
        store.close()
