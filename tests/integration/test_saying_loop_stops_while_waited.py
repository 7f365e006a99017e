"""review55a: a resume waiting for another event loop's saying of the kept words (polish55's
``Saying``) looked once, as its wait began, whether that loop still ran. A loop driven by hand
(``run_until_complete`` of something else) that returned after the wait began, the first
resume suspended in its saying, left the second waiting until someone ran that loop again:
forever, for a loop let go. The first run's word is held in its write until the second resume
waits and the first loop has stopped; each wait is bounded by a patience only a stall
reaches (never a measurement)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from support.crash_bound import doc_loop, first_word_held

import loopwright as lw
from loopwright import _saying

pytestmark = pytest.mark.postgres

PATIENCE = 60.0


def test_a_saying_whose_loop_stops_while_waited_for_is_taken_over(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = doc_loop("edges", max_crashes=0)
    waits = threading.Event()  # the second resume found the saying's loop running: it waits
    gone = _saying.Saying.gone

    def seen(self: _saying.Saying, here: asyncio.AbstractEventLoop) -> bool:
        out = gone(self, here)
        if not out:
            waits.set()
        return out

    monkeypatch.setattr(_saying.Saying, "gone", seen)
    with lw.Runtime(pg_url) as rt:
        ids, entered, release = first_word_held(rt, monkeypatch, loop)
        old = asyncio.new_event_loop()
        got: list[lw.RunResult | BaseException] = []

        def second() -> None:
            try:
                got.append(asyncio.run(rt.resume(ids[1], loop)))
            except BaseException as exc:  # (said by the assertion below)
                got.append(exc)

        try:
            first = old.create_task(rt.resume(ids[0], loop))
            assert old.run_until_complete(asyncio.to_thread(entered.wait, PATIENCE))
            t = threading.Thread(target=second, daemon=True)

            async def until_the_second_waits() -> bool:
                t.start()  # (while this loop runs, the first saying suspended in it)
                return await asyncio.to_thread(waits.wait, PATIENCE)

            assert old.run_until_complete(until_the_second_waits())
            release.set()  # (the loop runs no more; the write goes on in its thread)
            t.join(PATIENCE)
            assert not t.is_alive(), "the second resume still waits on a loop that stopped"
            went = old.run_until_complete(first)  # (the user drives the old loop again)
        finally:
            release.set()
            if not old.is_closed() and not first.done():
                old.run_until_complete(first)  # (lets a stalled second resume go on)
            old.close()
        assert [(r.status, r.cycles) for r in got] == [("accepted", 3)], got  # type: ignore[union-attr]
        assert (went.status, went.cycles) == ("accepted", 3), went.packet
        for run_id in ids:
            events = rt.store.events(run_id)
            assert sum(e.kind == "interrupted" for e in events) == 1, run_id  # said once
        assert rt._unsaid == [] and rt._saying is None
