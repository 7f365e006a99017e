"""Group commit: concurrent runs in one process share transactions, with the same outcomes and
the same per-run guarantees (contiguous checkpoints, fencing) as committing one by one."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

import loopwright as lw
from loopwright import _group
from loopwright.store import CommitRequest, NewEvent, open_store

TARGET = {"a": 1, "b": 2, "c": 3, "d": 4}


def _loop() -> lw.Loop:
    async def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        wrong = [k for k, v in TARGET.items() if doc.get(k) != v]
        # tasks marked stuck never fix the last part: they stop by the plateau rule
        if ctx.task.get("stuck"):
            wrong = [k for k in wrong if k != "d"] or ["d"]
            value = TARGET[wrong[0]] if wrong[0] != "d" else -1
            return lw.Proposal.edit("doc", {wrong[0]: value})
        return lw.Proposal.edit("doc", {wrong[0]: TARGET[wrong[0]]})

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [k for k, v in TARGET.items() if doc.get(k) != v]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / len(TARGET))

    return lw.Loop(
        name="gc",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8), no_progress=lw.NoProgress(cycles=2)),
    )


def _tasks(n: int) -> list[dict[str, object]]:
    return [
        {"task_key": f"g{i}", "stuck": i % 3 == 0, "artifacts": {"doc": dict.fromkeys(TARGET, 0)}}
        for i in range(n)
    ]


def _outcomes(store: str, group: bool, n: int) -> tuple[list[tuple[str, int]], int]:
    batches: list[int] = []
    orig = _group.GroupCommitter.close

    async def close(self: _group.GroupCommitter) -> None:
        await orig(self)
        batches.append(self.batches)

    _group.GroupCommitter.close = close  # type: ignore[method-assign]
    try:
        with lw.Runtime(store, group_commit=group) as rt:
            res = asyncio.run(rt.run_many(_loop(), _tasks(n), concurrency=n))
            for r in res:
                seqs = [c.seq for c in rt.store.checkpoints(r.run_id)]
                assert seqs == list(range(len(seqs))), seqs
            return [(r.task_key, r.stop_reason or "", r.cycles) for r in res], sum(batches)
    finally:
        _group.GroupCommitter.close = orig  # type: ignore[method-assign]


def _commit_of(
    run_id: str,
    token: int,
    state: dict[str, object],
    seq: int = 1,
    run: dict[str, object] | None = None,
) -> CommitRequest:
    """A commit of checkpoint ``seq`` (on ``seq - 1``) with one event, as a test hands it to
    ``commit_many``."""
    return CommitRequest(
        run_id, token, seq, seq - 1, state, None, [NewEvent(seq - 1, "x", {})],
        {"status": "running"} if run is None else run,
    )  # fmt: skip


def _two_runs(store_url: str) -> tuple[lw.RunRecord, lw.RunRecord]:
    """Runs ``a`` and ``b`` of ``_loop()``, created (checkpoint 0 each), no lease held."""
    loop = _loop()
    with lw.Runtime(store_url) as rt:
        a, _ = rt.create(loop, _tasks(1)[0], task_key="a")
        b, _ = rt.create(loop, _tasks(1)[0], task_key="b")
    return a, b


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "s.db")
    return str(request.getfixturevalue("pg_url"))


def test_grouped_runs_end_as_runs_committed_one_by_one(store_url: str, tmp_path: Path) -> None:
    grouped, batches = _outcomes(store_url, True, 24)
    alone, _ = _outcomes(str(tmp_path / "alone.db"), False, 24)
    assert [(k, s, c) for k, s, c in grouped] == alone
    assert {s for _, s, _ in grouped} == {"success", "no_progress"}
    total_commits = sum(c for _, _, c in grouped)
    # commits were really grouped: far fewer transactions than cycles
    assert 0 < batches < total_commits / 4


def test_a_stale_commit_in_a_batch_fails_alone(store_url: str) -> None:
    a, b = _two_runs(store_url)
    st = open_store(store_url)
    try:
        ta = st.acquire_lease(a.run_id, "x:1:a", 60)
        tb = st.acquire_lease(b.run_id, "x:1:b", 60)
        state = st.latest_checkpoint(a.run_id).state

        out = st.commit_many([_commit_of(a.run_id, ta, state), _commit_of(b.run_id, tb - 1, state)])
        assert out[0] is False
        assert isinstance(out[1], lw.StaleLeaseError)
        assert st.latest_checkpoint(a.run_id).seq == 1
        assert st.latest_checkpoint(b.run_id).seq == 0  # nothing of the stale one written
        assert [e.kind for e in st.events(b.run_id)][-1:] != ["x"]
    finally:
        st.close()


def test_a_batch_of_one_is_written_on_the_loop_and_a_larger_one_in_a_thread(
    store_url: str,
) -> None:
    """A lone commit gains nothing from a thread (it only pays the GIL's hand-offs); a batch
    of several goes to one, so the event loop runs the other runs meanwhile. PostgreSQL's
    lone commit goes to one too: it may wait on its run's row lock (evloop53)."""
    import threading

    loop = _loop()
    with lw.Runtime(store_url) as rt:
        ids = [rt.create(loop, _tasks(1)[0], task_key=f"t{i}")[0].run_id for i in range(4)]
    st = open_store(store_url)
    calls: list[tuple[bool, int]] = []
    orig = st.commit_many

    def commit_many(items: list[CommitRequest]) -> list[bool | lw.StoreError]:
        calls.append((threading.get_ident() == loop_thread, len(items)))
        return orig(items)

    st.commit_many = commit_many  # type: ignore[method-assign]
    loop_thread = threading.get_ident()
    try:
        tokens = {r: st.acquire_lease(r, f"x:1:{r}", 60) for r in ids}
        state = st.latest_checkpoint(ids[0]).state

        def req(run_id: str) -> CommitRequest:
            return CommitRequest(
                run_id, tokens[run_id], 1, 0, state, None, [NewEvent(0, "x", {})],
                {"status": "running"},
            )  # fmt: skip

        async def main() -> list[bool]:
            committer = _group.GroupCommitter(st)
            first = await committer.submit(req(ids[0]))
            rest = await asyncio.gather(*(committer.submit(req(r)) for r in ids[1:]))
            await committer.close()
            return [first, *rest]

        assert asyncio.run(main()) == [False] * 4  # each committed, none cancelled
        assert calls == [(not st.concurrent_writers, 1), (False, 3)]
        assert [st.latest_checkpoint(r).seq for r in ids] == [1] * 4
    finally:
        st.close()


@pytest.mark.postgres
def test_a_batch_goes_on_without_the_run_whose_row_another_session_holds(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    """Three runs' commits in one batch, run A's row held locked by another session (a
    cancel, the dashboard, psql inside a transaction): B's and C's are written while A's
    waits, alone, in a batch of its own; then A's too, once the lock goes. The batch waited
    on A's row, and B and C with it, until the lock went (evloop53)."""
    import psycopg

    base, schema = pg_schema
    loop = _loop()
    with lw.Runtime(pg_url) as rt:
        ids = [rt.create(loop, _tasks(1)[0], task_key=f"t{i}")[0].run_id for i in range(3)]
    st = open_store(pg_url)
    lock = psycopg.connect(base)
    try:
        tokens = {r: st.acquire_lease(r, f"x:1:{r}", 60) for r in ids}
        state = st.latest_checkpoint(ids[0]).state
        lock.execute(f'SET search_path TO "{schema}"')
        lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (ids[0],)).fetchall()

        async def main() -> int:
            committer = _group.GroupCommitter(st)
            try:
                # (submitted in one turn: one batch)
                a, b, c = [committer.submit(_commit_of(r, tokens[r], state)) for r in ids]
                # B's and C's while A's row stays locked: behind it, they never come, and
                # PATIENCE, a bound only that hang reaches, fails the test
                assert await asyncio.wait_for(asyncio.gather(b, c), PATIENCE) == [False] * 2
                assert not a.done()
                assert st.latest_checkpoint(ids[0]).seq == 0  # nothing of A's written
            finally:
                lock.rollback()  # (a batch left waiting on it would never end)
            assert await asyncio.wait_for(a, PATIENCE) is False
            await committer.close()
            return committer.commits

        assert asyncio.run(main()) == 3  # each written once
        assert [st.latest_checkpoint(r).seq for r in ids] == [1] * 3
        assert [[e.kind for e in st.events(r)].count("x") for r in ids] == [1] * 3
    finally:
        lock.close()
        st.close()


PATIENCE = 120.0  # a bound that only a hang reaches (never a measurement)


# --- found by review: one bad commit, a cancel during a parked cycle ------------------------
POISON = {"a": 1, "b": 2, "c": 3}


def _poison_loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        wrong = [k for k, v in POISON.items() if doc.get(k) != v]
        usage = lw.Usage(tokens=2**63 + 5) if ctx.task.get("poison") and ctx.cycle == 2 else None
        return lw.Proposal.edit("doc", {wrong[0]: POISON[wrong[0]]}, usage=usage)

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [k for k, v in POISON.items() if doc.get(k) != v]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 3)

    return lw.Loop(
        name="poison",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8)),
        retry=lw.RetryPolicy(attempts=1),
    )


