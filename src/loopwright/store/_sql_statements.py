"""The SQL text of the SQL stores (``_sql.SQLStore``): the columns read and ``CoreStatements``,
every statement but feedback memory's (``_sql.Statements`` adds those), written once with ``?``
and given the driver's placeholder when a backend class is made.
"""

from __future__ import annotations

import functools

from ._rows import (
    APPROVAL_COLS,
    INSERT_CHECKPOINT_COLS,
    INSERT_EVENT_COLS,
    INSERT_REJECTED_COLS,
    INSERT_VERSION_COLS,
    fork_reuses,
    inherited_data,
)
from ._schema import FENCED_COLS, RUN_TASK

RUN_COLS = (
    "run_id, task_key, loop_name, project, status, stop_reason, cycle, best_score, cost_usd, "
    f"tokens, seconds, spec_ref, loop_version, contract, {RUN_TASK}, packet, created_at, updated_at, "
    "ended_at, cancel_requested, lease_owner, lease_expires_at, fencing_token, last_seq, "
    "held_out_passed, forked_from, forked_at, created_by, open_requests, maker_starts, "
    "held_out_self_reported, fenced_cost_usd, fenced_tokens, fenced_seconds, "
    "fenced_held_cost_usd, fenced_held_tokens"
)
FENCED_NAMES = frozenset(name for name, _kind in FENCED_COLS)
JOURNAL_COLS = "run_id, key, kind, cycle, status, data, attempts, created_at, updated_at"
# The journal's key: every statement that finds one entry says ``JOURNAL_KEY`` and binds
# ``journal_key(run_id, key)`` for it (to change the key, change these two).
JOURNAL_KEY = "run_id=? AND key=?"


def journal_key(run_id: str, key: str) -> tuple[str, ...]:
    return (run_id, key)


# Runnable by status: in progress, or waiting to start (not a fork its maker starts), or parked
# with no pending request (decided, so it can go on). Each store's claim adds its own lease
# condition.
#: A commit's events written by one multi-row INSERT up to this many (``insert_events``);
#: more, by ``executemany`` (one statement text per count, each kept by the driver's cache).
EVENTS_IN_ONE = 8

RUNNABLE_STATUS = (
    "(r.status = 'running' OR (r.maker_starts = 0 AND (r.status = 'pending' OR "
    "(r.status = 'awaiting_approval' AND NOT EXISTS "
    "(SELECT 1 FROM approvals a WHERE a.run_id = r.run_id AND a.status = 'pending')))))"
)


# What a commit's fencing read returns about the run: a person asked it to stop, by a cancel
# (``cancel_requested``) or by a request pending on it (``open_requests``, kept by triggers),
# which for a run executing is a person's pause. A boolean in both stores.
ASKED = "(cancel_requested OR open_requests > 0)"


