"""Review of the long-run read paths (run page window, fork/rollback by cycle, metrics in
one pass): each test here failed on the tree before its fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import loopwright as lw
from loopwright._people import concluded_at, concluded_in
from loopwright.store._base import CheckpointRow
from loopwright.store.sqlite import SQLiteStore

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from support.dashboard import dashboard

from loopwright.web import _run_page, create_app

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"p": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "p"),))

    return lw.Loop(
        name="review",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _run(db: str, cycles: int) -> str:
    with lw.Runtime(db) as rt:
        task = {"goal": "g", "artifacts": {"doc": {"p": ""}}}
        return rt.run_sync(_loop(cycles), task, task_key="k").run_id


def test_a_windowed_run_page_says_where_every_cycle_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run longer than the page's window: the timeline's note was cut after "of N;" (its
    paragraph never closed, no link), though docs/ui.md says it links to the API."""
    db = str(tmp_path / "w.db")
    rid = _run(db, 12)
    monkeypatch.setattr(_run_page, "CHECKPOINTS_READ", 5)
    monkeypatch.setattr(_run_page, "CYCLES_SHOWN", 3)
    page = dashboard(db, token=TOKEN).get(f"/runs/{rid}").text
    note = page.split("<h2>Timeline</h2>", 1)[1].split("<table", 1)[0]
    assert re.search(r"The last 3 cycles of 12; every one in <a href=\"/api/runs/", note), note
    assert note.strip().endswith("</p>"), note


class _OlderCheckpointRows(SQLiteStore):
    """A third-party store written against ``_checkpoint_rows`` before ``until`` (docs/
    storage.md: a store whose method has the older signature is served all the same)."""

    def _checkpoint_rows(  # type: ignore[override]
        self, run_id: str, *, latest: bool, since: int | None = None
    ) -> list[CheckpointRow]:
        return super()._checkpoint_rows(run_id, latest=latest, since=since)


def test_fork_rollback_and_later_checkpoints_on_a_store_without_until(tmp_path: Path) -> None:
    """Fork, rollback (``checkpoints_at``) and ``checkpoints_after`` passed ``until`` to every
    store: one written before it raised TypeError (a traceback from ``loopwright rollback``).
    Now it is read without it, and the same checkpoints are chosen as by the built-in store."""
    db = tmp_path / "o.db"
    rid = _run(str(db), 9)
    store = _OlderCheckpointRows(db)
    try:
        rt = lw.Runtime(store)
        picked = {n: concluded_in(store, rid, n, "at_cycle") for n in (0, 4, 9)}
        whole = store.checkpoints(rid)
        for n, ck in picked.items():
            assert ck.seq == concluded_at(whole, rid, n, "at_cycle").seq
            assert ck.state == concluded_at(whole, rid, n, "at_cycle").state
        after = store.checkpoints_after(rid, 5)  # a delta chain read up to seq 5
        assert [(c.seq, dict(c.fields)) for c in after] == [
            (c.seq, dict(c.fields)) for c in whole if c.seq > 5
        ]
        fork = rt.fork(rid, at_cycle=4, task_key="k~4")
        assert store.latest_checkpoint(fork.run_id).cycle == 4
        rt.rollback(rid, 3, by="dave")
        back = store.latest_checkpoint(rid)
        assert back.record is not None and back.record.get("decision") == "rollback"
        assert back.state["artifacts"] == concluded_at(whole, rid, 3, "x").state["artifacts"]
    finally:
        store.close()


@pytest.mark.parametrize("call_id", [2**63 - 1, 2**63, 2**70])
def test_a_call_id_past_the_databases_integers_is_not_found(url: str, call_id: int) -> None:
    """The call page asked the store for events before ``call_id + 1``: past the bigint the
    databases hold, the driver failed and the page answered 500. It is a 404, as any id the
    run has no model call at."""
    db = url
    rid = _run(db, 2)
    client = TestClient(create_app(db, token=TOKEN), base_url=LOCAL, raise_server_exceptions=False)
    for path in (f"/runs/{rid}/calls/{call_id}", f"/api/runs/{rid}/calls/{call_id}"):
        got = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert got.status_code == 404, (path, got.status_code, got.text[:200])
        assert "has no model call" in got.text


