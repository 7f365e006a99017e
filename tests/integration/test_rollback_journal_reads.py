"""A rollback offers to undo the effects done after the cycle it goes back to
(``_reversal.offer_compensations``). It read the run's whole effects journal to find them, and
to find the compensations already run: a run with an effect a cycle, rolled back by two
cycles, decoded 50 entries at 50 cycles and 500 at 500. ``Store.journal_where`` reads the
cycles after the point (the journal's index by cycle) and the compensations by their keys."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, ClassVar

import pytest

import loopwright as lw
from loopwright._reversal import offer_compensations
from loopwright.store import JournalEntry, Store, _base, _sql, _sql_core, open_store
from loopwright.store.sqlite import SQLiteStore

ALLOW = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))


def _refund(key: str, result: Any, args: dict[str, Any]) -> None:
    return None


PAY = lw.effect(
    "spend", name="pay", key=lambda a: a["invoice"], compensate=_refund, requires_success=False
)(lambda invoice: {"paid": invoice})


def _paying_loop(cycles: int) -> lw.Loop:
    """An effect a cycle (invoice ``I-<cycle>``), every proposal rejected: a run whose effects
    journal grows by one entry a cycle."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"p0": f"{ctx.cycle}"}).edits,
            effects=(PAY.call(invoice=f"I-{ctx.cycle}"),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "p0"),))

    return lw.Loop(
        name="paying",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[PAY],
        approvals=ALLOW,
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


class _Counted(JournalEntry):
    """A journal entry that counts its decoding (the SQL stores build one per row read)."""

    made: ClassVar[list[int]] = [0]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _Counted.made[0] += 1
        super().__init__(*args, **kwargs)


def test_a_rollback_offers_from_the_cycles_rolled_back_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Journal entries decoded to make the offers of a rollback by two cycles: 50 and 500
    at 50 and 500 cycles of one effect each before, the two cycles' two entries now."""
    decoded: dict[int, int] = {}
    for cycles in (50, 500):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        loop = _paying_loop(cycles)
        with lw.Runtime(url) as rt:
            r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
            assert r.cycles == cycles
            assert len(rt.store.journal(r.run_id, kind="effect")) == cycles
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "JournalEntry", _Counted)
                _Counted.made[0] = 0
                pend, reqs = offer_compensations(
                    rt.store, r.run_id, after_cycle=cycles - 2, loop=loop, cycle=cycles, why="t"
                )
                decoded[cycles] = _Counted.made[0]
        assert pend is not None and reqs == []
        keys = [o["key"] for o in pend["offers"]]
        assert keys == [f"pay:I-{cycles - 1}", f"pay:I-{cycles}"], keys
    assert decoded == {50: 2, 500: 2}, decoded


# --- the offers as they were, on both stores ------------------------------------------------


def _old_offered(journal: list[JournalEntry], after_cycle: int, offered: set[str]) -> list[str]:
    """The effects ``offer_compensations`` offered, or listed as irreversible, before: its
    filter over the run's whole effects journal, as it was written."""
    undone = {
        (e.data.get("args") or {}).get("compensates")
        for e in journal
        if str(e.data.get("name", "")).endswith(".compensate") and e.status == "done"
    }
    return [
        e.key.removeprefix("effect:")
        for e in journal
        if e.status == "done"
        and e.cycle > after_cycle
        and not str(e.data.get("name", "")).endswith(".compensate")
        and e.key.removeprefix("effect:") not in undone
        and e.key.removeprefix("effect:") not in offered
    ]