class CoreStatements:
    """The SQL of one dialect, built once per backend class: written with ``?`` placeholders,
    given ``mark`` (the driver's), ``db_now`` (SQL for the server's clock in epoch seconds,
    ``None`` where leases run on the writer's clock) and ``locks`` (whether row-locking
    clauses exist; SQLite has one writer and needs none)."""

    def __init__(self, mark: str, db_now: str | None, locks: bool) -> None:
        self.mark = mark
        self.db_now = db_now
        # a lease expiry's value: a TTL added to the server's now, or an absolute time
        self.expires = f"{db_now} + ?" if db_now else "?"
        p = self.p

        def lock(clause: str) -> str:
            return f" {clause}" if locks else ""

        self.run_by_id = p(f"SELECT {RUN_COLS} FROM runs WHERE run_id=?")
        # (``Store.add_fenced_spend``: no lease, an increment of each ``FENCED_COLS`` column)
        self.add_fenced = p(
            "UPDATE runs SET "
            + ", ".join(f"{name}={name}+?" for name, _kind in FENCED_COLS)
            + " WHERE run_id=?"
        )
        # (its word's lease first: a word said again adds nothing, fenced56b)
        self.fenced_word = p(
            "INSERT INTO fenced_words(run_id, lease) VALUES(?,?) ON CONFLICT DO NOTHING"
        )
        self.run_by_task_key = p(f"SELECT {RUN_COLS} FROM runs WHERE task_key=?")
        # (compared as written in both stores: SQLite's LIKE ignores case, so "B" was a
        # prefix of "b…" there and of nothing in PostgreSQL)
        self.run_by_prefix = p(
            f"SELECT {RUN_COLS} FROM runs WHERE substr(run_id, 1, ?) = ? LIMIT 2"
        )
        # (a task file's line {"id": "A2"} is keyed "<loop>:A2": the keys a bare id may mean)
        self.task_keys_ending = p(
            "SELECT task_key FROM runs WHERE substr(task_key, length(task_key) - ? + 1) = ? "
            "ORDER BY task_key LIMIT 3"
        )
        self.run_exists = p("SELECT 1 FROM runs WHERE run_id=?")
        self.lock_run = p("SELECT 1 FROM runs WHERE run_id=?" + lock("FOR NO KEY UPDATE"))
        self.insert_run = p(
            "INSERT INTO runs(run_id, task_key, loop_name, project, status, spec_ref, "
            "loop_version, contract, task, created_at, updated_at, created_by) "
            "VALUES(?,?,?,?,'pending',?,?,?,?,?,?,?) "
            "ON CONFLICT DO NOTHING RETURNING run_id"
        )
        self.insert_run_task = p("INSERT INTO run_tasks(run_id, task) VALUES(?, ?)")
        # A fork's row starts where its state does: the cycle, spend and best score it
        # inherits (its budget goes on counting them; metrics subtract them: _inherited.py).
        self.set_forked = p(
            "UPDATE runs SET forked_from=?, forked_at=?, cycle=?, cost_usd=?, tokens=?, "
            "seconds=?, best_score=?, maker_starts=? WHERE run_id=?"
        )
        # Its maker started it (``Store.mark_started``): under the lease they hold.
        self.mark_started = p(
            "UPDATE runs SET maker_starts=0 WHERE run_id=? AND fencing_token=? AND maker_starts<>0"
        )
        self.insert_first_checkpoint = p(
            f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(?, 0, ?, ?, NULL, 0, ?, 0)"
        )
        self.cancel = p("UPDATE runs SET cancel_requested=? WHERE run_id=?")
        # --- leases
        self.lease_row = p(
            "SELECT lease_owner, lease_expires_at, fencing_token"
            + (f", {db_now}" if db_now else "")
            + " FROM runs WHERE run_id=?"
            + lock("FOR NO KEY UPDATE")
        )
        self.take_lease = p(
            "UPDATE runs SET lease_owner=?, lease_expires_at=?, fencing_token=? WHERE run_id=?"
        )
        # A lease still held (an owner) under its token: a release keeps the token, and a
        # renewal landing after it (one cancelled in its thread) set an expiry nobody held.
        self.renew_lease = p(
            f"UPDATE runs SET lease_expires_at={self.expires} "
            "WHERE run_id=? AND fencing_token=? AND lease_owner IS NOT NULL"
        )
        self.release_lease = p(
            "UPDATE runs SET lease_owner=NULL, lease_expires_at=NULL "
            "WHERE run_id=? AND fencing_token=?"
        )
        # A fencing check that writes nothing but takes the write lock (SQLite) or the run's
        # row lock (PostgreSQL) to the end of the transaction.
        self.fence = p(
            "UPDATE runs SET fencing_token=fencing_token WHERE run_id=? AND fencing_token=? "
            "RETURNING fencing_token"
        )
        # --- checkpoints, versions, rejected digests, events
        self.last_checkpoint = p(
            "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? "
            "ORDER BY seq DESC LIMIT 1"
        )
        self.checkpoint_rows = p(
            "SELECT seq, cycle, state, CASE WHEN ? OR seq=? THEN record END, created_at, "
            "COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND seq>=? ORDER BY seq"
        )
        self.checkpoint_range = p(
            "SELECT seq, cycle, state, CASE WHEN ? OR seq=? THEN record END, created_at, "
            "COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND seq>=? AND seq<=? "
            "ORDER BY seq"
        )
        # The run's first checkpoint and those of one cycle, without their states or records
        # (a fork's or rollback's target among a long run's checkpoints).
        self.cycle_marks = p(
            "SELECT seq, COALESCE(base, seq) FROM checkpoints WHERE run_id=? AND (cycle=? OR "
            "seq=(SELECT min(seq) FROM checkpoints WHERE run_id=?)) ORDER BY seq"
        )
        self.versions = p("SELECT ref, n, cycle, status, value FROM versions WHERE run_id=?")
        self.version_by_key = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? AND n=?"
        )
        self.versions_of_part = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? ORDER BY n"
        )
        self.version_page = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? AND ref=? AND n>? "
            "ORDER BY n LIMIT ?"
        )
        # A fork's versions of a part, copied from its origin's rows in the database (none
        # read into Python), and the numbers then held, to name any missing.
        self.copy_versions = p(
            f"INSERT INTO versions({INSERT_VERSION_COLS}) SELECT ?, ref, n, cycle, status, "
            "value FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ?"
        )
        self.count_versions_upto = p(
            "SELECT count(*) FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ?"
        )
        self.version_numbers_upto = p(
            "SELECT n FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ? ORDER BY n"
        )
        # A part's version numbers written again after a cycle (``Store.written_after``): read
        # from the primary key's range and the rows' cycles, no value.
        self.written_after = p(
            "SELECT n FROM versions WHERE run_id=? AND ref=? AND n BETWEEN 1 AND ? AND cycle>? "
            "ORDER BY n LIMIT ?"
        )
        # Records that may name versions (``_record_codec.refer_versions``): a rollback writes
        # their values back in (the text may also match inside a value: the reader checks).
        self.records_naming_versions = p(
            "SELECT seq, record FROM checkpoints WHERE run_id=? AND cycle>? "
            + ("AND CAST(record AS TEXT) LIKE ?" if mark == "?" else "AND record::text LIKE ?")
        )
        self.set_record = p("UPDATE checkpoints SET record=? WHERE run_id=? AND seq=?")
        self.record_page = p(
            "SELECT seq, cycle, record FROM checkpoints WHERE run_id=? AND seq>? ORDER BY seq "
            "LIMIT ?"
        )
        self.state_page = p(
            "SELECT seq, cycle, state, record, COALESCE(base, seq) FROM checkpoints "
            "WHERE run_id=? AND seq>? ORDER BY seq LIMIT ?"
        )
        self.checkpoint_page = p(
            "SELECT seq, cycle, state, record, COALESCE(base, seq), created_at FROM checkpoints "
            "WHERE run_id=? AND seq>? ORDER BY seq LIMIT ?"
        )
        self.all_versions = p(
            "SELECT ref, n, cycle, status, value FROM versions WHERE run_id=? ORDER BY ref, n"
        )
        # A value's stored size: SQLite reads it with the row; PostgreSQL's is in the row's
        # header (psycopg fetches a result whole, so the total is asked for first).
        size = "length(value)" if mark == "?" else "pg_column_size(value)"
        self.streams = mark == "?"
        self.sized_versions = p(
            f"SELECT ref, n, cycle, status, value, {size} FROM versions WHERE run_id=? "
            "ORDER BY ref, n"
        )
        self.versions_size = p(
            f"SELECT count(*), coalesce(sum({size}), 0) FROM versions WHERE run_id=?"
        )
        self.is_rejected = p("SELECT 1 FROM rejected WHERE run_id=? AND digest=?")
        self.rejected = p("SELECT digest FROM rejected WHERE run_id=?")
        self.forget_rejected = p("DELETE FROM rejected WHERE run_id=? AND cycle>?")
        self.insert_checkpoint = p(
            f"INSERT INTO checkpoints({INSERT_CHECKPOINT_COLS}) VALUES(?,?,?,?,?,?,?,?)"
        )
        # A version is written once; then only its status changes (and, after a rollback
        # reused its number, its value: the rolled-back timeline's versions are not kept).
        self.upsert_version = p(
            f"INSERT INTO versions({INSERT_VERSION_COLS}) VALUES(?,?,?,?,?,?) "
            "ON CONFLICT(run_id, ref, n) DO UPDATE SET cycle=excluded.cycle, "
            "status=excluded.status, value=excluded.value"
        )
        self.insert_rejected = p(
            f"INSERT INTO rejected({INSERT_REJECTED_COLS}) VALUES(?,?,?) ON CONFLICT DO NOTHING"
        )
        # A fork's rejected digests, copied from its origin's rows in the database (a late
        # fork of a long run read every one into Python and wrote it back). SQLite reads an
        # upsert after INSERT ... SELECT only when the SELECT has a WHERE clause, as here.
        self.copy_rejected = p(
            f"INSERT INTO rejected({INSERT_REJECTED_COLS}) SELECT ?, digest, cycle FROM rejected "
            "WHERE run_id=? AND cycle<=? ON CONFLICT DO NOTHING"
        )
        self.insert_event = p(f"INSERT INTO events({INSERT_EVENT_COLS}) VALUES(?,?,?,?,?)")
        self.events = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id>? "
            "ORDER BY id"
        )
        self.event_tail = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id<? "
            "ORDER BY id DESC LIMIT ?"
        )
        self.event_at = p("SELECT id FROM events WHERE run_id=? ORDER BY id LIMIT 1 OFFSET ?")
        self.count_events = p("SELECT count(*) FROM events WHERE run_id=? AND id<?")
        self.next_start = p(
            "SELECT cycle FROM events WHERE run_id=? AND id>? AND id<? "
            "AND kind='cycle_started' AND cycle>=? ORDER BY id LIMIT 1"
        )
        self.cycle_mark = p(
            "SELECT kind FROM events WHERE run_id=? AND id<? AND (kind IN ('stopped', "
            "'rolled_back') OR (cycle=? AND kind IN ('cycle_started', 'decision'))) "
            "ORDER BY id DESC LIMIT 1"
        )
        self.event_page = p(
            "SELECT id, run_id, cycle, kind, ts, data FROM events WHERE run_id=? AND id>? "
            "ORDER BY id LIMIT ?"
        )
        # --- journal
        self.journal_status = p(f"SELECT status, attempts FROM journal WHERE {JOURNAL_KEY}")
        self.clear_journal = p(f"DELETE FROM journal WHERE {JOURNAL_KEY}")
        self.insert_journal = p(
            "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
            "created_at, updated_at, fencing_token) VALUES(?,?,?,?,?,?,?,?,?,?) "
            f"RETURNING {JOURNAL_COLS}"
        )
        # A fork's inherited entries, copied from its origin's rows in the database (none
        # read into Python): the done effects up to the fork's cycle, marked inherited
        # (``_rows.inherited_data``), as ``create_run``'s ``inherited`` writes them.
        self.copy_effects = p(
            "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
            f"created_at, updated_at, fencing_token) SELECT ?, key, kind, cycle, status, "
            f"{inherited_data(mark)}, attempts, ?, ?, 0 FROM journal WHERE run_id=? "
            "AND kind='effect' AND cycle<=? AND status='done'"
        )
        # ``journal_put``'s one-statement write (an entry without a claim, an expected status
        # or events: a call's bill): the fencing check as the INSERT's condition, taking the
        # run's row lock as ``fence`` does (PostgreSQL; SQLite's write lock is the
        # statement's), the entry inserted or overwritten as ``update_journal`` does. No row
        # returned: the token is stale or the run gone (``journal_put`` then says which).
        self.put_journal_fenced = p(
            "INSERT INTO journal(run_id, key, kind, cycle, status, data, attempts, "
            "created_at, updated_at, fencing_token) SELECT ?,?,?,?,?,?,?,?,?,? FROM runs "
            f"WHERE run_id=? AND fencing_token=?{lock('FOR NO KEY UPDATE')} "
            "ON CONFLICT (run_id, key) DO UPDATE SET kind=excluded.kind, "
            "cycle=excluded.cycle, status=excluded.status, data=excluded.data, "
            "attempts=excluded.attempts, updated_at=excluded.updated_at, "
            f"fencing_token=excluded.fencing_token RETURNING {JOURNAL_COLS}"
        )
        self.update_journal = p(
            "UPDATE journal SET kind=?, cycle=?, status=?, data=?, attempts=?, "
            f"updated_at=?, fencing_token=? WHERE {JOURNAL_KEY} RETURNING {JOURNAL_COLS}"
        )
        # --- approvals
        self.insert_approval = p(
            f"INSERT INTO approvals({APPROVAL_COLS}) VALUES({','.join('?' * 17)})"
        )
        # The status guard makes a decision atomic: of two deciders, the second's UPDATE
        # waits for the first's commit (or its write lock), then matches nothing.
        self.decide = p(
            "UPDATE approvals SET status=?, decided_by=?, decided_at=?, note=?, answer=? "
            f"WHERE approval_id=? AND status='pending' RETURNING {APPROVAL_COLS}"
        )
        self.approval_status = p("SELECT status, decided_by FROM approvals WHERE approval_id=?")
        self.approval_run = p("SELECT run_id FROM approvals WHERE approval_id=?")
        # the pending pauses of a run that ends, closed with it (``CommitSQL._close_pauses``)
        self.close_pauses = p(
            "UPDATE approvals SET status='cancelled', decided_by=?, decided_at=?, note=? "
            f"WHERE run_id=? AND status='pending' AND kind='pause' RETURNING {APPROVAL_COLS}"
        )
        # --- effect keys, claimed store-wide (journal_put's ``claim``)
        self.claim_key = p(
            "INSERT INTO effect_keys(kind, key, run_id, status, args_hash, updated_at, "
            "generation) VALUES(?,?,?,?,?,?,?) ON CONFLICT(kind, key) DO NOTHING"
        )
        self.effect_key = p(
            "SELECT run_id, status, args_hash, result, generation FROM effect_keys "
            "WHERE kind=? AND key=?" + lock("FOR UPDATE")
        )
        self.effect_claim = p(
            "SELECT run_id, status, generation, args_hash FROM effect_keys WHERE kind=? AND key=?"
        )
        self.take_key = p(
            "UPDATE effect_keys SET run_id=?, status=?, args_hash=?, result=NULL, updated_at=?, "
            "generation=? WHERE kind=? AND key=? AND run_id=?"
        )
        self.raise_generation = p(
            "UPDATE effect_keys SET generation=? WHERE kind=? AND key=? AND generation<?"
        )
        self.settle_key = p(
            "UPDATE effect_keys SET status=?, result=?, updated_at=? "
            "WHERE kind=? AND key=? AND run_id=?"
        )
        # --- the runs that reused a claim's result, by its generation (``JournalSQL._claim``)
        self.add_reuse = p(
            "INSERT INTO effect_reuses(kind, key, generation, run_id, created_at) "
            "VALUES(?,?,?,?,?) ON CONFLICT(kind, key, generation, run_id) DO NOTHING"
        )
        self.reusers = p(
            "SELECT u.run_id, r.status, r.cycle FROM effect_reuses u "
            "JOIN runs r ON r.run_id = u.run_id "
            "WHERE u.kind=? AND u.key=? AND u.generation=? ORDER BY u.created_at, u.run_id"
        )
        # a fork's inherited done actions, each recorded as the fork's reuse of its claim
        # (``create_run``; the migration's ``fork_reuses_all`` for forks made before)
        self.fork_reuses = fork_reuses(mark, one_run=True)
        self.fork_reuses_all = fork_reuses(mark, one_run=False)
        # those of a fork's whose refund has started (``create_run`` tells the fork of each)
        self.fork_refunding = p(
            "SELECT k.run_id, k.kind, k.key, k.generation FROM effect_reuses u "
            "JOIN effect_keys k ON k.kind = u.kind AND k.key = u.key "
            "AND k.generation = u.generation WHERE u.run_id=? AND k.status='undoing' "
            "ORDER BY k.kind, k.key"
        )
        # every recorded reuse of a claim whose undoing has started, its run's cycle and the
        # claim's holder (the migration that records the forks made before tells them)
        self.refunding_reuses = (
            "SELECT u.run_id, r.cycle, k.run_id, k.kind, k.key, k.generation "
            "FROM effect_reuses u JOIN effect_keys k ON k.kind = u.kind AND k.key = u.key "
            "AND k.generation = u.generation JOIN runs r ON r.run_id = u.run_id "
            "WHERE k.status='undoing' ORDER BY u.run_id, k.kind, k.key"
        )
        self.claim_reusers = p(
            "SELECT u.run_id, r.status, r.cycle FROM effect_keys k "
            "JOIN effect_reuses u ON u.kind = k.kind AND u.key = k.key "
            "AND u.generation = k.generation JOIN runs r ON r.run_id = u.run_id "
            "WHERE k.kind=? AND k.key=? ORDER BY u.created_at, u.run_id"
        )
        # --- schema
        self.schema_version = "SELECT value FROM loopwright_meta WHERE key='schema_version'"
        self.set_schema_version = p(
            "INSERT INTO loopwright_meta(key, value) VALUES('schema_version', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value"
        )

    def p(self, text: str) -> str:
        """``text`` written with ``?`` placeholders, in the driver's."""
        return text if self.mark == "?" else text.replace("?", self.mark)

    @functools.cache  # noqa: B019 - one instance per backend class, EVENTS_IN_ONE texts
    def insert_events(self, n: int) -> str:
        """``insert_event`` for ``n`` rows in one statement, their parameters one row after
        another: one statement run instead of ``n`` (a cycle's four events), the ids given in
        the rows' order as ``executemany`` gives them."""
        rows = ",".join(["(?,?,?,?,?)"] * n)
        return self.p(f"INSERT INTO events({INSERT_EVENT_COLS}) VALUES{rows}")

    @functools.cache  # noqa: B019 - one instance per backend class, a few column sets each
    def update_run(self, names: tuple[str, ...], returning: bool) -> str:
        """A commit's ``UPDATE runs`` for these columns, fenced by the token; its parameters
        are ``(*values, now, run_id, token)``."""
        # The lease's expiry only while it is held (an owner): a commit written after its
        # lease was handed back (a group commit landing late) set an expiry nobody held, the
        # run then shown running to it (crash53b). (The right side reads the row as it was.)
        expiry = f"CASE WHEN lease_owner IS NULL THEN NULL ELSE {self.expires} END"
        # (a fenced-out execution's spend, ``runs.fenced_*``: the value is what this commit
        # charged of it, taken off what the row holds, added since by another included)
        assignments = ", ".join(
            f"{k}={expiry}"
            if k == "lease_expires_at"
            else f"{k}={k}-?"
            if k in FENCED_NAMES
            else f"{k}=?"
            for k in names
        )
        return self.p(
            f"UPDATE runs SET {assignments}, updated_at=? WHERE run_id=? AND fencing_token=?"
            # (whether a person asked the run to stop: a cancel, or a request pending on it, which
            # while it executes is a pause: ``Runtime.pause``; one read the commit does anyway)
            + (f" RETURNING {ASKED}" if returning else "")
        )
