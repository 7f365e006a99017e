"""Two people approving one four-eyes request at the same moment (PostgreSQL).

Each vote was a transaction that inserted its row and then counted the request's votes; under
PostgreSQL's read committed, two such transactions in flight together each counted only their
own vote, so both were told "1 of 2": the request stayed pending with both votes recorded, and
neither person could approve again ("already approved"). The interleaving is placed, not timed:
ben's vote is held after its insert, cat's approval runs meanwhile, and ben's goes on once
cat's has either finished or is waiting on ben's transaction (read from the server's locks).
Cat approves through a runtime of its own, as a second process (or a dashboard request) would:
one runtime's operations on a run take turns (``_person_turn``), so within one runtime cat's
vote would wait for ben's to end, and the race is between runtimes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_people import FOUR_EYES, make_loop, people, task

import loopwright as lw

_COUNT = 'SELECT approval_id, "by", at, note FROM votes'


class _Held:
    """A connection that, once ben's vote has counted the votes, lets ``meanwhile`` run."""

    def __init__(self, conn: Any, meanwhile: Any) -> None:
        self._conn, self._meanwhile = conn, meanwhile

    def execute(self, query: str, *args: Any) -> Any:
        got = self._conn.execute(query, *args)  # (its rows are read into the client)
        if _COUNT in query and threading.current_thread().name == "ben":
            # ben has counted the votes and not yet committed: cat approves now
            self._meanwhile(self._conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@pytest.mark.postgres
def test_two_approvers_at_once_decide_the_request(pg_url: str, pg_schema: tuple[str, str]) -> None:
    import psycopg

    base = pg_schema[0]  # the server, for reading its locks
    with lw.Runtime(pg_url) as rt:
        people(rt)
        loop = make_loop(FOUR_EYES)
        big = rt.run_sync(loop, task("INV-9", 50000), task_key="big", by="rita")
        store: Any = rt.store
        tx = store._tx
        outcomes: dict[str, Any] = {}

        def approve(name: str) -> None:
            try:
                if name == "cat":
                    with lw.Runtime(pg_url) as other:
                        outcomes[name] = other.approve(big.run_id, by=name).status
                    return
                outcomes[name] = rt.approve(big.run_id, by=name).status
            except Exception as exc:  # recorded, asserted below
                outcomes[name] = exc

        def meanwhile(ben_pid: int) -> None:
            cat = threading.Thread(target=approve, args=("cat",), name="cat")
            cat.start()
            with psycopg.connect(base, autocommit=True) as mon:
                while cat.is_alive():  # until cat finished, or waits on ben's transaction
                    cat.join(0.05)
                    row = mon.execute(
                        "SELECT count(*) FROM pg_stat_activity "
                        "WHERE %s = ANY(pg_blocking_pids(pid))",
                        (ben_pid,),
                    ).fetchone()
                    if row and row[0]:
                        break
            outcomes["cat-thread"] = cat

        @contextmanager
        def held_tx() -> Iterator[Any]:
            with tx() as conn:
                yield _Held(conn, meanwhile)

        store._tx = held_tx
        try:
            ben = threading.Thread(target=approve, args=("ben",), name="ben")
            ben.start()
            ben.join()
            outcomes.pop("cat-thread").join()
        finally:
            del store._tx
        assert not any(isinstance(v, BaseException) for v in outcomes.values()), outcomes
        req = rt.store.approval(rt.store.approvals(run_id=big.run_id)[0].approval_id)
        assert req is not None
        assert sorted(v.by for v in rt.store.votes(req.approval_id)) == ["ben", "cat"]
        assert req.status == "approved", (req.status, outcomes)
        assert sorted(outcomes.values()) == ["approved", "pending"]
        assert rt.resume_sync(big.run_id, loop).accepted


def test_a_vote_on_a_denied_request_is_refused(url: str) -> None:
    with lw.Runtime(url) as rt:
        people(rt)
        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-8", 50000), task_key="b", by="rita")
        req = rt.pending_approval(big.run_id)
        rt.deny(big.run_id, by="ben", note="no")
        with pytest.raises(lw.ApprovalError, match="already denied"):
            rt.store.add_vote(req.approval_id, "cat", note=None, now=1.0)
        assert rt.store.votes(req.approval_id) == []


def test_a_decision_that_lost_the_race_is_audited_as_refused(url: str) -> None:
    # ben read the request pending, cat decided it, then ben's decision was tried: it failed
    # ("already approved by cat") but the audit log said ben's approval was allowed. Placed:
    # cat's decision runs inside ben's call, just before ben's is written.
    with lw.Runtime(url) as rt:
        people(rt)
        r = rt.run_sync(
            make_loop((lw.PolicyRule(kind="spend", action="require"),)),
            task("INV-5", 500),
            task_key="r",
            by="rita",
        )
        store: Any = rt.store
        decide = store.decide_approval

        def cat_first(approval_id: str, **kw: Any) -> Any:
            del store.decide_approval
            rt.approve(r.run_id, by="cat")
            return decide(approval_id, **kw)

        store.decide_approval = cat_first
        with pytest.raises(lw.ApprovalError, match="already approved by cat"):
            rt.approve(r.run_id, by="ben")
        req = rt.store.approvals(run_id=r.run_id)[0]
        assert (req.status, req.decided_by) == ("approved", "cat")
        records = [(a.actor, a.action, a.outcome) for a in rt.store.audit()]
        assert ("cat", "approve", "allowed") in records
        assert ("ben", "approve", "refused") in records
        assert ("ben", "approve", "allowed") not in records
        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-4", 50000), task_key="b", by="rita")
        assert rt.approve(big.run_id, by="ben").status == "pending"  # one vote of two
        # a second vote of one person is refused...
        with pytest.raises(lw.ConflictError, match="ben already approved request"):
            rt.approve(big.run_id, by="ben")
        # ...and audited so
        votes = [
            a
            for a in rt.store.audit()
            if a.actor == "ben" and a.target != f"request {req.approval_id}"
        ]
        assert [a.outcome for a in votes] == ["allowed", "refused"]
