"""Sync user calls in daemon threads: reused between calls, never stuck behind a hung one,
never keeping the process alive, and working again in a forked child."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import multiprocessing as mp
import queue
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from loopwright import _calls
from loopwright._calls import CallTimeout, call_user

HANG_S = 120.0  # a bound on waits for other threads that only a hang reaches (never a measure)


def _call_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "loopwright-call")


@pytest.fixture
def own_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads of this test's own: a call of an earlier test (hung until its gate was set,
    or slow on a loaded machine) may end during this one, and its thread, idle then, takes
    calls too. ``len(set(idents)) <= max(1, before)`` failed so (2 <= 1) under load."""
    monkeypatch.setattr(_calls, "_threads", _calls._DaemonThreads())


def test_sequential_calls_reuse_one_thread(own_threads: None) -> None:
    async def go() -> list[int]:
        return [
            (await call_user(threading.get_ident, timeout=None, threaded=True))[0]
            for _ in range(50)
        ]

    before = _call_threads()
    idents = asyncio.run(go())
    assert _call_threads() - before == 1  # fifty calls, one thread started
    assert len(set(idents)) == 1  # ...which made every call
    assert threading.get_ident() not in idents  # ...and never on the event loop's thread


def test_concurrent_calls_run_at_once_and_each_gets_its_result() -> None:
    # All eight must reach it together; the bound only ends a test that would hang (5 s was a
    # bound a loaded machine could reach while it started the eight threads).
    barrier = threading.Barrier(8, timeout=HANG_S)

    def work(i: int) -> int:
        barrier.wait()  # only passes if all eight run at the same time
        return i * i

    async def go() -> list[int]:
        res = await asyncio.gather(
            *(call_user(work, i, timeout=None, threaded=True) for i in range(8))
        )
        return [r for r, _ in res]

    assert asyncio.run(go()) == [i * i for i in range(8)]


def test_a_hung_call_does_not_hold_up_the_next() -> None:
    gate = threading.Event()

    async def go() -> str:
        with pytest.raises(CallTimeout):
            await call_user(gate.wait, timeout=0.2)  # the gate is never set: it times out
        # a new thread takes this call (the hung one keeps its own): only a call stuck behind
        # the hung one reaches this bound (2 s was reachable while a loaded machine started
        # the thread)
        result, _ = await call_user(lambda: "next", timeout=HANG_S)
        return str(result)

    try:
        assert asyncio.run(go()) == "next"
    finally:
        gate.set()


def test_a_hung_call_does_not_keep_the_process_alive() -> None:
    code = (
        "import asyncio, threading\n"
        "from loopwright._calls import CallTimeout, call_user\n"
        "async def go():\n"
        "    try:\n"
        "        await call_user(threading.Event().wait, timeout=0.2)\n"
        "    except CallTimeout:\n"
        "        print('gave up')\n"
        "asyncio.run(go())\n"
    )
    # A hang would keep the child alive forever; the timeout only tells it from a slow start.
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "gave up"


def _child(q: mp.Queue[str]) -> None:
    async def go() -> str:
        result, _ = await call_user(lambda: "child ok", timeout=None, threaded=True)
        return str(result)

    q.put(asyncio.run(go()))


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method")
@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # 3.12+: fork with threads
def test_a_forked_child_gets_threads_of_its_own() -> None:
    async def warm() -> None:
        await call_user(lambda: None, timeout=None, threaded=True)  # an idle thread now

    asyncio.run(warm())
    ctx = mp.get_context("fork")
    q: mp.Queue[str] = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    p.join(120)  # a bound for a hang's sake: a loaded machine forks slowly
    assert p.exitcode == 0
    assert q.get(timeout=HANG_S) == "child ok"