def _scenario(store: Store) -> str:
    """A run's effects journal with every case the offers tell apart, written as the engine
    writes it (keys, names, ``compensates``), in cycle order of creation."""
    rec, _ = store.create_run(
        run_id="run-offers",
        task_key="offers",
        loop_name="paying",
        project="p",
        spec_ref=None,
        loop_version=None,
        contract={"budget": {"max_cycles": 20}},
        task={},
        initial_state={"cycle": 0},
    )
    run_id = rec.run_id
    token = store.acquire_lease(run_id, "me", 60)

    def put(key: str, cycle: int, status: str, name: str = "pay", **data: Any) -> None:
        args = data.pop("args", {"invoice": key})
        store.journal_put(
            run_id,
            token,
            key=f"effect:{key}",
            kind="effect",
            cycle=cycle,
            status=status,
            data={"name": name, "kind": "spend", "args": args, **data},
        )

    def comp(of: str, cycle: int, status: str, gen: int = 1) -> None:
        key = f"pay.compensate:{of}" + (f"~{gen}" if gen > 1 else "")
        put(key, cycle, status, "pay.compensate", args={"compensates": of})

    put("pay:A", 1, "done")
    put("pay:J", 2, "done")
    put("pay:B", 2, "done")
    put("pay:C", 3, "done")
    # The engine journals a compensation at the run's cycle then, at or after its original's
    # (a rollback keeps the cycle counter); these below it are a journal that says otherwise
    # anyway, which the offers read by key still see.
    comp("pay:C", 1, "done")
    put("pay:D", 4, "done")
    comp("pay:D", 2, "retired")  # failed, retired by a rollback: the next try is ~2
    comp("pay:D", 3, "done", gen=2)
    put("pay:E", 5, "done")
    comp("pay:E", 5, "failed")  # not undone: offered again
    put("pay:F", 6, "compensated")
    put("pay:F~2", 6, "done")  # the key's next generation, done again
    put("noop:G", 7, "done", name="noop")  # the loop has no such effect: irreversible
    put("pay:H", 8, "done", from_run="run-other")  # another run did it: irreversible
    put("pay:I", 9, "in_doubt")
    put("pay:K", 9, "done")
    comp("pay:J", 9, "done")  # a cancel's, after its original's cycle
    store.journal_put(
        run_id, token, key="retry:actor", kind="retry", cycle=9, status="settled", data={}
    )
    return run_id


def test_offers_are_those_the_whole_journal_gave(url: str) -> None:
    """On both stores, for every point and with offers kept, the effects offered (or listed
    irreversible) are those the filter over the whole journal chose: a compensation that ran
    but whose original was not yet marked counts at any cycle, in any generation."""
    loop = _paying_loop(20)
    with open_store(url) as store:
        run_id = _scenario(store)
        journal = store.journal(run_id, kind="effect")
        seen = 0
        for after_cycle in range(-1, 11):
            for keep in ([], [{"key": "pay:K"}], [{"key": "pay:E"}, {"key": "pay:A"}]):
                offered = {str(o["key"]) for o in keep}
                pend, reqs = offer_compensations(
                    store, run_id, after_cycle=after_cycle, loop=loop, cycle=9, why="t", keep=keep
                )
                want = _old_offered(journal, after_cycle, offered)
                got = [] if pend is None else [o["key"] for o in pend["offers"][len(keep) :]]
                got += (
                    []
                    if pend is None
                    else [i.split(" (")[1].split(")")[0] for i in pend["irreversible"]]
                )
                assert sorted(got) == sorted(want), (after_cycle, keep, got, want)
                assert reqs == []
                seen += len(got)
        assert seen > 0
        everything = offer_compensations(
            store, run_id, after_cycle=-1, loop=loop, cycle=9, why="t"
        )[0]
        assert everything is not None
        assert [o["key"] for o in everything["offers"]] == [
            "pay:A",
            "pay:B",
            "pay:E",
            "pay:F~2",
            "pay:K",
        ]
        assert len(everything["irreversible"]) == 2


def test_journal_where_answers_as_the_protocol_default(url: str) -> None:
    """The SQL stores' query against the protocol's filter over ``journal``, for each filter
    and their combinations (and a limit)."""
    with open_store(url) as store:
        run_id = _scenario(store)
        keys = [
            ["effect:pay:C", "effect:pay.compensate:pay:C", "effect:nope"],
            ["effect:pay.compensate:pay:D~2", "retry:actor", "effect:pay:A"],
            [],
        ]
        statuses = [None, ["done"], ["in_doubt", "retired", "settled"], []]
        checked = 0
        for kind in (None, "effect", "retry"):
            for after_cycle in (None, -1, 0, 3, 4, 9):
                for st in statuses:
                    for ks, lim in itertools.product((None, *keys), (None, 1, 3)):
                        filters: dict[str, Any] = {
                            "kind": kind,
                            "after_cycle": after_cycle,
                            "statuses": st,
                            "keys": ks,
                            "limit": lim,
                        }
                        got = store.journal_where(run_id, **filters)
                        want = Store.journal_where(store, run_id, **filters)
                        assert got == want, filters
                        checked += bool(got)
        assert checked > 50
        assert store.journal_where("run-none", kind="effect", after_cycle=0) == []
    assert _base.Store.journal_where is not _sql.SQLStore.journal_where


