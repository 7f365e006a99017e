"""One SQL core for both stores: the statements, the rules and the row planning.

``SQLStore`` holds everything SQLite and PostgreSQL do alike — the SQL text (written once with
``?`` and turned into the driver's placeholder when a backend class is made), fencing,
commits and group commit, the journal and approval rules, feedback memory, the migrations
runner and the parsing of rows. A backend sets the dialect (``_MARK``, ``_DB_NOW``,
``_LOCKS``, ``_UNIQUE``, ``_REFUSED``, ``_DB_FAILURE``, ``_js``/``_jl``) and the hooks:
connections and transactions (``_conn``, ``_tx``, ``_savepoint``, ``_executemany``), the
batch's fencing read (``_fence_batch``), and ``claim_runs``, which differs by design; and may
override ``_writer`` (what runs a commit's statements: SQLite keeps one cursor for them) and
``_jl_all`` (many JSON values read at once).

``SQLStore`` is made of parts, each a mixin in its own module: the statements
(``_sql_statements``), the dialect, hooks and row readers (``_sql_core``), migrations, runs and
leases, reads and events, commits, the journal and effect claims, approvals (``_sql_*``). This
module joins them and holds feedback memory: its statements and methods.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .._errors import (
    ConflictError,
    NotPermittedError,
    StoreError,
)
from .._memory import MemoryNotFoundError, screened_row
from .._owners import owner_is_dead
from ._people import person_key
from ._records import MemoryFound, MemoryRecall, MemorySearch
from ._rows import (
    memory_values,
    memory_where,
    sql_int,
)
from ._schema import memory_tag
from ._sql_approvals import DECISIONS, ApprovalsSQL
from ._sql_commit import BOOLEAN_RUN_COLS, CommitSQL
from ._sql_core import SQLCore
from ._sql_journal import JournalSQL, check_journal_expect
from ._sql_migrations import MigrationsSQL
from ._sql_reads import ReadsSQL
from ._sql_runs import RunsSQL
from ._sql_statements import (
    JOURNAL_COLS,
    JOURNAL_KEY,
    RUN_COLS,
    RUNNABLE_STATUS,
    CoreStatements,
    journal_key,
)

__all__ = [
    "BOOLEAN_RUN_COLS",
    "DECISIONS",
    "JOURNAL_COLS",
    "JOURNAL_KEY",
    "RUNNABLE_STATUS",
    "RUN_COLS",
    "SQLStore",
    "Statement",
    "Statements",
    "check_journal_expect",
    "journal_key",
    "owner_is_dead",
]


MEMORY_COLS = (
    'memory_id, scope, scope_key, signal, strength, text, rule, source, "by", status, '
    "created_at, updated_at, history"
)
MEMORY_STATUSES = ("active", "candidate", "forgotten")


class Statements(CoreStatements):
    """``CoreStatements`` and feedback memory's."""

    def __init__(self, mark: str, db_now: str | None, locks: bool) -> None:
        super().__init__(mark, db_now, locks)
        p = self.p

        def lock(clause: str) -> str:
            return f" {clause}" if locks else ""

        # --- memory
        self.insert_memory = p(f"INSERT INTO memory({MEMORY_COLS}) VALUES({','.join('?' * 13)})")
        self.memory_for_update = p(
            f"SELECT {MEMORY_COLS} FROM memory WHERE memory_id=?" + lock("FOR UPDATE")
        )
        self.set_memory_status = p(
            "UPDATE memory SET status=?, updated_at=?, history=? WHERE memory_id=?"
        )