def test_a_commit_the_database_rejects_fails_only_its_own_run(store_url: str) -> None:
    """A run whose checkpoint cannot be written (a token count too large for the database)
    must not take down the healthy runs that shared its transaction."""
    tasks = [
        {"task_key": f"p{i}", "poison": i == 0, "artifacts": {"doc": dict.fromkeys(POISON, 0)}}
        for i in range(4)
    ]
    with lw.Runtime(store_url) as rt:

        async def go() -> list[object]:
            return await asyncio.gather(
                *(rt.run(_poison_loop(), t) for t in tasks), return_exceptions=True
            )

        asyncio.run(go())
        runs = {r.task_key: r for r in rt.store.list_runs()}
        assert [runs[f"p{i}"].status for i in (1, 2, 3)] == ["accepted"] * 3
        assert runs["p0"].status != "accepted"
        for i in (1, 2, 3):
            seqs = [c.seq for c in rt.store.checkpoints(runs[f"p{i}"].run_id)]
            assert seqs == list(range(len(seqs)))


def test_a_cancel_during_a_cycle_that_parks_closes_its_request(store_url: str) -> None:
    with lw.Runtime(store_url) as rt:

        def actor(ctx: lw.Context) -> lw.Proposal:
            if ctx.task.get("cancel_me"):
                rt.store.request_cancel(ctx.run_id)
            return lw.Proposal.edit("doc", {"a": 1})

        loop = lw.Loop(
            name="park-cancel",
            actor=actor,
            verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
            contract=lw.Contract(
                budget=lw.Budget(max_cycles=3), risk=(lw.RiskRule(name="r", touches=("doc/a",)),)
            ),
        )

        async def go() -> list[lw.RunResult]:
            return await asyncio.gather(
                *(
                    rt.run(
                        loop,
                        {"task_key": f"c{i}", "cancel_me": i == 0, "artifacts": {"doc": {"a": 0}}},
                    )
                    for i in range(3)
                )
            )

        results = asyncio.run(go())
        assert results[0].status == "cancelled"
        assert [a.status for a in rt.store.approvals(run_id=results[0].run_id)] == ["cancelled"]
        assert [r.status for r in results[1:]] == ["awaiting_approval"] * 2


