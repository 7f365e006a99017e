"""What a person's command reads of a long run is bounded by what it answers (invariant 8):
``loopwright cancel`` read the run's every done effect to print their number, a request named
by a prefix of its id read the run's every request (and so did the error that no request is
pending), ``loopwright show`` read the retry entries it drops, and a fork read the origin's
whole effects journal to keep the done ones up to its cycle. Counted here as entries and
requests decoded (the SQL stores build one object per row read) at two run lengths."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Collection
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from test_rollback_journal_reads import PAY, _Counted, _paying_loop, _scenario

import loopwright as lw
from loopwright.cli import main
from loopwright.store import JournalEntry, NewApproval, Store, _base, _sql, _sql_core, open_store
from loopwright.store.sqlite import SQLiteStore


class _CountedApproval(_base.Approval):
    made: ClassVar[list[int]] = [0]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _CountedApproval.made[0] += 1
        super().__init__(*args, **kwargs)


HOLD = lw.effect("hold", name="hold", key=lambda a: a["what"], requires_success=False)(
    lambda what: {"held": what}
)


def _held_loop(cycles: int) -> lw.Loop:
    """A payment a cycle, then at cycle ``cycles`` an effect a person must approve: the run
    waits with ``cycles - 1`` done effects (not ended: it can be cancelled)."""
    base = _paying_loop(cycles + 5)

    def actor(ctx: lw.Context) -> lw.Proposal:
        edits = lw.Proposal.edit("doc", {"p0": f"{ctx.cycle}"}).edits
        if ctx.cycle >= cycles:
            return lw.Proposal(edits=edits, effects=(HOLD.call(what="it"),))
        return lw.Proposal(edits=edits, effects=(PAY.call(invoice=f"I-{ctx.cycle}"),))

    rules = (
        lw.PolicyRule(kind="spend", action="allow"),
        lw.PolicyRule(kind="hold", action="require", name="hold"),
    )
    return dataclasses.replace(
        base, actor=actor, effects=[PAY, HOLD], approvals=lw.ApprovalPolicy(rules)
    )


def test_cancel_counts_the_done_effects_it_cannot_offer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright cancel`` of a run started from Python says how many done effects it did
    not offer to undo: it decoded the run's every effect entry to count them (50 and 500 at
    50 and 500 cycles); the count is the database's now, as is whether any is left (the
    cancel's note that compensations were not offered): no entry is decoded."""
    decoded: dict[int, int] = {}
    for cycles in (50, 500):
        db = str(tmp_path / f"c{cycles}.db")
        with lw.Runtime(db) as rt:
            r = rt.run_sync(_held_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert r.status == "awaiting_approval", r.status
            done = [e for e in rt.store.journal(r.run_id, kind="effect") if e.status == "done"]
            assert len(done) == cycles - 1
        capsys.readouterr()
        with monkeypatch.context() as m:
            m.setattr(_sql_core, "JournalEntry", _Counted)
            _Counted.made[0] = 0
            assert main(["cancel", r.run_id, "--by", "ann", "--store", db]) == 0
            decoded[cycles] = _Counted.made[0]
        out = capsys.readouterr().out
        assert f"{cycles - 1} completed effect(s) not offered for compensation" in out, out
    # the fork's warning of effects it may do again (effects53b) reads the first few done
    # after the fork point, at most 33 whatever the run's length (``_fork_effects._READ``)
    assert decoded[50] == decoded[500] <= 33, decoded


def _asked_run(rt: lw.Runtime, cycles: int) -> tuple[str, str]:
    """A run asked for a payment every cycle, each approved but the last: ``cycles``
    requests, the last pending (its id returned with the run's)."""
    asking = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="p"),))
    loop = dataclasses.replace(_paying_loop(cycles), approvals=asking)
    r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
    while len(rt.store.approvals(run_id=r.run_id)) < cycles:
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, loop)
    assert r.status == "awaiting_approval"
    (pending,) = rt.store.approvals(run_id=r.run_id, status="pending")
    return r.run_id, pending.approval_id


