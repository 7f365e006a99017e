"""review55a: the feed's window of ``effect_settled`` events (polish55's ``_settlings``).

Two things it got wrong. A settling made before the feed's first look was heard as new by its
second look when it lay within ``SETTLED_ID_MARGIN`` ids of the newest event (a dashboard
started with a new webhook URL posted a settling of days ago; one further back was not: the
answer hung on how busy the store had been since). And the window's floor moved only with
the settlings it found: a dashboard that saw none for a while read, every look, every event
written since it started (the feed looks each second), not those written since the previous
look. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_notify_settle import _escalated

import loopwright as lw
from loopwright.cli import main
from loopwright.store import NewEvent, Store, open_store
from loopwright.web._feed import SETTLED, SETTLED_ID_MARGIN, Change, Feed


def _settle(url: str, run_id: str) -> None:
    assert main(["settle", run_id[:12], "pay:I6", "--not-done", "--by", "ops",
                 "--store", url]) == 0  # fmt: skip


@contextmanager
def _watching(url: str) -> Iterator[tuple[Store, Feed, list[Change]]]:
    """A feed on its own store, what it hears listed, after its first look (where things
    stand); the store closed on leaving."""
    st = open_store(url)
    try:
        heard: list[Change] = []
        feed = Feed(st)
        feed.listen(heard.append)
        feed.poll()  # (where things stand)
        yield st, feed, heard
    finally:
        st.close()


def test_a_settling_before_the_first_look_is_not_heard_as_new(url: str) -> None:
    run_id = _escalated(url)
    _settle(url, run_id)  # settled before the feed (and any webhook) was there
    with _watching(url) as (_st, feed, heard):
        feed.poll()
        feed.poll()
        assert [c for c in heard if c.kind == "settled"] == []
        # one settled from now on is heard, once
        again = _escalated(url)
        _settle(url, again)
        feed.poll()
        feed.poll()
    assert [c.event.run_id for c in heard if c.kind == "settled" and c.event] == [again]


def test_a_look_reads_from_near_the_newest_event_not_from_the_last_settling(url: str) -> None:
    run_id = _escalated(url)
    with _watching(url) as (st, feed, heard):
        # the runs go on, no one settles anything: 3 margins' worth of other events
        for _ in range(3):
            st.append_events(
                run_id, [NewEvent(1, "note", {"i": i}) for i in range(SETTLED_ID_MARGIN)]
            )
        feed.poll()
        newest = st.last_event_id()
        floors: list[int] = []
        read = st.events_after

        def spied(kind: str, after: int, limit: int = 1_000) -> Any:
            floors.append(after)
            return read(kind, after, limit)

        st.events_after = spied  # type: ignore[method-assign]
        feed.poll()
        assert floors and floors[-1] >= newest - SETTLED_ID_MARGIN, (floors, newest)
        # and a settling still comes through, once
        st.events_after = read  # type: ignore[method-assign]
        heard.clear()  # (heard from here on)
        _settle(url, run_id)
        feed.poll()
        feed.poll()
    assert [c.event.kind for c in heard if c.kind == "settled" and c.event] == [SETTLED]


def test_a_settling_past_a_margin_full_of_settlings_is_heard(url: str) -> None:
    """A margin's worth of settlings in a row (a script settling a batch): the next look's
    read of at most 1,000 held only those, heard already, and the feed heard no settling
    again, ever."""
    run_id = _escalated(url)
    with _watching(url) as (st, feed, heard):
        batch = [NewEvent(1, SETTLED, {"key": f"pay:{i}"}) for i in range(SETTLED_ID_MARGIN)]
        st.append_events(run_id, batch)
        feed.poll()
        assert len(heard) == SETTLED_ID_MARGIN
        st.append_events(run_id, [NewEvent(1, SETTLED, {"key": "pay:last"})])
        feed.poll()
        feed.poll()
    keys = [c.event.data["key"] for c in heard if c.kind == "settled" and c.event]
    assert keys[SETTLED_ID_MARGIN:] == ["pay:last"], keys[SETTLED_ID_MARGIN - 2 :]


def test_a_store_failing_in_the_look_loses_no_settling(url: str) -> None:
    """The store fails as the look reads the settled run (a restart, a dropped connection):
    the look fails, and the next one hears the settling (it was marked heard before its run
    was read, and never heard)."""
    run_id = _escalated(url)
    with _watching(url) as (st, feed, heard):
        _settle(url, run_id)
        feed.poll()  # (the run's own change: its cause and advice)
        armed, read, get_run = [False], st.events_after, st.get_run

        def reading(kind: str, after: int, limit: int = 1_000) -> Any:
            armed[0] = True  # the next read of a run fails
            return read(kind, after, limit)

        def failing(rid: str) -> Any:
            if armed[0]:
                armed[0] = False
                raise lw.StoreUnavailableError("connection refused (injected)")
            return get_run(rid)

        heard.clear()
        second = _escalated(url)
        _settle(url, second)
        st.events_after = reading  # type: ignore[method-assign]
        st.get_run = failing  # type: ignore[method-assign]
        with pytest.raises(lw.StoreUnavailableError, match="injected"):
            feed.poll()
        st.events_after = read  # type: ignore[method-assign]
        feed.poll()
        feed.poll()
    assert [c.event.run_id for c in heard if c.kind == "settled" and c.event] == [second]