def test_a_later_commit_of_a_run_whose_earlier_one_failed_in_the_batch_is_not_written(
    store_url: str,
) -> None:
    """A grouped run queues its next commit before the last is durable, so one batch can hold
    two commits of one run. The later one is a delta on the earlier: if the earlier is refused
    alone (slow path, one savepoint a commit), writing the later would leave a checkpoint
    chain with a hole (review50a). The other run's commit is still written."""
    a, b = _two_runs(store_url)
    st = open_store(store_url)
    try:
        ta = st.acquire_lease(a.run_id, "x:1:a", 60)
        tb = st.acquire_lease(b.run_id, "x:1:b", 60)
        state = st.latest_checkpoint(a.run_id).state

        def req(run_id: str, token: int, seq: int, run: dict[str, object]) -> CommitRequest:
            return _commit_of(run_id, token, state, seq, run)

        out = st.commit_many(
            [
                req(a.run_id, ta, 1, {"status": "running", "no_such_column": 1}),
                req(a.run_id, ta, 2, {"status": "running"}),
                req(b.run_id, tb, 1, {"status": "running"}),
            ]
        )
        assert isinstance(out[0], lw.StoreError)
        assert isinstance(out[1], lw.StoreError)
        assert "earlier commit" in str(out[1])
        assert out[2] is False
        assert [c.seq for c in st.checkpoints(a.run_id)] == [0]
        assert [c.seq for c in st.checkpoints(b.run_id)] == [0, 1]
    finally:
        st.close()


