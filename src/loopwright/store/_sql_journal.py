"""The SQL core's effect/retry journal and its store-wide effect claims."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._errors import (
    ConflictError,
    EffectKeyHeld,
    EffectKeyMoved,
    EffectReused,
    RunNotFoundError,
    StaleLeaseError,
)
from ._records import EffectClaim, EffectReuse, JournalEntry, JournalWrite, NewEvent
from ._rows import (
    event_row,
)
from ._sql_core import SQLCore, where_clause
from ._sql_statements import JOURNAL_COLS, journal_key


def check_journal_expect(run_id: str, key: str, status: str | None, expect: str | None) -> None:
    """``journal_put``'s ``expect_status``: ``""`` = the entry must not exist yet, a status =
    it must exist with that status. ``status`` is the entry's (``None``: there is none)."""
    if expect is None:
        return
    if expect == "":
        if status is not None:
            raise ConflictError(
                f"run {run_id}: journal entry {key!r} already exists (status {status!r})"
            )
    elif status is None:
        raise ConflictError(
            f"run {run_id}: journal entry {key!r} does not exist (expected status {expect!r})"
        )
    elif status != expect:
        raise ConflictError(
            f"run {run_id}: journal entry {key!r} has status {status!r}, expected {expect!r}"
        )


class JournalSQL(SQLCore):
    """The journal's writes (with effect claims) and reads."""

    # --- effect/retry journal -----------------------------------------------------------
    def journal_put(
        self,
        run_id: str,
        token: int,
        *,
        key: str,
        kind: str,
        cycle: int,
        status: str,
        data: Mapping[str, Any],
        attempts: int | None = None,
        expect_status: str | None = None,
        events: Sequence[NewEvent] = (),
        claim: tuple[str, str, str] | None = None,
        lazy: bool = False,
        audit: Mapping[str, Any] | None = None,
    ) -> JournalEntry:
        q = self._q
        now = time.time()
        bill = claim is None and expect_status is None and attempts is not None and not events
        if bill and audit is None:
            # A call's bill (written before every billed call's cycle commits): one statement,
            # fenced by its own condition, in place of the fence, the read and the write. No
            # row: the path below finds out why (a stale token, no such run) and says so.
            payload = self._js(dict(data))
            fenced = (run_id, key, kind, cycle, status, payload, attempts, now, now, token)
            row = self._put_fenced(q.put_journal_fenced, (*fenced, run_id, token), lazy)
            if row is not None:
                return self._journal(row)
        put = JournalWrite(key, kind, cycle, status, data, expect_status, events, claim)
        with self._tx_lazy() if lazy else self._tx() as conn:
            self._fence_journal(conn, run_id, token, key)
            row = self._journal_write(conn, run_id, token, put, attempts, now)
            if audit is not None:  # a person's write (a settling): stands or falls with it
                self._audit_row(conn, audit)
        return self._journal(row)

    def journal_put_all(
        self,
        run_id: str,
        token: int,
        writes: Sequence[JournalWrite],
        *,
        packet: Mapping[str, Any] | None = None,
        audit: Mapping[str, Any] | None = None,
    ) -> list[JournalEntry]:
        now = time.time()
        with self._tx() as conn:
            self._fence_journal(conn, run_id, token, writes[0].key if writes else "")
            rows = [self._journal_write(conn, run_id, token, w, None, now) for w in writes]
            if packet is not None:  # (fenced above: the run's row is this lease's)
                conn.execute(
                    self._q.update_run(("packet",), False),
                    (self._js(dict(packet)), now, run_id, token),
                )
            if audit is not None:
                self._audit_row(conn, audit)
        return [self._journal(r) for r in rows]

    def _fence_journal(self, conn: Any, run_id: str, token: int, key: str) -> None:
        """A journal write's fence, in its transaction: as in commit, a guarded write, so no
        other executor takes the lease between the check and the writes after it, and every
        journal writer of this run queues here (SQLite: the write lock is held; PostgreSQL:
        the run's row lock), so a read-check-write cannot interleave."""
        q = self._q
        if conn.execute(q.fence, (run_id, token)).fetchone() is None:
            if conn.execute(q.run_exists, (run_id,)).fetchone() is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            raise StaleLeaseError(
                f"run {run_id}: journal write {key!r} refused, fencing token {token} is stale"
            )

    def _journal_write(
        self,
        conn: Any,
        run_id: str,
        token: int,
        w: JournalWrite,
        attempts: int | None,
        now: float,
    ) -> Any:
        """One entry's write (its expectation, claim and events) in a fenced transaction."""
        q = self._q
        existing = conn.execute(q.journal_status, journal_key(run_id, w.key)).fetchone()
        check_journal_expect(
            run_id, w.key, None if existing is None else existing[0], w.expect_status
        )
        if w.claim is not None:
            self._claim(conn, run_id, w.claim, w.status, w.data, now)
        payload = self._js(dict(w.data))
        if existing is None:
            row = conn.execute(
                q.insert_journal,
                (run_id, w.key, w.kind, w.cycle, w.status, payload,
                 0 if attempts is None else attempts, now, now, token),
            ).fetchone()  # fmt: skip
        else:
            row = conn.execute(
                q.update_journal,
                (w.kind, w.cycle, w.status, payload,
                 existing[1] if attempts is None else attempts, now, token,
                 *journal_key(run_id, w.key)),
            ).fetchone()  # fmt: skip
        if w.events:
            self._executemany(
                conn, q.insert_event, [event_row(run_id, e, now, self._js) for e in w.events]
            )
        return row

    def _claim(
        self,
        conn: Any,
        run_id: str,
        claim: tuple[str, str, str],
        status: str,
        data: Mapping[str, Any],
        now: float,
    ) -> None:
        """``journal_put``'s store-wide claim of an effect key, in its transaction."""
        q = self._q
        kind, key, args_hash = claim
        if status == "intent":
            gen = int(data.get("generation") or 1)
            conn.execute(q.claim_key, (kind, key, run_id, "claimed", args_hash, now, gen))
            row = conn.execute(q.effect_key, (kind, key)).fetchone()
            if row[1] in ("failed", "refused", "compensated"):
                # it never happened, or was undone: the key is free; taken (by its own run too)
                # so that no other run takes it while this attempt is in flight. An action
                # that failed in a way that may have acted is tried again under its key; one
                # refused (a finished attempt: a provider keeps its answer by key) or undone
                # under a key never handed out (the next generation): asked for with an older
                # one, nothing is written.
                least = row[4] + (row[1] in ("refused", "compensated"))
                if gen < least:
                    raise EffectKeyMoved(
                        f"effect key {kind}/{key}: generation {gen} asked, {least} is next",
                        generation=least,
                    )
                conn.execute(
                    q.take_key, (run_id, "claimed", args_hash, now, gen, kind, key, row[0])
                )
                row = conn.execute(q.effect_key, (kind, key)).fetchone()
            elif row[0] == run_id and gen > row[4]:
                conn.execute(q.raise_generation, (gen, kind, key, gen))
            if row[0] != run_id:
                raise EffectKeyHeld(
                    f"effect key {kind}/{key} is held by run {row[0]} ({row[1]})",
                    run_id=row[0],
                    status=row[1],
                    args_hash=row[2],
                    result=self._jl(row[3]) if row[3] is not None else None,
                    generation=int(row[4] or 1),
                )
            return
        if status == "done" and data.get("from_run"):
            # Another run's result reused: written only while that run's claim still says it
            # did it. Read in the intent's transaction, it may have changed before this one
            # (the holder started undoing it, a refund): a refunded payment reused as paid.
            row = conn.execute(q.effect_key, (kind, key)).fetchone()
            if row is None or (row[0], row[1]) != (data["from_run"], "done"):
                raise EffectKeyHeld(
                    f"effect key {kind}/{key} is no longer done by run {data['from_run']}",
                    run_id=str(row[0]) if row else str(data["from_run"]),
                    status=str(row[1]) if row else "released",
                    args_hash=str(row[2]) if row else "",
                    result=self._jl(row[3]) if row and row[3] is not None else None,
                    generation=int(row[4] or 1) if row else 1,
                )
            # ...and recorded on the claim in this transaction (the holder's refund names
            # this run to a person, and tells it): a run counted is one whose journal holds
            # the reuse, and a reuse the run journaled is counted, whatever kills what after
            conn.execute(q.add_reuse, (kind, key, int(row[4] or 1), run_id, now))
            return  # the claim is the holder's: nothing of it to settle
        result = data.get("result") if status == "done" else None
        if status == "failed" and data.get("spent"):
            status = "refused"  # its key is spent: the next attempt gets the next generation
        if status == "undoing" and "reusers_known" in data:
            self._check_reusers(conn, run_id, kind, key, data["reusers_known"], now)
        if status == "compensated":
            self._tell_reusers(conn, run_id, kind, key, now, "effect_reuse_refunded")
        elif status == "done":
            self._tell_reusers(conn, run_id, kind, key, now, "effect_reuse_refund_refused")
        conn.execute(
            q.settle_key,
            (status, None if result is None else self._js(result), now, kind, key, run_id),
        )

    def _check_reusers(
        self, conn: Any, run_id: str, kind: str, key: str, known: Collection[str], now: float
    ) -> None:
        """The undoing of ``run_id``'s action starts only when every run that reused it is
        among ``known`` (those a person was told of: none under an ``allow`` rule), read under
        the claim's lock: a reuse is written only while the claim is ``done``, so none comes
        after this check (``EffectReused`` otherwise, nothing written). Started, each of them
        is told so before any refund is asked for (it may end in doubt, never settled)."""
        row = conn.execute(self._q.effect_key, (kind, key)).fetchone()
        if row is None or row[0] != run_id or row[1] != "done":
            return  # not this run's done action: the settle below writes nothing new
        found = conn.execute(self._q.reusers, (kind, key, int(row[4] or 1))).fetchall()
        runs = [(str(r), str(st)) for r, st, _c in found]
        if any(r not in known for r, _st in runs):
            raise EffectReused(
                f"effect key {kind}/{key} of run {run_id} was reused by run(s) "
                + ", ".join(f"{r} ({st})" for r, st in runs),
                runs=runs,
            )
        self._tell(conn, found, "effect_reuse_refunding", (run_id, kind, key, row[4]), now)

    def _tell_reusers(
        self, conn: Any, run_id: str, kind: str, key: str, now: float, event: str
    ) -> None:
        """Tell each run that reused ``run_id``'s action, in the transaction that records it
        undone, that it was (an ``effect_reuse_refunded`` event on that run: its ``show`` and
        log say so): once, as the claim turns ``compensated``. ``effect_reuse_refund_refused``:
        an undoing put back to ``done`` (the refund refused, the payment standing), as they
        were told it started."""
        row = conn.execute(self._q.effect_key, (kind, key)).fetchone()
        if row is None or row[0] != run_id:
            return
        refused = event == "effect_reuse_refund_refused"
        if (row[1] != "undoing") if refused else (row[1] == "compensated"):
            return
        found = conn.execute(self._q.reusers, (kind, key, int(row[4] or 1))).fetchall()
        self._tell(conn, found, event, (run_id, kind, key, row[4]), now)

    def _tell(
        self, conn: Any, found: Sequence[Any], event: str, what: tuple[Any, ...], now: float
    ) -> None:
        """An ``event`` on each reusing run of ``found`` (its id, status and cycle), naming the
        claim ``what`` (holder, kind, key, generation)."""
        holder, kind, key, gen = what
        said = {"kind": kind, "key": key, "generation": int(gen or 1), "refunded_by": holder}
        rows = [
            event_row(str(r), NewEvent(int(c), event, said), now, self._js) for r, _s, c in found
        ]
        if rows:
            self._executemany(conn, self._q.insert_event, rows)

    def effect_claim(self, kind: str, key: str) -> EffectClaim | None:
        with self._conn() as conn:
            row = conn.execute(self._q.effect_claim, (kind, key)).fetchone()
        if row is None:
            return None
        digest = None if row[3] is None else str(row[3])
        return EffectClaim(str(row[0]), str(row[1]), int(row[2]), digest)

    def effect_claims(
        self, pairs: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], EffectClaim]:
        by_kind: dict[str, list[str]] = {}
        for kind, key in dict.fromkeys(pairs):
            by_kind.setdefault(kind, []).append(key)
        m = self._MARK
        out: dict[tuple[str, str], EffectClaim] = {}
        for kind, keys in by_kind.items():  # by the primary key (kind, key): one query a kind
            for i in range(0, len(keys), 400):  # under SQLite's bound on parameters
                chunk = keys[i : i + 400]
                query = (
                    "SELECT key, run_id, status, generation, args_hash FROM effect_keys "
                    f"WHERE kind={m} AND key IN ({','.join([m] * len(chunk))})"
                )
                for key, run, status, gen, digest in self._all(query, [kind, *chunk]):
                    hashed = None if digest is None else str(digest)
                    out[(kind, str(key))] = EffectClaim(str(run), str(status), int(gen), hashed)
        return out

    def effect_reuses(self, kind: str, key: str) -> list[EffectReuse]:
        with self._conn() as conn:
            rows = conn.execute(self._q.claim_reusers, (kind, key)).fetchall()
        return [EffectReuse(str(r), str(st)) for r, st, _c in rows]

    def journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        key: str | None = None,
        cycle: int | None = None,
    ) -> list[JournalEntry]:
        conds = (("run_id", run_id), ("kind", kind), ("key", key), ("cycle", cycle))
        where, args = where_clause(conds, self._MARK)
        query = f"SELECT {JOURNAL_COLS} FROM journal{where} ORDER BY created_at, key"
        if kind is not None and key is None:
            # The keys from the index on (run_id, kind, cycle), then the rows by primary key:
            # asked for whole rows, SQLite read the run's every entry through the primary key
            # instead, so a resume's look for the next cycle's retry entries grew with the
            # run's effects (one entry a cycle).
            m = self._MARK
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} AND key IN "
                f"(SELECT key FROM journal{where}) ORDER BY created_at, key"
            )
            args = [run_id, *args]
        return [self._journal(r) for r in self._all(query, args)]

    def journal_where(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        after_cycle: int | None = None,
        statuses: Collection[str] | None = None,
        keys: Collection[str] | None = None,
        limit: int | None = None,
        upto_cycle: int | None = None,
    ) -> list[JournalEntry]:
        if limit is not None and limit <= 0:
            return []
        found = self._journal_conds(kind, after_cycle, upto_cycle, statuses)
        if found is None:
            return []
        m = self._MARK
        where, args = found
        if keys is None:
            # As ``journal`` does: the keys from the index on (run_id, kind, cycle) (a cycle's
            # range of it when ``after_cycle`` is given), then the rows by primary key.
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} AND key IN "
                f"(SELECT key FROM journal WHERE run_id={m}{where}) ORDER BY created_at, key"
                + ("" if limit is None else f" LIMIT {int(limit)}")
            )
            return [self._journal(r) for r in self._all(query, [run_id, run_id, *args])]
        out: list[JournalEntry] = []
        wanted_keys = list(dict.fromkeys(keys))
        for i in range(0, len(wanted_keys), 400):  # under SQLite's bound on parameters
            chunk = wanted_keys[i : i + 400]
            query = (
                f"SELECT {JOURNAL_COLS} FROM journal WHERE run_id={m} "
                f"AND key IN ({','.join([m] * len(chunk))}){where} ORDER BY created_at, key"
            )
            out.extend(self._journal(r) for r in self._all(query, [run_id, *chunk, *args]))
        if len(wanted_keys) > 400:  # several chunks: their rows in one order again
            out.sort(key=lambda e: (e.created_at, e.key))
        return out if limit is None else out[:limit]

    def _journal_conds(
        self,
        kind: str | None,
        after_cycle: int | None,
        upto_cycle: int | None,
        statuses: Collection[str] | None,
    ) -> tuple[str, list[Any]] | None:
        """``journal_where``'s filters as `` AND ...`` conditions and their arguments
        (``None``: no entry can match, an empty ``statuses``)."""
        m = self._MARK
        conds: list[str] = []
        args: list[Any] = []
        if kind is not None:
            conds.append(f"kind={m}")
            args.append(kind)
        if after_cycle is not None:
            conds.append(f"cycle>{m}")
            args.append(int(after_cycle))
        if upto_cycle is not None:
            conds.append(f"cycle<={m}")
            args.append(int(upto_cycle))
        if statuses is not None:
            wanted = list(dict.fromkeys(statuses))
            if not wanted:
                return None
            conds.append(f"status IN ({','.join([m] * len(wanted))})")
            args.extend(wanted)
        return "".join(f" AND {c}" for c in conds), args

    def count_journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        statuses: Collection[str] | None = None,
        limit: int | None = None,
    ) -> int:
        found = self._journal_conds(kind, None, None, statuses)
        if found is None or (limit is not None and limit <= 0):
            return 0
        where, args = found
        rows = f"SELECT 1 FROM journal WHERE run_id={self._MARK}{where}"
        if limit is not None:  # the first rows found, in no order: no sort, no whole scan
            rows += f" LIMIT {int(limit)}"
        return int(self._all(f"SELECT COUNT(*) FROM ({rows}) AS found", [run_id, *args])[0][0])
