"""Schema migrations, forward only. Entry ``i`` moves a store from version ``i`` to ``i + 1``."""

from __future__ import annotations

from ._blobs import BLOBS_SQLITE
from ._live import NOTIFIED, NOTIFY_CURSORS_SQL, notified_key_index, settled_index
from ._people_schema import PEOPLE_SQLITE

__all__ = [
    "ADD_FENCED_SPEND",
    "ADD_HELD_OUT_SELF_REPORTED",
    "ADD_MAKER_STARTS",
    "APPROVALS_EXPIRING_SQL",
    "BACKFILL_CLAIMS",
    "BACKFILL_FORK_REUSES",
    "BACKFILL_GENERATIONS",
    "CLAIMABLE_SQLITE",
    "CLAIMABLE_V11",
    "EFFECT_GENERATION",
    "EVENTS_NOTIFIED_SQL",
    "EXPIRING",
    "FENCED_COLS",
    "FENCED_WORDS",
    "HELD_OUT_SELF_REPORTED",
    "HOLD_UNSTARTED_FORKS",
    "MAKER_STARTS",
    "MEMORY_REFLECTIONS_SQL",
    "RUN_TASK",
    "RUN_TASKS_SQL",
    "SQLITE_MIGRATIONS",
    "fenced_spend",
    "memory_tag",
]

# A run's task as every run query reads it: from ``run_tasks`` (runs created since it exists),
# else the row's own column (runs created before; new rows hold JSON ``null`` there). Both
# stores; a rowid table in SQLite (a task may be far over a page).
RUN_TASKS_SQL = "CREATE TABLE IF NOT EXISTS run_tasks (run_id TEXT PRIMARY KEY, task TEXT NOT NULL)"
RUN_TASK = (
    "COALESCE((SELECT t.task FROM run_tasks t WHERE t.run_id = runs.run_id), runs.task) AS task"
)

# The webhook notifier's delivery markers (``web/_notify.py``) by run, as a partial index:
# ``LiveSQL.events_of_kind`` states the kind as a literal for it, as a partial index needs.
# SQLite's v13, PostgreSQL's v11.
EVENTS_NOTIFIED_SQL = (
    f"CREATE INDEX IF NOT EXISTS events_notified ON events(run_id, id) WHERE kind = '{NOTIFIED}'"
)

# A migration step run in Python, not SQL (``SQLStore._backfill_claims``): the effect keys
# runs of an earlier release did, claimed store-wide.
BACKFILL_CLAIMS = "-- loopwright: claim the effect keys done before keys were claimed"

# A migration step run in Python (``SQLStore._backfill_generations``): each claimed action's
# highest redo generation any run's journal handed out (``<key>~<n>``), so that a redo after
# the upgrade gets a key no run was given before.
BACKFILL_GENERATIONS = "-- loopwright: the redo generations runs handed out before"

# The redo generation of an undone action, kept store-wide (SQLite's v15, PostgreSQL's v13):
# its key for a call is ``<key>`` at generation 1, ``<key>~<n>`` after; a claim that takes an
# undone action hands out the next one (``SQLStore._claim``).
EFFECT_GENERATION = "ALTER TABLE effect_keys ADD COLUMN {} generation INTEGER NOT NULL DEFAULT 1"

# The runs that reused a claim's recorded result (SQLite's v17, PostgreSQL's v15), one row a
# run and generation, written in the transaction of the reusing run's journal entry: the
# refund of a reused action asks a person, naming them, and its settling tells each of them
# (``JournalSQL._claim``). ``{real}``: the column type of a time.
EFFECT_REUSES = """CREATE TABLE IF NOT EXISTS effect_reuses (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            generation INTEGER NOT NULL,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            created_at {real} NOT NULL,
            PRIMARY KEY (kind, key, generation, run_id)
        )"""

# A migration step run in Python (``SQLStore._backfill_reuses``): the reuses runs of an earlier
# release journaled (``from_run``) of a claim still ``done`` by that run, or being undone by it
# (a reuser of one is told so, as the fork step tells a fork), recorded.
BACKFILL_REUSES = "-- loopwright: the reuses of done claims runs journaled before"

# A migration step run in Python (``_backfill_fork_reuses``): the forks made before
# a fork was counted as reusing the business actions it inherited done (SQLite's v18,
# PostgreSQL's v16), recorded on those claims still done by the run that did them, or being
# undone by it (a fork of one is told so, as one made now is).
BACKFILL_FORK_REUSES = "-- loopwright: the forks that inherited done claims before"