class SQLStore(RunsSQL, CommitSQL, ReadsSQL, JournalSQL, ApprovalsSQL, MigrationsSQL, SQLCore):
    """The shared logic of the SQL stores; a backend supplies the dialect and the hooks."""

    _q: ClassVar[Statements]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._q = Statements(cls._MARK, cls._DB_NOW, cls._LOCKS)

    def _memory_dict(self, row: Sequence[Any]) -> dict[str, Any]:
        jl = self._jl
        return {
            "memory_id": row[0],
            "scope": row[1],
            "scope_key": row[2],
            "signal": row[3],
            "strength": row[4],
            "text": row[5],
            "rule": None if row[6] is None else jl(row[6]),
            "source": jl(row[7]),
            "by": row[8],
            "status": row[9],
            "created_at": row[10],
            "updated_at": row[11],
            "history": jl(row[12]),
        }

    # --- feedback memory ---------------------------------------------------------------
    _memory_writes = 0
    """This store's own writes to feedback memory (``_known_empty``'s: another connection's
    are told by the database)."""

    def memory_add(self, item: Mapping[str, Any]) -> None:
        values = memory_values(screened_row(item), self._js)  # (a caller may come straight here)
        with self._tx() as conn:
            self._memory_writes += 1  # (under the store's lock, before the recall it holds)
            try:
                conn.execute(self._q.insert_memory, values)
            except self._UNIQUE:
                raise ConflictError(f"memory item {item['memory_id']!r} already exists") from None

    def memory_query(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
        limit: int | None = None,
        memory_id: str | None = None,
    ) -> list[dict[str, Any]]:
        where, args = memory_where(scopes, status, memory_id, self._MARK)
        query = f"SELECT {MEMORY_COLS} FROM memory"
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY created_at DESC, memory_id DESC"
        if limit is not None:
            query += f" LIMIT {sql_int(limit)}"
        return [self._memory_dict(r) for r in self._all(query, args)]

    def memory_count(
        self,
        *,
        scopes: Sequence[tuple[str, str | None]] | None = None,
        status: str | None = None,
    ) -> int:
        where, args = memory_where(scopes, status, None, self._MARK)
        query = "SELECT COUNT(*) FROM memory" + (" WHERE " + " AND ".join(where) if where else "")
        return int(self._all(query, args)[0][0])

    def memory_search(self, searches: Sequence[MemorySearch]) -> list[list[dict[str, Any]]]:
        out: list[list[dict[str, Any]]] = []
        with self._conn() as conn:
            # Several searches: one probe finds which of all their scopes hold active memory,
            # instead of one probe per search (a reflections' search in a scope holding only
            # people's feedback then runs and finds nothing: the rows are the same).
            live = self._memory_scopes_in_use(conn, searches) if len(searches) > 1 else None
            for s in searches:
                found = _holds(s, live) if live is not None else self._memory_in_scope(conn, s)
                # (most loops keep no memory: one indexed probe)
                out.append(self._memory_rows(conn, s) if found else [])
        return out

    def memory_recall(self, recalls: Sequence[MemoryRecall]) -> list[MemoryFound]:
        with self._conn() as conn:  # one connection (one lock) for every side of every recall
            if len(recalls) == 1:
                people, loop, slots = recalls[0]
                return [self._memory_recall_one(conn, people, loop, slots)]
            # several runs' recalls (GroupRecall): one probe per side for all their scopes
            # (a scope with a reflection is one with an active item: only those probed)
            live = self._memory_scopes_in_use(conn, [s for r in recalls for s in r[:2]])
            mused = [r[1] for r in recalls if _holds(r[1], live)]
            thought = self._memory_scopes_in_use(conn, mused, True) if mused else set()
            out: list[MemoryFound] = []
            for people, loop, slots in recalls:
                rows = self._memory_rows(conn, people) if _holds(people, live) else []
                theirs = None
                if len(rows) < slots:  # slots free: the reflections may fill them
                    theirs = self._memory_rows(conn, loop) if _holds(loop, thought) else []
                out.append((rows, theirs))
            return out

    def _memory_recall_one(
        self, conn: Any, people: MemorySearch, loop: MemorySearch, slots: int
    ) -> MemoryFound:
        """A cycle's recall. Most loops keep no memory: one indexed probe of the scopes
        answers both sides then (the recall's only statement). Where it finds an item, that
        item's side holds some; the other side is probed only when its search is wanted
        (each side through its own index), so no recall runs more statements than its two
        searches probed apart. A backend may skip the probe where it found nothing before and
        the database tells that no memory was written since (``_known_empty``): another
        process's write is seen by the next recall."""
        last = self._last_probes
        if last is not None and last[0] is people and last[1] is loop:
            probe = last[2]  # the same searches as the last recall's (a loop's usual cycle)
        else:
            probe = _recall_probes(people, loop, self._MARK)
            try:  # scopes that hash cannot change: the searches are then known by identity
                hash((people.scopes, loop.scopes))
                self._last_probes = (people, loop, probe)
            except TypeError:
                pass
        if probe[0] is None or self._known_empty(conn, probe[0]):
            return [], []
        first = conn.execute(*probe[0]).fetchone()
        if first is None:
            self._found_empty(probe[0])
            return [], []
        said = _side(conn, probe[1], first[0] != "reflection" and probe[3])
        rows = self._memory_rows(conn, people) if said else []
        if len(rows) >= slots:
            return rows, None
        told = _side(conn, probe[2], first[0] == "reflection" and probe[3])
        return rows, (self._memory_rows(conn, loop) if told else [])

    _last_probes: tuple[MemorySearch, MemorySearch, Probes] | None = None
    """The last recall's searches and their probes: a loop asks the same searches (the same
    objects, ``_recall._searches``) cycle after cycle while its query does not change."""

    def _known_empty(self, conn: Any, probe: Statement) -> bool:
        """Whether ``probe`` found no active memory when it last ran and nothing can have
        written memory since (so it would find none now). The default: unknown, probe again."""
        return False

    def _found_empty(self, probe: Statement) -> None:
        """``probe`` found no active memory (kept by a backend whose ``_known_empty`` reads it)."""

    def _memory_rows(self, conn: Any, s: MemorySearch) -> list[dict[str, Any]]:
        return [self._memory_dict(r) for r in conn.execute(*self._memory_search_sql(s))]

    def _memory_scopes_in_use(
        self, conn: Any, searches: Sequence[MemorySearch], reflections: bool = False
    ) -> set[tuple[str, str]]:
        """Which of the searches' ``(scope, scope_key)`` pairs hold an active item (an
        active reflection: ``reflections``)."""
        index = self._reflections_index(reflections)
        which = " AND signal='reflection'" if reflections else ""
        pairs = list(dict.fromkeys((sc, k) for s in searches for sc, k in s.scopes))
        m = self._MARK
        live: set[tuple[str, str]] = set()
        for i in range(0, len(pairs), 400):  # under any build's limit on bound parameters
            chunk = pairs[i : i + 400]
            cond = " OR ".join([f"(scope={m} AND scope_key={m})"] * len(chunk))
            live.update(
                (r[0], r[1])
                for r in conn.execute(
                    f"SELECT DISTINCT scope, scope_key FROM memory{index} WHERE "
                    f"status='active'{which} AND ({cond})",
                    [v for pair in chunk for v in pair],
                )
            )
        return live

    def _memory_in_scope(self, conn: Any, s: MemorySearch) -> bool:
        """Whether any active item lies in the search's scopes (the scope index answers)."""
        probe = _probe(_side_of(s), self._MARK)
        return probe is not None and conn.execute(*probe).fetchone() is not None

    def _reflections_index(self, reflections: bool | None) -> str:
        """Where a search reads reflections only, SQLite is told their index: without
        statistics its planner walked every active item of the scope (``memory_strength``)
        to find the few reflections. PostgreSQL's planner weighs the partial index itself."""
        return _by_index(reflections, self._MARK)

    def _memory_search_sql(self, s: MemorySearch) -> tuple[str, list[Any]]:
        """One search as one statement, all ranking in the database:

        - ``hit``: every active match in the scopes with its raw relevance (the best one
          scales the others, so all are scored — by the full-text index alone), or the newest
          ``s.ranked`` of them (older matches then rank as non-matches);
        - ``bar``: the ``limit``-th best score among the ``4 × limit`` most relevant matches, a
          lower bound of the final ``limit``-th score: a match whose relevance (an upper
          bound of its score, strengths being at most 1) is under it cannot place, so only
          the others are looked up in the table;
        - per scope, the ``limit`` strongest items: a non-match ranks at the floor, by
          strength, so no other non-match can place;
        - the candidates ranked; whole rows read for the first ``limit`` only.

        ``s.reflections`` keeps people's feedback or reflections only (``_signals``), in every
        part: the matches scored, their best, the bar and the strongest."""
        m = self._MARK
        pairs = [(scope, key) for scope, key in s.scopes]
        if not pairs or s.limit <= 0:
            return "SELECT * FROM memory WHERE 1=0", []
        fts5 = self._MARK == "?"  # SQLite (FTS5); PostgreSQL's psycopg marks with %s
        k = "rowid" if fts5 else "memory_id"  # the cheapest way back to a row
        limit, floor = int(s.limit), float(s.floor)
        cols = f"m.{k} AS k, m.strength, m.scope, m.updated_at, m.memory_id"
        in_scope = "(" + " OR ".join([f"(m.scope={m} AND m.scope_key={m})"] * len(pairs)) + ")"
        pair_args = [v for pair in pairs for v in pair]
        sig, by_index = _signals(s, "m."), self._reflections_index(s.reflections)
        ctes: list[str] = []
        branches: list[str] = []
        args: list[Any] = []
        top = "0"
        if s.terms:
            if fts5:
                # The tag column keeps the match to the scopes' active items, so no other
                # match is scored; bm25() is lower for better matches; the tag weighs 0.
                terms = " OR ".join(f'"{t}"' for t in s.terms)
                # each side its own tags (a reflection's apart: schema v15)
                sides = [False, True] if s.reflections is None else [s.reflections]
                tags = " OR ".join(
                    f'"{memory_tag(scope, key, side)}"' for side in sides for scope, key in pairs
                )
                # Capped, FTS5 hands the matches out newest first (rowid order, which it
                # keeps) and stops after ``ranked``: bm25() reads only those rows.
                cap = "" if s.ranked is None else f" ORDER BY rowid DESC LIMIT {int(s.ranked)}"
                ctes.append(
                    "hit AS MATERIALIZED (SELECT rowid AS k, -bm25(memory_fts, 1.0, 1.0, 0.0) "
                    f"AS raw FROM memory_fts WHERE memory_fts MATCH ?{cap})"
                )
                args.append(f"{{text rule}} : ({terms}) AND tag : ({tags})")
            else:
                tsq = " | ".join(f"'{t}'" for t in s.terms)
                match = (
                    f"FROM memory m, to_tsquery('english'::regconfig, {m}) q "
                    f"WHERE m.search @@ q AND m.status='active'{sig}"
                )
                if s.ranked is None:
                    ctes.append(
                        "hit AS MATERIALIZED (SELECT m.memory_id AS k, ts_rank(m.search, q) "
                        f"AS raw {match} AND {in_scope})"
                    )
                    args += [tsq, *pair_args]
                else:
                    # Capped, the newest ``ranked`` matches of each scope (memory_recent, one
                    # index walk per scope that stops at the cap; an OR of scopes would make
                    # the planner read every match and sort them), then the newest of those;
                    # ts_rank() reads only their vectors.
                    cap = f"ORDER BY created_at DESC, k DESC LIMIT {int(s.ranked)}"
                    per_scope = " UNION ALL ".join(
                        [
                            f"(SELECT m.memory_id AS k, m.created_at, m.search, q {match} "
                            f"AND m.scope={m} AND m.scope_key={m} {cap})"
                        ]
                        * len(pairs)
                    )
                    ctes.append(
                        "hit AS MATERIALIZED (SELECT c.k, ts_rank(c.search, c.q) AS raw FROM "
                        f"(SELECT * FROM ({per_scope}) u {cap}) c)"
                    )
                    args += [v for pair in pairs for v in (tsq, *pair)]
            top = "(SELECT MAX(raw) FROM hit)"
            rel = f"CASE WHEN t.top > 0 THEN {floor} + {1 - floor} * h.raw / t.top ELSE {floor} END"
            ctes.append(f"t AS (SELECT {top} AS top)")
            # A hit is an active item of the scopes: on SQLite the check is belt and braces
            # over the FTS5 index. On PostgreSQL the same statement's snapshot filtered it
            # already, and left out: without statistics the planner took the check for very
            # selective and read every row of the scopes to join them to the hits.
            again, again_args = (
                (f"AND m.status='active'{sig} AND {in_scope}", pair_args) if fts5 else ("", [])
            )
            ctes.append(
                f"bar AS (SELECT COALESCE((SELECT m.strength * {rel} AS score FROM "
                f"(SELECT k, raw FROM hit ORDER BY raw DESC LIMIT {4 * limit}) h "
                f"JOIN memory m ON m.{k} = h.k CROSS JOIN t WHERE 1=1 {again} "
                f"ORDER BY score DESC LIMIT 1 OFFSET {limit - 1}), 0) AS bar)"
            )
            args += again_args
            branches.append(
                # CROSS JOIN fixes SQLite's join order: the bar first, so that a match under
                # it is dropped before its row is looked up.
                f"SELECT {cols}, h.raw FROM t CROSS JOIN bar CROSS JOIN hit h "
                f"CROSS JOIN memory m WHERE m.{k} = h.k AND {rel} >= bar.bar - 1e-9 {again}"
            )
            args += again_args
        for scope, key in pairs:
            branches.append(
                f"SELECT * FROM (SELECT {cols}, 0.0 AS raw FROM memory m{by_index} "
                f"WHERE m.scope={m} AND m.scope_key={m} AND m.status='active'{sig} "
                f"ORDER BY m.strength DESC, m.updated_at DESC, m.memory_id LIMIT {limit}) AS strongest"
            )
            args += [scope, key]
        ctes.append(f"cand AS ({' UNION ALL '.join(branches)})")
        order = "score DESC, scope_rank, strength DESC, updated_at DESC, memory_id"
        query = (
            f"WITH {', '.join(ctes)}, "
            "best AS (SELECT k, strength, scope, updated_at, memory_id, MAX(raw) AS raw "
            "FROM cand GROUP BY k, strength, scope, updated_at, memory_id), "
            "ranked AS (SELECT k, strength, updated_at, memory_id, "
            f"ROUND(CAST(strength * CASE WHEN top > 0 THEN {floor} + {1 - floor} * raw / top "
            f"ELSE {floor} END AS NUMERIC), 9) AS score, "
            "CASE scope WHEN 'task' THEN 0 WHEN 'project' THEN 1 ELSE 2 END AS scope_rank "
            f"FROM best CROSS JOIN (SELECT {'t.top FROM t' if s.terms else '0 AS top'}) tt "
            f"ORDER BY {order} LIMIT {limit}) "
            f"SELECT {', '.join(f'm.{c.strip()}' for c in MEMORY_COLS.split(','))} "
            f"FROM ranked JOIN memory m ON m.{k} = ranked.k "
            "ORDER BY ranked.score DESC, ranked.scope_rank, ranked.strength DESC, "
            "ranked.updated_at DESC, ranked.memory_id"
        )
        return query, args

    def memory_set_status(
        self,
        memory_id: str,
        status: str,
        *,
        by: str,
        now: float,
        expect: Sequence[str] | None = None,
        not_by: str | None = None,
    ) -> dict[str, Any]:
        if status not in MEMORY_STATUSES:
            raise StoreError(
                f"unknown memory status {status!r}; one of {', '.join(MEMORY_STATUSES)}"
            )
        with self._tx() as conn:
            self._memory_writes += 1
            # FOR UPDATE where rows lock: two people deciding one item at once queue here.
            row = conn.execute(self._q.memory_for_update, (memory_id,)).fetchone()
            if row is None:
                raise MemoryNotFoundError(f"no memory item {memory_id!r} in {self.url}")
            item = self._memory_dict(row)
            if item["status"] == status:
                return item
            if expect is not None and item["status"] not in expect:
                raise ConflictError(
                    f"memory item {item['memory_id']} is {item['status']}, "
                    f"not {' or '.join(expect)}"
                )
            if not_by is not None and person_key(str(item["by"])) == person_key(not_by):
                # read on the locked row: the check and the change are one transaction
                raise NotPermittedError(
                    f"{not_by} added memory {memory_id} and cannot make it {status} "
                    "(separation of duties)"
                )
            history = [*item["history"], {"status": status, "by": by, "at": now}]
            conn.execute(self._q.set_memory_status, (status, now, self._js(history), memory_id))
            item.update(status=status, updated_at=now, history=history)
        return item


