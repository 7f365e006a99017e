"""``_effect_holders.Tracked``: what counts as an effect call "running here" (review48)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopwright._effect_holders import running_here, tracked

MARK = ("run-1", "effect:k")


def test_a_coroutine_counts_until_it_ends_not_until_it_is_made() -> None:
    gate: list[bool] = []

    async def pay() -> str:
        await asyncio.sleep(0)
        gate.append(running_here(MARK))
        return "paid"

    async def main() -> None:
        call = tracked(pay, MARK)
        aw = call()  # made, not run yet
        assert running_here(MARK)  # before: unmarked here
        assert await aw == "paid"
        call.over()
        assert not running_here(MARK)

    asyncio.run(main())
    assert gate == [True]


def test_an_awaitable_never_awaited_stops_counting_when_the_caller_gives_up() -> None:
    async def pay() -> str:
        return "paid"

    call = tracked(pay, MARK)
    aw: Any = call()
    assert running_here(MARK)
    call.over()  # (a timeout before it started: it never runs)
    assert not running_here(MARK)
    aw.close()  # (the wrapper; the call itself was closed by over)


def test_an_awaitable_made_after_the_caller_gave_up_is_closed_and_uncounted() -> None:
    made: list[Any] = []

    async def pay() -> str:
        return "paid"

    def slow() -> Any:  # a sync call whose thread ran past its timeout, returning a coroutine
        made.append(pay())
        return made[-1]

    call = tracked(slow, MARK)
    call.over()
    assert running_here(MARK)  # the thread still runs
    call()
    assert not running_here(MARK)
    assert made[0].cr_frame is None  # closed: it never runs


def test_two_calls_of_one_mark_each_count() -> None:
    # an idempotent call retried while the timed-out thread of the first runs on
    first = tracked(lambda: 1, MARK)
    second = tracked(lambda: 2, MARK)
    assert first() == 1  # the first thread ends while the second call runs
    assert running_here(MARK)  # before (a set): unmarked
    assert second() == 2
    assert not running_here(MARK)


def test_a_sync_call_that_raises_stops_counting() -> None:
    def boom() -> None:
        raise ValueError("no")

    call = tracked(boom, MARK)
    with pytest.raises(ValueError, match="no"):
        call()
    assert not running_here(MARK)
