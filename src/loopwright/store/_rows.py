"""Row planning for the SQL stores (``_sql.SQLStore``): the rows a commit writes, table by
table, in the column order of ``INSERT_*_COLS`` and ``APPROVAL_COLS`` (the statements of
``_sql.Statements`` insert them), fencing a group commit, and what is checked before any SQL
runs (the run columns a commit may set, a memory item's row). ``js`` makes a JSON column's
parameter: text for SQLite, a ``Json`` for psycopg."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._errors import StaleLeaseError, StoreError
from .._record_codec import pack as pack_record
from ._protocol_commit import (  # (the commit protocol's: the engine catches them)
    RunBusy,
)
from ._records import Approval, CommitRequest, NewApproval, NewEvent, VersionRow
from ._schema import FENCED_COLS

Row = tuple[Any, ...]

SQL_INT_MAX = 2**63 - 1  # SQLite's and PostgreSQL's bigint


def sql_int(n: int) -> int:
    """``n`` within a bigint: a limit or position beyond it means "all" or "none" anyway, and
    passed on as it is the database answers with an overflow (read as a damaged store)."""
    return max(-SQL_INT_MAX, min(int(n), SQL_INT_MAX))


@dataclass(slots=True)
class BatchRows:
    """What ``commit_many``'s one-pass path writes: a result per commit (its stop flag,
    ``ASKED``, or why it was refused) and the rows of every accepted commit, table by table."""

    results: list[bool | StoreError] = field(default_factory=list)
    # run-row updates, grouped by the columns they set (one statement per group)
    updates: dict[tuple[str, ...], list[Row]] = field(default_factory=dict)
    checkpoints: list[Row] = field(default_factory=list)
    events: list[Row] = field(default_factory=list)
    approvals: list[Row] = field(default_factory=list)
    versions: list[Row] = field(default_factory=list)
    rejected: list[Row] = field(default_factory=list)
    forgotten: list[Row] = field(default_factory=list)  # (run, cycle): a rollback's
    cleared: list[Row] = field(default_factory=list)  # (run, key): journal entries made moot


class BatchRefused(Exception):
    """The database refused a value of a one-pass ``commit_many`` (a duplicate key, a number
    out of range...): nothing of the batch was written, and it is retried commit by commit so
    that the refusal is only its own run's. Never raised out of ``commit_many``."""


# ``_fence_batch``'s token for a run whose row another session holds locked (``RunBusy``).
BUSY_TOKEN = -1


def batch_rows(
    items: Sequence[CommitRequest],
    cols: Sequence[dict[str, Any]],
    owner: Mapping[str, tuple[int, Any]],
    now: float,
    *,
    js: Callable[[Any], Any],
) -> BatchRows:
    """Fence each commit against ``owner`` (run_id → (fencing token, stop flag: ``ASKED``),
    read under the batch's write lock) and turn the accepted ones into rows; ``cols[i]`` are the run
    columns of ``items[i]``, already checked. A run-row update's row is ``(*column values, now,
    run_id, token)``, for ``... WHERE run_id=? AND fencing_token=?``; ``js`` makes a JSON
    column's parameter (text for SQLite, a ``Json`` for psycopg)."""
    out = BatchRows()
    for it, cols_ in zip(items, cols, strict=True):
        held = owner.get(it.run_id)
        if held is not None and held[0] == BUSY_TOKEN:
            out.results.append(RunBusy(f"run {it.run_id}: its row is locked by another session"))
            continue
        if held is None or held[0] != it.token:
            out.results.append(
                StaleLeaseError(
                    f"run {it.run_id}: checkpoint refused, fencing token {it.token} is stale"
                )
            )
            continue
        out.updates.setdefault(tuple(cols_), []).append((*cols_.values(), now, it.run_id, it.token))
        out.checkpoints.append(checkpoint_row(it, now, js))
        out.events.extend(event_row(it.run_id, e, now, js) for e in it.events)
        out.approvals.extend(approval_row(it.run_id, a, now, js) for a in it.approvals)
        out.versions.extend(version_row(it.run_id, v, js) for v in it.versions)
        if it.forget_rejected_after is not None:
            out.forgotten.append((it.run_id, it.forget_rejected_after))
        out.rejected.extend((it.run_id, d, c) for d, c in it.rejected)
        out.cleared.extend((it.run_id, k) for k in it.cleared)
        out.results.append(bool(cols_.get("cancel_requested", held[1])))
    return out


# The rows of the tables a commit writes, in the column order of INSERT_CHECKPOINT_COLS,
# INSERT_EVENT_COLS and APPROVAL_COLS (both stores).
INSERT_CHECKPOINT_COLS = "run_id, seq, cycle, state, record, fencing_token, created_at, base"
INSERT_VERSION_COLS = "run_id, ref, n, cycle, status, value"
INSERT_REJECTED_COLS = "run_id, digest, cycle"
INSERT_EVENT_COLS = "run_id, cycle, kind, ts, data"
APPROVAL_COLS = (
    "approval_id, run_id, cycle, kind, rule, what, why, evidence, diff, action_hash, status, "
    "requested_at, expires_at, decided_by, decided_at, note, answer"
)