@pytest.mark.parametrize("cycle", [2**63, 2**70])
def test_a_cycle_past_the_databases_integers_is_refused_clearly(url: str, cycle: int) -> None:
    """Fork and rollback chose their target in Python over every checkpoint; asked in SQL
    (``checkpoints_at``) a cycle past SQLite's integers raised OverflowError, a traceback
    from ``loopwright rollback --to-cycle`` and the dashboard. It is the ConfigError any
    cycle the run has not gets, naming the run's cycles."""
    db = url
    rid = _run(db, 2)
    with lw.Runtime(db) as rt:
        with pytest.raises(lw.ConfigError, match=r"has no completed checkpoint .*cycles 0\.\.2"):
            rt.rollback(rid, cycle, by="dave")
        with pytest.raises(lw.ConfigError, match=r"has no completed checkpoint .*cycles 0\.\.2"):
            rt.fork(rid, at_cycle=cycle, task_key="k~big")
    # the dashboard's API: a 400 naming the run's cycles, not a 500
    client = TestClient(create_app(db, token=TOKEN), base_url=LOCAL, raise_server_exceptions=False)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for path, body in (("rollback", {"to_cycle": cycle}), ("rerun", {"at_cycle": cycle})):
        got = client.post(f"/api/runs/{rid}/{path}", json=body, headers=auth)
        assert got.status_code == 400, (path, got.status_code, got.text[:200])
        assert "has no completed checkpoint" in got.text


@pytest.mark.parametrize("kind", ["not-a-kind", "Cycle_Started"])
def test_a_run_page_filtered_to_a_kind_the_log_lacks_lists_none(url: str, kind: str) -> None:
    """``?kind=`` names a kind the log does not hold: the page lists no event (a NUL never
    reaches the page: the app refuses it with 400 first)."""
    rid = _run(url, 2)
    client = TestClient(create_app(url, token=TOKEN), base_url=LOCAL, raise_server_exceptions=False)
    got = client.get(f"/runs/{rid}", params={"kind": kind})
    assert got.status_code == 200, got.text[:300]
    assert "cycle_started" in got.text  # the kind list is still there
    assert f"No events of kind {kind}." in got.text


def test_checkpoints_of_a_cycle_across_snapshots_rollbacks_and_a_fork(url: str) -> None:
    """``checkpoints_at`` reads each snapshot's chain once for the marks built on it: with a
    snapshot every two checkpoints and rollbacks adding checkpoints of one cycle on several
    snapshots, every cycle's checkpoints are those ``checkpoints`` gives (seq, record, fields,
    time, state), and so are a fork's."""

    def same(store: lw.Store, rid: str) -> int:
        whole = store.checkpoints(rid)
        cycles = sorted({c.cycle for c in whole})
        widest = 0
        for n in [*cycles, 10**6]:
            picked = store.checkpoints_at(rid, n)
            want = [c for i, c in enumerate(whole) if i == 0 or c.cycle == n]
            assert [(c.seq, c.cycle, c.record, dict(c.fields), c.created_at) for c in picked] == [
                (c.seq, c.cycle, c.record, dict(c.fields), c.created_at) for c in want
            ], n
            assert [c.state for c in picked] == [c.state for c in want], n
            widest = max(widest, len(picked))
        return widest

    with lw.Runtime(url, snapshot_every=2) as rt:
        task = {"goal": "g", "artifacts": {"doc": {"p": ""}}}
        rid = rt.run_sync(_loop(6), task, task_key="k").run_id
        for to in (3, 5, 2):
            rt.rollback(rid, to, by="dave")
            rt.resume_sync(rid, _loop(9))
        assert same(rt.store, rid) >= 4  # one cycle's checkpoints on several snapshots
        fork = rt.fork(rid, at_cycle=3, task_key="k~3")
        rt.resume_sync(fork.run_id, _loop(9))
        same(rt.store, fork.run_id)