def test_a_rollback_reads_no_entry_of_the_cycles_it_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Journal entries decoded by a whole rollback by two cycles (the effects in flight, the
    failed ones and spent retries it retires, the offers): 150 and 1,500 at 50 and 500
    cycles of one effect each before, the offers' two entries now; then the resume runs the
    two compensations and marks their originals."""
    decoded: dict[int, int] = {}
    for cycles in (50, 500):
        url = f"sqlite:///{tmp_path / f'r{cycles}.db'}?durability=process"
        loop = _paying_loop(cycles)
        with lw.Runtime(url) as rt:
            r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "JournalEntry", _Counted)
                _Counted.made[0] = 0
                rt.rollback(r.run_id, cycles - 2, by="dave", loop=loop)
                decoded[cycles] = _Counted.made[0]
            rt.resume_sync(r.run_id, loop)
            j = {e.key: e.status for e in rt.store.journal(r.run_id, kind="effect")}
            assert j[f"effect:pay:I-{cycles}"] == "compensated"
            assert j[f"effect:pay.compensate:pay:I-{cycles}"] == "done"
            assert j[f"effect:pay:I-{cycles - 2}"] == "done"
    assert decoded == {50: 2, 500: 2}, decoded


def test_a_resume_reads_the_offers_requests_not_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resume that runs a rollback's compensations reads the offers' requests by id: it
    read the run's every request, one a cycle here (each payment needs a person): 11 and 41
    at 10 and 40 cycles before, the one offer's now."""
    built: dict[int, int] = {}

    class CountedApproval(_base.Approval):
        made: ClassVar[list[int]] = [0]

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            CountedApproval.made[0] += 1
            super().__init__(*args, **kwargs)

    asking = lw.ApprovalPolicy(
        (
            lw.PolicyRule(kind="spend", effect="pay.compensate", action="require", name="r"),
            lw.PolicyRule(kind="spend", effect="pay", action="require", name="p"),
        )
    )
    for cycles in (10, 40):
        url = f"sqlite:///{tmp_path / f'a{cycles}.db'}?durability=process"
        loop = dataclasses.replace(_paying_loop(cycles), approvals=asking)
        with lw.Runtime(url) as rt:
            r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
            while r.status == "awaiting_approval":
                rt.approve(r.run_id, by="ann")
                r = rt.resume_sync(r.run_id, loop)
            assert r.cycles == cycles
            assert len(rt.store.approvals(run_id=r.run_id)) == cycles
            rt.rollback(r.run_id, cycles - 1, by="dave", loop=loop)
            rt.approve(r.run_id, by="ann")  # the refund of the last payment
            with monkeypatch.context() as m:
                m.setattr(_sql_core, "Approval", CountedApproval)
                CountedApproval.made[0] = 0
                rt.resume_sync(
                    r.run_id,
                    dataclasses.replace(
                        loop, contract=lw.Contract(budget=lw.Budget(max_cycles=cycles - 1))
                    ),
                )
                built[cycles] = CountedApproval.made[0]
            j = {e.key: e.status for e in rt.store.journal(r.run_id, kind="effect")}
            assert j[f"effect:pay:I-{cycles}"] == "compensated"
    assert built == {10: 1, 40: 1}, built


def test_a_store_without_journal_where_rolls_back_and_compensates_alike(tmp_path: Path) -> None:
    """The same rollbacks, offers and compensations on a store served by the protocol's
    default as on the built-in one: twice back, the second over the first's compensations."""

    class OwnStore(SQLiteStore):
        """A store of one's own written before ``journal_where``: the protocol's default
        serves it (its ``journal``, filtered)."""

        journal_where = Store.journal_where

    seen: list[Any] = []
    for own in (False, True):
        db = tmp_path / f"s{own}.db"
        store: Store = OwnStore(db) if own else SQLiteStore(db)
        try:
            rt = lw.Runtime(store)
            loop = _paying_loop(8)
            r = rt.run_sync(loop, {"artifacts": {"doc": {}}}, task_key="w")
            rt.rollback(r.run_id, 6, by="dave", loop=loop)
            rt.resume_sync(r.run_id, loop)  # refunds 7 and 8 (at cycle 8: the budget's end)
            rt.rollback(r.run_id, 4, by="dave", loop=loop)
            pend = store.latest_checkpoint(r.run_id).state["pending"]
            rt.resume_sync(r.run_id, loop)
            j = {e.key: e.status for e in store.journal(r.run_id, kind="effect")}
            seen.append(([o["key"] for o in pend["offers"]], j))
        finally:
            store.close()
    assert seen[0] == seen[1]
    offers, j = seen[0]
    # the second rollback offers what the first did not undo; each refund ran once
    assert offers == ["pay:I-5", "pay:I-6"], offers
    assert [k for k, v in j.items() if v == "compensated"] == [
        f"effect:pay:I-{n}" for n in (5, 6, 7, 8)
    ]
    assert sorted(k for k in j if ".compensate:" in k) == [
        f"effect:pay.compensate:pay:I-{n}" for n in (5, 6, 7, 8)
    ]
