"""The Store protocol's approval requests and cancellation (``ApprovalsStore``, part of
``Store``), and the search a request page is filtered by."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from .._errors import StoreError
from ._records import Approval, NewApproval, RunRecord, past_expiry

__all__ = ["ApprovalsStore", "approvals_matching"]


def approvals_matching(rows: list[Approval], search: str | None) -> list[Approval]:
    """The requests ``search`` finds (``Store.page_approvals``), in their order."""
    needle = (search or "").strip().lower()
    if not needle:
        return list(rows)
    return [
        a
        for a in rows
        if a.approval_id.lower().startswith(needle)
        or a.run_id.lower().startswith(needle)
        or any(needle in (x or "").lower() for x in (a.what, a.why, a.rule, a.kind))
    ]


class ApprovalsStore(ABC):
    """Approval requests, their decisions, and cancellation (mixed into ``Store``)."""

    def clock(self) -> float:
        """Now, as epoch seconds, on the clock a request's ``expires_at`` is set and compared
        on: this host's (a store on one host); ``PostgresStore``: the database server's, as
        its leases, so hosts whose clocks disagree expire a request at the same moment."""
        return time.time()

    # --- approvals and cancellation ----------------------------------------------------
    @abstractmethod
    def approvals(self, *, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        """Approval requests, oldest first."""

    def approval(self, approval_id: str) -> Approval | None:
        """One request by its id (``None``: no such request). This default reads them all;
        the built-in stores read one row."""
        return next((a for a in self.approvals() if a.approval_id == approval_id), None)

    def approvals_by_prefix(
        self, run_id: str, prefix: str, *, limit: int | None = None
    ) -> list[Approval]:
        """The run's requests whose id starts with ``prefix`` (case as given), oldest first
        as ``approvals`` gives them, at most ``limit``: what a person's few typed characters
        name (``limit=2`` tells one from several). This default reads the run's every
        request; the built-in stores read the matching rows."""
        found = [a for a in self.approvals(run_id=run_id) if a.approval_id.startswith(prefix)]
        return found if limit is None else found[: max(limit, 0)]

    def count_approvals(
        self, *, status: str | None = None, run_id: str | None = None, search: str | None = None
    ) -> int:
        """How many requests there are (of one ``status``, one run, matching ``search`` as
        ``page_approvals`` does): what every page's badge shows. This default reads them all;
        the built-in stores count in the database."""
        return len(approvals_matching(self.approvals(run_id=run_id, status=status), search))

    def page_approvals(
        self,
        *,
        status: str | None = None,
        run_id: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        limit: int,
    ) -> list[Approval]:
        """One page of requests, newest first (``requested_at`` descending, then
        ``approval_id``): those after the keyset ``after`` (``(requested_at, approval_id)`` of
        the last row of the page before), at most ``limit``. ``search``: a case-insensitive
        prefix of the request's or the run's id, or a substring of its what, why, rule or
        kind. This default reads them all; the built-in stores read one page."""
        rows = approvals_matching(self.approvals(run_id=run_id, status=status), search)
        rows.sort(key=lambda a: (-a.requested_at, a.approval_id))
        if after is not None:
            at, key = after
            rows = [
                a
                for a in rows
                if a.requested_at < at or (a.requested_at == at and a.approval_id > key)
            ]
        return rows[: max(0, limit)]

    def decided_approvals(self, limit: int) -> list[Approval]:
        """The ``limit`` decided requests most recently requested, newest first (what the
        inbox shows under its pending ones). This default reads them all; the built-in stores
        read ``limit`` rows."""
        done = [a for a in self.approvals() if a.status != "pending"]
        return done[::-1][:limit]

    def expired_requests(self, *, limit: int) -> list[Approval]:
        """Up to ``limit`` pending requests whose ``expires_at`` has passed on the store's
        clock (``clock``), soonest expired first: what a worker records as expired, so that
        a run whose every open request expired is claimable (its resume escalates). This
        default reads every pending request; the built-in stores read only the expired ones,
        by a partial index."""
        pending = [a for a in self.approvals(status="pending") if a.expires_at is not None]
        if not pending:
            return []
        now = self.clock()
        due = sorted(
            (a for a in pending if past_expiry(a.expires_at, now)),
            key=lambda a: (a.expires_at, a.approval_id),
        )
        return due[: max(0, limit)]

    @abstractmethod
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
        """Record a decision on a pending request (atomically: two deciders cannot both win),
        with an optional JSON-serialisable ``answer`` from the decider. Raises
        ``ApprovalError`` when there is no such request or it is no longer pending.
        ``audit``: the audit record of the decision (``audit_put``'s fields), written in the
        same transaction, so that a decision recorded always has its record and one refused
        or failed has none (a store written before ``audit`` has the engine write it after,
        with ``audit_put``, as ``request_pause``'s)."""

    @abstractmethod
    def request_cancel(self, run_id: str) -> RunRecord:
        """Flag the run for cancellation; the executor honours it at the next cycle boundary."""

    def request_pause(
        self,
        run_id: str,
        request: NewApproval,
        *,
        by: str,
        now: float,
        audit: Mapping[str, Any] | None = None,
    ) -> Approval:
        """File a person's pause: ``request`` (kind ``pause``) written pending, with a
        ``pause_requested`` event, atomically with the checks that the run has not ended
        (``ConflictError``) and has no pending pause (``ConflictError``); and ``audit``, the
        audit record of the filing (``audit_put``'s fields), in the same transaction, so that
        a pause filed has its record and one refused or failed has none (a store written
        before ``audit`` has the engine write it after, with ``audit_put``). A pending request
        keeps a parked run from being claimed (``open_requests``); an executing run learns of
        it from its next commit, which reports it (``commit``'s flag), and parks. A store
        whose commit reports only cancellation has the run pause when it is next resumed.
        The built-in stores close it (``cancelled``) in the commit that ends the run."""
        raise StoreError(f"{type(self).__name__} does not implement request_pause")
