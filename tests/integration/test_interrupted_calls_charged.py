"""A billed call whose cycle is killed before its commit is charged when the cycle is redone
(invariant 7: spend is accounted from every call; the provider billed it). Before, only
failed attempts were journaled: a process killed after the actor's answer re-asked it on
resume and charged once what was billed twice, and a crash loop spent without limit under
any budget. The journal entry that carries the billing goes with the commit that charges
it, so the journal does not grow a row a cycle."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright import _lease_life
from loopwright.replay import simulate, traces_from_store

PARTS = ("a", "b", "c")
TASK: dict[str, object] = {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}}
ACTOR = lw.Usage(cost_usd=0.1, tokens=100)
CHECK = lw.Usage(cost_usd=0.01, tokens=10)


def _loop(
    calls: list[str],
    max_cost: float = 10.0,
    *,
    name: str = "billed",
    actor_usage: Callable[[int], lw.Usage] = lambda _cycle: ACTOR,
) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append("actor")
        doc = ctx.artifacts["doc"]
        todo = [p for p in PARTS if doc.get(p) != "good"] or ["a"]
        return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=actor_usage(ctx.cycle))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls.append("check")
        doc = state.artifacts["doc"].values()
        bad = [x for x in PARTS if doc.get(x) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / len(PARTS), usage=CHECK)

    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            budget=lw.Budget(max_cycles=6, max_cost_usd=max_cost),
        ),
    )


def _crashed_then_resumed(url: str, crash: tuple[str, int]) -> tuple[lw.RunResult, lw.Runtime]:
    calls: list[str] = []
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(crash)
        with pytest.raises(Crash):
            rt.run_sync(_loop(calls), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    again = lw.Runtime(url)
    return again.resume_sync(run_id, _loop(calls)), again


def _reference(url: str) -> lw.RunResult:
    with lw.Runtime(url) as rt:
        return rt.run_sync(_loop([]), TASK, task_key="k")


@pytest.mark.parametrize(
    ("crash", "redone", "owed"),
    [
        # cycle 2's actor answered; the check not yet asked
        (("after_actor", 2), 2, ACTOR),
        # cycle 1's actor and check answered (the first checkpoint is the run's start); the
        # cycle not committed
        (("before_checkpoint", 2), 1, ACTOR + CHECK),
    ],
)
def test_a_cycle_killed_before_its_commit_still_owes_its_calls(
    url: str, tmp_path: Path, crash: tuple[str, int], redone: int, owed: lw.Usage
) -> None:
    ref = _reference(f"sqlite:///{tmp_path / 'ref.db'}")
    got, rt = _crashed_then_resumed(url, crash)
    try:
        assert (got.status, got.stop_reason, got.cycles) == (ref.status, ref.stop_reason, 3)
        # what the uninterrupted run spent, and the calls the killed cycle was billed for
        assert got.spent.cost_usd == pytest.approx(ref.spent.cost_usd + owed.cost_usd)
        assert got.spent.tokens == ref.spent.tokens + owed.tokens
        # the redone cycle's record lists them as calls: its usage, the events and the
        # trace add up to the run's spend; replay under the contract agrees
        records = [c.record for c in rt.store.checkpoints(got.run_id) if c.record]
        (again,) = [r for r in records if r.get("cycle") == redone and "proposal" in r]
        # each call owed is charged just before the call asked again in its place
        assert [(c["who"], c["cost_usd"]) for c in again["calls"]] == (
            [("actor", 0.1), ("actor", 0.1), ("verifier:check", 0.01)]
            if owed == ACTOR
            else [
                ("actor", 0.1),
                ("actor", 0.1),
                ("verifier:check", 0.01),
                ("verifier:check", 0.01),
            ]
        )
        assert sum(r["usage"]["cost_usd"] for r in records if "usage" in r) == pytest.approx(
            got.spent.cost_usd
        )
        (trace,) = list(traces_from_store(rt.store))
        out = simulate(trace, _loop([]).contract)
        assert out.cost_usd == pytest.approx(got.spent.cost_usd)
        # the billing entries went with the commits that charged them
        assert [e.key for e in rt.store.journal(got.run_id, kind="retry")] == []
    finally:
        rt.close()


def test_an_uninterrupted_run_leaves_no_billing_rows(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop([]), TASK, task_key="k")
        assert (r.status, r.cycles) == ("accepted", 3)
        assert r.spent.cost_usd == pytest.approx(3 * (ACTOR.cost_usd + CHECK.cost_usd))
        assert rt.store.journal(r.run_id) == []


def test_a_crash_loop_ends_by_its_budget(tmp_path: Path) -> None:
    """A process killed after the actor's answer of cycle 2, again and again: each restart
    owes what the killed one was billed, and once that crosses the budget the run stops
    without asking the actor again (before: charged nothing, asked for ever)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    calls: list[str] = []
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("after_actor", 2))
        with pytest.raises(Crash):
            rt.run_sync(_loop(calls, max_cost=0.45), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    # cycle 1 spent 0.11; every restart's actor call of cycle 2 is 0.1 more
    for _ in range(2):
        with lw.Runtime(url) as rt:
            rt._on_phase = phase_hook(("after_actor", 1))
            with pytest.raises(Crash):
                rt.resume_sync(run_id, _loop(calls, max_cost=0.45))
    asked = calls.count("actor")
    assert asked == 4  # cycle 1, then cycle 2 three times (each killed)
    with lw.Runtime(url) as rt:
        r = rt.resume_sync(run_id, _loop(calls, max_cost=0.45))
        # 0.11 + 3 × 0.1 owed = 0.41, under 0.45: asked a fourth time, then over the budget
        assert calls.count("actor") == asked + 1
        assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
        assert r.spent.cost_usd == pytest.approx(0.11 + 4 * 0.1)
    # killed once more at its fourth ask of cycle 2 instead: the owed 0.41 + 0.1 are over
    # 0.45 before a fifth call could be made
    url2 = f"sqlite:///{tmp_path / 't.db'}"
    calls2: list[str] = []
    with lw.Runtime(url2) as rt:
        rt._on_phase = phase_hook(("after_actor", 2))
        with pytest.raises(Crash):
            rt.run_sync(_loop(calls2, max_cost=0.35), TASK, task_key="k")
        run2 = rt.store.list_runs()[0].run_id
    with lw.Runtime(url2) as rt:
        rt._on_phase = phase_hook(("after_actor", 1))
        with pytest.raises(Crash):
            rt.resume_sync(run2, _loop(calls2, max_cost=0.35))
    with lw.Runtime(url2) as rt:
        r = rt.resume_sync(run2, _loop(calls2, max_cost=0.35))
        # 0.11 + 0.2 owed = 0.31 < 0.35 ... asked once more (0.41): over
        assert (r.stop_reason, calls2.count("actor")) == ("budget_cost", 4)
        assert r.spent.cost_usd == pytest.approx(0.41)


def test_grouped_commits_take_the_billing_rows_with_them(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several runs on one event loop commit in batches (``commit_many``'s one-pass path):
    each run's billing entries go with the batch that charges them."""
    import asyncio

    from loopwright import _group

    batched: list[int] = []
    close = _group.GroupCommitter.close

    async def counted(self: _group.GroupCommitter) -> None:
        await close(self)
        batched.append(self.batches)

    monkeypatch.setattr(_group.GroupCommitter, "close", counted)
    tasks = [{**TASK, "task_key": f"g{i}"} for i in range(6)]
    with lw.Runtime(url, group_commit=True) as rt:
        got = asyncio.run(rt.run_many(_loop([]), tasks, concurrency=6))
        assert [(r.status, r.cycles) for r in got] == [("accepted", 3)] * 6
        assert sum(batched) > 0  # batched, not one by one
        for r in got:
            assert r.spent.cost_usd == pytest.approx(0.33)
            assert rt.store.journal(r.run_id) == []


def test_the_trace_of_a_redone_cycle_adds_up_to_its_spend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The calls a killed cycle lost are charged by the redone one, and its trace shows them:
    a ``retry`` event each carries what it was billed, so the actor's span counts every answer
    it was billed for (before: the cycle span read $0.40 over calls adding up to $0.20; the
    answers of a cycle killed twice had no event at all)."""
    from loopwright.trace import run_spans

    url = f"sqlite:///{tmp_path / 's.db'}"
    calls: list[str] = []
    # a process death says nothing: the word of an execution stopped alive (which ``Crash``,
    # a BaseException as a Ctrl-C is, would have written) left unsaid, as a kill leaves it;
    # said, the metrics count no crash (crash53b)
    monkeypatch.setattr(_lease_life, "_said_alive", lambda *a, **k: None)
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("after_actor", 2))
        with pytest.raises(Crash):
            rt.run_sync(_loop(calls), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    with lw.Runtime(url) as rt:  # cycle 2 killed a second time, after its actor answered
        rt._on_phase = phase_hook(("after_actor", 1))
        with pytest.raises(Crash):
            rt.resume_sync(run_id, _loop(calls))
    with lw.Runtime(url) as rt:
        r = rt.resume_sync(run_id, _loop(calls))
        assert (r.status, r.cycles) == ("accepted", 3)
        assert r.spent.cost_usd == pytest.approx(0.33 + 2 * ACTOR.cost_usd)
        _, spans = run_spans(rt.store, run_id)
    cycles = [s for s in spans if s.name.startswith("cycle ")]
    by_parent: dict[str | None, float] = {}
    for s in spans:
        if s.name.startswith(("invoke_agent", "verify")):
            by_parent[s.parent] = by_parent.get(s.parent, 0.0) + float(
                s.attributes.get("loopwright.cost_usd") or 0.0
            )
    got = [(c.name, round(by_parent.get(c.key, 0.0), 6)) for c in cycles]
    want = [(c.name, round(float(c.attributes["loopwright.cost_usd"]), 6)) for c in cycles]
    assert got == want
    assert want[1] == ("cycle 2", 0.31)  # three answers of the actor, one check
    assert sum(v for _, v in got) == pytest.approx(r.spent.cost_usd)
    # the crashes count as such in the metrics, not once more as retries
    with lw.Runtime(url) as rt:
        (row,) = lw.compute_metrics(rt.store).per_run
    assert row.failures == {"crash_resume": 2}


def test_a_rollback_after_a_kill_keeps_what_the_killed_cycle_owes(url: str) -> None:
    """A run killed after cycle 2's actor answered, then rolled back by a person before it
    was resumed: the rollback gives the cycle a fresh retry bound but the answer was billed,
    so the cycle redone still charges it (before: the rollback retired its billing entry and
    the $0.10 was charged nowhere)."""
    calls: list[str] = []
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("after_actor", 2))
        with pytest.raises(Crash):
            rt.run_sync(_loop(calls), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    with lw.Runtime(url) as rt:
        rt.rollback(run_id, 1, by="ann")
        r = rt.resume_sync(run_id, _loop(calls))
        assert (r.status, r.cycles) == ("accepted", 3)
        assert r.spent.cost_usd == pytest.approx(0.33 + ACTOR.cost_usd)
        assert r.spent.tokens == 330 + ACTOR.tokens
        # listed in the redone cycle's record, before the call asked again in its place
        records = [c.record for c in rt.store.checkpoints(run_id) if c.record]
        (again,) = [x for x in records if x.get("cycle") == 2 and "proposal" in x]
        assert [c["who"] for c in again["calls"]] == ["actor", "actor", "verifier:check"]
        assert rt.store.journal(run_id, kind="retry") == []


def test_a_rollback_after_a_kill_keeps_the_bill_of_a_call_given_up_on(url: str) -> None:
    """The actor's billed failed attempt was given up on and the process died before the
    stop's commit; a person rolled the run back instead of resuming it: the redone cycle
    still charges the attempt (before: retired with the rest, charged nowhere)."""
    failing = [True]

    def actor(ctx: lw.Context) -> lw.Proposal:
        if failing:
            failing.clear()
            err = lw.PermanentError("refused")
            err.usage = lw.Usage(cost_usd=0.05, tokens=50)  # type: ignore[attr-defined]
            raise err
        return lw.Proposal.edit("doc", {"a": "good", "b": "good", "c": "good"}, usage=ACTOR)

    def loop() -> lw.Loop:
        base = _loop([])
        return lw.Loop(
            name=base.name, actor=actor, verifiers=base.verifiers, contract=base.contract
        )

    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("before_checkpoint", 2))  # the escalation's commit
        with pytest.raises(Crash):
            rt.run_sync(loop(), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    with lw.Runtime(url) as rt:
        assert rt.store.get_run(run_id).status == "running"
        rt.rollback(run_id, 0, by="ann")
        r = rt.resume_sync(run_id, loop())
        assert (r.status, r.cycles) == ("accepted", 1)
        assert r.spent.cost_usd == pytest.approx(0.05 + ACTOR.cost_usd + CHECK.cost_usd)
        assert r.spent.tokens == 50 + ACTOR.tokens + CHECK.tokens
        assert rt.store.journal(run_id, kind="retry") == []


def _dear_loop(calls: list[str]) -> lw.Loop:
    """Cycle 1 is cheap; from cycle 2 the actor's call costs 0.5 (a budget of 0.9): the
    actor's owed calls can cross the budget before the check is asked again."""
    return _loop(
        calls, 0.9, name="dear", actor_usage=lambda n: lw.Usage(0.01 if n == 1 else 0.5, 1)
    )


def test_a_call_not_asked_again_in_the_redone_cycle_is_still_charged(url: str) -> None:
    """The check of cycle 2 answered (0.01, journaled), then the process died, twice; the
    third process finds the actor's two owed calls over the budget and stops before asking
    the check again. The check's owed call is charged too, and no billing row is left
    (before: 0.01 never charged, its row left in the journal for good)."""
    calls: list[str] = []
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("before_checkpoint", 3))  # cycle 2 answered, not committed
        with pytest.raises(Crash):
            rt.run_sync(_dear_loop(calls), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    with lw.Runtime(url) as rt:
        # the actor asked again (0.5 more), the check's owed call crosses the budget: the
        # stop's own commit is where this process dies
        rt._on_phase = phase_hook(("before_checkpoint", 2))
        with pytest.raises(Crash):
            rt.resume_sync(run_id, _dear_loop(calls))
    assert calls == ["actor", "check", "actor", "check", "actor"]
    with lw.Runtime(url) as rt:
        r = rt.resume_sync(run_id, _dear_loop(calls))
        assert calls[5:] == []  # the actor's owed 1.0 is over the budget: nothing asked
        assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
        # cycle 1 (0.01 + 0.01), the actor's two calls of cycle 2, the check's one
        assert r.spent.cost_usd == pytest.approx(0.02 + 1.0 + 0.01)
        assert r.spent.tokens == (1 + 10) + 2 + 10
        assert rt.store.get_run(run_id).cost_usd == pytest.approx(1.03)
        assert [e.key for e in rt.store.journal(run_id, kind="retry")] == []


def test_a_run_cancelled_while_its_process_was_dead_is_charged_its_calls(url: str) -> None:
    """Killed after cycle 2's actor and check answered; a person cancels the run before it
    is resumed: the cycle is never redone, but its two calls were billed and are charged."""
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("before_checkpoint", 3))  # cycle 2 answered
        with pytest.raises(Crash):
            rt.run_sync(_loop([]), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
    with lw.Runtime(url) as rt:
        rt.store.request_cancel(run_id)
        r = rt.resume_sync(run_id, _loop([]))
        assert r.status == "cancelled"
        assert r.spent.cost_usd == pytest.approx(2 * (ACTOR.cost_usd + CHECK.cost_usd))
        assert r.spent.tokens == 2 * (ACTOR.tokens + CHECK.tokens)
        assert [e.key for e in rt.store.journal(run_id, kind="retry")] == []
        # each charged answer has its retry event: the calls' spans and the run span's
        # events add up to the spend (the cycle never redone has no span of its own: its
        # events arrive with no cycle_started, and go to the run, docs/trace.md)
        from loopwright.trace import run_spans

        _, spans = run_spans(rt.store, run_id)
    calls = sum(
        float(s.attributes.get("loopwright.cost_usd") or 0.0)
        for s in spans
        if s.name.startswith(("invoke_agent", "verify"))
    )
    (root,) = [s for s in spans if s.parent is None]
    lost = [e.attributes for e in root.events if e.name == "retry"]
    assert all(a.get("interrupted") for a in lost) and len(lost) == 2
    usage = [u if isinstance(u, dict) else json.loads(u) for u in (a["usage"] for a in lost)]
    assert calls == pytest.approx(ACTOR.cost_usd + CHECK.cost_usd)  # cycle 1's
    assert calls + sum(u["cost_usd"] for u in usage) == pytest.approx(r.spent.cost_usd)


def test_a_bill_is_written_without_waiting_for_the_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call's bill must outlive the process, not the machine (the cycle's commit syncs it):
    SQLite writes it with ``synchronous=NORMAL`` and goes back to FULL at once, so every other
    write of the store stays as durable as before, a failed one too."""
    from loopwright._errors import StoreError
    from loopwright.store import sqlite as lite

    url = f"sqlite:///{tmp_path / 's.db'}"
    said: list[str] = []
    with lw.Runtime(url) as rt:
        db = rt.store._db  # type: ignore[attr-defined]
        real = db.execute

        class Spy:
            def __getattr__(self, name: str) -> object:
                return getattr(db, name)

            def execute(self, sql: str, *args: object) -> object:
                if "synchronous" in sql:
                    said.append(sql)
                return real(sql, *args)

        monkeypatch.setattr(rt.store, "_db", Spy())
        r = rt.run_sync(_loop([]), TASK, task_key="k")
        assert (r.status, r.cycles) == ("accepted", 3)
        # six billed calls (three cycles of an actor and a check), each written lazily
        assert said == ["PRAGMA synchronous = NORMAL", "PRAGMA synchronous = FULL"] * 6
        assert real("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        # a lazy write the database refuses leaves the store FULL too
        with pytest.raises(StoreError), lite._Tx(rt.store, lazy=True) as conn:  # type: ignore[arg-type]
            conn.execute("INSERT INTO no_such_table VALUES (1)")
        assert real("PRAGMA synchronous").fetchone()[0] == 2
    # a store opened for process durability is NORMAL throughout: nothing to switch
    with lw.Runtime(f"sqlite:///{tmp_path / 'p.db'}?durability=process") as rt:
        r = rt.run_sync(_loop([]), TASK, task_key="k")
        assert r.status == "accepted"
        assert rt.store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # type: ignore[attr-defined]


def test_a_store_whose_journal_put_predates_lazy_is_served(tmp_path: Path) -> None:
    """A third-party store written before ``lazy`` was a keyword of ``journal_put``: the
    bill is written all the same (without it), and charged once."""
    from typing import Any

    from loopwright.store.sqlite import SQLiteStore

    class Older(SQLiteStore):
        def journal_put(self, run_id: str, token: int, **kw: Any) -> Any:  # type: ignore[override]
            if "lazy" in kw:
                raise TypeError("journal_put() got an unexpected keyword argument 'lazy'")
            return super().journal_put(run_id, token, **kw)

    store = Older(str(tmp_path / "s.db"))
    with lw.Runtime(store) as rt:
        rt._on_phase = phase_hook(("after_actor", 2))
        with pytest.raises(Crash):
            rt.run_sync(_loop([]), TASK, task_key="k")
        run_id = rt.store.list_runs()[0].run_id
        assert [e.key for e in rt.store.journal(run_id)] == ["retry:actor:2"]
    with lw.Runtime(Older(str(tmp_path / "s.db"))) as rt:
        r = rt.resume_sync(run_id, _loop([]))
        assert r.spent.cost_usd == pytest.approx(0.33 + ACTOR.cost_usd)