def test_a_thread_that_cannot_start_leaves_nothing_queued(
    monkeypatch: pytest.MonkeyPatch, own_threads: None
) -> None:
    ran: list[str] = []
    real_start = threading.Thread.start
    fail = {"once": True}

    def start(self: threading.Thread) -> None:
        if fail["once"] and self.name == "loopwright-call":
            fail["once"] = False
            raise RuntimeError("can't start new thread")
        real_start(self)

    async def go() -> None:
        # no idle thread (the test's own): the call must start one. (With the threads of
        # earlier tests, one of theirs could come free meanwhile and take the call.)
        monkeypatch.setattr(threading.Thread, "start", start)
        with pytest.raises(RuntimeError, match="can't start new thread"):
            await call_user(lambda: ran.append("first"), timeout=None, threaded=True)
        for name in ("second", "third"):  # a call queued for later would run between them
            await call_user(lambda n=name: ran.append(n), timeout=None, threaded=True)

    asyncio.run(go())
    assert ran == ["second", "third"]  # the call that could not start never runs later


def test_calls_do_not_share_context_variables() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    async def go() -> list[str]:
        await call_user(lambda: var.set("run A"), timeout=None, threaded=True)
        return [(await call_user(var.get, timeout=None, threaded=True))[0] for _ in range(5)]

    assert asyncio.run(go()) == ["unset"] * 5


class _WatchedTasks(queue.SimpleQueue[Any]):
    """The threads' task queue, telling when a thread waits on it (idle: its call delivered)."""

    def __init__(self) -> None:
        self.waiting = threading.Event()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.waiting.set()
        return super().get(block, timeout)


def test_an_idle_thread_holds_no_result(own_threads: None) -> None:
    tasks = _WatchedTasks()
    _calls._threads._tasks = tasks

    class Big:
        pass

    ref: list[weakref.ref[Big]] = []

    def make() -> Big:
        b = Big()
        ref.append(weakref.ref(b))
        return b

    async def go() -> None:
        await call_user(make, timeout=None, threaded=True)

    asyncio.run(go())
    # The thread lets go of the result once it has delivered it, before it waits for the next
    # call: wait for that point (an event, not a time: a loop of 10 ms sleeps gave it 10 s),
    # then check nothing kept it.
    assert tasks.waiting.wait(HANG_S), "the thread never became idle"
    gc.collect()
    assert ref[0]() is None


def test_the_call_knows_when_the_engine_gives_up_on_it() -> None:
    """A model adapter bounds its requests by it: a sync call the engine abandoned went on in
    its thread, its request answered (and billed) after the engine had moved on."""
    from loopwright._calls import call_deadline

    async def in_async() -> float | None:
        return call_deadline()

    async def go() -> list[tuple[float, float | None, float]]:
        seen = []
        for fn, timeout in ((call_deadline, 5.0), (in_async, 5.0), (call_deadline, None)):
            before = time.monotonic()
            got, _ = await call_user(fn, timeout=timeout, threaded=True)
            seen.append((before, got, time.monotonic()))
        return seen

    (b1, sync, a1), (b2, coro, a2), (_, none, _) = asyncio.run(go())
    assert sync is not None and b1 + 5.0 <= sync <= a1 + 5.0  # in the call's own thread
    assert coro is not None and b2 + 5.0 <= coro <= a2 + 5.0
    assert none is None  # no timeout, no deadline
    assert call_deadline() is None  # nothing left behind in the caller's context


class _CountedVar:
    """``_calls._deadline`` with its ``set`` calls counted (a ContextVar cannot be wrapped)."""

    def __init__(self) -> None:
        self.var: contextvars.ContextVar[float | None] = contextvars.ContextVar("d", default=None)
        self.sets = 0

    def get(self) -> float | None:
        return self.var.get()

    def set(self, value: float | None) -> contextvars.Token[float | None]:
        self.sets += 1
        return self.var.set(value)

    def reset(self, token: contextvars.Token[float | None]) -> None:
        self.var.reset(token)


