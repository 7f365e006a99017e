"""The SQL core's migrations runner and the backfills that migrations need."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._effects import canon
from .._errors import (
    StoreCorruptError,
)
from .._redact_logs import masked_logger
from ._records import NewEvent
from ._rows import event_row
from ._schema import (
    ADD_FENCED_SPEND,
    ADD_HELD_OUT_SELF_REPORTED,
    ADD_MAKER_STARTS,
    BACKFILL_CLAIMS,
    BACKFILL_FORK_REUSES,
    BACKFILL_GENERATIONS,
    BACKFILL_REUSES,
    HELD_OUT_SELF_REPORTED,
    MAKER_STARTS,
    fenced_spend,
)
from ._sql_core import SQLCore
from ._sql_statements import JOURNAL_KEY, journal_key

_log = masked_logger("loopwright.store")

# SQLite's steps that add a column to ``runs`` unless it is there (no ADD COLUMN IF NOT EXISTS;
# a store put back to an earlier version by a test runs the step again): each column, its SQL.
_ADD_COLUMN = {
    ADD_MAKER_STARTS: [("maker_starts", MAKER_STARTS.format(""))],
    ADD_HELD_OUT_SELF_REPORTED: [("held_out_self_reported", HELD_OUT_SELF_REPORTED.format(""))],
    ADD_FENCED_SPEND: fenced_spend("", "REAL", "INTEGER"),
}


class MigrationsSQL(SQLCore):
    """Schema migrations, applied in order; the claims and generations they need backfilled."""

    # --- schema -------------------------------------------------------------------------
    def _apply_migrations(
        self, conn: Any, migrations: Sequence[Sequence[str]], what: str, *, built: bool
    ) -> None:
        """Bring the schema forward to ``len(migrations)`` in the caller's transaction (its
        ``loopwright_meta`` exists). ``what`` names the schema for an error: '<what> <n>,
        newer than this loopwright understands'. ``built``: the store's tables (``runs``)
        exist already."""
        row = conn.execute(self._q.schema_version).fetchone()
        if row is None and built:
            # Its version row deleted (or its loopwright_meta dropped): migrating from 0 would
            # fail on the first CREATE TABLE ("table runs already exists"), or, were it let
            # pass, migrate a current store over itself.
            raise StoreCorruptError(
                f"{what.rpartition(' has ')[0]}: the store's tables are there but "
                "loopwright_meta holds no schema_version row (deleted by something other "
                "than loopwright): the store is damaged; restore it from a backup, or name "
                "another store"
            )
        try:
            version = int(row[0]) if row else 0
        except ValueError:
            # a version no loopwright wrote: damage, said so, never migrated over
            raise StoreCorruptError(
                f"{what} {row[0]!r}, not a number: the store is damaged (loopwright_meta)"
            ) from None
        latest = len(migrations)
        if version > latest:
            raise StoreCorruptError(
                f"{what} {version}, newer than this loopwright understands ({latest}); "
                "upgrade loopwright"
            )
        if version == latest:
            return  # nothing written: opening a current store costs no sync to disk
        for statements in migrations[version:latest]:
            for statement in statements:
                if statement == BACKFILL_CLAIMS:
                    self._backfill_claims(conn)
                elif statement == BACKFILL_GENERATIONS:
                    self._backfill_generations(conn)
                elif statement == BACKFILL_REUSES:
                    self._backfill_reuses(conn)
                elif statement == BACKFILL_FORK_REUSES:
                    self._backfill_fork_reuses(conn)
                elif statement in _ADD_COLUMN:  # (SQLite's: PRAGMA names the columns)
                    cols = {r[1] for r in conn.execute("PRAGMA table_info(runs)").fetchall()}
                    for column, add in _ADD_COLUMN[statement]:
                        if column not in cols:
                            conn.execute(add)
                else:
                    conn.execute(statement)
        conn.execute(self._q.set_schema_version, (str(latest),))

    def _backfill_claims(self, conn: Any) -> None:
        """A migration step: claim store-wide the effect keys that runs of an earlier release
        did (or may be doing) before keys were claimed — ``done`` with its result, an intent
        not settled as ``claimed`` — so that no run of this release does them again
        (invariant 2 across an upgrade). A key claimed already is left as it is; a key that
        was undone or failed is not claimed, but an undone one is recorded as such
        (``compensated``), so that its redo gets a key none of its runs was handed
        (``_backfill_generations`` counts the generations). Keys that named their run are
        claimed too: no other run asks for them. Each entry gets the ``action`` it names, as
        this release records it: a refund of it then frees its claim (without it, the claim
        stayed ``done`` and the next run was handed the refunded action's result)."""
        rows = conn.execute(
            "SELECT run_id, key, status, data FROM journal WHERE kind='effect' "
            "ORDER BY created_at, run_id, key"
        ).fetchall()
        # an undone (or retired) action's next generation is key~2, key~3, ...
        undone = {(r, k) for r, k, st, _d in rows if st in ("compensated", "retired")}
        now = time.time()
        insert = self._q.p(
            "INSERT INTO effect_keys(kind, key, run_id, status, args_hash, result, updated_at) "
            "VALUES(?,?,?,?,?,?,?) ON CONFLICT(kind, key) DO NOTHING"
        )
        named = self._q.p(f"UPDATE journal SET data=? WHERE {JOURNAL_KEY}")
        freed: dict[tuple[str, str], str] = {}  # (kind, action): a run that undid it
        for run_id, key, status, raw in rows:
            try:
                data = self._jl(raw) if raw is not None else {}
            except ValueError:
                if status in ("done", "intent", "in_doubt"):
                    # not what any release wrote: nothing to claim by, said once per row
                    _log.warning(
                        "run %s: effect journal entry %s is not readable JSON; its key is not "
                        "claimed store-wide (check whether the action happened)",
                        run_id,
                        key,
                    )
                continue
            if not isinstance(data, Mapping) or not isinstance(data.get("kind"), str):
                continue
            action = data.get("action")
            if not isinstance(action, str):
                action = str(key).removeprefix("effect:")
                head, sep, gen = action.rpartition("~")
                if sep and gen.isdigit() and (run_id, f"effect:{head}") in undone:
                    action = head  # a later generation of an undone action names the action
                conn.execute(
                    named, (self._js({**data, "action": action}), *journal_key(run_id, key))
                )
            if data.get("from_run"):
                continue  # a copy of another run's action: that run's entry claims it
            if status == "compensated":
                freed[(data["kind"], action)] = run_id
            if status not in ("done", "intent", "in_doubt"):
                continue
            args_hash = hashlib.sha256(canon(data.get("args") or {}).encode()).hexdigest()[:24]
            done = status == "done"
            result = data.get("result") if done else None
            conn.execute(
                insert,
                (
                    data["kind"],
                    action,
                    run_id,
                    "done" if done else "claimed",
                    args_hash,
                    None if result is None else self._js(result),
                    now,
                ),
            )
        for (kind, action), run_id in freed.items():  # (an action done again is claimed)
            conn.execute(insert, (kind, action, run_id, "compensated", "", None, now))

    def _backfill_generations(self, conn: Any) -> None:
        """A migration step: each claimed action's generation, the highest any run's journal
        handed out before (an earlier release counted a redo's ``key~2``, ``~3``... in its
        run only), so that the next redo, whichever run asks, gets a key none was given.
        Only the entries whose key has a ``~`` are read (a first generation has none)."""
        sql = "SELECT key, data FROM journal WHERE kind='effect' AND key LIKE '%~%'"
        for key, data in self._effect_data(conn, sql):
            action, kind = data.get("action"), data.get("kind")
            if not isinstance(action, str) or not isinstance(kind, str):
                continue  # not a business key: never claimed store-wide
            gen = str(key).removeprefix(f"effect:{action}~")
            if gen.isdigit() and gen != str(key):
                conn.execute(self._q.raise_generation, (int(gen), kind, action, int(gen)))

    def _backfill_reuses(self, conn: Any) -> None:
        """A migration step: the reuses an earlier release journaled (a ``done`` entry naming
        ``from_run``) of a claim that run still holds ``done``, or is undoing (a refund
        running, or in doubt), recorded at the claim's generation (the one the entry says it
        reused, when it says), so that its refund asks a person, names it and tells it, as
        one reused after the upgrade does; a reuse of a claim being undone is told so
        (``effect_reuse_refunding``), as the fork step tells a fork (it was passed over:
        recorded on nothing, told nothing, before the refund settled or ever). A reuse of a
        claim since undone (or taken again, or of an earlier generation) names a payment no
        longer there: not recorded (nothing of it is left to refund); a fork's inherited copy
        of one is the next step's (``BACKFILL_FORK_REUSES``). Done entries only are read."""
        insert = self._q.p(
            "INSERT INTO effect_reuses(kind, key, generation, run_id, created_at) "
            "SELECT k.kind, k.key, k.generation, ?, ? FROM effect_keys k "
            "WHERE k.kind=? AND k.key=? AND k.run_id=? AND k.status IN ('done', 'undoing') "
            "AND k.generation = COALESCE(CAST(? AS INTEGER), k.generation) "
            "ON CONFLICT(kind, key, generation, run_id) DO NOTHING"
        )
        before = self._refunding_reuses(conn)
        now = time.time()
        sql = "SELECT run_id, data FROM journal WHERE kind='effect' AND status='done'"
        for run_id, data in self._effect_data(conn, sql):
            if data.get("inherited_from"):
                continue
            holder, kind, action = data.get("from_run"), data.get("kind"), data.get("action")
            # the generation it reused (an entry of a release before generations names none)
            gen = data.get("generation")
            gen = gen if isinstance(gen, int) and not isinstance(gen, bool) else None
            if isinstance(holder, str) and isinstance(kind, str) and isinstance(action, str):
                conn.execute(insert, (run_id, now, kind, action, holder, gen))
        self._tell_refunding(conn, before, now)

    def _backfill_fork_reuses(self, conn: Any) -> None:
        """A migration step: the forks an earlier release made, recorded as reusers of the
        business actions they inherited done (``fork_reuses_all``), as a fork made now is in
        its creating transaction. One whose origin's undoing had started (the claim
        ``undoing``: a refund running, or in doubt) is told so (``effect_reuse_refunding``),
        as a fork made now is (``create_run``) and as a reuser is when a refund starts: no
        other word reaches it before the refund settles, if ever. Only the reuses this step
        records are told: a store put back to an earlier version runs it again, and a fork
        recorded before was told when it was."""
        before = self._refunding_reuses(conn)
        now = time.time()
        conn.execute(self._q.fork_reuses_all, (now,))
        self._tell_refunding(conn, before, now)

    def _refunding_reuses(self, conn: Any) -> set[tuple[Any, ...]]:
        """The recorded reuses of claims being undone (``refunding_reuses``' rows), before a
        step records more: those are told already."""
        return {tuple(r) for r in conn.execute(self._q.refunding_reuses).fetchall()}

    def _tell_refunding(self, conn: Any, before: set[tuple[Any, ...]], now: float) -> None:
        """Tell each reuse of a claim being undone that a step recorded (not in ``before``)
        that its refund started (``effect_reuse_refunding``), as a reuser is told when a
        refund starts: once, however often the step runs."""
        q = self._q
        rows = [
            event_row(
                str(run_id),
                NewEvent(
                    int(cycle),
                    "effect_reuse_refunding",
                    {"kind": kind, "key": key, "generation": int(gen or 1), "refunded_by": by},
                ),
                now,
                self._js,
            )
            for run_id, cycle, by, kind, key, gen in conn.execute(q.refunding_reuses).fetchall()
            if (run_id, cycle, by, kind, key, gen) not in before
        ]
        if rows:
            self._executemany(conn, q.insert_event, rows)

    def _effect_data(self, conn: Any, sql: str) -> Iterator[tuple[Any, Mapping[str, Any]]]:
        """The rows of ``sql`` (a column, then a journal entry's ``data``) whose data reads
        as a JSON object; any other is not what a release wrote (``_backfill_claims`` says
        so) and is passed over."""
        for first, raw in conn.execute(sql).fetchall():
            try:
                data = self._jl(raw) if raw is not None else {}
            except ValueError:
                continue
            if isinstance(data, Mapping):
                yield first, data

    @property
    def schema_version(self) -> int:
        with self._conn() as conn:
            row = conn.execute(self._q.schema_version).fetchone()
        return int(row[0]) if row else 0
