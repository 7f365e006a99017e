"""The learning exports read a run's states a page of checkpoints at a time (export49): a
store's ``iter_checkpoints`` folds each state on the one before and keeps the version rows it
read, instead of reading each checkpoint's chain from its snapshot and its versions again (~11
statements a cycle on SQLite, 110,309 at 10,000 cycles; ~4 round trips a cycle on PostgreSQL).

The exports must not change: eval cases and preference pairs of runs with parked, approved and
denied cycles, a person's edits, check-only cycles, forks (inherited cycles), a rollback and a
held-out verifier are compared, byte for byte, with the same exports read through the store's
whole-run reader (``checkpoints``: every state folded in memory, a different code path), on
both stores; and the statements an export costs grow with its pages, not its cycles."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import pg_base_url, pg_create_schema, pg_drop_schema
from test_checkpoint_fields import TASK as WIDE_TASK
from test_checkpoint_fields import _loop as wide_loop
from test_replay_edit_escalations import TASK as EDIT_TASK
from test_replay_edit_escalations import _loop as edit_loop
from test_trace_export import FIX_B, FULL, HELD_TASK, WRONG, make_loop, paying, script

import loopwright as lw
from loopwright import trace
from loopwright.store import Store, open_store
from loopwright.store.sqlite import SQLiteStore


def _build(url: str) -> dict[str, str]:
    runs: dict[str, str] = {}
    with lw.Runtime(url, snapshot_every=4) as rt:
        # a held-out verifier on every run of this loop; retries, an approved and a denied
        # request, a run left parked
        runs["ok"] = rt.run_sync(
            make_loop(script(WRONG, paying(FIX_B, 50), flaky=True)), HELD_TASK, task_key="ok"
        ).run_id
        runs["stuck"] = rt.run_sync(make_loop(script(WRONG)), HELD_TASK, task_key="stuck").run_id
        for name, decide in (("appr", rt.approve), ("deny", rt.deny)):
            loop = make_loop(script(paying(FULL, 500)))
            r = rt.run_sync(loop, HELD_TASK, task_key=name)
            assert r.status == "awaiting_approval"
            decide(r.run_id, by="alice", note=name)
            runs[name] = rt.resume_sync(r.run_id, loop).run_id
        runs["parked"] = rt.run_sync(
            make_loop(script(paying(FULL, 900))), HELD_TASK, task_key="parked"
        ).run_id
        # a request denied after a person's edit beside it (the cycle judges the edit)
        loop = edit_loop(1, risky_from=1)
        r = rt.run_sync(loop, EDIT_TASK, task_key="ed")
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo")
        runs["edit_denied"] = rt.resume_sync(r.run_id, loop).run_id
        # an edit past the cycle cap: a check-only cycle
        r = rt.run_sync(edit_loop(2), EDIT_TASK, task_key="co")
        rt.edit(r.run_id, "doc/c", "worse", by="ana")
        r = rt.resume_sync(r.run_id, edit_loop(2))
        assert r.cycles == 3
        runs["check_only"] = r.run_id
        # a run longer than a page (32 rows), snapshots every 4 checkpoints, effects parked
        # mid-cycle; forked twice (a fork of the fork), and rolled back and resumed
        wide = rt.run_sync(wide_loop(), WIDE_TASK, task_key="wide")
        runs["wide"] = wide.run_id
        fork = rt.fork(wide.run_id, 20)
        runs["fork"] = rt.resume_sync(fork.run_id, wide_loop()).run_id
        again = rt.fork(fork.run_id, 25)
        runs["fork2"] = rt.resume_sync(again.run_id, wide_loop()).run_id
        rolled = rt.run_sync(wide_loop(), WIDE_TASK, task_key="rolled")
        rt.rollback(rolled.run_id, 12, by="ana", loop=wide_loop())
        runs["rolled"] = rt.resume_sync(rolled.run_id, wide_loop()).run_id
    return runs


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def world(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """The runs, written once per store."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('paged') / 's.db'}"
        yield url, _build(url)
        return
    base = pg_base_url()
    schema = "lw_export49_paged"
    pg_drop_schema(base, schema)
    url = pg_create_schema(base, schema)
    try:
        yield url, _build(url)
    finally:
        pg_drop_schema(base, schema)