# Runnable by status (``Store.claim_runs``) on SQLite, but for a run in progress: waiting to
# start (not a fork its maker starts: ``MAKER_STARTS``), or parked with no pending request. The WHERE of the partial index runs_claimable, and a
# term of the claim's query as is (SQLite uses a partial index only for a query that states its
# condition). A ``running`` run is not in it: its every commit moves ``updated_at``, and so
# would move its entry (one more index page written every cycle, on the engine's hot path);
# the few running runs a claim may take over (a lapsed lease) are read by status instead.
CLAIMABLE_SQLITE = (
    "(maker_starts = 0 AND (status = 'pending' OR (status = 'awaiting_approval' AND "
    "open_requests = 0)))"
)
# As v11 wrote it (PostgreSQL's v8), before forks were left to their makers: those steps build
# the index so, v20 (v18) builds it again with the column.
CLAIMABLE_V11 = "(status = 'pending' OR (status = 'awaiting_approval' AND open_requests = 0))"

# A run its maker starts (SQLite's v20, PostgreSQL's v18): a fork is made to be edited or
# reviewed first, so no worker claims it until whoever made it resumes it (``Runtime.resume``
# clears the mark, ``Store.mark_started``) or it was made for the pool (``fork(queue=True)``).
# ``{}``: PostgreSQL's IF NOT EXISTS (a store put back to an earlier version by a test).
MAKER_STARTS = "ALTER TABLE runs ADD COLUMN {} maker_starts INTEGER NOT NULL DEFAULT 0"
# SQLite's step for it, run in Python (``MigrationsSQL._apply_migrations``): the column added
# unless there (SQLite has no ADD COLUMN IF NOT EXISTS; a store put back to an earlier version
# by a test runs the step again).
ADD_MAKER_STARTS = "-- loopwright: runs.maker_starts, unless the column is there"
# How many of the tests behind a run's held-out verdict its candidate's own process decided
# (SQLite's v21, PostgreSQL's v19): ``runs.held_out_self_reported``, written with
# ``held_out_passed`` (0: every test judged outside the candidate; NULL: no held-out verdict,
# or a run ended before the column). A held-out pass resting on a self-reported test is not an
# independent pass: ``false_success_rate`` and ``verified_completion_rate`` leave it out, and
# the runs lists say so (stop 55). ``{}``: PostgreSQL's IF NOT EXISTS.
HELD_OUT_SELF_REPORTED = "ALTER TABLE runs ADD COLUMN {} held_out_self_reported INTEGER"
# SQLite's step for it, run in Python as ADD_MAKER_STARTS is (the column added unless there).
ADD_HELD_OUT_SELF_REPORTED = "-- loopwright: runs.held_out_self_reported, unless there"
# What executions fenced out of a run spent and no commit of the run has charged yet (SQLite's
# v22, PostgreSQL's v20): the bills the lease's fence refused to journal (``fenced_bill``),
# their seconds, and the held-out verifiers' share (invariant 3), added by the executor taken
# over, with a write that needs no lease (``Store.add_fenced_spend``), and taken off by the
# commit of the execution that charged them to its state (``Execution.unfolded``). Every read
# of a run's spend adds them (``RunRecord.cost_usd``...), so a word said while its taker ends
# the run, or after its end, is charged too (fenced56).
FENCED_COLS = (
    ("fenced_cost_usd", "real"),
    ("fenced_tokens", "int"),
    ("fenced_seconds", "real"),
    ("fenced_held_cost_usd", "real"),
    ("fenced_held_tokens", "int"),
)


def fenced_spend(exists: str, real: str, integer: str) -> list[tuple[str, str]]:
    """The columns of ``FENCED_COLS`` and the statement adding each (``exists``: PostgreSQL's
    IF NOT EXISTS; the types of the dialect)."""
    return [
        (
            name,
            f"ALTER TABLE runs ADD COLUMN {exists} {name} "
            f"{real if kind == 'real' else integer} NOT NULL DEFAULT 0",
        )
        for name, kind in FENCED_COLS
    ]


