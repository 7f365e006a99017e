"""The people tables (docs/permissions.md), one migration step in each dialect.

- ``users``: a name, its roles and approval limits; revoked users stay (the audit names them).
- ``tokens``: the SHA-256 of each token, never the token; one live token per user.
- ``votes``: one row per person approving a request that needs several people.
- ``audit``: who did what, when, from where, allowed or refused; append-only — a trigger
  refuses UPDATE and DELETE, so neither a rollback nor a bug can rewrite it.
- ``runs.created_by``: who started a run (the requester, for separation of duties), and an
  index to find a loop's runs (earned authority reads a loop's record).
"""

from __future__ import annotations

__all__ = ["PEOPLE_PG", "PEOPLE_SQLITE"]

_APPEND_ONLY = "the audit log is append-only"

PEOPLE_SQLITE: list[str] = [
    """CREATE TABLE users (
        name TEXT PRIMARY KEY,
        roles TEXT NOT NULL,
        limits TEXT NOT NULL,
        created_at REAL NOT NULL,
        created_by TEXT NOT NULL,
        revoked_at REAL
    )""",
    """CREATE TABLE tokens (
        token_hash TEXT PRIMARY KEY,
        name TEXT NOT NULL REFERENCES users(name),
        created_at REAL NOT NULL,
        revoked_at REAL
    )""",
    "CREATE INDEX tokens_name ON tokens(name)",
    """CREATE TABLE votes (
        approval_id TEXT NOT NULL REFERENCES approvals(approval_id),
        "by" TEXT NOT NULL,
        at REAL NOT NULL,
        note TEXT,
        PRIMARY KEY (approval_id, "by")
    )""",
    """CREATE TABLE audit (
        audit_id INTEGER PRIMARY KEY AUTOINCREMENT,
        at REAL NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL,
        outcome TEXT NOT NULL,
        origin TEXT NOT NULL,
        detail TEXT NOT NULL
    )""",
    "CREATE INDEX audit_target ON audit(target, audit_id)",
    f"CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit BEGIN "
    f"SELECT RAISE(ABORT, '{_APPEND_ONLY}'); END",
    f"CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit BEGIN "
    f"SELECT RAISE(ABORT, '{_APPEND_ONLY}'); END",
    "ALTER TABLE runs ADD COLUMN created_by TEXT",
    "CREATE INDEX runs_loop ON runs(loop_name, loop_version)",
]

PEOPLE_PG: list[str] = [
    """CREATE TABLE users (
        name TEXT PRIMARY KEY,
        roles JSON NOT NULL,
        limits JSON NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        created_by TEXT NOT NULL,
        revoked_at DOUBLE PRECISION
    )""",
    """CREATE TABLE tokens (
        token_hash TEXT PRIMARY KEY,
        name TEXT NOT NULL REFERENCES users(name),
        created_at DOUBLE PRECISION NOT NULL,
        revoked_at DOUBLE PRECISION
    )""",
    "CREATE INDEX tokens_name ON tokens(name)",
    """CREATE TABLE votes (
        approval_id TEXT NOT NULL REFERENCES approvals(approval_id),
        "by" TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        note TEXT,
        PRIMARY KEY (approval_id, "by")
    )""",
    """CREATE TABLE audit (
        audit_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        at DOUBLE PRECISION NOT NULL,
        actor TEXT NOT NULL,
        action TEXT NOT NULL,
        target TEXT NOT NULL,
        outcome TEXT NOT NULL,
        origin TEXT NOT NULL,
        detail JSON NOT NULL
    )""",
    "CREATE INDEX audit_target ON audit(target, audit_id)",
    "CREATE FUNCTION loopwright_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
    f"$$ BEGIN RAISE EXCEPTION '{_APPEND_ONLY}'; END $$",
    "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit "
    "FOR EACH ROW EXECUTE FUNCTION loopwright_audit_append_only()",
    "ALTER TABLE runs ADD COLUMN created_by TEXT",
    "CREATE INDEX runs_loop ON runs(loop_name, loop_version)",
]
