"""polish55: the words a runtime keeps for stops alive its store refused (crash54) are said by
its next resume; a second resume waited for them only in the same event loop (review54c). One
runtime driven from two event loops (a thread per ``resume_sync``, or ``asyncio.run`` after
``asyncio.run``) went on beside the one saying them, found the list empty, and counted its own
run's stop, its word still on its way, as a crash (``max_crashes = 0``: escalated). So did a
resume after one cancelled while its store thread still wrote a word (``asyncio.run``'s
teardown cancels it, the write goes on). The write of the first run's word is held at a fixed
point until the other resume has ended or waits: either way the outcome is the same."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.crash_bound import cancelled_in_its_word, doc_loop, first_word_held

import loopwright as lw

pytestmark = pytest.mark.postgres


def _loop() -> lw.Loop:
    return doc_loop("edges", max_crashes=0)


def test_a_resume_in_another_threads_event_loop_waits_for_the_words(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _loop()
    with lw.Runtime(pg_url) as rt:
        ids, entered, release = first_word_held(rt, monkeypatch, loop)
        got: dict[str, lw.RunResult | BaseException] = {}

        def resume(run_id: str) -> None:
            try:
                got[run_id] = rt.resume_sync(run_id, loop)
            except BaseException as exc:  # (said by the assertion below)
                got[run_id] = exc

        first = threading.Thread(target=resume, args=(ids[0],))
        first.start()
        assert entered.wait(60)
        second = threading.Thread(target=resume, args=(ids[1],))
        second.start()
        second.join(2.0)  # (ended, or waits for the first's words: the same outcome)
        release.set()
        first.join(60)
        second.join(60)
    results = [got[i] for i in ids]
    assert all(isinstance(r, lw.RunResult) for r in results), results
    assert [(r.status, r.cycles) for r in results] == [("accepted", 3)] * 2, results  # type: ignore[union-attr]


def test_a_resume_after_an_event_loop_cancelled_its_saying_waits_for_the_write(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = _loop()
    with lw.Runtime(pg_url) as rt:
        ids, entered, release = first_word_held(rt, monkeypatch, loop)

        # (the first run's word still being written, in its thread, as the event loop ends)
        asyncio.run(cancelled_in_its_word(rt, ids[0], loop, entered))

        async def again() -> list[lw.RunResult]:
            went = asyncio.ensure_future(rt.resume(ids[0], loop))
            await asyncio.wait([went], timeout=2.0)
            release.set()
            return [await went, await rt.resume(ids[1], loop)]

        got = asyncio.run(again())
        assert [(r.status, r.cycles) for r in got] == [("accepted", 3)] * 2, [r.packet for r in got]
        events = rt.store.events(ids[0])
        assert sum(e.kind == "interrupted" for e in events) == 1  # said once


def test_a_saying_left_in_a_stopped_event_loop_is_taken_over_not_waited_for(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A loop driven by hand (``run_until_complete``) returns with the first resume suspended
    # in its saying: waiting for it would never end; the words it has not said are said by the
    # next resume, in its own loop, once the write under way ended, and each only once.
    loop = _loop()
    with lw.Runtime(pg_url) as rt:
        ids, entered, release = first_word_held(rt, monkeypatch, loop)
        old = asyncio.new_event_loop()
        try:
            first = old.create_task(rt.resume(ids[0], loop))
            assert old.run_until_complete(asyncio.to_thread(entered.wait, 60))
            release.set()  # (the write goes on in its thread; the loop runs no more)
            second = asyncio.run(rt.resume(ids[1], loop))
            assert (second.status, second.cycles) == ("accepted", 3), second.packet
            went = old.run_until_complete(first)  # (the user drives the old loop again)
        finally:
            old.close()
        assert (went.status, went.cycles) == ("accepted", 3), went.packet
        for run_id in ids:
            events = rt.store.events(run_id)
            assert sum(e.kind == "interrupted" for e in events) == 1, run_id
        assert rt._unsaid == [] and rt._saying is None
