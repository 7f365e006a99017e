"""A fork is its maker's to start: no worker claims it until someone resumes it (fork54), SQLite
and PostgreSQL.

A fork is made to be edited or reviewed first (``fork``, ``edit``, then ``resume``), but it was
created ``pending``, and every worker claims every ``pending`` run: on a store a pool serves,
the fork was started on the state it was made with before its maker could edit it, its effects
run. Now the fork carries ``maker_starts`` (a column, in ``runs_claimable``'s WHERE) until a
``resume`` clears it under its lease; ``fork(queue=True)`` makes one the pool may take at once.
Each worker here polls once (``run(once=True)``): what it leaves is asserted, no time waited.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from doc_loop import TARGET, TASK
from support.dashboard import AUTH, dashboard, rerun
from test_effects_engine import Payments, Script, make_loop, with_effects
from test_pg_claim_scale import _claim_cost, _create

import loopwright as lw
from loopwright._worker import Worker
from loopwright.store import Store, open_store
from loopwright.store._pg_schema import PG_MIGRATIONS
from loopwright.store._schema import CLAIMABLE_V11, HOLD_UNSTARTED_FORKS, SQLITE_MIGRATIONS
from loopwright.store.sqlite import SQLiteStore


def _paid_run(rt: lw.Runtime) -> tuple[lw.RunResult, lw.Loop, Payments]:
    """A run that pays an invoice (a run-scoped key) in its first cycle and is accepted."""
    bank = Payments()
    pay = bank.effect()
    actor = Script(
        with_effects(lw.Proposal.edit("doc", TARGET), pay.call(invoice="A-1", amount=5.0))
    )
    loop = make_loop(actor, [pay])
    r = rt.run_sync(loop, TASK)
    assert r.status == "accepted", r.packet
    assert len(bank.executed) == 1
    return r, loop, bank


def _paid_file_run(tmp_path: Path) -> tuple[str, lw.RunResult, lw.Loop, Payments]:
    """``_paid_run`` on a SQLite file in ``tmp_path`` (a dashboard's store): its URL first."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with lw.Runtime(url) as rt:
        return (url, *_paid_run(rt))


def _poll_once(rt: lw.Runtime, loop: lw.Loop) -> list[lw.RunResult]:
    ended: list[lw.RunResult] = []
    stats = asyncio.run(
        Worker(rt, loops={loop.name: loop}, poll_s=0.001, on_result=ended.append).run(once=True)
    )
    assert stats.claimed == len(ended), stats
    return ended


def test_a_worker_leaves_a_fork_to_its_maker_until_it_is_resumed(url: str) -> None:
    with lw.Runtime(url) as rt:
        r, loop, bank = _paid_run(rt)
        fork = rt.fork(r.run_id, 0, by="ann")  # before the payment: its cycle 1 pays again
        assert fork.maker_starts and fork.status == "pending"
        before = [(e.kind, e.data) for e in rt.store.events(fork.run_id)]
        # before: the worker claimed the fork and ran it, paying before ann could edit it
        assert _poll_once(rt, loop) == []
        got = rt.store.get_run(fork.run_id)
        assert (got.status, got.cycle, got.lease_owner) == ("pending", 0, None)
        assert got.fencing_token == fork.fencing_token  # never leased
        assert [(e.kind, e.data) for e in rt.store.events(fork.run_id)] == before
        assert len(bank.executed) == 1
        # the maker's edit leaves it theirs (an edit takes the lease, and starts nothing)
        rt.edit(fork.run_id, "doc/a", 1, by="ann")
        assert _poll_once(rt, loop) == []
        assert rt.store.get_run(fork.run_id).maker_starts
        # started by its maker: a worker's run like any other from then on
        done = rt.resume_sync(fork.run_id, loop)
        assert done.status == "accepted", done.packet
        assert not rt.store.get_run(fork.run_id).maker_starts


def test_a_fork_resumed_and_interrupted_is_the_pools_to_go_on_with(url: str) -> None:
    # Started by its maker, then left running by a process gone: any worker takes it over.
    with lw.Runtime(url) as rt:
        r, loop, _bank = _paid_run(rt)
        fork = rt.fork(r.run_id, 1, by="ann")
        token = rt.store.acquire_lease(fork.run_id, "gone-host:1", 0.0)
        rt.store.mark_started(fork.run_id, token - 1)  # a stale token clears nothing
        assert rt.store.get_run(fork.run_id).maker_starts
        rt.store.mark_started(fork.run_id, token)
        rt.store.release_lease(fork.run_id, token)
        assert [x.run_id for x in _poll_once(rt, loop)] == [fork.run_id]


def test_a_queued_fork_is_the_pools_at_once(url: str) -> None:
    with lw.Runtime(url) as rt:
        r, loop, _bank = _paid_run(rt)
        fork = rt.fork(r.run_id, 1, by="ann", queue=True)
        assert not fork.maker_starts
        [ended] = _poll_once(rt, loop)
        assert ended.run_id == fork.run_id
        assert rt.store.get_run(fork.run_id).status == ended.status == "accepted"
        with pytest.raises(lw.ConfigError, match="queue"):
            rt.fork(r.run_id, 1, queue="yes")  # type: ignore[arg-type]


def test_the_claim_reads_held_forks_through_no_index_entry(url: str) -> None:
    # Held forks are not in runs_claimable: a claim passes over none of them.
    with open_store(url) as s:
        origin = _create(s, "o")
        for i in range(400):
            rec, made = s.create_run(
                run_id=f"f{i}", task_key=f"f{i}", loop_name="l", project="p", spec_ref=None,
                loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
                forked_from=(origin, 0), maker_starts=True,
            )  # fmt: skip
            assert made and rec.maker_starts
        queued, made = s.create_run(
            run_id="q", task_key="q", loop_name="l", project="p", spec_ref=None,
            loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
            forked_from=(origin, 0),
        )  # fmt: skip
        assert not queued.maker_starts
        claimed: list[str] = []
        if url.startswith("postgres"):
            # (the claim's own statements, explained: the forks are not read)
            claimed, read, names = _claim_cost(s)
            assert "runs_claimable" in names, names
            assert read < 20, read  # not the 400 forks
        else:
            assert isinstance(s, SQLiteStore)
            [(sql,)] = s._db.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'runs_claimable'"
            ).fetchall()
            assert "maker_starts = 0" in sql  # the claim names it INDEXED BY, its WHERE as is
        claimed += [r for r, _ in s.claim_runs("w", 30, limit=100)]
        assert claimed == [origin, "q"]
        assert s.claim_runs("w2", 30, limit=100) == []