def test_a_commit_under_a_new_token_is_written_after_a_fenced_one_in_the_batch(
    store_url: str,
) -> None:
    """The same run twice in one batch under two tokens: an executor fenced (its commit
    refused, stale) and the one that took the run over. The new holder's commit builds on the
    store, not on the refused commit: it is written (a worker that claimed its own lapsed run
    saw it refused, "an earlier commit of this run in the same batch failed")."""
    loop = _loop()
    with lw.Runtime(store_url) as rt:
        a, _ = rt.create(loop, _tasks(1)[0], task_key="a")
    st = open_store(store_url)
    try:
        old = st.acquire_lease(a.run_id, "x:1:a", 60)
        st.release_lease(a.run_id, old)
        new = st.acquire_lease(a.run_id, "x:2:a", 60)
        assert new != old
        state = st.latest_checkpoint(a.run_id).state

        out = st.commit_many([_commit_of(a.run_id, old, state), _commit_of(a.run_id, new, state)])
        assert isinstance(out[0], lw.StaleLeaseError)
        assert out[1] is False
        assert [c.seq for c in st.checkpoints(a.run_id)] == [0, 1]
    finally:
        st.close()


def test_a_later_commit_after_a_stale_one_in_the_batch_is_said_stale(store_url: str) -> None:
    """A fenced executor's two commits of one run in one batch (slow path: the run is there
    twice). Alone, the second is a ``StaleLeaseError``; after the first it was a plain
    ``StoreError``, and the run waits on its newest commit only: the engine took it for a
    failure of its own (it tried to end the run as failed) and a worker recorded
    ``worker_skipped`` on a run another worker drives, counted skipped, not lost (review51a).
    A later commit after a refusal that is not a stale token stays a plain ``StoreError``."""
    a, b = _two_runs(store_url)
    st = open_store(store_url)
    try:
        old = st.acquire_lease(a.run_id, "x:1:a", 60)
        st.release_lease(a.run_id, old)
        new = st.acquire_lease(a.run_id, "x:2:a", 60)
        tb = st.acquire_lease(b.run_id, "x:1:b", 60)
        state = st.latest_checkpoint(a.run_id).state
        alone = st.commit_many([_commit_of(a.run_id, old, state, 2)])
        assert isinstance(alone[0], lw.StaleLeaseError)

        bad = {"status": "running", "no_such_column": 1}
        out = st.commit_many(
            [
                _commit_of(a.run_id, old, state, 1),
                _commit_of(a.run_id, old, state, 2),
                _commit_of(b.run_id, tb, state, 1, bad),
                _commit_of(b.run_id, tb, state, 2),
            ]
        )
        assert [type(o) for o in out] == [
            lw.StaleLeaseError,
            lw.StaleLeaseError,
            lw.StoreError,
            lw.StoreError,
        ], out
        assert "earlier commit" in str(out[1]) and f"token {old} is stale" in str(out[1])
        assert "earlier commit" in str(out[3])
        assert [c.seq for c in st.checkpoints(a.run_id)] == [0]
        assert [c.seq for c in st.checkpoints(b.run_id)] == [0]
        assert new != old
    finally:
        st.close()


def test_a_commit_closing_a_request_beside_rejected_digests_dates_it_now(
    store_url: str,
) -> None:
    """A commit that closes a pending request (a cancel's, a rollback's) and writes rejected
    digests: the loop over the digests reused the name of the store's time, so the request was
    recorded decided at the digests' cycle (``decided_at`` 3: 1970) instead of now
    (review51a). One commit alone and in a batch (a close goes commit by commit)."""
    from loopwright.store import ClosedApproval, NewApproval

    a, b = _two_runs(store_url)
    st = open_store(store_url)
    try:
        for n, rec in enumerate((a, b)):
            token = st.acquire_lease(rec.run_id, f"x:1:{n}", 60)
            state = st.latest_checkpoint(rec.run_id).state
            ask = NewApproval(f"ap-{n}", 0, "risk", "r", "pay", "why", {}, None, "h", None)
            parked = _commit_of(rec.run_id, token, state, 1, {"status": "awaiting_approval"})
            assert st.commit_many([replace(parked, approvals=[ask])]) == [False]
            close = ClosedApproval(f"ap-{n}", "ana", "cancelled")
            req = replace(
                _commit_of(rec.run_id, token, state, 2, {"status": "cancelled"}),
                rejected=[("d" * 64, 3)],
                closes=[close],
            )
            # (True: a request was pending on the run when it committed, which the flag reports:
            # a person's pause, for a run executing; ``_sql_statements.ASKED``)
            assert (st.commit_request(req) if n == 0 else st.commit_many([req])[0]) is True
            (got,) = st.approvals(run_id=rec.run_id)
            assert got.status == "cancelled" and got.decided_by == "ana"
            # (on the store's clock, as the request's time: not before it was asked)
            assert got.decided_at is not None and got.decided_at >= got.requested_at, got
    finally:
        st.close()


