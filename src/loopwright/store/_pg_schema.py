"""PostgreSQL schema migrations, forward only. Entry ``i`` moves a schema from version ``i`` to
``i + 1``; the version lives in ``loopwright_meta`` as in the SQLite store.

Differences from the SQLite schema, each on purpose:

- JSON columns are ``json``, not ``jsonb``: ``json`` keeps the text as written, so object key
  order survives a round trip exactly as it does in SQLite (a task or a part value rendered
  into a prompt must not come back reordered). Cast to ``jsonb`` in ad-hoc queries.
- Timestamps are ``double precision`` epoch seconds, as the API's floats.
- ``runs_claimable`` (v8) is a partial index over exactly the runs ``claim_runs`` may take by
  status, in claim order, so a claim reads a bounded number of rows however many runs have
  ended or wait for a person. ``runs.open_requests`` (a run's pending requests) is kept by a
  plpgsql trigger on ``approvals``, whoever writes them, as SQLite's v11 triggers keep it.
"""

from __future__ import annotations

from ._blobs import BLOBS_PG
from ._live import NOTIFY_CURSORS_SQL, notified_key_index, settled_index
from ._people_schema import PEOPLE_PG
from ._schema import (
    APPROVALS_EXPIRING_SQL,
    BACKFILL_CLAIMS,
    BACKFILL_FORK_REUSES,
    BACKFILL_GENERATIONS,
    BACKFILL_REUSES,
    CLAIMABLE_SQLITE,
    CLAIMABLE_V11,
    EFFECT_GENERATION,
    EFFECT_REUSES,
    EVENTS_NOTIFIED_SQL,
    FENCED_WORDS,
    HELD_OUT_SELF_REPORTED,
    HOLD_UNSTARTED_FORKS,
    MAKER_STARTS,
    MEMORY_REFLECTIONS_SQL,
    fenced_spend,
)

__all__ = ["CLAIMABLE_PG", "PG_MIGRATIONS", "PG_TABLES"]

# The tables loopwright creates; a schema holding any of them without ``loopwright_meta`` is
# someone else's and is refused untouched.
PG_TABLES = frozenset(
    {"runs", "checkpoints", "events", "approvals", "journal", "memory", "run_tasks"}
)

# Runnable by status (``PostgresStore.claim_runs``), but for a run in progress: waiting to
# start (not a fork its maker starts), or parked with no pending request; as SQLite's. The
# WHERE of the partial index runs_claimable, and a term of the claim's query as is (the
# planner uses a partial index when the query's
# conditions imply its WHERE). A ``running`` run is not in it: its every commit moves
# ``updated_at``, which would move its index entry (and rule out a HOT update) every cycle; the
# few running runs a claim may take over (a lapsed lease) are read by status instead.
CLAIMABLE_PG = CLAIMABLE_SQLITE

# The trigger function keeping ``runs.open_requests``: a request that becomes pending (inserted
# so, or moved to another run) counts on its run, one that stops being pending (decided,
# deleted, moved) no longer does. ``runs`` is named in the schema of the approvals table that
# fired (TG_TABLE_SCHEMA), not looked up on the writing session's search_path.
_OPEN_REQUESTS_FN = """CREATE OR REPLACE FUNCTION loopwright_open_requests() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.status = 'pending' THEN
            EXECUTE format('UPDATE %I.runs SET open_requests = open_requests - 1 '
                           'WHERE run_id = $1', TG_TABLE_SCHEMA) USING OLD.run_id;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.status = 'pending' THEN
            EXECUTE format('UPDATE %I.runs SET open_requests = open_requests + 1 '
                           'WHERE run_id = $1', TG_TABLE_SCHEMA) USING NEW.run_id;
        END IF;
    END IF;
    RETURN NULL;
END
$fn$"""