def _holds(s: MemorySearch, live: set[tuple[str, str]]) -> bool:
    """Whether the search may find anything: a scope of it holds an item (``live``)."""
    return s.limit > 0 and any(pair in live for pair in s.scopes)


Statement = tuple[str, tuple[str, ...]]


Side = tuple[Sequence[tuple[str, str]], bool | None, bool]
"""What a probe of a search's side depends on: its scopes, its side
(``MemorySearch.reflections``) and whether it asks for rows; not its query."""


def _side_of(s: MemorySearch) -> Side:
    return s.scopes, s.reflections, s.limit > 0


def _probe(side: Side, mark: str) -> Statement | None:
    """Whether a search's side holds an active item in its scopes, as a statement and its
    arguments (its side's index answers); None when it asks for no rows."""
    scopes, reflections, asks = side
    if not scopes or not asks:
        return None
    return (
        f"SELECT 1 FROM memory{_by_index(reflections, mark)} WHERE "
        f"status='active'{_which(reflections)} AND ({_in_scopes(len(scopes), mark)}) LIMIT 1",
        tuple(_flat(scopes)),
    )


def _side(conn: Any, probe: Statement | None, known: bool) -> bool:
    """Whether a recall's side holds an active item: ``known``, or its ``probe`` finds one."""
    return known or (probe is not None and conn.execute(*probe).fetchone() is not None)


