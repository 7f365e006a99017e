"""PostgreSQL schema migrations, forward only. Entry ``i`` moves a schema from version ``i`` to
``i + 1``; the version lives in ``loopwright_meta`` as in the SQLite store.

Differences from the SQLite schema, each on purpose:

- JSON columns are ``json``, not ``jsonb``: ``json`` keeps the text as written, so object key
  order survives a round trip exactly as it does in SQLite (a task or a part value rendered
  into a prompt must not come back reordered). Cast to ``jsonb`` in ad-hoc queries.
- Timestamps are ``double precision`` epoch seconds, as the API's floats.
- ``runs_claim`` is a partial index over the only statuses ``claim_runs`` looks at, so
  claiming stays cheap however many finished runs accumulate.
"""

from __future__ import annotations

from ._blobs import BLOBS_PG
from ._people_schema import PEOPLE_PG
from ._schema import BACKFILL_CLAIMS

__all__ = ["PG_MIGRATIONS", "PG_TABLES"]

# The tables loopwright creates; a schema holding any of them without ``loopwright_meta`` is
# someone else's and is refused untouched.
PG_TABLES = frozenset({"runs", "checkpoints", "events", "approvals", "journal", "memory"})

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
]
