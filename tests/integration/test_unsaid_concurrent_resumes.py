"""review54c: the words a runtime keeps for stops alive its store refused (crash54) are said
by the first resume after the outage; on PostgreSQL from store threads, so that another resume
of the same runtime (a worker claiming many runs after the outage) went on meanwhile, found
the list empty, and counted its own run's stop, its word still on its way, as a crash: with
``max_crashes = 0`` ended escalated, "crashed 1 time", though no process died. It now waits
for the words being said. The write of the first run's word is held at a fixed point until
the second resume has ended or waits: either way the outcome is the same."""

from __future__ import annotations

import asyncio

import pytest
from support.crash_bound import cancelled_in_its_word, doc_loop, first_word_held

import loopwright as lw

pytestmark = pytest.mark.postgres


def test_a_resume_beside_the_one_saying_the_words_waits_for_its_runs(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = doc_loop("edges", max_crashes=0)
    with lw.Runtime(pg_url) as rt:
        assert rt.store.concurrent_writers  # (the words said from store threads)
        ids, entered, release = first_word_held(rt, monkeypatch, loop)

        async def both() -> list[lw.RunResult]:
            first = asyncio.ensure_future(rt.resume(ids[0], loop))
            assert await asyncio.to_thread(entered.wait, 60)
            second = asyncio.ensure_future(rt.resume(ids[1], loop))
            await asyncio.wait([second], timeout=2.0)
            release.set()
            return list(await asyncio.gather(first, second))

        got = asyncio.run(both())
        assert [(r.status, r.cycles) for r in got] == [("accepted", 3)] * 2, [r.packet for r in got]


def test_a_resume_cancelled_while_it_says_them_keeps_the_words_not_reached(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A resume cancelled (Ctrl-C, a worker's shutdown) while it said the first run's word
    # dropped the words after it: the second run's next resume counted its stop as a crash.
    loop = doc_loop("edges", max_crashes=0)
    with lw.Runtime(pg_url) as rt:
        ids, entered, release = first_word_held(rt, monkeypatch, loop)

        async def cancelled() -> None:
            await cancelled_in_its_word(rt, ids[0], loop, entered)
            release.set()

        asyncio.run(cancelled())
        assert [w[0] for w in rt._unsaid] == [ids[1]]
        r = rt.resume_sync(ids[1], loop)
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
