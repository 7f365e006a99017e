"""A runtime's words of stops alive the store refused (``_unsaid``) are taken by a resume about
to say them, and kept by executions winding down, in several threads' event loops at once
(``resume_sync``, a worker's): the take (read, then reset) and the keeping are made under one
lock (lifecycle55). A word kept by a wind-down in another thread exactly between the take's
read and its reset was lost: the reset dropped it. The interleaving is driven through a patched
point: the take's read runs the other thread's wind-down and waits until it has kept its word
or waits for the lock; nothing is timed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import loopwright as lw
from loopwright import _lease_life
from loopwright._errors import StoreUnavailableError

Word = tuple[str, int, int, str, Any]


class Taken(lw.Runtime):
    """``_unsaid``'s second read in the main thread (a resume's take) runs ``hook`` after the
    value is read, before it is handed back."""

    hook: Any = None
    reads = 0

    @property  # type: ignore[override]
    def _unsaid(self) -> list[Word]:
        value: list[Word] = self.__dict__["_unsaid_"]
        if self.hook is not None and threading.current_thread() is threading.main_thread():
            self.reads += 1
            if self.reads == 2:
                self.hook()
        return value

    @_unsaid.setter
    def _unsaid(self, value: list[Word]) -> None:
        self.__dict__["_unsaid_"] = value


class Spied:
    """The words' lock, saying when another thread waits for it."""

    def __init__(self, real: Any, waits: threading.Event) -> None:
        self.real, self.waits = real, waits

    def __enter__(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            self.waits.set()
        return self.real.__enter__()

    def __exit__(self, *exc: object) -> Any:
        return self.real.__exit__(*exc)


def test_a_word_kept_in_another_thread_during_the_take_is_not_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = Taken(tmp_path / "s.db")
    moved = threading.Event()  # (the other thread kept its word, or waits for the lock)
    words_lock = getattr(_lease_life, "WORDS", None)  # (before lifecycle55: none)
    if words_lock is not None:
        monkeypatch.setattr(_lease_life, "WORDS", Spied(words_lock, moved))
    get_run = rt.store.get_run
    keeper: list[threading.Thread] = []

    def refused_there(run_id: str) -> Any:  # (the store down, for the winding thread only)
        if threading.current_thread() is keeper[0]:
            raise StoreUnavailableError("down")
        return get_run(run_id)

    rt.store.get_run = refused_there  # type: ignore[method-assign]

    async def wind_down() -> None:
        beat = asyncio.ensure_future(asyncio.sleep(0))
        state = SimpleNamespace(cycle=3)
        ex = SimpleNamespace(
            run_id="later", token=7, state=state, seq=1, started_said=True, lost=False
        )
        await rt._wind_down(ex, beat, 0, "KeyboardInterrupt")  # type: ignore[arg-type]

    def setter_spy(value: list[Word]) -> None:  # (the keeper's word set: it moved)
        rt.__dict__["_unsaid_"] = value
        if threading.current_thread() is not threading.main_thread():
            moved.set()

    def hook() -> None:
        thread = threading.Thread(target=asyncio.run, args=(wind_down(),))
        keeper.append(thread)
        thread.start()
        assert moved.wait(60)

    rt._unsaid = [("earlier", 1, 1, "store unavailable", None)]
    prop = Taken._unsaid
    monkeypatch.setattr(
        Taken, "_unsaid", property(prop.fget, lambda self, v: setter_spy(v)), raising=True
    )
    rt.hook = hook
    asyncio.run(rt._say_unsaid())
    keeper[0].join(60)
    rt.hook = None
    assert [w[0] for w in rt._unsaid] == ["later"]  # (kept: said before the next resume)
    rt.close()
