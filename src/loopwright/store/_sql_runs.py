"""The SQL core's runs: creating (and forking) one, reading and listing them, and leases."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .._contract import RUN_STATUSES
from .._errors import (
    ConfigError,
    ConflictError,
    RunNotFoundError,
    StaleLeaseError,
)
from .._keys import MAX_KEY_CHARS, check_lookup
from .._owners import holder_text, owner_is_dead
from ._records import JournalEntry, NewEvent, RunRecord, VersionRow
from ._rows import (
    event_row,
    sql_int,
    version_row,
)
from ._sql_core import SQLCore, search_text, where_clause
from ._sql_statements import RUN_COLS

_HEX = frozenset("0123456789abcdef")  # a run id's characters (uuid4().hex)
# A task key this long or longer may also be read as a run id's start. Not 4, as git's
# shortest abbreviation: a store's ids are random, so a 4-digit invoice number (a task key)
# starts some run's id in about 14 % of stores of 10,000 runs and was refused at random;
# at 8 the chance is 2e-6 at 10,000 runs, and the CLI shows 12 characters of an id.
SHORTEST_PREFIX = 8


class RunsSQL(SQLCore):
    """Runs and their leases."""

    # --- runs ---------------------------------------------------------------------------
    def create_run(
        self,
        *,
        run_id: str,
        task_key: str,
        loop_name: str,
        project: str,
        spec_ref: str | None,
        loop_version: str | None,
        contract: dict[str, Any],
        task: dict[str, Any],
        initial_state: dict[str, Any],
        initial_versions: Sequence[VersionRow] = (),
        forked_from: tuple[str, int] | None = None,
        inherited: Sequence[JournalEntry] = (),
        initial_rejected: Sequence[tuple[str, int]] = (),
        created_by: str | None = None,
        copy_versions: Sequence[tuple[str, str, int]] = (),
        copy_effects: tuple[str, int] | None = None,
        copy_rejected: tuple[str, int] | None = None,
        fork_seq: int | None = None,
        maker_starts: bool | None = None,
    ) -> tuple[RunRecord, bool]:
        now = time.time()
        q, js = self._q, self._js
        with self._tx() as conn:
            # A concurrent creator of the same key makes this INSERT wait for its commit (or
            # for the write lock), then do nothing; the SELECT then sees the winner's row.
            row = conn.execute(
                q.insert_run,
                (
                    run_id,
                    task_key,
                    loop_name,
                    project,
                    spec_ref,
                    loop_version,
                    js(contract),
                    "null",  # the task is in run_tasks (RUN_TASK)
                    now,
                    now,
                    created_by,
                ),
            ).fetchone()
            if row is not None:
                conn.execute(q.insert_run_task, (run_id, js(task)))
                row = conn.execute(q.run_by_id, (run_id,)).fetchone()
            if row is None:
                row = conn.execute(q.run_by_task_key, (task_key,)).fetchone()
                if row is None:
                    raise ConflictError(f"run id {run_id!r} is taken by another task key")
                return self._keep_task(self._run(row)), False
            # cycle 0, or for a fork the cycle whose state it starts from
            first_cycle = int(initial_state.get("cycle") or 0)
            conn.execute(q.insert_first_checkpoint, (run_id, first_cycle, js(initial_state), now))
            for origin, ref, upto in copy_versions:
                conn.execute(q.copy_versions, (run_id, origin, ref, upto))
                got = conn.execute(q.count_versions_upto, (run_id, ref, upto)).fetchone()
                if int(got[0]) < upto:  # (as Part.fill says it, for a store missing rows)
                    held = {
                        int(r[0]) for r in conn.execute(q.version_numbers_upto, (run_id, ref, upto))
                    }
                    missing = [n for n in range(1, upto + 1) if n not in held]
                    raise LookupError(f"part {ref!r}: versions {missing[:5]} are missing")
            # after the copies: the versions held in memory are the newer truth (their status)
            if initial_versions:
                self._executemany(
                    conn, q.upsert_version, [version_row(run_id, v, js) for v in initial_versions]
                )
            created: dict[str, Any] = {"task_key": task_key, "loop": loop_name}
            if forked_from is not None:
                spent = initial_state.get("spent") or {}
                cost = float(spent.get("cost_usd") or 0.0)
                tokens = int(spent.get("tokens") or 0)
                seconds = float(spent.get("seconds") or 0.0)
                best = initial_state.get("best_score")
                conn.execute(
                    q.set_forked,
                    (
                        *forked_from,
                        forked_from[1],
                        cost,
                        tokens,
                        seconds,
                        best,
                        1 if maker_starts else 0,
                        run_id,
                    ),
                )
                row = conn.execute(q.run_by_id, (run_id,)).fetchone()
                created["forked_from"] = {
                    "run": forked_from[0],
                    "cycle": forked_from[1],
                    "inherited": {"cost_usd": cost, "tokens": tokens, "seconds": seconds},
                }
                if fork_seq is not None:  # the origin's checkpoint it starts from
                    created["forked_from"]["seq"] = int(fork_seq)
                if maker_starts:  # (no worker claims it: its maker starts it)
                    created["maker_starts"] = True
            for e in inherited:
                # the run that did it: a fork of a fork names the origin, not its parent
                data = {**e.data, "inherited_from": e.data.get("inherited_from") or e.run_id}
                conn.execute(
                    q.insert_journal,
                    (run_id, e.key, e.kind, e.cycle, e.status, js(data), e.attempts, now, now, 0),
                )
            if copy_effects is not None:
                origin, upto = copy_effects
                conn.execute(q.copy_effects, (run_id, now, now, origin, int(upto)))
            if forked_from is not None and (inherited or copy_effects is not None):
                # The fork relies on each business action it inherited done, as a run that
                # reused its result does: recorded on the claim in this transaction, so that
                # the refund of the origin's payment names the fork and tells it
                conn.execute(q.fork_reuses, (now, run_id))
            if initial_rejected:
                self._executemany(
                    conn, q.insert_rejected, [(run_id, d, c) for d, c in initial_rejected]
                )
            if copy_rejected is not None:
                origin, upto = copy_rejected
                conn.execute(q.copy_rejected, (run_id, origin, int(upto)))
            conn.execute(q.insert_event, (run_id, 0, "run_created", now, js(created)))
            if forked_from is not None:
                # an inherited payment whose refund had started: told, as a run that reused
                # it was when it started (its ``show``: may be refunded)
                self._told_refunding(conn, run_id, int(forked_from[1]), now)
        return self._keep_task(self._run(row)), True

    def _told_refunding(self, conn: Any, run_id: str, cycle: int, now: float) -> None:
        """An ``effect_reuse_refunding`` event on fork ``run_id`` for each business action it
        inherited whose undoing its holder started (in doubt, or running), in the fork's
        creating transaction: it inherited the payment done, and no other word reaches it
        before the refund settles (if ever)."""
        rows = [
            event_row(
                run_id,
                NewEvent(
                    cycle,
                    "effect_reuse_refunding",
                    {"kind": k, "key": key, "generation": int(g or 1), "refunded_by": h},
                ),
                now,
                self._js,
            )
            for h, k, key, g in conn.execute(self._q.fork_refunding, (run_id,)).fetchall()
        ]
        if rows:
            self._executemany(conn, self._q.insert_event, rows)

    def get_run(self, run_id: str) -> RunRecord:
        check_lookup(run_id)  # PostgreSQL refuses a NUL, both stores a lone surrogate: alike
        q = self._q
        with self._conn() as conn:
            row = conn.execute(q.run_by_id, (run_id,)).fetchone()  # a whole id: that run
            keyed = None
            if row is None:
                keyed = conn.execute(q.run_by_task_key, (run_id,)).fetchone()
            # (a prefix of a run id is short: a long one is no prefix, not looked for. A task
            # key is checked for being one too only when it could be one a person meant, as
            # 8 or more characters of lower-case hex, as run ids are; "f", "d4" or "1001" stays
            # its task's, whatever ids the store holds.)
            rows: list[Any] = []
            maybe = keyed is None or (
                len(run_id) >= SHORTEST_PREFIX and all(c in _HEX for c in run_id)
            )
            if row is None and run_id and len(run_id) <= MAX_KEY_CHARS and maybe:
                rows = conn.execute(q.run_by_prefix, (len(run_id), run_id)).fetchall()
            if keyed is not None:
                others = [r[0] for r in rows if r[0] != keyed[0]]
                if others:
                    # Neither may win unseen: a task key "abc" and a run id "abc…" are two
                    # runs, and a decision or a rollback on the wrong one is not undone.
                    raise RunNotFoundError(
                        f"{run_id!r} is ambiguous: the task key of run {keyed[0]} and the "
                        f"start of run {others[0]}'s id; give the whole run id of the one "
                        "you mean"
                    )
                row = keyed
            elif len(rows) > 1:
                raise RunNotFoundError(f"run id prefix {run_id!r} is ambiguous; give more of it")
            elif rows:
                row = rows[0]
        if row is None:
            shown = repr(run_id) if len(run_id) <= 80 else f"{run_id[:60]!r}… ({len(run_id)} chars)"
            raise RunNotFoundError(f"no run {shown} in {self.url}{self._keys_meant(run_id)}")
        return self._keep_task(self._run(row))

    def _keys_meant(self, bare: str) -> str:
        """The task keys a bare task id may mean (``loopwright run`` keys ``{"id": "A2"}``
        of loop L as ``L:A2``), as a hint for the not-found message; "" when none."""
        if not bare or len(bare) > MAX_KEY_CHARS:
            return ""
        suffix = f":{bare}"
        with self._conn() as conn:
            keys = [r[0] for r in conn.execute(self._q.task_keys_ending, (len(suffix), suffix))]
        if not keys:
            return ""
        named = " or ".join(repr(k) for k in keys[:2]) + (" or others" if len(keys) > 2 else "")
        return f"; a task file's id is keyed <loop>:<id>: did you mean {named}?"

    def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        limit: int | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        where, args = self._runs_where(status, project, loop_name, stop_reason, search)
        m = self._MARK
        for bound, op in ((since, ">="), (until, "<=")):
            if bound is not None:  # the window, selected by the database (index runs_created)
                where += (" AND " if where else " WHERE ") + f"created_at {op} {m}"
                args.append(float(bound))
        if after is not None:  # keyset pagination: the rows after (created_at, run_id)
            m = self._MARK
            where += (" AND " if where else " WHERE ") + (
                f"(created_at < {m} OR (created_at = {m} AND run_id > {m}))"
            )
            args += [after[0], after[0], after[1]]
        query = f"SELECT {RUN_COLS} FROM runs{where} ORDER BY created_at DESC, run_id"
        if limit is not None and limit >= 0:  # a negative limit is no limit
            query += f" LIMIT {sql_int(limit)}"
        return [self._run(r) for r in self._all(query, args)]

    def count_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
    ) -> int:
        where, args = self._runs_where(status, project, loop_name, stop_reason, search)
        return int(self._all(f"SELECT COUNT(*) FROM runs{where}", args)[0][0])

    def run_projects(self) -> list[str]:
        return self._distinct("project")

    def run_loops(self) -> list[str]:
        return self._distinct("loop_name")

    def _distinct(self, column: str) -> list[str]:
        """The distinct non-empty values of a column of runs (indexed), sorted."""
        rows = self._all(f"SELECT DISTINCT {column} FROM runs WHERE {column} <> '' ORDER BY 1", [])
        return [str(r[0]) for r in rows]

    def first_accepted(self, loop_names: Sequence[str]) -> dict[tuple[str, str], float]:
        names = sorted(set(loop_names))
        if not names:
            return {}
        m = self._MARK
        rows = self._all(
            "SELECT loop_name, loop_version, MIN(ended_at) FROM runs WHERE status = 'accepted' "
            f"AND loop_name IN ({', '.join([m] * len(names))}) AND loop_version IS NOT NULL "
            "AND ended_at IS NOT NULL GROUP BY loop_name, loop_version",
            names,
        )
        return {(str(r[0]), str(r[1])): float(r[2]) for r in rows}

    def _runs_where(
        self,
        status: str | None,
        project: str | None,
        loop_name: str | None,
        stop_reason: str | None,
        search: str | None,
    ) -> tuple[str, list[Any]]:
        if status is not None and status not in RUN_STATUSES:
            # (a misspelt status matched no run: an empty list, read as "no such runs")
            raise ConfigError(
                f"must be one of {', '.join(RUN_STATUSES)} (got {status!r})", field="status"
            )
        where, args = where_clause(
            (
                ("status", status),
                ("project", project),
                ("loop_name", loop_name),
                ("stop_reason", stop_reason),
            ),
            self._MARK,
        )
        search = search_text(search)
        if search:
            # Case-insensitive substring of the task key, loop, project, stop reason or the
            # packet (its cause and stop_cause), or a run id prefix; ! escapes LIKE's wildcards.
            m = self._MARK
            pat = search.lower().replace("!", "!!").replace("%", "!%").replace("_", "!_")
            cols = ("task_key", "loop_name", "project", "stop_reason", "CAST(packet AS TEXT)")
            low = self._LOWER
            cond = " OR ".join(f"{low}({c}) LIKE {m} ESCAPE '!'" for c in cols)
            where += (" AND " if where else " WHERE ") + f"({cond} OR run_id LIKE {m} ESCAPE '!')"
            args += [f"%{pat}%"] * len(cols) + [f"{pat}%"]
        return where, args

    # --- leases -------------------------------------------------------------------------
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        now = time.time()
        with self._tx() as conn:
            row = conn.execute(self._q.lease_row, (run_id,)).fetchone()
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r} in {self.url}")
            holder, expires, token, *server_now = row
            if server_now:  # the lease clock is the server's
                now = server_now[0]
            if (
                holder is not None
                and holder != owner
                and expires is not None
                and expires > now
                and not owner_is_dead(holder)
            ):
                raise ConflictError(
                    f"run {run_id} is being executed by {holder_text(holder)} (lease for "
                    f"{expires - now:.0f} s more)"
                )
            token += 1
            conn.execute(self._q.take_lease, (owner, now + ttl_s, token, run_id))
        return int(token)

    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        with self._tx() as conn:
            cur = conn.execute(self._q.renew_lease, (self._expiry(ttl_s), run_id, token))
            if cur.rowcount != 1:
                raise StaleLeaseError(f"run {run_id}: lease lost (token {token} is stale)")

    def mark_started(self, run_id: str, token: int) -> None:
        with self._tx() as conn:
            conn.execute(self._q.mark_started, (run_id, token))

    def release_lease(self, run_id: str, token: int) -> None:
        with self._tx() as conn:
            conn.execute(self._q.release_lease, (run_id, token))