def checkpoint_row(it: CommitRequest, now: float, js: Callable[[Any], Any]) -> Row:
    return (
        it.run_id,
        it.seq,
        it.cycle,
        js(it.state),
        js(it.record if it.packed else pack_record(it.record)) if it.record else None,
        it.token,
        now,
        it.seq if it.base is None else it.base,
    )


def version_row(run_id: str, v: VersionRow, js: Callable[[Any], Any]) -> Row:
    ref, n, cycle, status, value = v
    return (run_id, ref, n, cycle, status, js(value))


def event_row(run_id: str, e: NewEvent, now: float, js: Callable[[Any], Any]) -> Row:
    return (run_id, e.cycle, e.kind, now, js(dict(e.data)))


def approval_row(run_id: str, a: NewApproval, now: float, js: Callable[[Any], Any]) -> Row:
    """A new request: pending, undecided."""
    return (
        a.approval_id,
        run_id,
        a.cycle,
        a.kind,
        a.rule,
        a.what,
        a.why,
        js(a.evidence),
        a.diff,
        a.action_hash,
        "pending",
        now,
        a.expires_at,
        None,
        None,
        None,
        None,
    )


def decided_event(
    a: Approval, by: str, note: str | None, answer: Any, now: float, js: Callable[[Any], Any]
) -> Row:
    """The ``approval_decided`` event of a decision just written on request ``a``."""
    data: dict[str, Any] = {
        "approval_id": a.approval_id,
        "status": a.status,
        "by": by,
        "note": note,
    }
    if answer is not None:
        data["answer"] = answer
    return (a.run_id, a.cycle, "approval_decided", now, js(data))


# The run columns a commit may set (the rest are the store's own: identity, lease, times).
UPDATABLE_RUN_COLS = frozenset(
    {
        "status",
        "stop_reason",
        "cycle",
        "best_score",
        "cost_usd",
        "tokens",
        "seconds",
        "packet",
        "ended_at",
        "last_seq",
        "lease_expires_at",
        "held_out_passed",
        "held_out_self_reported",
        "cancel_requested",
        # (what the commit charged of a fenced-out execution's spend: taken off the row's)
        *(name for name, _kind in FENCED_COLS),
    }
)


def run_cols(run: Mapping[str, Any], seq: int) -> dict[str, Any]:
    """A commit's run columns, checked, with ``last_seq``: what each store then adapts."""
    bad = set(run) - UPDATABLE_RUN_COLS
    if bad:
        raise StoreError(f"cannot update run columns {sorted(bad)}")
    return {**run, "last_seq": seq}


def memory_values(item: Mapping[str, Any], js: Callable[[Any], Any]) -> tuple[Any, ...]:
    """The row of a memory item (``MemoryItem.to_dict()`` keys); ``js`` makes JSON columns."""
    try:
        rule = item.get("rule")
        return (
            item["memory_id"],
            item["scope"],
            item.get("scope_key") or "",
            item["signal"],
            float(item["strength"]) + 0.0,  # -0.0 is 0.0 (PostgreSQL would keep the sign)
            item["text"],
            None if rule is None else js(rule),
            js(dict(item.get("source") or {})),
            item["by"],
            item["status"],
            float(item["created_at"]),
            float(item["updated_at"]),
            js(list(item.get("history") or [])),
        )
    except KeyError as exc:
        raise StoreError(f"memory item lacks {exc.args[0]!r}") from None


def memory_where(
    scopes: Sequence[tuple[str, str | None]] | None,
    status: str | None,
    memory_id: str | None,
    mark: str,
) -> tuple[list[str], list[Any]]:
    """WHERE clauses and arguments of ``memory_query`` (``mark``: the driver's placeholder)."""
    where: list[str] = []
    args: list[Any] = []
    if scopes is not None:
        ors = []
        for scope, key in scopes:
            if key is None:
                ors.append(f"scope={mark}")
                args.append(scope)
            else:
                ors.append(f"(scope={mark} AND scope_key={mark})")
                args.extend((scope, key))
        where.append("(" + " OR ".join(ors) + ")" if ors else "1=0")
    if status is not None:
        where.append(f"status={mark}")
        args.append(status)
    if memory_id is not None:
        where.append(f"memory_id={mark}")
        args.append(memory_id)
    return where, args


