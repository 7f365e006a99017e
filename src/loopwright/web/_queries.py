"""One page of runs or of approval requests, newest first, with the cursor of the next page
and how many match (what the list pages and the list endpoints read); a paged answer's
headers."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import HTTPException
from fastapi.responses import Response

from .._contract import RUN_STATUSES, STOP_REASONS
from ..store import Approval, RunRecord, Store
from ..store._base import with_newer
from ..store._sql_approvals import DECISIONS
from ..store._sql_core import MAX_SEARCH
from ._views import Cursor

__all__ = [
    "MAX_PAGE",
    "MAX_SEARCH",
    "PAGE_SIZE",
    "approvals_query",
    "page_size",
    "paged",
    "runs_query",
]

PAGE_SIZE = 50  # runs or approvals per page (and the API's default limit)
MAX_PAGE = 500


def page_size(limit: int) -> int:
    """A list endpoint's ``limit``: 1 or more (400 otherwise), at most ``MAX_PAGE``."""
    if limit < 1:
        raise HTTPException(400, f"limit must be 1 or more (a page holds at most {MAX_PAGE})")
    return min(limit, MAX_PAGE)


def _search(q: str | None) -> str | None:
    """A list's search text, or None for none: one longer than ``MAX_SEARCH`` is a 400."""
    text = (q or "").strip()
    if len(text) > MAX_SEARCH:
        raise HTTPException(
            400, f"the search is {len(text):,} characters long: give at most {MAX_SEARCH:,}"
        )
    return text or None


def _one_of(value: str | None, choices: tuple[str, ...], name: str) -> str | None:
    """A list filter's value, or None for none: one outside ``choices`` is a 400 in the
    words the CLI's ``--status`` uses (it matched nothing: an empty page, 200, read as "no
    such runs")."""
    if value and value not in choices:
        raise HTTPException(400, f"{name}: must be one of {', '.join(choices)} (got {value!r})")
    return value or None


def runs_query(
    store: Store,
    status: str | None,
    stop_reason: str | None,
    project: str | None,
    q: str | None,
    after: str | None,
    limit: int,
) -> tuple[list[RunRecord], str | None, int]:
    """One page of runs newest first, the cursor of the next page (``None``: the last),
    and how many match in all."""
    try:
        cur = Cursor.parse(after)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    limit = page_size(limit)
    flt: dict[str, Any] = {
        "status": _one_of(status, RUN_STATUSES, "status"),
        "stop_reason": _one_of(stop_reason, STOP_REASONS, "stop_reason"),
        "project": project or None,
        "search": _search(q),
    }
    rows = store.list_runs(**flt, after=(cur.at, cur.key) if cur else None, limit=limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = Cursor(rows[-1].created_at, rows[-1].run_id).text() if more and rows else None
    return rows, nxt, store.count_runs(**flt)


def approvals_query(
    store: Store,
    status: str | None,
    run_id: str | None,
    q: str | None,
    after: str | None,
    limit: int,
) -> tuple[list[Approval], str | None, int]:
    """A page of approval requests, newest first: one page read and a COUNT, in the
    store (not every request filtered here)."""
    try:
        cur = Cursor.parse(after)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from exc
    limit = page_size(limit)
    flt: dict[str, Any] = {
        "status": _one_of(status, ("pending", *DECISIONS), "status"),
        "run_id": run_id or None,
        "search": _search(q),
    }
    rows = store.page_approvals(**flt, after=(cur.at, cur.key) if cur else None, limit=limit + 1)
    # (a store whose count_approvals predates run_id/search: counted by the default)
    newer = {"run_id": flt["run_id"], "search": flt["search"]}
    total = with_newer(store.count_approvals, {"status": flt["status"]}, newer)
    if total is None:
        total = Store.count_approvals(store, **flt)
    page_rows = rows[:limit]
    more = len(rows) > limit
    nxt = (
        Cursor(page_rows[-1].requested_at, page_rows[-1].approval_id).text()
        if more and page_rows
        else None
    )
    return page_rows, nxt, total


def paged(response: Response, path: str, nxt: str | None, total: int, **query: Any) -> None:
    response.headers["X-Total-Count"] = str(total)
    if nxt:
        keep = {k: v for k, v in query.items() if v not in (None, "")}
        response.headers["X-Next-Cursor"] = nxt
        response.headers["Link"] = f'<{path}?{urlencode({**keep, "after": nxt})}>; rel="next"'