def _v(migrations: list[list[str]]) -> int:
    """The version before the step that adds ``maker_starts``."""
    return next(i for i, m in enumerate(migrations) if HOLD_UNSTARTED_FORKS in m)


def _old_store(s: Store) -> dict[str, str]:
    """Runs as an earlier release left them: a fork never started (and one parked by a pause,
    never started), a fork started (its ``started`` event), an ended fork, a plain run."""
    origin = _create(s, "origin")
    ids = {}
    for name in ("fresh", "paused", "started", "ended"):
        rec, _ = s.create_run(
            run_id=name, task_key=name, loop_name="l", project="p", spec_ref=None,
            loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
            forked_from=(origin, 0),
        )  # fmt: skip
        ids[name] = rec.run_id
    token = s.acquire_lease("started", "me", 60)
    s.commit(
        "started", token, seq=1, cycle=0, state={"cycle": 0}, record=None,
        events=[lw.store.NewEvent(0, "started", {"owner": "me", "lease": token})],
        run={"status": "pending"},
    )  # fmt: skip
    s.release_lease("started", token)
    for name, status in (("paused", "awaiting_approval"), ("ended", "cancelled")):
        token = s.acquire_lease(name, "me", 60)
        s.commit(name, token, seq=1, cycle=0, state={"cycle": 0}, record=None, events=[],
                 run={"status": status})  # fmt: skip
        s.release_lease(name, token)
    ids["origin"] = origin
    return ids