def _exports(store: Store) -> tuple[str, str]:
    """Every ended run's eval case as ``export eval-cases`` writes it, and every pair."""
    out = io.StringIO()
    for run_id in trace.ended_run_ids(store):
        trace.write_eval_case(store, run_id, out)
    pairs = [
        json.dumps(trace.preference_pairs(store, match=m)) for m in ("state", "hindsight", "both")
    ]
    return out.getvalue(), "\n".join(pairs)


def _whole(self: Any, run_id: str) -> Iterator[Any]:
    return iter(self.checkpoints(run_id))


def test_the_exports_read_by_pages_are_those_read_whole(
    world: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, runs = world
    with open_store(url) as st:
        status = {k: st.get_run(r).status for k, r in runs.items()}
        assert status["parked"] == "awaiting_approval" and status["deny"] == "escalated"
        cases, pairs = _exports(st)
        for run_id in runs.values():  # every state, as the pages give it
            whole = [c.state for c in st.checkpoints(run_id)]
            assert [c.read_state() for c in st.iter_checkpoints(run_id)] == whole, run_id
            # and read last first, once every page is listed: each page's pages before gone
            listed = list(st.iter_checkpoints(run_id))
            assert [c.read_state() for c in reversed(listed)][::-1] == whole, run_id
        with monkeypatch.context() as m:
            m.setattr(type(st), "iter_checkpoints", _whole)
            whole_cases, whole_pairs = _exports(st)
    assert cases == whole_cases
    assert pairs == whole_pairs
    # what the fixture promises is in the exports
    read = [json.loads(line) for line in cases.splitlines()]
    by_run = {c["run_id"]: c for c in read}
    assert [c["cycle"] for c in by_run[runs["fork2"]]["inherited_cycles"]] == list(range(1, 26))
    assert any(c.get("edit_judged") for c in by_run[runs["edit_denied"]]["cycles"])
    assert by_run[runs["ok"]]["held_out_keys"] == ["held_out"]
    assert json.loads(pairs.splitlines()[-1]), "no pair formed"


def test_no_held_out_result_enters_a_pairs_actor_context(
    world: tuple[str, dict[str, str]],
) -> None:
    url, _runs = world
    with open_store(url) as st:
        pairs = trace.preference_pairs(st, match="both")
    assert pairs
    for p in pairs:
        ctx = json.dumps(p["context"])
        assert "held_out" not in p["context"]["task"] and "secret" not in ctx
        assert "audit" not in ctx  # the held-out verifier's name, its verdicts


def _statements(path: Path, cycles: int) -> tuple[int, int, int]:
    """(rows, statements of an eval case, statements of the pairs) of a run of ``cycles``."""
    loop = lw.Loop(
        name="long",
        actor=lambda ctx: lw.Proposal.edit("doc", {f"p{ctx.cycle % 5}": f"v{ctx.cycle}"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )
    task = {"artifacts": {"doc": {f"p{i}": "" for i in range(5)}}, "held_out": {"k": 1}}
    with lw.Runtime(str(path)) as rt:
        run_id = rt.run_sync(loop, task, task_key="t").run_id
    with open_store(str(path)) as st:
        assert isinstance(st, SQLiteStore)
        rows = len(st.checkpoints(run_id))
        seen: list[str] = []
        st._db.set_trace_callback(seen.append)
        try:
            trace.write_eval_case(st, run_id, io.StringIO())
            case = len(seen)
            seen.clear()
            trace.preference_pairs(st, run_ids=[run_id])
            pairs = len(seen)
        finally:
            st._db.set_trace_callback(None)
    return rows, case, pairs


def test_an_exports_statements_grow_with_its_pages_not_its_cycles(tmp_path: Path) -> None:
    """50 against 500 cycles: the difference is at most a few statements a page of 32
    checkpoints (before: ~11 a cycle, 5,000 more)."""
    rows_s, case_s, pairs_s = _statements(tmp_path / "short.db", 50)
    rows_l, case_l, pairs_l = _statements(tmp_path / "long.db", 500)
    pages = -(-rows_l // 32) - rows_s // 32
    assert case_l - case_s <= 4 * pages, (case_s, case_l, pages)
    assert pairs_l - pairs_s <= 4 * pages, (pairs_s, pairs_l, pages)


def test_states_read_last_first_over_many_pages_are_the_states(url: str) -> None:
    """Four pages, a snapshot every 50 checkpoints: a page whose page before is gone (read by
    no state in time) reads its chain from the snapshot again, and folds the same states."""
    loop = lw.Loop(
        name="pages",
        actor=lambda ctx: lw.Proposal.edit("doc", {f"p{ctx.cycle % 7}": f"v{ctx.cycle}"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=100)),
    )
    task = {"artifacts": {"doc": {f"p{i}": "" for i in range(7)}}}
    with lw.Runtime(url, snapshot_every=50) as rt:
        run_id = rt.run_sync(loop, task, task_key="t").run_id
        st = rt.store
        whole = [c.state for c in st.checkpoints(run_id)]
        assert len(whole) > 3 * 32
        listed = list(st.iter_checkpoints(run_id))
        assert [c.read_state() for c in reversed(listed)][::-1] == whole
        # every other page read only: each then folds on a page before it never read
        listed = list(st.iter_checkpoints(run_id))
        for i in range(0, len(listed), 64):
            assert listed[i].read_state() == whole[i]


@pytest.mark.parametrize(("every", "edge"), [(30, 31), (31, 32), (33, 34)])
def test_states_at_page_edges_are_each_chain_folded_whole(url: str, every: int, edge: int) -> None:
    """review50a: a snapshot (at ``edge``: seq 1, then every ``every``) as a page's last row
    (31), as the next page's first (32) and one row past it (34: that page opens on a delta
    whose snapshot is in the page before), a rollback into the first page and a fork from the
    second, each state compared with its chain read from its snapshot (``_state_at``, the
    reader before export49), read in order and last first."""

    def loop(cycles: int) -> lw.Loop:
        return lw.Loop(
            name="edges",
            actor=lambda ctx: lw.Proposal.edit("doc", {f"p{ctx.cycle % 3}": {"v": ctx.cycle}}),
            verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5), name="c")],
            contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
        )

    task = {"artifacts": {"doc": {f"p{i}": {} for i in range(3)}}}
    with lw.Runtime(url, snapshot_every=every) as rt:
        r = rt.run_sync(loop(70), task, task_key="t")
        fork = rt.fork(r.run_id, 40, loop=loop(110))
        rt.resume_sync(fork.run_id, loop(110))
        rt.rollback(r.run_id, 20, by="ana", loop=loop(70))
        rt.resume_sync(r.run_id, loop(90))
        st = rt.store
        for run_id in (r.run_id, fork.run_id):
            rows = st._checkpoint_rows(run_id, latest=False)
            assert len(rows) > 2 * 32
            if run_id == r.run_id:  # the snapshot the parameter places at a page's edge
                assert [row.seq for row in rows if row.seq == row.base][:3] == [0, 1, edge]
            whole = [st._state_at(run_id, row.seq, row.base) for row in rows]
            assert [c.read_state() for c in st.iter_checkpoints(run_id)] == whole
            listed = list(st.iter_checkpoints(run_id))
            assert [c.read_state() for c in reversed(listed)][::-1] == whole