def test_a_request_named_by_a_prefix_reads_those_of_the_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests decoded to find the pending one by a prefix of its id (10 and 40 at 10 and
    40 requests before), and to say that none is pending once it is decided (10 and 40 too):
    one each now."""
    by_prefix: dict[int, int] = {}
    none_left: dict[int, int] = {}
    for cycles in (10, 40):
        with lw.Runtime(str(tmp_path / f"a{cycles}.db")) as rt:
            run_id, pending = _asked_run(rt, cycles)
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "Approval", _CountedApproval)
                _CountedApproval.made[0] = 0
                found = rt.pending_approval(run_id, pending[:-2])
                by_prefix[cycles] = _CountedApproval.made[0]
            assert found.approval_id == pending
            rt.approve(run_id, by="ann", approval_id=pending[:-2])
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "Approval", _CountedApproval)
                _CountedApproval.made[0] = 0
                with pytest.raises(lw.ApprovalError, match=f"{pending} was already approved"):
                    rt.pending_approval(run_id)
                none_left[cycles] = _CountedApproval.made[0]
    assert by_prefix == {10: 1, 40: 1}, by_prefix
    assert none_left == {10: 1, 40: 1}, none_left


def _requests(store: Store, run_id: str, ids: list[str]) -> None:
    token = store.acquire_lease(run_id, "me", 60)
    store.commit(
        run_id,
        token,
        seq=1,
        cycle=1,
        state={"cycle": 1},
        record=None,
        events=[],
        run={"status": "awaiting_approval"},
        approvals=[
            NewApproval(aid, 1, "risk", "r", f"do {aid}", "why", {}, None, "h", None) for aid in ids
        ],
    )
    store.release_lease(run_id, token)


def test_approvals_by_prefix_answers_as_the_protocol_default(url: str) -> None:
    """On both stores, the requests of a prefix are those ``startswith`` chose over the run's
    every request: LIKE's wildcards and a backslash are characters, the case is as typed,
    another run's requests are not the run's."""
    with open_store(url) as store:
        for run_id in ("run-a", "run-b"):
            store.create_run(
                run_id=run_id,
                task_key=run_id,
                loop_name="l",
                project="",
                spec_ref=None,
                loop_version=None,
                contract={"budget": {"max_cycles": 3}},
                task={},
                initial_state={"cycle": 0},
            )
        ids = ["ab%1", "ab_2", "abX", "aB3", "abc", "ab", "a\\b", "éa", "éb", "xyz"]
        _requests(store, "run-a", ids)
        _requests(store, "run-b", ["abz", "ab%9"])
        checked = 0
        prefixes = ["a", "ab", "ab%", "ab_", "aB", "AB", "abc", "abcd", "a\\", "é", "x", "%", "_"]
        for prefix, limit in itertools.product(prefixes, (None, 1, 2, 0)):
            got = store.approvals_by_prefix("run-a", prefix, limit=limit)
            want = Store.approvals_by_prefix(store, "run-a", prefix, limit=limit)
            assert got == want, (prefix, limit)
            checked += len(got)
        assert checked > 20
        assert [a.approval_id for a in store.approvals_by_prefix("run-a", "ab%")] == ["ab%1"]
    assert _base.Store.approvals_by_prefix is not _sql.SQLStore.approvals_by_prefix


def test_journal_where_up_to_a_cycle_and_count_journal_answer_as_the_default(url: str) -> None:
    """``upto_cycle`` (with ``after_cycle``, statuses and kind) and ``count_journal`` against
    the protocol's filter over ``journal``, on both stores."""
    with open_store(url) as store:
        run_id = _scenario(store)
        checked = 0
        for kind, after, upto, st in itertools.product(
            (None, "effect", "retry"),
            (None, 2),
            (None, -1, 0, 3, 4, 9),
            (None, ["done"], ["in_doubt", "settled"], []),
        ):
            filters: dict[str, Any] = {
                "kind": kind,
                "after_cycle": after,
                "upto_cycle": upto,
                "statuses": st,
            }
            got = store.journal_where(run_id, **filters)
            assert got == Store.journal_where(store, run_id, **filters), filters
            assert upto is None or all(e.cycle <= upto for e in got), filters
            checked += bool(got)
        assert checked > 20
        for kind, st, lim in itertools.product(
            (None, "effect", "retry"), (None, ["done"], []), (None, 0, 1, 3)
        ):
            n = store.count_journal(run_id, kind=kind, statuses=st, limit=lim)
            want = Store.count_journal(store, run_id, kind=kind, statuses=st, limit=lim)
            assert n == want, (kind, st, lim)
        assert store.count_journal(run_id, kind="effect", statuses=["done"], limit=3) == 3
        assert store.count_journal(run_id, kind="effect", statuses=["done"]) == 13
        assert store.count_journal("run-none") == 0
    assert _base.Store.count_journal is not _sql.SQLStore.count_journal