def test_a_call_without_a_deadline_leaves_the_variable_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Most calls have no timeout and no deadline around them: the variable already says
    None and is not set and reset around them (two calls a cycle); a call with a timeout,
    and one inside an outer deadline, still see theirs, and nothing is left behind."""
    from loopwright._calls import call_deadline, within_deadline

    counted = _CountedVar()
    monkeypatch.setattr(_calls, "_deadline", counted)

    async def go() -> tuple[float | None, float | None, float | None]:
        plain, _ = await call_user(call_deadline, timeout=None)
        timed, _ = await call_user(call_deadline, timeout=5.0)
        with within_deadline(123.0):
            inner, _ = await call_user(call_deadline, timeout=None)
        return plain, timed, inner

    plain, timed, inner = asyncio.run(go())
    assert plain is None
    assert timed is not None
    assert inner is None  # no timeout of its own: no deadline, as before
    # the timed call (and its daemon thread's context), within_deadline, the call inside it
    assert counted.sets == 4
    assert counted.get() is None


def _retried_loop(actor: Any, timeout: float | None) -> Any:
    import loopwright as lw

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(False, 0.5)

    return lw.Loop(
        name="calls",
        actor=actor,
        actor_timeout_s=timeout,
        verifiers=[lw.Check(fn=verifier, name="check")],
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_cycles_plain_calls_make_no_coroutine_of_call_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: float | None
) -> None:
    """An actor's or verifier's call with no timeout, no thread and no deadline around it (two
    a cycle, the common case) is ``call_user``'s inline path, run by ``call_with_retry``
    itself; a call with a timeout still goes through ``call_user``. What either sees is the
    same: no deadline inline, its own with a timeout; and the callable's own ``TimeoutError``
    is kept as it is (retried as transient) either way."""
    import loopwright as lw
    from loopwright import _call_retry
    from loopwright._calls import call_deadline

    made = [0]
    real = _call_retry.call_user

    async def counted(*args: Any, **kwargs: Any) -> Any:
        made[0] += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(_call_retry, "call_user", counted)
    seen: list[float | None] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(call_deadline())
        if len(seen) == 2:
            raise TimeoutError("slow")  # a failed attempt, tried again
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    task = {"goal": "g", "artifacts": {"doc": {"body": ""}}}
    with lw.Runtime(str(tmp_path / "x.db")) as rt:
        r = asyncio.run(rt.run(_retried_loop(actor, timeout), task, task_key="k"))
        retries = [e.data for e in rt.store.events(r.run_id) if e.kind == "retry"]
    assert r.cycles == 3
    assert len(seen) == 4  # three cycles, one attempt again
    assert made[0] == (0 if timeout is None else 4)  # the verifier has no timeout: inline
    assert all(d is None for d in seen) if timeout is None else all(d is not None for d in seen)
    # the actor's own TimeoutError, raised at once, is its own error, retried as transient
    # (it read "Timeout: no result after 0 s", or "after 30 s", for a call that failed at once)
    assert [d["error"] for d in retries] == ["TimeoutError: slow"]


@pytest.mark.parametrize("threaded", [False, True])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_callables_own_timeout_error_is_its_own_under_a_limit(threaded: bool, kind: str) -> None:
    """A callable given a limit that raises ``TimeoutError`` itself, at once (an HTTP client's
    read timeout): it is its own error, message kept — not "no result after 30 s", which the
    engine reports only when the call ran to the limit ``wait_for`` enforces."""

    def sync_fn() -> None:
        raise TimeoutError("read timed out")

    async def async_fn() -> None:
        raise TimeoutError("read timed out")

    fn = sync_fn if kind == "sync" else async_fn
    with pytest.raises(TimeoutError, match="read timed out") as info:
        asyncio.run(call_user(fn, timeout=30.0, threaded=threaded))
    assert not isinstance(info.value, CallTimeout)


def test_the_limit_reached_is_still_a_call_timeout() -> None:
    async def hangs() -> None:
        await asyncio.Event().wait()

    with pytest.raises(CallTimeout, match=r"no result after 0\.01 s"):
        asyncio.run(call_user(hangs, timeout=0.01))