@pytest.mark.postgres
@pytest.mark.parametrize("slow", [True, False], ids=["slow_path", "fast_path"])
def test_a_batch_skips_a_run_whose_row_another_session_holds(
    pg_schema: tuple[str, str], pg_url: str, slow: bool
) -> None:
    """PostgreSQL: a batch of several runs, one of whose rows another transaction holds (a
    cancel, the dashboard, psql): the batch waits on nothing; the others' commits are written
    and that run's is left out, unwritten (``RunBusy``: the committer writes it again alone,
    where it waits). Before evloop53 the batch waited for the row, with every run in it; and a
    slow batch (a run twice in it) that took its rows in batch order could deadlock another
    process's, which its run_id order prevented (a batch that waits on no row deadlocks none)."""
    import threading

    import psycopg
    from psycopg import sql

    from loopwright.store._protocol_commit import RunBusy

    base, schema = pg_schema
    a, b = _two_runs(pg_url)
    lo, hi = sorted((a.run_id, b.run_id))
    st = open_store(pg_url)
    holder = psycopg.connect(base)
    try:
        tokens = {r: st.acquire_lease(r, f"x:1:{r}", 60) for r in (lo, hi)}
        state = st.latest_checkpoint(lo).state
        holder.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        holder.execute("SELECT 1 FROM runs WHERE run_id = %s FOR NO KEY UPDATE", (lo,))
        batch = [_commit_of(hi, tokens[hi], state, 1), _commit_of(lo, tokens[lo], state, 1)]
        if slow:
            batch.append(_commit_of(hi, tokens[hi], state, 2))  # a run twice: the slow path
        out: list[list[bool | lw.StoreError]] = []
        worker = threading.Thread(target=lambda: out.append(st.commit_many(batch)), daemon=True)
        worker.start()
        worker.join(PATIENCE)  # (a bound only a batch waiting on the row reaches)
        alive = worker.is_alive()
        holder.rollback()  # (a batch left waiting then ends)
        worker.join(PATIENCE)
        assert not alive, "the batch waited for the row another session holds"
        [results] = out
        assert results[0] is False and isinstance(results[1], RunBusy)
        assert results[2:] == ([False] if slow else [])
        assert [c.seq for c in st.checkpoints(hi)] == ([0, 1, 2] if slow else [0, 1])
        assert [c.seq for c in st.checkpoints(lo)] == [0]  # nothing of it written
        # alone, once the row is free, it is written as ever
        assert st.commit_many([_commit_of(lo, tokens[lo], state, 1)]) == [False]
        assert [c.seq for c in st.checkpoints(lo)] == [0, 1]
    finally:
        holder.close()
        st.close()


# --- evloop53b: rows locked elsewhere take no worker's every thread nor connection ----------
def _locked_runs(pg_url: str, n: int) -> tuple[list[str], dict[str, int], dict[str, object]]:
    """``n`` runs of ``_loop()`` created, each leased to a test owner: ids, tokens, a state."""
    loop = _loop()
    with lw.Runtime(pg_url) as rt:
        ids = [rt.create(loop, _tasks(1)[0], task_key=f"t{i}")[0].run_id for i in range(n)]
    st = open_store(pg_url)
    try:
        tokens = {r: st.acquire_lease(r, f"x:1:{r}", 600) for r in ids}
        return ids, tokens, st.latest_checkpoint(ids[0]).state
    finally:
        st.close()