def test_an_sqlite_store_of_an_earlier_release_holds_its_unstarted_forks(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SQLiteStore(db) as s:
        _old_store(s)
    raw = sqlite3.connect(db)  # as v19 left it: no column, the index without it
    for undo in (
        "DROP INDEX runs_claimable",
        "ALTER TABLE runs DROP COLUMN maker_starts",
        f"CREATE INDEX runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_V11}",
        f"UPDATE loopwright_meta SET value = '{_v(SQLITE_MIGRATIONS)}' "
        "WHERE key = 'schema_version'",
    ):
        raw.execute(undo)
    raw.commit()
    raw.close()
    with SQLiteStore(db) as s:
        assert s.schema_version == len(SQLITE_MIGRATIONS)
        held = {r.run_id for r in s.list_runs() if r.maker_starts}
        assert held == {"fresh", "paused"}
        assert sorted(r for r, _ in s.claim_runs("w", 30, limit=10)) == ["run-origin", "started"]


@pytest.mark.postgres
def test_a_pg_store_of_an_earlier_release_holds_its_unstarted_forks(pg_url: str) -> None:
    with open_store(pg_url) as s:
        _old_store(s)
        with s._tx() as conn:  # type: ignore[attr-defined]  # as v17 left it
            for undo in (
                "DROP INDEX runs_claimable",
                "ALTER TABLE runs DROP COLUMN maker_starts",
                f"CREATE INDEX runs_claimable ON runs(updated_at, run_id) WHERE {CLAIMABLE_V11}",
                f"UPDATE loopwright_meta SET value = '{_v(PG_MIGRATIONS)}' "
                "WHERE key = 'schema_version'",
            ):
                conn.execute(undo)
    with open_store(pg_url) as s:
        assert s.schema_version == len(PG_MIGRATIONS)  # type: ignore[attr-defined]
        held = {r.run_id for r in s.list_runs() if r.maker_starts}
        assert held == {"fresh", "paused"}
        assert sorted(r for r, _ in s.claim_runs("w", 30, limit=10)) == ["run-origin", "started"]
        [(where,)] = s._all(  # type: ignore[attr-defined]
            "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND indexname = 'runs_claimable'",
            [],
        )
        assert "maker_starts = 0" in where, where


def test_the_dashboards_rerun_not_started_is_left_and_says_how_to_start_it(
    tmp_path: Path,
) -> None:
    # A rerun asked not to start (``"start": false``) is a fork like any: no worker takes it,
    # and the run page and the API say how to start it.
    url, r, loop, bank = _paid_file_run(tmp_path)
    c = dashboard(url)
    new = rerun(c, r.run_id, at_cycle=0, start=False)["run"]["run_id"]
    with lw.Runtime(url) as rt:
        assert rt.store.get_run(new).maker_starts
        assert _poll_once(rt, loop) == []
        assert rt.store.get_run(new).status == "pending"
    assert len(bank.executed) == 1
    said = f"fork, not started: start it with Runtime.resume({new[:12]!r}, loop)"
    assert said.replace("'", "&#39;") in c.get(f"/runs/{new}").text
    assert c.get(f"/api/runs/{new}").json()["run"]["stop_words"].startswith(said)
    assert c.get(f"/api/runs/{new}").json()["run"]["maker_starts"] is True


def test_an_api_rerun_queued_is_the_pools_to_start(tmp_path: Path) -> None:
    # (crash54) ``"queue": true`` hands the rerun to the worker pool (``fork(queue=True)``):
    # the API had no such field (400 "unknown field"), so a client could only start it on
    # the dashboard's server or leave it to a person's resume.
    url, r, loop, _bank = _paid_file_run(tmp_path)
    c = dashboard(url)
    api = f"/api/runs/{r.run_id}/rerun"
    got = rerun(c, r.run_id, at_cycle=1, queue=True)
    new = got["run"]["run_id"]
    assert "queued" in got["message"]
    with lw.Runtime(url) as rt:
        made = rt.store.get_run(new)
        assert (made.status, made.maker_starts) == ("pending", False)
        [ended] = _poll_once(rt, loop)
        assert ended.run_id == new and ended.status == "accepted"
    # checked as the other fields are: a boolean, and not both ways to start it
    for body, said in (
        ({"queue": "yes"}, "queue must be true or false"),
        ({"queue": True, "start": True}, "not both"),
    ):
        bad = c.post(api, json=body, headers=AUTH)
        assert bad.status_code == 400 and said in bad.json()["detail"], bad.text