def test_a_cycle_among_no_checkpoints_is_refused_by_name() -> None:
    """``concluded_at`` of no checkpoints (its error's range taken from the first and last
    cycles concluded) failed with IndexError; it says the run has no checkpoint, as a
    ConfigError naming the argument."""
    with pytest.raises(lw.ConfigError, match=r"for cycle 3 \(it has no checkpoint\)") as got:
        concluded_at([], "r1", 3, "to_cycle")
    assert got.value.field == "to_cycle"


@lw.effect("spend", name="pay", requires_success=False)
def _pay(amount: int) -> dict[str, int]:
    return {"paid": amount}


def _slashed(cycles: int, park_at: int | None = None) -> lw.Loop:
    """Two parts, one named with a slash; a payment a person approves at ``park_at``."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        pay = (_pay.call(amount=500),) if ctx.cycle == park_at else ()
        return lw.Proposal(
            edits=(lw.Edit("doc", "a/b", f"draft {ctx.cycle}"), lw.Edit("doc", "c", ctx.cycle)),
            effects=pay,
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        open_ = (lw.Finding("open", "doc", "a/b"), lw.Finding("open", "doc", "c"))
        return lw.Verdict(passed=False, score=0.5, findings=open_)

    return lw.Loop(
        name="slashed",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[_pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="big"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def test_the_paged_reads_at_every_page_boundary(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``iter_fields``, ``iter_checkpoints`` (one paged reader, ``_folded_pages``) and
    ``iter_versions`` (through ``versions_page``) give what ``checkpoints`` and ``versions``
    give whole, with pages of 1, 2 and 3 rows and of exactly the rows' number and one either
    side of it (the last page full, then an empty one): fields folded across pages on
    snapshots every two checkpoints, rollbacks, a fork, a cycle parked for a person, a part
    whose name holds a slash, and a rollback's abandoned versions above a part's count."""
    task = {"goal": "g", "artifacts": {"doc": {"a/b": "", "c": 0}}}
    with lw.Runtime(url, snapshot_every=2) as rt:
        rid = rt.run_sync(_slashed(9, park_at=4), task, task_key="k").run_id
        assert rt.store.get_run(rid).status == "awaiting_approval"
        rt.approve(rid, by="alice")
        rt.resume_sync(rid, _slashed(9))
        rt.rollback(rid, 6, by="dave")
        rt.resume_sync(rid, _slashed(12))
        fork = rt.fork(rid, at_cycle=5, task_key="k~5").run_id
        rt.resume_sync(fork, _slashed(8))
        rt.rollback(rid, 3, by="dave")  # versions above the count abandoned, not resumed
        store = rt.store
        for run_id in (rid, fork):
            whole = store.checkpoints(run_id)
            assert any(c.fields.get("pending") for c in whole) == (run_id == rid)
            versions = {ref: store.versions(run_id, ref) for ref in ("doc/a/b", "doc/c")}
            if run_id == rid:  # the last rollback left versions above the part's count
                part = store.latest_checkpoint(rid).task_state().part("doc/a/b")
                assert part is not None and versions["doc/a/b"][-1].n > part.count
            sizes = {len(whole), *(len(vs) for vs in versions.values())}
            pages = {1, 2, 3, *sizes, *(n - 1 for n in sizes), *(n + 1 for n in sizes)}
            assert min(sizes) > 4, sizes  # every read crosses pages
            for page in sorted(pages):
                monkeypatch.setattr(store, "PAGE", page, raising=False)
                assert [(s, n, r, dict(f)) for s, n, r, f in store.iter_fields(run_id)] == [
                    (c.seq, c.cycle, c.record, dict(c.fields)) for c in whole
                ], page
                paged = list(store.iter_checkpoints(run_id))
                assert [
                    (c.seq, c.cycle, c.record, dict(c.fields), c.created_at) for c in paged
                ] == [(c.seq, c.cycle, c.record, dict(c.fields), c.created_at) for c in whole], page
                assert [c.state for c in paged] == [c.state for c in whole], page
                for ref, vs in versions.items():
                    assert list(store.iter_versions(run_id, ref)) == vs, (page, ref)
