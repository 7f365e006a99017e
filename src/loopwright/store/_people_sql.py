"""The people statements of the SQL stores (see ``_people`` for the protocol)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import ApprovalError, ConfigError, ConflictError, already_decided
from ._people import AuditRecord, AuthorityRecord, PeopleStore, UserRecord, Vote, person_key
from ._records import Approval, NewApproval
from ._rows import APPROVAL_COLS, approval_row, sql_int

__all__ = ["PeopleSQL"]

_USER_COLS = "name, roles, limits, created_at, created_by, revoked_at"
_AUDIT_COLS = "audit_id, at, actor, action, target, outcome, origin, detail"


@functools.cache
def _in_dialect(mark: str, text: str) -> str:
    """``text`` written with ``?`` placeholders, in the driver's (once per statement)."""
    return text if mark == "?" else text.replace("?", mark)


class PeopleSQL(PeopleStore):
    """Mixed into ``SQLStore``: the same statements serve SQLite and PostgreSQL."""

    _MARK: ClassVar[str]
    _UNIQUE: ClassVar[tuple[type[BaseException], ...]]
    _LOCKS: ClassVar[bool]

    if TYPE_CHECKING:

        def _tx(self) -> AbstractContextManager[Any]: ...
        def _all(self, query: str, args: Sequence[Any]) -> list[Any]: ...
        def _approval(self, row: Sequence[Any]) -> Approval: ...
        def _lock_run(self, conn: Any, run_id: str) -> None: ...
        def _store_now(self, conn: Any, now: float) -> float: ...
        @staticmethod
        def _js(value: Any) -> Any: ...
        @staticmethod
        def _jl(value: Any) -> Any: ...

    def _p(self, text: str) -> str:
        return _in_dialect(self._MARK, text)

    def _user(self, row: Sequence[Any]) -> UserRecord:
        limits = self._jl(row[2])
        return UserRecord(
            name=row[0],
            roles=tuple(self._jl(row[1])),
            limits={str(k): (None if v is None else float(v)) for k, v in limits.items()},
            created_at=row[3],
            created_by=row[4],
            revoked_at=row[5],
        )

    def has_users(self) -> bool:
        return bool(self._all(self._p("SELECT 1 FROM users LIMIT 1"), ()))

    def add_user(
        self,
        name: str,
        *,
        roles: Sequence[str],
        limits: dict[str, float | None],
        by: str,
        now: float,
    ) -> UserRecord:
        p, js = self._p, self._js
        with self._tx() as conn:
            # "Ben" beside "ben" would be the same person under two spellings: two votes on a
            # four-eyes request, and a starter who could approve their own run as the other
            if self._LOCKS:
                # Two admins adding "Ben" and "ben" at once each read the users before the
                # other's insert (the folded name has no index to refuse the second): adds
                # take turns. SQLite's write transaction already does; readers never wait.
                conn.execute("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
            key = person_key(name)
            for (other,) in conn.execute(p("SELECT name FROM users"), ()).fetchall():
                if other != name and person_key(other) == key:
                    raise ConflictError(
                        f"user {other!r} exists: {name!r} would be the same name spelled "
                        "another way"
                    )
            row = conn.execute(p("SELECT revoked_at FROM users WHERE name=?"), (name,)).fetchone()
            if row is not None and row[0] is None:
                raise ConflictError(f"user {name!r} exists; revoke them first to change roles")
            if row is None:
                conn.execute(
                    p(f"INSERT INTO users({_USER_COLS}) VALUES(?,?,?,?,?,NULL)"),
                    (name, js(list(roles)), js(limits), now, by),
                )
            else:
                conn.execute(
                    p(
                        "UPDATE users SET roles=?, limits=?, created_at=?, created_by=?, "
                        "revoked_at=NULL WHERE name=?"
                    ),
                    (js(list(roles)), js(limits), now, by, name),
                )
            got = conn.execute(p(f"SELECT {_USER_COLS} FROM users WHERE name=?"), (name,))
            return self._user(got.fetchone())

    def get_user(self, name: str) -> UserRecord | None:
        rows = self._all(self._p(f"SELECT {_USER_COLS} FROM users WHERE name=?"), (name,))
        return self._user(rows[0]) if rows else None

    def list_users(self) -> list[UserRecord]:
        return [
            self._user(r) for r in self._all(f"SELECT {_USER_COLS} FROM users ORDER BY name", ())
        ]

    def revoke_user(self, name: str, *, now: float) -> UserRecord:
        p = self._p
        with self._tx() as conn:
            row = conn.execute(
                p(f"SELECT {_USER_COLS} FROM users WHERE name=?"), (name,)
            ).fetchone()
            if row is None:
                raise ConfigError(f"no user {name!r}", field="NAME")
            conn.execute(
                p("UPDATE users SET revoked_at=? WHERE name=? AND revoked_at IS NULL"), (now, name)
            )
            conn.execute(
                p("UPDATE tokens SET revoked_at=? WHERE name=? AND revoked_at IS NULL"), (now, name)
            )
            # Their approvals of requests still waiting for more people are withdrawn: a
            # revoked person's vote made a four-eyes request with the next person's (the audit
            # log keeps that they voted). Decided requests keep their votes.
            conn.execute(
                p(
                    'DELETE FROM votes WHERE "by"=? AND approval_id IN '
                    "(SELECT approval_id FROM approvals WHERE status='pending')"
                ),
                (name,),
            )
            got = conn.execute(p(f"SELECT {_USER_COLS} FROM users WHERE name=?"), (name,))
            return self._user(got.fetchone())

    def set_token(self, name: str, token_hash: str, *, now: float) -> None:
        p = self._p
        with self._tx() as conn:
            row = conn.execute(p("SELECT revoked_at FROM users WHERE name=?"), (name,)).fetchone()
            if row is None:
                raise ConfigError(f"no user {name!r}", field="NAME")
            if row[0] is not None:
                raise ConfigError(f"user {name!r} is revoked; add them again first", field="NAME")
            conn.execute(
                p("UPDATE tokens SET revoked_at=? WHERE name=? AND revoked_at IS NULL"), (now, name)
            )
            conn.execute(
                p("INSERT INTO tokens(token_hash, name, created_at) VALUES(?,?,?)"),
                (token_hash, name, now),
            )

    def user_by_token(self, token_hash: str) -> UserRecord | None:
        cols = ", ".join(f"u.{c.strip()}" for c in _USER_COLS.split(","))
        rows = self._all(
            self._p(
                f"SELECT {cols} FROM tokens t JOIN users u ON u.name = t.name WHERE "
                "t.token_hash=? AND t.revoked_at IS NULL AND u.revoked_at IS NULL"
            ),
            (token_hash,),
        )
        return self._user(rows[0]) if rows else None

    def add_vote(
        self,
        approval_id: str,
        by: str,
        *,
        note: str | None,
        now: float,
        audit: Callable[[Sequence[Vote]], Mapping[str, Any]] | None = None,
    ) -> list[Vote]:
        p = self._p
        with self._tx() as conn:
            # The run's row first, as ``decide_approval`` takes it: two people voting at once
            # on PostgreSQL each counted only their own uncommitted vote, so with two needed
            # both were told "1 of 2" and the request stayed pending with both votes, neither
            # able to vote again. Locked, the second counts the first's vote. A request decided
            # meanwhile (a denial is final) takes no vote.
            owner = conn.execute(
                p("SELECT run_id FROM approvals WHERE approval_id=?"), (approval_id,)
            ).fetchone()
            if owner is None:
                raise ApprovalError(f"no approval request {approval_id!r}")
            self._lock_run(conn, owner[0])
            found = conn.execute(
                p("SELECT status, decided_by FROM approvals WHERE approval_id=?"), (approval_id,)
            ).fetchone()
            if found[0] != "pending":
                raise already_decided(owner[0], approval_id, found[0], found[1])
            # The voter may have been revoked since the engine checked them: ``revoke_user``
            # withdraws pending votes, so a vote written after it would stand alone. Read (and on
            # PostgreSQL hold, FOR SHARE) their row: a revocation commits before (refused here)
            # or waits for this vote and then withdraws it.
            share = " FOR SHARE" if self._LOCKS else ""
            voter = conn.execute(
                p("SELECT revoked_at FROM users WHERE name=?" + share), (by,)
            ).fetchone()
            if voter is not None and voter[0] is not None:
                raise ApprovalError(f"{by} was revoked; their approval does not count")
            try:
                conn.execute(
                    p('INSERT INTO votes(approval_id, "by", at, note) VALUES(?,?,?,?)'),
                    (approval_id, by, now, note),
                )
            except self._UNIQUE:
                raise ConflictError(
                    f"{by} already approved request {approval_id}; it needs another person"
                ) from None
            rows = conn.execute(
                p('SELECT approval_id, "by", at, note FROM votes WHERE approval_id=? ORDER BY at'),
                (approval_id,),
            ).fetchall()
            votes = [Vote(*r) for r in rows]
            if audit is not None:  # the record of the vote stands or falls with it
                self._audit_row(conn, audit(votes))
        return votes

    def votes(self, approval_id: str) -> list[Vote]:
        rows = self._all(
            self._p(
                'SELECT approval_id, "by", at, note FROM votes WHERE approval_id=? ORDER BY at'
            ),
            (approval_id,),
        )
        return [Vote(*r) for r in rows]

    def grant_approval(
        self, run_id: str, approval: NewApproval, *, by: str, note: str | None, now: float
    ) -> Approval:
        with self._tx() as conn:
            now = self._store_now(conn, now)  # (as any request's times: its expiry's clock)
            row = list(approval_row(run_id, approval, now, self._js))
            row[10], row[13], row[14], row[15] = "approved", by, now, note
            conn.execute(
                self._p(
                    f"INSERT INTO approvals({APPROVAL_COLS}) VALUES({','.join('?' * 17)}) "
                    "ON CONFLICT DO NOTHING"
                ),
                row,
            )
            got = conn.execute(
                self._p(f"SELECT {APPROVAL_COLS} FROM approvals WHERE approval_id=?"),
                (approval.approval_id,),
            ).fetchone()
        return self._approval(got)

    def audit_put(
        self,
        *,
        actor: str,
        action: str,
        target: str,
        outcome: str,
        origin: str,
        detail: dict[str, Any],
        now: float,
    ) -> int:
        entry = {"actor": actor, "action": action, "target": target, "outcome": outcome}
        with self._tx() as conn:
            return self._audit_row(conn, {**entry, "origin": origin, "detail": detail, "now": now})

    def _audit_row(self, conn: Any, entry: Mapping[str, Any]) -> int:
        """Write one audit record (``audit_put``'s fields) in ``conn``'s transaction: that
        of the action it records, where the two must stand or fall together (a pause)."""
        row = conn.execute(
            self._p(
                "INSERT INTO audit(at, actor, action, target, outcome, origin, detail) "
                "VALUES(?,?,?,?,?,?,?) RETURNING audit_id"
            ),
            (
                entry["now"],
                entry["actor"],
                entry["action"],
                entry["target"],
                entry["outcome"],
                entry["origin"],
                self._js(entry["detail"]),
            ),
        ).fetchone()
        return int(row[0])

    def audit(
        self,
        *,
        after: int = 0,
        limit: int | None = None,
        actor: str | None = None,
        target: str | None = None,
        action: str | None = None,
    ) -> list[AuditRecord]:
        where: list[str] = ["audit_id > ?"]
        args: list[Any] = [sql_int(after)]
        if actor is not None:
            where.append("actor = ?")
            args.append(actor)
        if target is not None:
            where.append("target = ?")
            args.append(target)
        if action is not None:
            where.append("action = ?")
            args.append(action)
        query = f"SELECT {_AUDIT_COLS} FROM audit WHERE {' AND '.join(where)} ORDER BY audit_id"
        if limit is not None:
            query += " LIMIT ?"
            args.append(sql_int(limit))
        rows = self._all(self._p(query), args)
        return [AuditRecord(r[0], r[1], r[2], r[3], r[4], r[5], r[6], self._jl(r[7])) for r in rows]

    def loop_versions(self) -> list[tuple[str, str | None, str | None]]:
        rows = self._all(
            "SELECT loop_name, loop_version, MAX(spec_ref), MAX(created_at) FROM runs "
            "GROUP BY loop_name, loop_version ORDER BY 4 DESC",
            (),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def authority_record(self, loop_name: str, loop_version: str | None) -> AuthorityRecord:
        p, jl = self._p, self._jl
        # Runs of one loop version (an index on runs(loop_name, loop_version) finds them).
        same = "r.loop_name = ? AND " + (
            "r.loop_version IS NULL" if loop_version is None else "r.loop_version = ?"
        )
        args: list[Any] = [loop_name] + ([] if loop_version is None else [loop_version])
        decided = self._all(
            p(
                "SELECT a.approval_id, a.run_id, a.decided_at, a.status, a.decided_by, a.evidence "
                f"FROM approvals a JOIN runs r ON r.run_id = a.run_id WHERE {same} "
                "AND a.status IN ('approved', 'denied') ORDER BY a.decided_at, a.approval_id"
            ),
            args,
        )
        effects = self._all(
            p(
                "SELECT j.updated_at, j.data FROM journal j JOIN runs r ON r.run_id = j.run_id "
                f"WHERE {same} AND j.kind = 'effect' AND j.status = 'done'"
            ),
            args,
        )
        failed = self._all(
            p(
                f"SELECT r.ended_at FROM runs r WHERE {same} AND r.held_out_passed = ? "
                "AND r.status = 'accepted'"
            ),
            [*args, False],
        )
        compensated = []
        for at, data in effects:
            d = jl(data)
            if str(d.get("name", "")).endswith(".compensate"):
                compensated.append((float(at), str(d.get("kind"))))
        return AuthorityRecord(
            decisions=[(r[0], r[1], float(r[2] or 0), r[3], r[4] or "", jl(r[5])) for r in decided],
            compensated=sorted(compensated),
            held_out_failed=sorted(float(r[0] or 0) for r in failed),
        )