def test_show_reads_the_effects_not_the_retry_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright show`` of a run with a retry entry a cycle (an actor's call that failed
    once every cycle) and three effects decoded every entry (53 and 503 at 50 and 500
    cycles), to show the three effects; it reads those now."""
    decoded: dict[int, int] = {}
    for cycles in (50, 500):
        db = str(tmp_path / f"s{cycles}.db")
        with lw.Runtime(db) as rt:
            r = rt.run_sync(_paying_loop(3), {"artifacts": {"doc": {}}}, task_key="w")
            st = rt.store
            token = st.acquire_lease(r.run_id, "me", 60)
            for n in range(1, cycles + 1):
                st.journal_put(
                    r.run_id,
                    token,
                    key=f"retry:actor:{n}",
                    kind="retry",
                    cycle=n,
                    status="settled",
                    data={"class": "transient", "error": {"type": "Timeout"}},
                )
            st.release_lease(r.run_id, token)
        capsys.readouterr()
        with monkeypatch.context() as m:
            m.setattr(_sql_core, "JournalEntry", _Counted)
            _Counted.made[0] = 0
            assert main(["show", r.run_id, "--store", db]) == 0
            decoded[cycles] = _Counted.made[0]
        out = capsys.readouterr().out
        assert "Effects (journal)" in out and "pay:I-3" in out, out
    assert decoded == {50: 3, 500: 3}, decoded


def test_a_fork_reads_the_done_effects_up_to_its_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork at cycle 3 of a run with an effect a cycle, every proposal rejected, inherits
    the three done effects and the three rejections before it: it decoded the origin's whole
    effects journal (50 and 500 entries at 50 and 500 cycles) and read its every rejection
    (50 and 500 rows) to keep them; none of either now (the store copies them:
    ``test_fork_copies_effects.py``), but for the few its warning names (as many at 500 as at 50)."""
    decoded: dict[int, int] = {}
    rejections: dict[int, int] = {}
    real = _sql.SQLStore.rejected_rows
    read: list[int] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> list[tuple[str, int]]:
        rows = real(self, *args, **kwargs)
        read.append(len(rows))
        return rows

    for cycles in (50, 500):
        with lw.Runtime(f"sqlite:///{tmp_path / f'f{cycles}.db'}?durability=process") as rt:
            r = rt.run_sync(_paying_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            assert len(rt.store.rejected_rows(r.run_id)) == cycles
            read.clear()
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "JournalEntry", _Counted)
                m.setattr(_sql.SQLStore, "rejected_rows", counted)
                _Counted.made[0] = 0
                new = rt.fork(r.run_id, 3)
                decoded[cycles] = _Counted.made[0]
                rejections[cycles] = sum(read)
            got = rt.store.journal(new.run_id, kind="effect")
            assert [e.key for e in got] == [f"effect:pay:I-{n}" for n in (1, 2, 3)]
            assert all(e.status == "done" and e.data["inherited_from"] == r.run_id for e in got)
            assert sorted(c for _d, c in rt.store.rejected_rows(new.run_id)) == [1, 2, 3]
    # the fork's warning of effects it may do again (effects53b) reads the first few done
    # after the fork point, at most 33 whatever the run's length (``_fork_effects._READ``)
    assert decoded[50] == decoded[500] <= 33, decoded
    assert rejections == {50: 0, 500: 0}, rejections


def test_a_store_whose_journal_where_predates_upto_cycle_forks_alike(tmp_path: Path) -> None:
    """A store of one's own whose ``journal_where`` and ``rejected_rows`` have the older
    signatures (no ``upto_cycle``) is served all the same: the fork cuts the cycles itself."""

    class OwnStore(SQLiteStore):
        def journal_where(  # type: ignore[override]
            self,
            run_id: str,
            *,
            kind: str | None = None,
            after_cycle: int | None = None,
            statuses: Collection[str] | None = None,
            keys: Collection[str] | None = None,
            limit: int | None = None,
        ) -> list[JournalEntry]:
            return super().journal_where(
                run_id,
                kind=kind,
                after_cycle=after_cycle,
                statuses=statuses,
                keys=keys,
                limit=limit,
            )

        def rejected_rows(self, run_id: str) -> list[tuple[str, int]]:  # type: ignore[override]
            return super().rejected_rows(run_id)

    store = OwnStore(tmp_path / "own.db")
    try:
        rt = lw.Runtime(store)
        r = rt.run_sync(_paying_loop(8), {"artifacts": {"doc": {}}}, task_key="w")
        new = rt.fork(r.run_id, 3)
        got = store.journal(new.run_id, kind="effect")
        assert [e.key for e in got] == [f"effect:pay:I-{n}" for n in (1, 2, 3)]
        assert sorted(c for _d, c in store.rejected_rows(new.run_id)) == [1, 2, 3]
    finally:
        store.close()


def test_whether_a_done_effect_is_left_is_one_row(tmp_path: Path) -> None:
    """A cancel or a rollback without its loop notes that compensations were not offered when
    the run has a done effect. It asked ``journal_where(..., limit=1)``, the oldest one, which
    the database found by sorting every done effect of the run; it asks for the first row
    found now. SQLite VM steps (deterministic: the rows it reads) at 50 and 500 cycles: 1,292
    and 12,542 before, 30 at both now."""
    steps: dict[int, int] = {}
    for cycles in (50, 500):
        with lw.Runtime(f"sqlite:///{tmp_path / f'n{cycles}.db'}?durability=process") as rt:
            r = rt.run_sync(_paying_loop(cycles), {"artifacts": {"doc": {}}}, task_key="w")
            ex = SimpleNamespace(run_id=r.run_id, events=[], state=SimpleNamespace(cycle=cycles))
            store = rt.store
            assert isinstance(store, SQLiteStore)
            count = [0]

            def step(count: list[int] = count) -> int:
                count[0] += 1
                return 0

            rt._note_not_offered(ex, None)  # type: ignore[arg-type]  # statements prepared
            ex.events.clear()
            store._db.set_progress_handler(step, 1)
            try:
                rt._note_not_offered(ex, None)  # type: ignore[arg-type]
            finally:
                store._db.set_progress_handler(None, 1)
            steps[cycles] = count[0]
            assert [e.kind for e in ex.events] == ["compensations_not_offered"]
            rt._note_not_offered(ex, _paying_loop(cycles))  # with the loop: nothing noted
            assert len(ex.events) == 1
    assert steps[500] == steps[50], steps