# SQLite's step for them, run in Python as ADD_MAKER_STARTS is (each column added unless there).
ADD_FENCED_SPEND = "-- loopwright: runs.fenced_*, unless there"
# The words whose bills were added to their run's fenced spend, by run and lease (SQLite's v24,
# PostgreSQL's v22): a word is said again when the store failed its write (``_say_unsaid``),
# its transaction durable though its answer was lost; the row adds a word's bills only if its
# row here was new, so they are added once (fenced56b). ``{integer}``: the dialect's.
FENCED_WORDS = (
    "CREATE TABLE IF NOT EXISTS fenced_words (run_id TEXT NOT NULL, lease {integer} NOT NULL, "
    "PRIMARY KEY (run_id, lease))"
)
# The forks an earlier release made and nothing has started (no ``started`` or ``resumed``
# event: read by events_run, a few rows a fork) are marked so: a worker after the upgrade
# would start them before their maker's edit, as ``resume --all`` already leaves them.
HOLD_UNSTARTED_FORKS = (
    "UPDATE runs SET maker_starts = 1 WHERE forked_from IS NOT NULL "
    "AND status IN ('pending', 'awaiting_approval') AND NOT EXISTS (SELECT 1 FROM events e "
    "WHERE e.run_id = runs.run_id AND e.kind IN ('started', 'resumed'))"
)

# Pending requests that can expire (SQLite's v19, PostgreSQL's v17): the WHERE of the partial
# index approvals_expiring, and a term of ``expired_requests``' query as is. A worker's poll
# reads the requests expired on the store's clock through it, and records them expired, so the
# runs parked on them become claimable; it holds no decided request, nor one that never
# expires, so the poll reads only the requests it will decide.
EXPIRING = "(status = 'pending' AND expires_at IS NOT NULL)"
APPROVALS_EXPIRING_SQL = (
    f"CREATE INDEX IF NOT EXISTS approvals_expiring ON approvals(expires_at, approval_id) "
    f"WHERE {EXPIRING}"
)

_HEX_DIGITS = (("9", "99"), *((c, f"9{i}") for i, c in enumerate("ABCDEF")))


MEMORY_REFLECTIONS_SQL = (
    "CREATE INDEX IF NOT EXISTS memory_reflections ON memory(scope, scope_key, "
    "created_at DESC, memory_id DESC) WHERE status = 'active' AND signal = 'reflection'"
)
"""The active reflections of each scope, newest first (both stores)."""


REFLECTION_TAG = "reflection/"
"""What a reflection's tag starts with (from v16): a search reads people's feedback and the
loop's reflections apart (``MemorySearch.reflections``), each side through its own tags."""


def memory_tag(scope: str, scope_key: str, reflection: bool = False) -> str:
    """The token that stands for one ``(scope, scope_key)`` in the memory search index: the
    hex of ``scope:scope_key`` in digits only (9 escapes: 99 is 9, 90-95 are A-F), so the
    tokenizer and its stemmer keep it whole and no two scopes share one. A reflection's
    (``reflection``) is that of ``reflection/scope:scope_key``: no scope starts so."""
    out = f"{REFLECTION_TAG if reflection else ''}{scope}:{scope_key}".encode().hex().upper()
    for old, new in _HEX_DIGITS:
        out = out.replace(old, new)
    return out


def memory_tag_sql(row: str, sides: bool = False) -> str:
    """``memory_tag`` in SQL, of the item in ``row``; empty unless the item is active.
    ``sides``: a reflection's tag apart (the index from v16 on)."""
    side = f"CASE WHEN {row}.signal = 'reflection' THEN '{REFLECTION_TAG}' ELSE '' END || "
    expr = f"hex({side if sides else ''}{row}.scope || ':' || {row}.scope_key)"
    for old, new in _HEX_DIGITS:
        expr = f"replace({expr}, '{old}', '{new}')"
    return f"CASE WHEN {row}.status = 'active' THEN {expr} ELSE '' END"


def _fts_row(row: str, command: str, sides: bool = False) -> str:
    """A statement adding the item in ``row`` to the memory search index, or with ``command``
    'delete' taking it out (a contentless index is told the values it was given)."""
    tag = memory_tag_sql(row, sides)
    if command:
        return (
            "INSERT INTO memory_fts(memory_fts, rowid, text, rule, tag) "
            f"SELECT '{command}', {row}.rowid, {row}.text, {row}.rule, {tag}"
        )
    return f"INSERT INTO memory_fts(rowid, text, rule, tag) SELECT {row}.rowid, {row}.text, {row}.rule, {tag}"