PG_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            task_key TEXT NOT NULL UNIQUE,
            loop_name TEXT NOT NULL,
            project TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL,
            stop_reason TEXT,
            cycle INTEGER NOT NULL DEFAULT 0,
            best_score DOUBLE PRECISION,
            held_out_passed BOOLEAN,
            cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
            tokens BIGINT NOT NULL DEFAULT 0,
            seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
            spec_ref TEXT,
            loop_version TEXT,
            contract JSON NOT NULL,
            task JSON NOT NULL,
            packet JSON,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            ended_at DOUBLE PRECISION,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
            lease_owner TEXT,
            lease_expires_at DOUBLE PRECISION,
            fencing_token BIGINT NOT NULL DEFAULT 0,
            last_seq INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX runs_status ON runs(status)",
        "CREATE INDEX runs_created ON runs(created_at)",
        "CREATE INDEX runs_project ON runs(project, created_at)",
        "CREATE INDEX runs_id_prefix ON runs(run_id text_pattern_ops)",
        "CREATE INDEX runs_claim ON runs(updated_at) "
        "WHERE status IN ('pending', 'running', 'awaiting_approval')",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            seq INTEGER NOT NULL,
            cycle INTEGER NOT NULL,
            state JSON NOT NULL,
            record JSON,
            fencing_token BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (run_id, seq)
        )""",
        """CREATE TABLE events (
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            cycle INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ts DOUBLE PRECISION NOT NULL,
            data JSON NOT NULL
        )""",
        "CREATE INDEX events_run ON events(run_id, id)",
        """CREATE TABLE approvals (
            approval_id TEXT PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            cycle INTEGER NOT NULL,
            kind TEXT NOT NULL,
            rule TEXT,
            what TEXT NOT NULL,
            why TEXT NOT NULL,
            evidence JSON NOT NULL,
            diff TEXT,
            action_hash TEXT NOT NULL,
            status TEXT NOT NULL,
            requested_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            decided_by TEXT,
            decided_at DOUBLE PRECISION,
            note TEXT,
            answer JSON
        )""",
        "CREATE INDEX approvals_status ON approvals(status, requested_at)",
        "CREATE INDEX approvals_run ON approvals(run_id, status)",
        """CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            cycle INTEGER NOT NULL,
            status TEXT NOT NULL,
            data JSON NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            fencing_token BIGINT NOT NULL,
            PRIMARY KEY (run_id, key)
        )""",
        "CREATE INDEX journal_kind ON journal(run_id, kind)",
    ],
    # v2: feedback memory (loopwright._memory). "by" is quoted: BY is an SQL keyword.
    [
        """CREATE TABLE memory (
            memory_id TEXT PRIMARY KEY,
            scope TEXT NOT NULL,
            scope_key TEXT NOT NULL DEFAULT '',
            signal TEXT NOT NULL,
            strength DOUBLE PRECISION NOT NULL,
            text TEXT NOT NULL,
            rule JSON,
            source JSON NOT NULL,
            "by" TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            history JSON NOT NULL DEFAULT '[]'
        )""",
        "CREATE INDEX memory_scope ON memory(scope, scope_key, status)",
    ],
    # v3: append-only state (loopwright._state_codec), as SQLite's v4.
    [
        """CREATE TABLE versions (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            ref TEXT NOT NULL,
            n INTEGER NOT NULL,
            cycle INTEGER NOT NULL,
            status TEXT NOT NULL,
            value JSON NOT NULL,
            PRIMARY KEY (run_id, ref, n)
        )""",
        """CREATE TABLE rejected (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            digest TEXT NOT NULL,
            cycle INTEGER NOT NULL,
            PRIMARY KEY (run_id, digest)
        )""",
        "ALTER TABLE checkpoints ADD COLUMN base BIGINT",
        "ALTER TABLE runs ADD COLUMN forked_from TEXT",
        "ALTER TABLE runs ADD COLUMN forked_at BIGINT",
        "CREATE INDEX runs_created_id ON runs(created_at, run_id)",
        """CREATE TABLE effect_keys (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            status TEXT NOT NULL,
            args_hash TEXT NOT NULL,
            result JSON,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (kind, key)
        )""",
        # Memory search, as SQLite's v4: a generated tsvector over text and rule (filled for
        # the items already stored when the column is added, kept in step by the database),
        # under a GIN index; the english configuration stems plurals and drops stop words.
        "ALTER TABLE memory ADD COLUMN search tsvector GENERATED ALWAYS AS "
        "(to_tsvector('english'::regconfig, text || ' ' || COALESCE(rule::text, ''))) STORED",
        "CREATE INDEX memory_search ON memory USING GIN (search)",
        "CREATE INDEX memory_strength ON memory(scope, scope_key, status, strength, updated_at, "
        "memory_id DESC)",
    ],
    # v4: people, as SQLite's v5 (docs/permissions.md).
    PEOPLE_PG,
    # v5: content-addressed blobs, as SQLite's v6 (store/_blobs.py).
    BLOBS_PG,
    # v6: only active items' words in the search column, as SQLite's v8: the GIN index hands
    # over every row holding a query word before the scope and status are checked, so a long
    # run's forgotten reflections slowed every later recall.
    [
        "DROP INDEX memory_search",
        "ALTER TABLE memory DROP COLUMN search",
        "ALTER TABLE memory ADD COLUMN search tsvector GENERATED ALWAYS AS (CASE WHEN "
        "status = 'active' THEN to_tsvector('english'::regconfig, text || ' ' || "
        "COALESCE(rule::text, '')) END) STORED",
        "CREATE INDEX memory_search ON memory USING GIN (search)",
        # A resume reads the retry entries of the cycle it runs next, not all of the run's.
        "DROP INDEX journal_kind",
        "CREATE INDEX journal_kind ON journal(run_id, kind, cycle)",
    ],
    # v7: the effect keys runs did before v3 claimed keys store-wide, as SQLite's v9.
    [BACKFILL_CLAIMS],
    # v8: a claim reads a bounded number of rows, as SQLite's v11. ``open_requests`` counts a
    # run's pending requests, so "parked with nothing pending" is a column test, and
    # ``runs_claimable`` holds exactly the runs runnable by status, in claim order: a claim
    # walks it from the oldest and stops at ``limit`` free ones, instead of sorting every open
    # run and probing the approvals of every parked one (outside probe: 19-37 ms a claim with
    # 5,000 pending and 5,000 parked runs). The triggers come before the count: ALTER TABLE
    # holds runs exclusively to the commit, so no request is written between the two. Each
    # step may run again (a store put back to v7 by a test).
    [
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS open_requests INTEGER NOT NULL DEFAULT 0",
        _OPEN_REQUESTS_FN,
        "DROP TRIGGER IF EXISTS approvals_open_insert ON approvals",
        "DROP TRIGGER IF EXISTS approvals_open_delete ON approvals",
        "DROP TRIGGER IF EXISTS approvals_open_update ON approvals",
        "CREATE TRIGGER approvals_open_insert AFTER INSERT ON approvals FOR EACH ROW "
        "WHEN (NEW.status = 'pending') EXECUTE FUNCTION loopwright_open_requests()",
        "CREATE TRIGGER approvals_open_delete AFTER DELETE ON approvals FOR EACH ROW "
        "WHEN (OLD.status = 'pending') EXECUTE FUNCTION loopwright_open_requests()",
        "CREATE TRIGGER approvals_open_update AFTER UPDATE OF status, run_id ON approvals "
        "FOR EACH ROW WHEN ((OLD.status = 'pending') IS DISTINCT FROM (NEW.status = 'pending') "
        "OR OLD.run_id IS DISTINCT FROM NEW.run_id) EXECUTE FUNCTION loopwright_open_requests()",
        "UPDATE runs r SET open_requests = COALESCE(p.n, 0) FROM runs r2 LEFT JOIN "
        "(SELECT run_id, count(*)::integer AS n FROM approvals WHERE status = 'pending' "
        "GROUP BY run_id) p ON p.run_id = r2.run_id "
        "WHERE r2.run_id = r.run_id AND r.open_requests IS DISTINCT FROM COALESCE(p.n, 0)",
        f"CREATE INDEX IF NOT EXISTS runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_V11}",
    ],
    # v9: a run's task in a table of its own, as SQLite's v12 (one SQL core reads it there; a
    # TOASTed task was not copied by an update here, but the queries are the same).
    ["CREATE TABLE IF NOT EXISTS run_tasks (run_id TEXT PRIMARY KEY, task JSON NOT NULL)"],
    # v10: a capped recall reads a bounded number of rows. It scores the newest ``ranked``
    # matches of its scopes; the GIN index hands over every match, in no order, so all of
    # them were read and sorted to keep the newest (≈ 89 ms and 3,500 buffers at 100,000
    # matches). This index holds each scope's active items newest first: the search walks it
    # per scope, checks the match on the row and stops at ``ranked`` (the planner still takes
    # the GIN index where matches are rare). No SQLite step: FTS5 hands its matches out newest
    # first already (rowid order). IF NOT EXISTS: a step run again changes nothing.
    [
        "CREATE INDEX IF NOT EXISTS memory_recent ON memory(scope, scope_key, "
        "created_at DESC, memory_id DESC) WHERE status = 'active'"
    ],
    # v11: a webhook delivery reads its run's delivery markers only, as SQLite's v13.
    [EVENTS_NOTIFIED_SQL],
    # v12: and only the markers of its own key, as SQLite's v14.
    [notified_key_index("%s")],
    # v13: an undone action's redo generation, store-wide, as SQLite's v15 (IF NOT EXISTS: a
    # store put back to an earlier version by a test runs the step again).
    [EFFECT_GENERATION.format("IF NOT EXISTS"), BACKFILL_GENERATIONS],
    # v14: people's feedback and reflections apart, as SQLite's v16: a recall walks a
    # scope's active reflections here, not every active item of the scope (memory_recent).
    [MEMORY_REFLECTIONS_SQL],
    # v15: the runs that reused a claim's result, as SQLite's v17 (IF NOT EXISTS and a
    # backfill that writes a row once: a store put back to an earlier version runs it again).
    [EFFECT_REUSES.format(real="DOUBLE PRECISION"), BACKFILL_REUSES],
    # v16: the forks made before, recorded as reusing what they inherited done, as SQLite's
    # v18 (a backfill that writes a row once: a store put back to an earlier version runs it
    # again).
    [BACKFILL_FORK_REUSES],
    # v17: the pending requests that can expire, by expiry, as SQLite's v19: a worker's poll
    # records those expired on the server's clock, so the runs parked on them are claimed.
    [APPROVALS_EXPIRING_SQL],
    # v18: a fork is its maker's to start, as SQLite's v20 (each step may run again).
    [
        MAKER_STARTS.format("IF NOT EXISTS"),
        HOLD_UNSTARTED_FORKS,
        "DROP INDEX IF EXISTS runs_claimable",
        f"CREATE INDEX runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_PG}",
    ],
    # v19: how many tests behind a held-out verdict were self-reported, as SQLite's v21 (IF
    # NOT EXISTS: the step may run again).
    [HELD_OUT_SELF_REPORTED.format("IF NOT EXISTS")],
    # v20: what executions fenced out of a run spent, as SQLite's v22 (IF NOT EXISTS: the
    # step may run again).
    [add for _name, add in fenced_spend("IF NOT EXISTS", "DOUBLE PRECISION", "BIGINT")],
    # v21: each webhook URL's cursor over the settlings, as SQLite's v23, and each event's
    # writing transaction (``tx``): the settlings are read in the order no late commit can
    # get behind (``LiveSQL.settlings_after``). Each step may run again.
    [NOTIFY_CURSORS_SQL.format(real="DOUBLE PRECISION"), *settled_index("%s")],
    # v22: the words whose bills the row holds, by lease, as SQLite's v24 (IF NOT EXISTS).
    [FENCED_WORDS.format(integer="BIGINT")],
]
