"""The SQL core's approvals (requests, reads, pages and decisions) and cancellation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._errors import ApprovalError, ConflictError, RunNotFoundError, already_decided
from ._records import PAUSE, Approval, NewApproval, NewEvent, RunRecord
from ._rows import (
    APPROVAL_COLS,
    approval_row,
    decided_event,
    event_row,
    sql_int,
)
from ._schema import EXPIRING
from ._sql_core import SQLCore, search_text, where_clause

DECISIONS = ("approved", "answered", "denied", "expired", "cancelled")


class ApprovalsSQL(SQLCore):
    """Approvals and cancellation."""

    # --- approvals and cancellation ----------------------------------------------------
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        where, args = where_clause((("run_id", run_id), ("status", status)), self._MARK)
        query = f"SELECT {APPROVAL_COLS} FROM approvals{where} ORDER BY requested_at, approval_id"
        return [self._approval(r) for r in self._all(query, args)]

    def approval(self, approval_id: str) -> Approval | None:
        m = self._MARK
        rows = self._all(
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE approval_id={m}", [approval_id]
        )
        return self._approval(rows[0]) if rows else None

    def approvals_by_prefix(
        self, run_id: str, prefix: str, *, limit: int | None = None
    ) -> list[Approval]:
        if limit is not None and limit <= 0:
            return []
        m = self._MARK
        # The run's rows through its index, only those of the prefix decoded: the first
        # characters compared as typed (LIKE ignores ASCII case on SQLite; startswith did not)
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE run_id={m} "
            f"AND substr(approval_id, 1, CAST({m} AS INTEGER))={m} ORDER BY requested_at, approval_id"
            + ("" if limit is None else f" LIMIT {int(limit)}")
        )
        return [self._approval(r) for r in self._all(query, [run_id, len(prefix), prefix])]

    def count_approvals(
        self, *, status: str | None = None, run_id: str | None = None, search: str | None = None
    ) -> int:
        where, args = self._approvals_where(status, run_id, search)
        return int(self._all(f"SELECT COUNT(*) FROM approvals{where}", args)[0][0])

    def page_approvals(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        limit: int,
    ) -> list[Approval]:
        where, args = self._approvals_where(status, run_id, search)
        if after is not None:  # keyset pagination: the rows after (requested_at, approval_id)
            m = self._MARK
            where += (" AND " if where else " WHERE ") + (
                f"(requested_at < {m} OR (requested_at = {m} AND approval_id > {m}))"
            )
            args += [after[0], after[0], after[1]]
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals{where} "
            f"ORDER BY requested_at DESC, approval_id LIMIT {sql_int(max(0, limit))}"
        )
        return [self._approval(r) for r in self._all(query, args)]

    def _approvals_where(
        self, status: str | None, run_id: str | None, search: str | None
    ) -> tuple[str, list[Any]]:
        where, args = where_clause((("run_id", run_id), ("status", status)), self._MARK)
        needle = search_text(search).lower()
        if needle:
            # as approvals_matching: an id prefix (either id), or a substring of the words;
            # ! escapes LIKE's wildcards
            m = self._MARK
            pat = needle.replace("!", "!!").replace("%", "!%").replace("_", "!_")
            words = ("what", "why", "rule", "kind")
            low = self._LOWER
            cond = " OR ".join(
                [f"{low}({c}) LIKE {m} ESCAPE '!'" for c in ("approval_id", "run_id")]
                + [f"{low}({c}) LIKE {m} ESCAPE '!'" for c in words]
            )
            where += (" AND " if where else " WHERE ") + f"({cond})"
            args += [f"{pat}%"] * 2 + [f"%{pat}%"] * len(words)
        return where, args

    def decided_approvals(self, limit: int) -> list[Approval]:
        # Only ``limit`` rows are parsed; the scan for them stays in the database.
        query = (
            f"SELECT {APPROVAL_COLS} FROM approvals WHERE status <> 'pending' "
            f"ORDER BY requested_at DESC, approval_id DESC LIMIT {self._MARK}"
        )
        return [self._approval(r) for r in self._all(query, [max(0, int(limit))])]

    def expired_requests(self, *, limit: int) -> list[Approval]:
        # Through the partial index approvals_expiring (pending requests with an expiry), its
        # WHERE stated as is, in its order; compared on the store's clock. PostgreSQL's, read
        # once by a subquery: clock_timestamp() itself is volatile, so a bound of it is no
        # index condition (the whole index was read and filtered). SQLite is told the index:
        # without statistics it took approvals_status and sorted every pending request. Its
        # clock is ``clock()``, as ``expire`` decides on and a request's expiry is set by
        # (``time.time()`` here: a store whose clock was moved found none expired).
        m = self._MARK
        if self._DB_NOW:
            table, now, args = "approvals", f"(SELECT {self._DB_NOW})", []
        else:
            table, now, args = "approvals INDEXED BY approvals_expiring", m, [self.clock()]
        query = (
            f"SELECT {APPROVAL_COLS} FROM {table} WHERE {EXPIRING} AND expires_at < {now} "
            f"ORDER BY expires_at, approval_id LIMIT {sql_int(max(0, limit))}"
        )
        return [self._approval(r) for r in self._all(query, args)]

    def decide_approval(
        self,
        approval_id: str,
        *,
        status: str,
        by: str,
        note: str | None,
        now: float,
        answer: Any = None,
        audit: Mapping[str, Any] | None = None,
    ) -> Approval:
        if status not in DECISIONS:
            raise ApprovalError(f"unknown decision {status!r}")
        q, js = self._q, self._js
        with self._tx() as conn:
            # The run's row first, then the request's: the order a commit takes them in (its
            # fencing update, then the requests it closes), so a person deciding while a
            # cancel commits waits for it instead of deadlocking with it (PostgreSQL).
            owner = conn.execute(q.approval_run, (approval_id,)).fetchone()
            if owner is None:
                raise ApprovalError(f"no approval request {approval_id!r}")
            self._lock_run(conn, owner[0])
            at = self._store_now(conn, now)  # as its requested_at and expires_at
            row = conn.execute(
                q.decide,
                (status, by, at, note, None if answer is None else js(answer), approval_id),
            ).fetchone()
            if row is None:
                found = conn.execute(q.approval_status, (approval_id,)).fetchone()
                raise already_decided(owner[0], approval_id, found[0], found[1])
            decided = self._approval(row)
            conn.execute(q.insert_event, decided_event(decided, by, note, answer, now, js))
            if audit is not None:  # the record of the decision stands or falls with it
                self._audit_row(conn, audit)
        return decided

    def request_cancel(self, run_id: str) -> RunRecord:
        with self._tx() as conn:
            conn.execute(self._q.cancel, (True, run_id))
        return self.get_run(run_id)

    def request_pause(
        self,
        run_id: str,
        request: NewApproval,
        *,
        by: str,
        now: float,
        audit: Mapping[str, Any] | None = None,
    ) -> Approval:
        q, js, m = self._q, self._js, self._MARK
        with self._tx() as conn:
            # The run's row locked first (PostgreSQL; SQLite's write lock is held already): a
            # commit ending the run either went first (its status read here: refused) or waits,
            # and then closes this request with the run (``_close_pauses``).
            self._lock_run(conn, run_id)
            row = conn.execute(f"SELECT status FROM runs WHERE run_id={m}", (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            if row[0] in ENDED:
                raise ConflictError(f"run {run_id} already ended ({row[0]}); nothing to pause")
            held = conn.execute(
                f"SELECT approval_id, requested_at FROM approvals WHERE run_id={m} "
                f"AND status='pending' AND kind={m}",
                (run_id, PAUSE),
            ).fetchone()
            if held is not None:
                raise ConflictError(
                    f"run {run_id} is paused already (request {held[0]}): unpause it (approve "
                    "that request) to let it go on"
                )
            at = self._store_now(conn, now)
            conn.execute(q.insert_approval, approval_row(run_id, request, at, js))
            data = {
                "approval_id": request.approval_id,
                "by": by,
                "note": request.evidence.get("note"),
            }
            conn.execute(
                q.insert_event,
                event_row(run_id, NewEvent(request.cycle, "pause_requested", data), now, js),
            )
            if audit is not None:  # the record of the filing stands or falls with it
                self._audit_row(conn, audit)
        found = self.approval(request.approval_id)
        assert found is not None  # (written just now)
        return found


# The statuses of a run that ended (``_contract.TERMINAL_STATUSES``, which the store does not
# import: the engine's module)
ENDED = ("accepted", "stopped", "escalated", "cancelled", "failed")
