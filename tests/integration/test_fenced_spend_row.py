"""What an execution fenced out spent is the run's spend though no resume follows its word, on
SQLite and PostgreSQL (fenced56).

crash55b carried a fenced-out execution's refused bills on its ``lease lost`` word alone, and
only a later resume charged them: a word said while the executor that took the run over
drives that cycle and ends the run (no resume after it) was never charged, and one said after
the end was not written at all. The word's spend now goes to the run's row (``runs.fenced_*``,
added with no lease), which every read of the run's spend counts; the next resume charges it
to its state and its commit takes it off the row, so it is counted once.

Executor ``a`` is held in its actor at cycle 2 until ``b`` has taken the run over and is held
there too; ``a`` let go is fenced out and says its word while the run is open; ``b`` let go
concludes cycle 2 and the run is accepted. No timing: each step waits on an event."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.crash_bound import BILLED, TASK, Gates, billed_loop, expire, resumer, start_held

import loopwright as lw
from loopwright.store import NewEvent, open_store

ACTOR = BILLED


def _loop(gates: Gates) -> lw.Loop:
    return billed_loop("row", gates)


def test_a_word_said_while_the_taker_ends_the_run_is_charged(url: str) -> None:
    gates: Gates = {n: (threading.Event(), threading.Event()) for n in ("a", "b")}
    loop = _loop(gates)
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="fenced-row")[0].run_id
        drive, ended = resumer(url, run_id, loop)

        def start(name: str) -> threading.Thread:
            return start_held(drive, name, gates, ended)

        try:
            a = start("a")
            expire(rt, run_id)
            b = start("b")  # took the run over, held in cycle 2
            gates["a"][1].set()  # a wakes fenced out and says its word, the run open
            a.join()
            assert isinstance(ended["a"], lw.StaleLeaseError), ended
            gates["b"][1].set()  # b concludes cycle 2: accepted, no resume after a's word
            b.join()
        finally:
            for _entered, go in gates.values():
                go.set()
        r = ended["b"]
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        # cycle 1 ($0.10), a's stalled call ($0.10), b's cycle 2 ($0.10); before: $0.20
        rec = rt.store.get_run(run_id)
        assert (rec.cost_usd, rec.tokens) == (pytest.approx(0.30), 30)
        assert rt.result(run_id).spent.cost_usd == pytest.approx(0.30)
        m = lw.compute_metrics(rt.store)
        assert m.spend_usd == pytest.approx(0.30)
        assert m.per_run[0].cost_usd == pytest.approx(0.30)
        # said while the run was open, the run's row counting it (not a resume)
        [word] = [e for e in rt.store.events(run_id) if e.data.get("why") == "lease lost"]
        assert word.data["fenced"]["cost_usd"] == pytest.approx(0.10), word


def _fenced(cost: float, tokens: int, seconds: float) -> dict[str, Any]:
    """``RunRecord.fenced`` with these amounts and the held-out share of the test below."""
    held = {"cost_usd": 0.05, "tokens": 2}
    return {"cost_usd": cost, "tokens": tokens, "seconds": seconds, "held_out": held}


def test_the_fenced_spend_is_taken_off_once_by_the_commit_that_charged_it(url: str) -> None:
    """Store level: what a commit names of ``fenced_*`` is taken off the row, what was added
    after its read stays (two words at once), and the run's totals count the row's rest."""
    loop = _loop({})
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="fenced-take")[0].run_id
    with open_store(url) as s:
        one = {"cost_usd": 0.25, "tokens": 7, "seconds": 1.5}
        s.add_fenced_spend(run_id, one)
        s.add_fenced_spend(
            run_id,
            {**one, "held_out": {"cost_usd": 0.05, "tokens": 2}},
            [NewEvent(0, "interrupted", {"lease": 99, "why": "lease lost"})],
        )
        rec = s.get_run(run_id)
        assert rec.fenced == _fenced(0.5, 14, 3.0)
        assert (rec.cost_usd, rec.tokens, rec.seconds) == (0.5, 14, 3.0)
        assert [e.kind for e in s.events(run_id)][-1] == "interrupted"
        token = s.acquire_lease(run_id, "taker", 60.0)
        assert token is not None
        ck = s.latest_checkpoint(run_id)
        taken = {
            "fenced_cost_usd": 0.25,
            "fenced_tokens": 7,
            "fenced_seconds": 1.5,
            "fenced_held_cost_usd": 0.0,
            "fenced_held_tokens": 0,
        }
        run = {"cost_usd": 0.25, "tokens": 7, "seconds": 1.5, **taken}
        s.commit(
            run_id, token, seq=ck.seq + 1, cycle=0, state=ck.state, record=None, events=[], run=run
        )
        after = s.get_run(run_id)
        assert after.fenced == _fenced(0.25, 7, 1.5)
        assert (after.cost_usd, after.tokens) == (0.5, 14)


def test_a_word_an_earlier_release_said_is_still_charged_once(url: str) -> None:
    """A ``lease lost`` word written before the row held the fenced spend (its ``spent``, and
    nothing on the row) is charged by the resume that reads it back, once (``fenced_upto``)."""
    loop = _loop({})
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, TASK, task_key="fenced-old")[0].run_id
        s = rt.store
        token = s.acquire_lease(run_id, "old", 60.0)
        ck = s.latest_checkpoint(run_id)
        started = NewEvent(0, "started", {"lease": token})
        s.commit(
            run_id,
            token,
            seq=ck.seq + 1,
            cycle=0,
            state=ck.state,
            record=None,
            events=[started],
            run={"status": "running"},
        )
        s.release_lease(run_id, token)
        spent = {"cost_usd": 0.05, "tokens": 5, "seconds": 0.0}
        word = {"lease": token, "why": "lease lost", "spent": spent}
        s.append_events(run_id, [NewEvent(0, "interrupted", word)])
        r = rt.resume_sync(run_id, loop)
        assert r.status == "accepted", r
        # its $0.05 and two cycles' calls ($0.10 each), once
        assert r.spent.cost_usd == pytest.approx(0.25) and r.spent.tokens == 25
        assert s.get_run(run_id).cost_usd == pytest.approx(0.25)
        assert s.get_run(run_id).fenced is None


def test_an_effects_cost_the_fence_refused_to_journal_is_the_runs_spend(url: str) -> None:
    """An effect that reported its cost and whose ``done`` entry the fence refused (its run
    taken over while it was called): its cost is its execution's word's, and the run's."""
    taken: list[int] = []

    @lw.effect("send", name="notify", key=lambda a: f"n:{a['cycle']}", requires_success=False)
    def notify(cycle: int, *, key: str) -> lw.EffectResult:
        with lw.Runtime(url) as other:  # the run taken over while the effect is called
            run_id = other.store.get_run("fenced-effect").run_id
            expire(other, run_id)
            taken.append(other.store.acquire_lease(run_id, "taker", 60.0))
        return lw.EffectResult({"sent": key}, usage=lw.Usage(cost_usd=0.07, tokens=7))

    def actor(ctx: lw.Context) -> lw.Proposal:
        effects = (notify.call(cycle=ctx.cycle),) if ctx.cycle == 1 else ()
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), effects=effects)

    loop = lw.Loop(
        name="fenced-effect",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=False)],
        effects=[notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(url) as rt:
        with pytest.raises(lw.StaleLeaseError):
            rt.run_sync(loop, TASK, task_key="fenced-effect")
        assert len(taken) == 1
        rec = rt.store.get_run("fenced-effect")
        # (before: nothing; the effect's $0.07 was in no journal entry, commit nor word)
        assert rec.fenced is not None and rec.fenced["cost_usd"] == pytest.approx(0.07)
        assert (rec.cost_usd, rec.tokens) == (pytest.approx(0.07), 7)


def test_a_store_of_ones_own_keeps_the_bills_in_the_word(tmp_path: Any) -> None:
    """``Store.add_fenced_spend``'s default (a store of one's own, no fenced spend on its
    rows): the word says the bills as ``spent``, which the next resume charges (crash55b)."""
    from loopwright.store import Store

    loop = _loop({})
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}") as rt:
        run_id = rt.create(loop, TASK, task_key="own")[0].run_id
        word = {"lease": 3, "why": "lease lost", "fenced": {"cost_usd": 0.05, "tokens": 5}}
        Store.add_fenced_spend(rt.store, run_id, word["fenced"], [NewEvent(0, "interrupted", word)])
        [said] = [e for e in rt.store.events(run_id) if e.kind == "interrupted"]
        assert said.data == {
            "lease": 3,
            "why": "lease lost",
            "spent": {"cost_usd": 0.05, "tokens": 5},
        }
        assert rt.store.get_run(run_id).fenced is None
        before = len(rt.store.events(run_id))
        Store.add_fenced_spend(rt.store, run_id, word["fenced"])  # (an ended run's: no word)
        assert len(rt.store.events(run_id)) == before