# A fork's inherited journal entry keeps the origin's data with ``inherited_from`` set to the
# run that did the effect: the origin's ``inherited_from`` when it is truthy (a fork of a
# fork names the first run), else the origin's run id -- ``{**data, "inherited_from":
# data.get("inherited_from") or run_id}``, computed by the database over the origin's row
# (``copy_effects``), the key kept in place when present, appended when not (SQLite's
# ``json_set``; PostgreSQL's ``json`` column keeps its text, so it is appended as text, and a
# falsy value replaced through ``json_each`` in the keys' order: ``jsonb`` would reorder them).
_SQLITE_TRUTHY = (
    "CASE json_type(data, '$.inherited_from') WHEN 'true' THEN 1 "
    "WHEN 'integer' THEN json_extract(data, '$.inherited_from') <> 0 "
    "WHEN 'real' THEN json_extract(data, '$.inherited_from') <> 0 "
    "WHEN 'text' THEN json_extract(data, '$.inherited_from') <> '' "
    "WHEN 'array' THEN json_array_length(data, '$.inherited_from') > 0 "
    "WHEN 'object' THEN json_extract(data, '$.inherited_from') <> '{}' ELSE 0 END"
)
_SQLITE_INHERITED = (
    f"CASE WHEN {_SQLITE_TRUTHY} THEN data ELSE json_set(data, '$.inherited_from', run_id) END"
)
_PG_TRUTHY = (
    "CASE json_typeof(data->'inherited_from') "
    "WHEN 'string' THEN (data->>'inherited_from') <> '' "
    "WHEN 'number' THEN (data->>'inherited_from')::numeric <> 0 "
    "WHEN 'boolean' THEN (data->>'inherited_from')::boolean "
    "WHEN 'array' THEN json_array_length(data->'inherited_from') > 0 "
    "WHEN 'object' THEN EXISTS (SELECT 1 FROM json_object_keys(data->'inherited_from')) "
    "ELSE false END"
)
_PG_INHERITED = (
    f"CASE WHEN {_PG_TRUTHY} THEN data "
    "WHEN json_typeof(data->'inherited_from') IS NULL THEN "
    "CASE WHEN EXISTS (SELECT 1 FROM json_object_keys(data)) "
    "THEN (left(rtrim(data::text, E' \\t\\n\\r'), -1) || ',\"inherited_from\":' "
    "|| to_json(run_id)::text || '}')::json "
    "ELSE ('{\"inherited_from\":' || to_json(run_id)::text || '}')::json END "
    "ELSE (SELECT json_object_agg(e.key, CASE WHEN e.key = 'inherited_from' "
    "THEN to_json(run_id) ELSE e.value END ORDER BY e.n) "
    "FROM json_each(data) WITH ORDINALITY AS e(key, value, n)) END"
)


def inherited_data(mark: str) -> str:
    """The SQL of an origin journal row's ``data`` as its fork inherits it (the row's own
    ``run_id`` and ``data`` columns), in the dialect of ``mark``."""
    return _SQLITE_INHERITED if mark == "?" else _PG_INHERITED


# A fork's inherited entries of business actions (``action``) whose claim still stands done by
# the run that did them (``from_run`` for an inherited reuse, else ``inherited_from``), or is
# being undone by it (a refund started, maybe in doubt: the fork inherits the payment all the
# same, so it is told when the refund settles, and one refused leaves it counted), at the
# generation the entry names (any, for an entry of a release that named none): the fork relies
# on each, as a run that reused it does, so each is recorded on its claim (``effect_reuses``).
# ``FOR UPDATE OF k`` (PostgreSQL): a refund whose ``undoing`` committed meanwhile is read as
# it now stands, as a reuse's write reads the claim under its lock (``JournalSQL._claim``).
_SQLITE_FIELD = "json_extract(j.data, '$.{}')"
_PG_FIELD = "(j.data->>'{}')"
_PG_GENERATION = (
    "CASE WHEN json_typeof(j.data->'generation') = 'number' "
    "THEN (j.data->>'generation')::numeric END"
)


def fork_reuses(mark: str, *, one_run: bool) -> str:
    """The SQL recording the reuses of ``j``'s inherited done entries (``one_run``: of the run
    given, with ``(created_at, run_id)`` as its parameters; else of every fork, with
    ``(created_at,)``), in the dialect of ``mark``."""
    f = _SQLITE_FIELD if mark == "?" else _PG_FIELD
    gen = f.format("generation") if mark == "?" else _PG_GENERATION
    which = f"j.run_id={mark} AND " if one_run else ""
    return (
        "INSERT INTO effect_reuses(kind, key, generation, run_id, created_at) "
        f"SELECT k.kind, k.key, k.generation, j.run_id, {mark} FROM journal j "
        f"JOIN effect_keys k ON k.kind = {f.format('kind')} AND k.key = {f.format('action')} "
        f"WHERE {which}j.kind='effect' AND j.status='done' AND k.status IN ('done', 'undoing') "
        f"AND COALESCE({f.format('inherited_from')}, '') <> '' "
        f"AND k.run_id = COALESCE(NULLIF({f.format('from_run')}, ''), "
        f"{f.format('inherited_from')}) AND k.run_id <> j.run_id "
        f"AND k.generation = COALESCE({gen}, k.generation)"
        + ("" if mark == "?" else " FOR UPDATE OF k")
        + " ON CONFLICT(kind, key, generation, run_id) DO NOTHING"
    )
