"""A fenced-out execution's word said again adds its bills once, on SQLite and PostgreSQL
(fenced56b).

The word of an execution taken over (``lease lost``) adds its refused bills to the run's row
(``Store.add_fenced_spend``, fenced56). When the store fails that write
(``StoreUnavailableError``) its runtime keeps the word and says it again before its next
resume (``_say_unsaid``): a write that was durable though its answer was lost (PostgreSQL: the
connection dropped after COMMIT was sent) added the bills a second time. The word is now named
by its lease (``fenced_words``): said again, it adds nothing.

The fault is placed at a deterministic point: the first write of the word is committed, then
the store says it failed. No timing: each step waits on an event."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.crash_bound import BILLED, TASK, Gates, billed_loop, expire, resumer, start_held

import loopwright as lw
from loopwright.store import NewEvent, open_store

ACTOR = BILLED


def _loop(gates: Gates) -> lw.Loop:
    return billed_loop("once", gates)


def _answer_lost(store: Any) -> list[int]:
    """The store's first ``add_fenced_spend`` committed, then failed as a connection dropped
    after its COMMIT fails it; the number of calls made, in the list returned."""
    real, calls = store.add_fenced_spend, [0]

    def lost(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        real(*args, **kwargs)
        if calls[0] == 1:
            raise lw.StoreUnavailableError("connection lost after COMMIT (injected)")

    store.add_fenced_spend = lost
    return calls


def test_a_word_said_again_after_its_answer_was_lost_adds_its_bills_once(url: str) -> None:
    gates: Gates = {n: (threading.Event(), threading.Event()) for n in ("a", "b")}
    loop = _loop(gates)
    with lw.Runtime(url) as rt, lw.Runtime(url) as own:
        run_id = rt.create(loop, TASK, task_key="fenced-once")[0].run_id
        calls = _answer_lost(own.store)
        drive, ended = resumer(url, run_id, loop)
        out: dict[str, BaseException | lw.RunResult] = {}

        def drive_a() -> None:
            try:
                out["a"] = own.resume_sync(run_id, loop)
            except BaseException as exc:  # (read below)
                out["a"] = exc

        try:
            a = start_held(drive_a, "a", gates, out)
            expire(rt, run_id)
            b = start_held(drive, "b", gates, ended)  # took the run over, held in cycle 2
            gates["a"][1].set()  # a wakes fenced out; its word's write durable, answer lost
            a.join()
            assert isinstance(out["a"], lw.StaleLeaseError), out
            assert calls[0] == 1 and len(own._unsaid) == 1  # (kept: said again)
            gates["b"][1].set()  # b concludes cycle 2: accepted
            b.join()
        finally:
            for _entered, go in gates.values():
                go.set()
        r = ended["b"]
        assert isinstance(r, lw.RunResult) and r.status == "accepted", r
        assert rt.store.get_run(run_id).cost_usd == pytest.approx(0.30)
        # a's runtime resumes the run: its kept word is said again first (the run ended)
        again = own.resume_sync(run_id, loop)
        assert again.status == "accepted"
        assert calls[0] == 2 and not own._unsaid
        # cycle 1, a's stalled call, b's cycle 2: $0.30 (before: $0.40, a's bill twice)
        rec = rt.store.get_run(run_id)
        assert (rec.cost_usd, rec.tokens) == (pytest.approx(0.30), 30)
        assert lw.compute_metrics(rt.store).spend_usd == pytest.approx(0.30)
        words = [e for e in rt.store.events(run_id) if e.data.get("why") == "lease lost"]
        assert len(words) == 1, words


def test_the_same_word_twice_writes_it_once_another_lease_adds(url: str) -> None:
    """Store level: a word said again by its lease adds nothing and appends no second event;
    another execution's word (another lease) adds its bills."""
    with lw.Runtime(url) as rt:
        run_id = rt.create(_loop({}), TASK, task_key="fenced-twice")[0].run_id
    spent = {"cost_usd": 0.25, "tokens": 7, "seconds": 1.5}
    word = NewEvent(0, "interrupted", {"lease": 7, "why": "lease lost", "fenced": spent})
    with open_store(url) as s:
        s.add_fenced_spend(run_id, spent, [word], lease=7)
        s.add_fenced_spend(run_id, spent, [word], lease=7)
        rec = s.get_run(run_id)
        assert rec.fenced == {"cost_usd": 0.25, "tokens": 7, "seconds": 1.5}
        assert [e.kind for e in s.events(run_id)].count("interrupted") == 1
        s.add_fenced_spend(run_id, spent, lease=8)  # (another execution's, the run ended say)
        assert s.get_run(run_id).fenced == {"cost_usd": 0.5, "tokens": 14, "seconds": 3.0}