Probes = tuple[Statement | None, Statement | None, Statement | None, bool]


def _recall_probes(people: MemorySearch, loop: MemorySearch, mark: str) -> Probes:
    """``_recall_probes_of``, cached where the scopes can be (tuples): the same scopes every
    cycle of a loop, whatever its query, so the same statements, built once."""
    mine, theirs = _side_of(people), _side_of(loop)
    try:
        return _recall_probes_cached(mine, theirs, mark)
    except TypeError:  # scopes held in lists (unhashable): built each time
        return _recall_probes_of(mine, theirs, mark)


def _recall_probes_of(mine: Side, theirs: Side, mark: str) -> Probes:
    """A recall's probes (``_memory_recall_one``), each with its arguments, None where its
    search asks for no rows: the signal of any active item of both searches' scopes, then
    whether people's side (``mine``), and the reflections' side (``theirs``), holds one; and
    whether the first answers for the sides (both searches read the same scopes)."""
    sides = [_probe(mine, mark), _probe(theirs, mark)]
    anywhere = dict.fromkeys(
        [pair for s, side in zip((mine, theirs), sides, strict=True) if side for pair in s[0]]
    )
    first: Statement | None = None
    if anywhere:
        first = (
            f"SELECT signal FROM memory WHERE status='active' AND "
            f"({_in_scopes(len(anywhere), mark)}) LIMIT 1",
            tuple(_flat(list(anywhere))),
        )
    same = mine[0] == theirs[0] and None not in sides
    return first, sides[0], sides[1], same


_recall_probes_cached = functools.lru_cache(maxsize=256)(_recall_probes_of)


def _in_scopes(n: int, mark: str) -> str:
    """The condition keeping ``n`` ``(scope, scope_key)`` pairs' items."""
    return " OR ".join([f"(scope={mark} AND scope_key={mark})"] * n)


def _by_index(reflections: bool | None, mark: str) -> str:
    """``SQLStore._reflections_index`` for a store marking parameters with ``mark``."""
    return " INDEXED BY memory_reflections" if reflections and mark == "?" else ""


def _flat(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """``[scope, key, scope, key, …]``, in a loop (no comprehension a cycle)."""
    out: list[str] = []
    for scope, key in pairs:
        out += (scope, key)
    return out


def _signals(s: MemorySearch, prefix: str = "") -> str:
    """The condition keeping a search's side (``MemorySearch.reflections``): people's
    feedback, reflections, or (None) every item."""
    return _which(s.reflections, prefix)


def _which(reflections: bool | None, prefix: str = "") -> str:
    """``_signals`` of a search whose ``reflections`` is this."""
    if reflections is None:
        return ""
    return f" AND {prefix}signal {'=' if reflections else '<>'} 'reflection'"
