"""How long an effect intent's holder may still start its call (``_backoff.held_for``), and
how the holder counts the time its call was given (``_backoff.since``): on one clock each,
never by comparing two hosts' clocks (probe47)."""

from __future__ import annotations

import time

import pytest

from loopwright._backoff import held_for, since

HOUR = 3600.0


@pytest.mark.parametrize("holder_off", [-HOUR, 0.0, HOUR])
def test_an_intent_is_held_until_its_limit_has_passed_on_the_stores_clock(
    holder_off: float,
) -> None:
    # the holder's own times (``deadline_at``, the entry's) say nothing here: an hour either way
    data = {"deadline_at": 1000.0 + holder_off + 20.0, "limit_s": 20.0, "clock_at": 5000.0}
    written = 1000.0 + holder_off
    assert held_for(data, written, 5000.0, 30.0) == 20.0  # read as soon as it was written
    assert held_for(data, written, 5015.0, 30.0) == 5.0
    assert held_for(data, written, 5020.0, 30.0) == 0.0
    assert held_for(data, written, 9000.0, 30.0) < 0  # long past: no wait
    # a store clock read that went back (never past what the call was given, from now)
    assert held_for(data, written, 10.0, 30.0) == 20.0


@pytest.mark.parametrize("reader_off", [-HOUR, 0.0, HOUR])
def test_an_older_intent_is_held_for_all_its_holder_gave_it(reader_off: float) -> None:
    """Written before the store's clock was recorded: the holder's deadline less its write
    time, counted from now, whatever the reader's clock says (it cannot tell what is left)."""
    data = {"deadline_at": 1020.0}
    assert held_for(data, 1000.0, 1010.0 + reader_off, 30.0) == 20.0
    assert held_for({}, 1000.0, 1010.0 + reader_off, 30.0) == 30.0  # no deadline: the TTL


def test_a_holder_counts_its_time_on_the_clock_that_says_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clocks = {"wall": 1000.0, "mono": 50.0}
    monkeypatch.setattr(time, "time", lambda: clocks["wall"])
    monkeypatch.setattr(time, "monotonic", lambda: clocks["mono"])
    wall, mono = time.time(), time.monotonic()
    clocks["wall"] -= HOUR  # stepped back while the holder was paused
    clocks["mono"] += 25.0
    assert since(wall, mono) == 25.0
    clocks["wall"] += HOUR + 40.0  # the host slept: its monotonic clock stood still
    assert since(wall, mono) == 40.0
