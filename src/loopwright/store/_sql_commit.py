"""The SQL core's commits: one, and many in a group commit, fenced by the lease's token."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .._errors import (
    ConflictError,
    StaleLeaseError,
    StoreError,
)
from .._record_codec import referred_versions
from ._protocol_commit import RunBusy, after_failed
from ._records import CommitRequest, NewApproval, NewEvent, VersionRow
from ._rows import (
    BUSY_TOKEN,
    BatchRefused,
    approval_row,
    batch_rows,
    checkpoint_row,
    decided_event,
    run_cols,
    version_row,
)
from ._sql_reads import ReadsSQL
from ._sql_statements import EVENTS_IN_ONE, journal_key

BOOLEAN_RUN_COLS = frozenset({"held_out_passed", "cancel_requested"})


class CommitSQL(ReadsSQL):
    """Commits: fenced, one by one or grouped."""

    # --- checkpoints: writing -------------------------------------------------------------
    def commit(
        self,
        run_id: str,
        token: int,
        *,
        seq: int,
        cycle: int,
        state: dict[str, Any],
        record: dict[str, Any] | None,
        events: Sequence[NewEvent],
        run: Mapping[str, Any],
        approval: NewApproval | None = None,
        approvals: Sequence[NewApproval] = (),
        base: int | None = None,
        versions: Sequence[VersionRow] = (),
        rejected: Sequence[tuple[str, int]] = (),
    ) -> bool:
        now = time.time()
        req = CommitRequest(
            run_id,
            token,
            seq,
            cycle,
            state,
            record,
            events,
            run,
            [*([approval] if approval is not None else []), *approvals],
            base,
            versions,
            rejected,
        )
        cols = self._run_cols(run, seq)
        with self._tx() as conn:
            return self._commit_in(self._writer(conn), req, cols, now)

    def forget_rejected(self, run_id: str, after_cycle: int, *, keep: Collection[str] = ()) -> None:
        with self._tx() as conn:
            self._forget_rejected_in(conn, run_id, after_cycle, keep)

    def _forget_rejected_in(
        self, conn: Any, run_id: str, after_cycle: int, keep: Collection[str]
    ) -> None:
        if not keep:
            conn.execute(self._q.forget_rejected, (run_id, after_cycle))
            return
        m = self._MARK
        conn.execute(
            f"DELETE FROM rejected WHERE run_id={m} AND cycle>{m} "
            f"AND digest NOT IN ({', '.join([m] * len(keep))})",
            (run_id, after_cycle, *keep),
        )

    def _inline_versions_in(self, conn: Any, run_id: str, after_cycle: int) -> None:
        """The records of the cycles after ``after_cycle`` hold their edits' values again
        instead of naming versions (a rollback's: those numbers are written again after it).
        Read and rewritten in ``conn``; once per rollback, over the cycles it abandons."""
        q, jl, js = self._q, self._jl, self._js
        rows = conn.execute(
            q.records_naming_versions, (run_id, after_cycle, "%version%")
        ).fetchall()
        # (an edit's "version", a replacement's "replace_versions"; the text may match inside
        # a value: a record naming nothing is left as it is)
        named = [(seq, rec) for seq, raw in rows if referred_versions(rec := jl(raw))]
        if named:
            self._fill_versions(conn, run_id, [rec for _seq, rec in named])
            self._executemany(conn, q.set_record, [(js(rec), run_id, seq) for seq, rec in named])

    def commit_request(self, it: CommitRequest) -> bool:
        now = time.time()
        cols = self._run_cols(it.run, it.seq)
        with self._tx() as conn:
            return self._commit_in(self._writer(conn), it, cols, now)

    def commit_many(self, items: Sequence[CommitRequest]) -> list[bool | StoreError]:
        """Several runs' commits in ONE transaction (one sync to disk): each is fenced on its
        own — a stale one is reported and left out, the others commit.

        Fast path: one fencing read for the whole batch that keeps every token as read until
        the commit (SQLite: the write lock, held from BEGIN IMMEDIATE; PostgreSQL: the batch's
        run rows locked ``FOR NO KEY UPDATE`` in run_id order, so two batches never deadlock),
        then one ``executemany`` per table. A bad column set, a run twice in the batch, or a
        value the database refuses (a duplicate checkpoint or request, a number out of range)
        takes the slow path instead (its run rows locked in run_id order too): one savepoint
        per commit, so each failure is its own run's (and a run's later commits in the batch
        under the same lease token, deltas on the failed one, are not written; one under
        another token, a new executor's, is). A failure of the database itself (locked, disk
        full, a lost connection) fails the whole batch, as one transaction."""
        if not items:
            return []
        now = time.time()
        try:  # a bad column set goes commit by commit, where it fails alone
            cols = [self._run_cols(it.run, it.seq) for it in items]
        except StoreError:
            cols = None
        # (a commit closing approval requests, a cancel's or a rollback's, is rare: it goes
        # commit by commit, where its closures are written)
        # (and a rollback's, which rewrites the records it abandons)
        fast = not any(it.closes or it.forget_rejected_after is not None for it in items)
        if fast and cols is not None and len({it.run_id for it in items}) == len(items):
            try:
                with self._tx() as conn:
                    return self._commit_batch(conn, items, cols, now)
            except BatchRefused:
                pass  # nothing was written: commit by commit, below
        out: list[bool | StoreError] = []
        # A grouped run queues its next commit before the last is durable: a later commit of
        # a run under the same lease token is a delta on its earlier one, so once one fails the
        # later are not written (written, they would leave a hole in the run's checkpoint
        # chain). Another token is another executor's (one that took the run over from a
        # fenced one): its commits build on what the store holds, not on the failed one.
        # A run waits on its newest commit only: one after a stale one is stale too, and said
        # so (a plain StoreError sent the fenced executor down its failure path: it tried to
        # end the run as failed, and a worker recorded worker_skipped on a run another worker
        # now drives, counting it skipped, not lost).
        failed_runs: dict[tuple[str, int], StoreError] = {}
        with self._tx() as conn:
            busy: set[str] = set()
            if self._LOCKS:
                # The batch's run rows locked first, in run_id order (the fast path's
                # ``_fence_batch``), held to the commit: taken by each commit's update in
                # batch order, two processes' slow batches holding the same two runs in
                # opposite orders deadlocked. The commits then go in batch order, as before.
                # (a run whose row another session holds is left out: ``RunBusy``)
                owner = self._fence_batch(conn, sorted({it.run_id for it in items}))
                busy = {r for r, (token, _) in owner.items() if token == BUSY_TOKEN}
            for it in items:
                if it.run_id in busy:
                    out.append(RunBusy(f"run {it.run_id}: its row is locked by another session"))
                    continue
                first = failed_runs.get((it.run_id, it.token))
                if first is not None:
                    out.append(after_failed(it, first))
                    continue
                try:
                    with self._savepoint(conn):
                        ok = self._commit_in(conn, it, self._run_cols(it.run, it.seq), now)
                except StoreError as exc:  # rolled back to its savepoint; the others go on
                    failed_runs[(it.run_id, it.token)] = exc
                    out.append(exc)
                    continue
                except Exception as exc:
                    failed = self._damaged(exc) or StoreError(
                        f"run {it.run_id}: commit failed: {exc}"
                    )
                    failed.__cause__ = exc
                    failed_runs[(it.run_id, it.token)] = failed
                    out.append(failed)
                    continue
                out.append(ok)
        return out

    def _commit_batch(
        self,
        conn: Any,
        items: Sequence[CommitRequest],
        cols: Sequence[dict[str, Any]],
        now: float,
    ) -> list[bool | StoreError]:
        q = self._q
        owner = self._fence_batch(conn, [it.run_id for it in items])
        rows = batch_rows(items, cols, owner, now, js=self._js)
        if rows.approvals and self._DB_NOW:  # (requested on the store's clock: _store_now)
            at = self._store_now(conn, now)
            rows.approvals = [(*r[:11], at, *r[12:]) for r in rows.approvals]
        try:
            for names, updates in rows.updates.items():
                self._executemany(conn, q.update_run(names, False), updates)
            for statement, table in (
                (q.insert_checkpoint, rows.checkpoints),
                (q.insert_event, rows.events),
                (q.insert_approval, rows.approvals),
                (q.upsert_version, rows.versions),
                (q.forget_rejected, rows.forgotten),
                (q.insert_rejected, rows.rejected),
                (q.clear_journal, rows.cleared),
            ):
                if table:
                    self._executemany(conn, statement, table)
            for it, c, ok in zip(items, cols, rows.results, strict=True):
                if c.get("ended_at") is not None and not isinstance(ok, StoreError) and ok:
                    self._close_pauses(conn, it.run_id, now)
        except self._DB_FAILURE:
            raise  # the database, not a value (locked, disk full...): every commit fails
        except self._REFUSED as exc:
            damage = self._damaged(exc)
            if damage is not None:  # the store, not a value: every commit fails
                raise damage from exc
            raise BatchRefused(str(exc)) from exc
        return rows.results

    def _run_cols(self, run: Mapping[str, Any], seq: int) -> dict[str, Any]:
        """A commit's run columns as the database takes them."""
        cols = run_cols(run, seq)
        if cols.get("packet") is not None:
            cols["packet"] = self._js(cols["packet"])
        for name in BOOLEAN_RUN_COLS & cols.keys():
            if cols[name] is not None:
                cols[name] = bool(cols[name])
        if self._DB_NOW and cols.get("lease_expires_at") is not None:
            # the caller's clock says when; what is kept is how long, from the server's now
            cols["lease_expires_at"] = float(cols["lease_expires_at"]) - time.time()
        return cols

    def _commit_in(self, conn: Any, it: CommitRequest, cols: dict[str, Any], now: float) -> bool:
        q, js = self._q, self._js
        run_id, token = it.run_id, it.token
        flag = conn.execute(
            q.update_run(tuple(cols), True), (*cols.values(), now, run_id, token)
        ).fetchone()
        if flag is None:
            raise StaleLeaseError(
                f"run {run_id}: checkpoint refused, fencing token {token} is stale"
            )
        try:
            conn.execute(q.insert_checkpoint, checkpoint_row(it, now, js))
        except self._UNIQUE:
            raise ConflictError(f"run {run_id}: checkpoint {it.seq} already written") from None
        if it.events:  # (``event_row`` written out: four a cycle, in one statement)
            n = len(it.events)
            if n <= EVENTS_IN_ONE:
                conn.execute(q.insert_events(n), _event_params(run_id, it.events, now, js))
            else:
                self._executemany(conn, q.insert_event, _event_rows(run_id, it.events, now, js))
        # (a request's times on the store's clock, as its expiry: ``_store_now``)
        at = self._store_now(conn, now) if it.approvals or it.closes else now
        for a in it.approvals:
            try:
                conn.execute(q.insert_approval, approval_row(run_id, a, at, js))
            except self._UNIQUE:
                raise ConflictError(
                    f"run {run_id}: approval request {a.approval_id!r} already exists"
                ) from None
        if it.forget_rejected_after is not None:
            # A rollback: the run will write the abandoned cycles' version numbers again, so
            # their records take back the values they name first (before this commit's rows).
            self._inline_versions_in(conn, run_id, it.forget_rejected_after)
        if it.versions:
            self._executemany(conn, q.upsert_version, _version_rows(run_id, it.versions, js))
        if it.forget_rejected_after is not None:
            self._forget_rejected_in(conn, run_id, it.forget_rejected_after, ())
        if it.rejected:
            rejected = []
            # (``at`` is the store's time, which the requests it closes below are decided at:
            # named so here, it was the last digest's cycle, and a cancel dated them 1970)
            for digest, cycle in it.rejected:  # (a loop: no comprehension a cycle)
                rejected.append((run_id, digest, cycle))
            self._executemany(conn, q.insert_rejected, rejected)
        if it.cleared:
            self._executemany(conn, q.clear_journal, [journal_key(run_id, k) for k in it.cleared])
        for c in it.closes:
            row = conn.execute(
                q.decide, ("cancelled", c.by, at, c.note, None, c.approval_id)
            ).fetchone()
            if row is not None:  # one already decided stays as it was
                conn.execute(
                    q.insert_event,
                    decided_event(self._approval(row), c.by, c.note, None, now, js),
                )
        if flag[0] and cols.get("ended_at") is not None:
            self._close_pauses(conn, run_id, now)
        return bool(flag[0])

    def _close_pauses(self, conn: Any, run_id: str, now: float) -> None:
        """A run that ends (this commit's) with a person's pause pending (filed while its last
        cycle ran, ``request_pause``): the pause is closed with it, in its transaction, so no
        request stays open on an ended run. Only asked when the commit's fencing read said a
        request is pending (the run's end, not every commit)."""
        at = self._store_now(conn, now)
        why = "the run ended before it paused"
        for row in conn.execute(self._q.close_pauses, ("loopwright", at, why, run_id)).fetchall():
            conn.execute(
                self._q.insert_event,
                decided_event(self._approval(row), "loopwright", why, None, now, self._js),
            )


def _event_rows(
    run_id: str, events: Sequence[NewEvent], now: float, js: Callable[[Any], str]
) -> list[tuple[Any, ...]]:
    """A commit's event rows (``event_row`` written out, in a loop: four a cycle)."""
    rows: list[tuple[Any, ...]] = []
    for e in events:
        rows.append((run_id, e.cycle, e.kind, now, js(dict(e.data))))
    return rows


def _event_params(
    run_id: str, events: Sequence[NewEvent], now: float, js: Callable[[Any], str]
) -> list[Any]:
    """``_event_rows`` one after another: the parameters of ``insert_events``."""
    params: list[Any] = []
    for e in events:
        params += (run_id, e.cycle, e.kind, now, js(dict(e.data)))
    return params


def _version_rows(
    run_id: str, versions: Sequence[Any], js: Callable[[Any], str]
) -> list[tuple[Any, ...]]:
    """A commit's version rows (a loop: no comprehension a cycle)."""
    rows: list[tuple[Any, ...]] = []
    for v in versions:
        rows.append(version_row(run_id, v, js))
    return rows