def _fts_triggers(sides: bool) -> list[str]:
    """The triggers keeping the memory search index to the active items (v8 on)."""
    return [
        "DROP TRIGGER memory_fts_insert",
        "DROP TRIGGER memory_fts_delete",
        "DROP TRIGGER memory_fts_update",
        "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory WHEN new.status = 'active' "
        f"BEGIN {_fts_row('new', '', sides)}; END",
        "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory WHEN old.status = 'active' "
        f"BEGIN {_fts_row('old', 'delete', sides)}; END",
        "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text, rule, scope, scope_key, status "
        "ON memory BEGIN "
        f"{_fts_row('old', 'delete', sides)} WHERE old.status = 'active'; "
        f"{_fts_row('new', '', sides)} WHERE new.status = 'active'; END",
        "INSERT INTO memory_fts(memory_fts) VALUES ('delete-all')",
        "INSERT INTO memory_fts(rowid, text, rule, tag) "
        f"SELECT rowid, text, rule, {memory_tag_sql('memory', sides)} FROM memory "
        "WHERE status = 'active'",
    ]


SQLITE_MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            task_key TEXT NOT NULL UNIQUE,
            loop_name TEXT NOT NULL,
            project TEXT NOT NULL DEFAULT '',
            status TEXT NOT NULL,
            stop_reason TEXT,
            cycle INTEGER NOT NULL DEFAULT 0,
            best_score REAL,
            held_out_passed INTEGER,
            cost_usd REAL NOT NULL DEFAULT 0,
            tokens INTEGER NOT NULL DEFAULT 0,
            seconds REAL NOT NULL DEFAULT 0,
            spec_ref TEXT,
            loop_version TEXT,
            contract TEXT NOT NULL,
            task TEXT NOT NULL,
            packet TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            ended_at REAL,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            lease_owner TEXT,
            lease_expires_at REAL,
            fencing_token INTEGER NOT NULL DEFAULT 0,
            last_seq INTEGER NOT NULL DEFAULT 0
        )""",
        "CREATE INDEX runs_status ON runs(status)",
        "CREATE INDEX runs_project ON runs(project, created_at)",
        """CREATE TABLE checkpoints (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            seq INTEGER NOT NULL,
            cycle INTEGER NOT NULL,
            state TEXT NOT NULL,
            record TEXT,
            fencing_token INTEGER NOT NULL,
            created_at REAL NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID""",
        """CREATE TABLE events (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            cycle INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ts REAL NOT NULL,
            data TEXT NOT NULL
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
            evidence TEXT NOT NULL,
            diff TEXT,
            action_hash TEXT NOT NULL,
            status TEXT NOT NULL,
            requested_at REAL NOT NULL,
            expires_at REAL,
            decided_by TEXT,
            decided_at REAL,
            note TEXT
        )""",
        "CREATE INDEX approvals_status ON approvals(status, requested_at)",
        "CREATE INDEX approvals_run ON approvals(run_id)",
    ],
    # v2: the effect/retry journal, and structured answers on approval decisions.
    [
        """CREATE TABLE journal (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            key TEXT NOT NULL,
            kind TEXT NOT NULL,
            cycle INTEGER NOT NULL,
            status TEXT NOT NULL,
            data TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            fencing_token INTEGER NOT NULL,
            PRIMARY KEY (run_id, key)
        ) WITHOUT ROWID""",
        "CREATE INDEX journal_kind ON journal(run_id, kind)",
        "ALTER TABLE approvals ADD COLUMN answer TEXT",
    ],
    # v3: feedback memory (loopwright._memory). "by" is quoted: BY is an SQL keyword.
    [
        """CREATE TABLE memory (
            memory_id TEXT PRIMARY KEY,
            scope TEXT NOT NULL,
            scope_key TEXT NOT NULL DEFAULT '',
            signal TEXT NOT NULL,
            strength REAL NOT NULL,
            text TEXT NOT NULL,
            rule TEXT,
            source TEXT NOT NULL,
            "by" TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            history TEXT NOT NULL DEFAULT '[]'
        )""",
        "CREATE INDEX memory_scope ON memory(scope, scope_key, status)",
    ],
    # v4: append-only state (loopwright._state_codec): version rows written once, rejected
    # proposals' digests, and checkpoints that hold a delta from the previous one (``base``:
    # the seq of the snapshot they build on; NULL for the full states of earlier versions).
    [
        """CREATE TABLE versions (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            ref TEXT NOT NULL,
            n INTEGER NOT NULL,
            cycle INTEGER NOT NULL,
            status TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (run_id, ref, n)
        )""",
        """CREATE TABLE rejected (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            digest TEXT NOT NULL,
            cycle INTEGER NOT NULL,
            PRIMARY KEY (run_id, digest)
        ) WITHOUT ROWID""",
        # Rebuilt as a rowid table, small columns first: a WITHOUT ROWID row over ~1 KB (a
        # cycle's record is about that) spills to an overflow page of its own — 4 KB a cycle.
        """CREATE TABLE checkpoints_v4 (
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            seq INTEGER NOT NULL,
            cycle INTEGER NOT NULL,
            base INTEGER,
            fencing_token INTEGER NOT NULL,
            created_at REAL NOT NULL,
            state TEXT NOT NULL,
            record TEXT,
            PRIMARY KEY (run_id, seq)
        )""",
        "INSERT INTO checkpoints_v4(run_id, seq, cycle, base, fencing_token, created_at, state, "
        "record) SELECT run_id, seq, cycle, NULL, fencing_token, created_at, state, record "
        "FROM checkpoints ORDER BY run_id, seq",
        "DROP TABLE checkpoints",
        "ALTER TABLE checkpoints_v4 RENAME TO checkpoints",
        # a fork's origin: the run and the cycle whose state it started from
        "ALTER TABLE runs ADD COLUMN forked_from TEXT",
        "ALTER TABLE runs ADD COLUMN forked_at INTEGER",
        # the runs list pages newest first by (created_at, run_id): no sort of the table
        "CREATE INDEX runs_created ON runs(created_at, run_id)",
        # Invariant 2 per business action: an effect's idempotency key is claimed store-wide
        # (by kind), so a second run asking for a done key gets its recorded result.
        """CREATE TABLE effect_keys (
            kind TEXT NOT NULL,
            key TEXT NOT NULL,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            status TEXT NOT NULL,
            args_hash TEXT NOT NULL,
            result TEXT,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, key)
        )""",
        # Memory search (loopwright._memory.FeedbackMemory.retrieve): a contentless FTS5 index
        # over each item's text and rule, plus a ``tag`` column holding one token for an active
        # item's (scope, scope_key) — so the index itself keeps a search to its scopes, and no
        # out-of-scope match is looked up or scored. Triggers keep it in step with the table
        # (every writer, in its own transaction); the last statement fills it from the items
        # already stored. The porter stemmer folds plurals ("colours" finds "colour");
        # diacritics are kept, as casefold keeps them.
        "CREATE VIRTUAL TABLE memory_fts USING fts5(text, rule, tag, content='', "
        "tokenize='porter unicode61 remove_diacritics 0')",
        f"CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN "
        f"INSERT INTO memory_fts(rowid, text, rule, tag) "
        f"VALUES (new.rowid, new.text, new.rule, {memory_tag_sql('new')}); END",
        f"CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN "
        f"INSERT INTO memory_fts(memory_fts, rowid, text, rule, tag) "
        f"VALUES ('delete', old.rowid, old.text, old.rule, {memory_tag_sql('old')}); END",
        f"CREATE TRIGGER memory_fts_update AFTER UPDATE OF text, rule, scope, scope_key, status "
        f"ON memory BEGIN INSERT INTO memory_fts(memory_fts, rowid, text, rule, tag) "
        f"VALUES ('delete', old.rowid, old.text, old.rule, {memory_tag_sql('old')}); "
        f"INSERT INTO memory_fts(rowid, text, rule, tag) "
        f"VALUES (new.rowid, new.text, new.rule, {memory_tag_sql('new')}); END",
        f"INSERT INTO memory_fts(rowid, text, rule, tag) "
        f"SELECT rowid, text, rule, {memory_tag_sql('memory')} FROM memory",
        # The strongest, newest items of one scope without a sort: what fills the slots the
        # matches leave (their relevance is the floor, so strength orders them).
        "CREATE INDEX memory_strength ON memory(scope, scope_key, status, strength, updated_at, "
        "memory_id DESC)",
    ],
    # v5: people (docs/permissions.md) — users and their token hashes, the votes of
    # multi-person approvals, who started a run, and the append-only audit log.
    PEOPLE_SQLITE,
    # v6: content-addressed blobs (pictures a run makes; store/_blobs.py), in a step of their
    # own.
    BLOBS_SQLITE,
    # v7: events without AUTOINCREMENT. Its counter row in sqlite_sequence was one more page
    # rewritten by every commit (≈ 10 µs of CPU a cycle, and a WAL page); events are never
    # deleted, so the rowid's max + 1 keeps ids increasing, never reused.
    [
        """CREATE TABLE events_v7 (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL REFERENCES runs(run_id),
            cycle INTEGER NOT NULL,
            kind TEXT NOT NULL,
            ts REAL NOT NULL,
            data TEXT NOT NULL
        )""",
        "INSERT INTO events_v7(id, run_id, cycle, kind, ts, data) "
        "SELECT id, run_id, cycle, kind, ts, data FROM events ORDER BY id",
        "DROP TABLE events",
        "ALTER TABLE events_v7 RENAME TO events",
        "CREATE INDEX events_run ON events(run_id, id)",
    ],
    # v8: only active items' words in the memory search index. FTS5 reads a query word's
    # whole list of rows, and bm25 counts them, whatever the tag narrows the match to: a long
    # run's forgotten reflections made every later cycle's recall slower (≈ 0.7 ms at 3,000
    # items). An item enters the index when it becomes active and leaves when it stops being.
    # And the journal's index by cycle too (the retry entries a resume reads).
    [
        *_fts_triggers(sides=False),
        # A resume reads the retry entries of the cycle it runs next, not all of the run's.
        "DROP INDEX journal_kind",
        "CREATE INDEX journal_kind ON journal(run_id, kind, cycle)",
    ],
    # v9: the effect keys runs did before v4 claimed keys store-wide (effect_keys came empty:
    # an invoice an earlier release paid was paid again after the upgrade).
    [BACKFILL_CLAIMS],
    # v10: one run's requests by status, in order. ``approvals(run_id=X, status='pending')``
    # (every approve, deny and resume) and the claim's NOT EXISTS read only that run's rows;
    # with no ANALYZE statistics the planner took approvals_status (status, requested_at) for
    # its ORDER BY and read every pending request of the store. This index serves both the
    # equality and the order, so it wins whatever the statistics; it replaces approvals_run,
    # its prefix. (IF [NOT] EXISTS: a step run again, as a test of v9 does, changes nothing.)
    [
        "CREATE INDEX IF NOT EXISTS approvals_run_status ON approvals(run_id, status, "
        "requested_at, approval_id)",
        "DROP INDEX IF EXISTS approvals_run",
    ],
    # v11: a claim reads a bounded number of rows. ``open_requests`` counts a run's pending
    # requests (kept by triggers, whoever writes approvals), so "parked with nothing pending"
    # is a column test, and ``runs_claimable`` holds exactly the runs runnable by status, in
    # claim order: a claim walks it from the oldest and stops at ``limit`` free ones, instead
    # of sorting every open run and probing the approvals of every parked one (outside probe:
    # 0.34 -> 31 ms a claim at 50,000 runs, inside BEGIN IMMEDIATE). The index's WHERE is
    # CLAIMABLE_SQLITE, word for word, as the claim's query says it.
    [
        "ALTER TABLE runs ADD COLUMN open_requests INTEGER NOT NULL DEFAULT 0",
        "UPDATE runs SET open_requests = (SELECT count(*) FROM approvals a "
        "WHERE a.run_id = runs.run_id AND a.status = 'pending') "
        "WHERE run_id IN (SELECT run_id FROM approvals WHERE status = 'pending')",
        "CREATE TRIGGER approvals_open_insert AFTER INSERT ON approvals "
        "WHEN new.status = 'pending' BEGIN "
        "UPDATE runs SET open_requests = open_requests + 1 WHERE run_id = new.run_id; END",
        "CREATE TRIGGER approvals_open_delete AFTER DELETE ON approvals "
        "WHEN old.status = 'pending' BEGIN "
        "UPDATE runs SET open_requests = open_requests - 1 WHERE run_id = old.run_id; END",
        "CREATE TRIGGER approvals_open_update AFTER UPDATE OF status, run_id ON approvals "
        "WHEN (old.status = 'pending') <> (new.status = 'pending') OR old.run_id <> new.run_id "
        "BEGIN "
        "UPDATE runs SET open_requests = open_requests - 1 "
        "WHERE run_id = old.run_id AND old.status = 'pending'; "
        "UPDATE runs SET open_requests = open_requests + 1 "
        "WHERE run_id = new.run_id AND new.status = 'pending'; END",
        f"CREATE INDEX runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_V11}",
    ],
    # v12: a run's task in a table of its own (``RUN_TASK``). SQLite writes a row whole when
    # any column changes, and a run's row changes every cycle: a task holding a 2 MB document
    # cost ≈ 4 ms of CPU a cycle, copied with the cycle's counters. Runs created before keep
    # their task in ``runs.task`` (read when this table has none).
    [RUN_TASKS_SQL],
    # v13: a webhook delivery reads its run's delivery markers only. "Was this posted?" read
    # every event of the run (``events_run``) to keep the few ``notified`` ones, so a delivery
    # cost grew with the run's log (a long run: thousands of events per delivery). A partial
    # index holds just those markers; other events pay nothing for it (not written to it).
    [EVENTS_NOTIFIED_SQL],
    # v14: a webhook delivery reads the markers of its own key. v13's index held the run's
    # markers, and "was this request posted?" read every one of them: a run with thousands
    # of requests posted paid thousands of rows a delivery. This one holds them by key too.
    [notified_key_index("?")],
    # v15: an undone action's redo generation, store-wide. It was the run's own (its journal's
    # ``key~2``, ``~3``...), so another run (or a fork) redoing an action another run had
    # refunded handed the payment provider the refunded charge's key: the provider answered
    # with that charge and nothing was paid.
    [EFFECT_GENERATION.format(""), BACKFILL_GENERATIONS],
    # v16: a recall reads people's feedback and the loop's reflections apart (reflections only
    # fill the slots people's feedback leaves free), each side a bounded search of its own: a
    # reflection's tag in the search index is its own (``REFLECTION_TAG``), so each side's
    # match stays to its items (the index rebuilt), and the scopes' active reflections, a few
    # a task, are read from their own index, not among every active item of the scopes.
    [*_fts_triggers(sides=True), MEMORY_REFLECTIONS_SQL],
    # v17: the runs that reused a claim's result, recorded with the reuse (``EFFECT_REUSES``):
    # the refund of a payment another run was accepted on ran under an ``allow`` rule, and
    # nothing named that run to the person who cancelled the payer.
    [EFFECT_REUSES.format(real="REAL"), BACKFILL_REUSES],
    # v18: a fork relies on the payments it inherited as a run that reused them does: the
    # forks made before are recorded on those claims (``effect_reuses``), as a fork made
    # since is when it is made; the refund of its origin's payment left the fork accepted on
    # an unpaid invoice, and nobody was told.
    [BACKFILL_FORK_REUSES],
    # v19: a run whose every open request expired is claimable by a worker (expiry escalates):
    # a worker's poll reads the pending requests expired on the store's clock through this
    # partial index and records them expired, so the count of open requests drops and the run
    # enters runs_claimable. Before, expiry was recorded only when someone resumed the run or
    # tried to decide the request, and ``loopwright worker`` left the run parked for ever.
    [APPROVALS_EXPIRING_SQL],
    # v20: a fork is its maker's to start (``MAKER_STARTS``): every worker claimed every
    # ``pending`` run, so a fork made to be edited first was started on a store a pool serves
    # before its maker could edit it, its effects run. ``runs_claimable`` is built again with
    # the mark in its WHERE (CLAIMABLE_SQLITE, as the claim says it).
    [
        ADD_MAKER_STARTS,
        HOLD_UNSTARTED_FORKS,
        "DROP INDEX IF EXISTS runs_claimable",
        f"CREATE INDEX runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_SQLITE}",
    ],
    # v21: how many tests behind a held-out verdict were self-reported (``HELD_OUT_SELF_REPORTED``):
    # the metrics and the runs lists read ``held_out_passed`` alone, and counted a pass the
    # candidate's own process could have forged as an independent one.
    [ADD_HELD_OUT_SELF_REPORTED],
    # v22: what executions fenced out of a run spent (``FENCED_COLS``): carried only by their
    # ``lease lost`` word and charged by a later resume, a word said while the taker ended the
    # run, or with no resume after it, was never charged (invariant 7).
    [ADD_FENCED_SPEND],
    # v23: each webhook URL's cursor over the settlings (``notify_cursors``), and the settlings
    # by id (a partial index): a settling made while no process notified was never posted,
    # since a notifier started reading at the newest event (notify56).
    [NOTIFY_CURSORS_SQL.format(real="REAL"), *settled_index("?")],
    # v24: a word said again after its durable write's answer was lost added its bills twice.
    [FENCED_WORDS.format(integer="INTEGER")],
]