async def _blocked_by(base: str, holder: int, n: int) -> None:
    """Until ``n`` sessions wait on a lock the session ``holder`` (a backend pid) holds."""
    import psycopg

    with psycopg.connect(base, autocommit=True) as watch:
        for _ in range(int(PATIENCE * 20)):  # (a bound only a hang reaches)
            [(k,)] = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                (holder,),
            ).fetchall()
            if k >= n:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{n} writes never waited on the lock")


@pytest.mark.postgres
def test_runs_whose_rows_another_session_holds_leave_the_others_commits_going(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    """Five runs' rows held locked by another session, each run's commit waiting alone for
    its row: a sixth run's commit is written meanwhile. The waiting batches were batches in
    flight, four at most, so the fifth locked run's and the free run's commits never started
    while the lock held, and a worker's every run stood still (evloop53b)."""
    import psycopg

    base, schema = pg_schema
    ids, tokens, state = _locked_runs(pg_url, 6)
    locked, free = ids[:5], ids[5]
    st = open_store(pg_url)
    lock = psycopg.connect(base)
    try:
        lock.execute(f'SET search_path TO "{schema}"')
        lock.execute("SELECT 1 FROM runs WHERE run_id = ANY(%s) FOR UPDATE", (locked,)).fetchall()

        async def main() -> int:
            committer = _group.GroupCommitter(st)
            try:
                waiting = []
                for r in locked:  # (one turn each: batches of one, each waiting on its row)
                    waiting.append(committer.submit(_commit_of(r, tokens[r], state)))
                    await asyncio.sleep(0)
                await _blocked_by(base, lock.info.backend_pid, 5)
                done = committer.submit(_commit_of(free, tokens[free], state))
                # behind the waiting batches it never comes: PATIENCE, a bound that only that
                # hang reaches, fails the test
                assert await asyncio.wait_for(done, PATIENCE) is False
                assert not any(w.done() for w in waiting)
            finally:
                lock.rollback()
            assert await asyncio.wait_for(asyncio.gather(*waiting), PATIENCE) == [False] * 5
            await committer.close()
            return committer.commits

        assert asyncio.run(main()) == 6  # each written once
        assert [st.latest_checkpoint(r).seq for r in ids] == [1] * 6
        assert [[e.kind for e in st.events(r)].count("x") for r in ids] == [1] * 6
    finally:
        lock.close()
        st.close()


@pytest.mark.postgres
def test_writes_waiting_on_rows_locked_elsewhere_leave_a_connection_for_a_renewal(
    pg_url: str, pg_schema: tuple[str, str]
) -> None:
    """A store of two pooled connections, three runs' rows held locked by another session and
    each run's commit waiting for its row: another run's lease renewal, from the same store
    threads, is written meanwhile. The waiting writes held every connection of the pool, and
    the renewal failed after the pool's 30 s (``StoreUnavailableError``): a lease left to run
    out under a live worker (evloop53b)."""
    import psycopg

    from loopwright._store_threads import in_store_thread

    base, schema = pg_schema
    ids, tokens, state = _locked_runs(pg_url, 4)
    locked, free = ids[:3], ids[3]
    st = open_store(pg_url + "&pool_max=2")
    lock = psycopg.connect(base)
    try:
        lock.execute(f'SET search_path TO "{schema}"')
        lock.execute("SELECT 1 FROM runs WHERE run_id = ANY(%s) FOR UPDATE", (locked,)).fetchall()
        before = st.get_run(free).lease_expires_at

        async def main() -> None:
            committer = _group.GroupCommitter(st)
            try:
                waiting = [committer.submit(_commit_of(r, tokens[r], state)) for r in locked]
                await _blocked_by(base, lock.info.backend_pid, 2)  # (every connection)
                await asyncio.wait_for(
                    in_store_thread(st.renew_lease, free, tokens[free], 900), PATIENCE
                )
                assert not any(w.done() for w in waiting)
            finally:
                lock.rollback()
            assert await asyncio.wait_for(asyncio.gather(*waiting), PATIENCE) == [False] * 3
            await committer.close()

        asyncio.run(main())
        after = st.get_run(free).lease_expires_at
        assert after is not None and before is not None and after > before
        assert [st.latest_checkpoint(r).seq for r in locked] == [1] * 3
    finally:
        lock.close()
        st.close()
