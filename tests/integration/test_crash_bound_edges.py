"""The crash bound's edges (crash54), on SQLite and PostgreSQL: who counts as a crash when an
execution stops alive but cannot say so in time, when a person's operation takes the run's
lease between executions, and what an execution says of a run that has ended.

Faults are placed at fixed points: a commit whose answer is lost, an event write refused, an
actor held on an event until the test has let the lease lapse and a person act.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from support.crash_bound import TASK, doc_loop, stalled_past_its_lease, stopped_in_an_outage

import loopwright as lw
from loopwright.store import NewEvent


def _loop(
    *, max_crashes: int, stall: threading.Event | None = None
) -> tuple[lw.Loop, threading.Event]:
    """``doc.n`` edited to the cycle, accepted at 3, and set once the actor is held. The actor
    of cycle 3 raises ``KeyboardInterrupt`` (a Ctrl-C); with ``stall``, in the thread named
    ``stalled`` it waits for it instead (its heartbeat with it: the same thread)."""
    held = threading.Event()

    def fault(ctx: lw.Context) -> None:
        if ctx.cycle == 3:
            if stall is None:
                raise KeyboardInterrupt
            if threading.current_thread().name == "stalled":
                held.set()
                stall.wait()

    return doc_loop("edges", fault, max_crashes=max_crashes), held


def _plain(max_crashes: int) -> lw.Loop:
    return doc_loop("edges", max_crashes=max_crashes)


def test_a_person_between_executions_leaves_the_concluders_word_its_own(url: str) -> None:
    # Lease A concludes cycle 2 and stalls in its actor of cycle 3; its lease lapses; a person's
    # operation (a settle refused: nothing is in doubt) takes lease A+1 and hands it back; A
    # wakes, finds its lease taken at its commit and says so (``lease lost``, late). A resume
    # (lease A+2) counts no crash: before, the concluder was judged by "its successor's lease
    # less one", the person's lease, and with ``max_crashes = 0`` the run ended escalated.
    go = threading.Event()
    loop, held = _loop(max_crashes=0, stall=go)
    with lw.Runtime(url) as rt:
        with stalled_past_its_lease(url, rt, loop, held, go, "person") as run_id:
            with pytest.raises(lw.ConfigError):
                rt.settle_effect(run_id, "nothing-in-doubt", done=True, by="ops")
            assert rt.store.get_run(run_id).lease_owner is None  # (handed back)
        events = rt.store.events(run_id)
        [word] = [e for e in events if e.kind == "interrupted"]
        assert word.data["why"] == "lease lost"
        r = rt.resume_sync(run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
        [decided] = [e for e in events if e.kind == "decision" and e.cycle == 2]
        assert decided.data["lease"] == word.data["lease"]  # (how it is told: its lease)


def test_a_run_ended_by_a_commit_whose_answer_was_lost_is_not_said_interrupted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The commit that accepts the run lands, and the store fails before it answers: the
    # execution hands its lease back, and said "interrupted" (store unavailable) of the run it
    # had just ended, after its end. An ended run's log stays as its last execution left it.
    loop = _plain(max_crashes=5)
    with lw.Runtime(url) as rt:
        one, many = rt.store.commit_request, rt.store.commit_many
        lost = [0]

        def answer_lost() -> None:
            if lost[0] == 0 and rt.store.get_run("lost").status == "accepted":
                lost[0] += 1
                raise lw.StoreUnavailableError("connection dropped after the commit (injected)")

        def flaky_one(req: Any) -> Any:
            out = one(req)
            answer_lost()
            return out

        def flaky_many(reqs: list[Any]) -> Any:
            out = many(reqs)
            answer_lost()
            return out

        monkeypatch.setattr(rt.store, "commit_request", flaky_one)
        monkeypatch.setattr(rt.store, "commit_many", flaky_many)
        r = rt.run_sync(loop, TASK, task_key="lost")
        assert lost == [1]
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
        kinds = [e.kind for e in rt.store.events(r.run_id)]
        assert kinds[-1] == "stopped" and "interrupted" not in kinds, kinds


def test_a_stop_the_store_kept_from_being_said_is_said_once_it_answers(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store goes down in cycle 3: the commit fails, and so does the execution's word that
    # it stopped alive. Before, the next resume counted a crash (``max_crashes = 0``: ended
    # escalated, "crashed 1 time"), though the process never died. The runtime keeps the
    # word and says it before its next resume counts (a worker's next claim, a caller's retry).
    loop = _plain(max_crashes=0)
    with lw.Runtime(url) as rt:
        down, [run_id] = stopped_in_an_outage(rt, monkeypatch, loop, "unsaid")
        run = rt.store.get_run(run_id)
        assert run.status == "running"
        assert "interrupted" not in [e.kind for e in rt.store.events(run.run_id)]
        down[0] = False
        r = rt.resume_sync(run.run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 3), r.packet
        [word] = [e for e in rt.store.events(r.run_id) if e.kind == "interrupted"]
        assert word.data["why"] in ("store unavailable", "lease lost"), word.data


def test_a_stop_the_store_kept_from_being_said_counts_for_another_process(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ...but a process that resumes the run first (the stopped one exited, or has not resumed
    # anything since) finds nothing that tells this stop from a death: a crash, as documented
    # (docs/concepts.md). Once said, later counts leave it out.
    loop = _plain(max_crashes=0)
    with lw.Runtime(url) as rt:
        down, [run_id] = stopped_in_an_outage(rt, monkeypatch, loop, "exited")
        down[0] = False
        with lw.Runtime(url) as other:
            r = other.resume_sync(run_id, loop)
        assert (r.status, r.packet["evidence"]["crashes"]) == ("escalated", 1), r.packet


def test_a_stop_said_is_no_crash_with_no_crash_allowed(url: str) -> None:
    # (the same stop, said: the run goes on with ``max_crashes = 0``)
    loop, _ = _loop(max_crashes=0)
    with lw.Runtime(url) as rt:
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(loop, TASK, task_key="said")
        r = rt.resume_sync(rt.store.get_run("said").run_id, _plain(0))
        assert (r.status, r.cycles) == ("accepted", 3), r.packet


def test_a_stalled_executor_is_counted_by_its_taker_until_it_says_otherwise(url: str) -> None:
    # Lease A stalls in cycle 3 and its lease lapses. Taken over now, nothing tells it from a
    # death: ``crashes_at`` counts it (with ``max_crashes = 0`` the takeover escalates, and A,
    # woken, writes nothing to the ended run). Once A has said its lease was lost, a count
    # leaves it out: each count says what the log holds when it is read.
    from loopwright._crash_bound import crashes_at

    go = threading.Event()
    loop, held = _loop(max_crashes=0, stall=go)
    with lw.Runtime(url) as rt:
        with stalled_past_its_lease(url, rt, loop, held, go, "stalled") as run_id:
            token = rt.store.get_run(run_id).fencing_token
            assert crashes_at(rt.store, run_id, 2, token + 1) == 1  # (a taker's count now)
            taker = rt.store.acquire_lease(run_id, "taker", 60)
            # (the taker's start, as its execution commits it, before A wakes)
            rt.store.append_events(run_id, [NewEvent(2, "resumed", {"lease": taker})])
            assert crashes_at(rt.store, run_id, 2, taker + 1) == 2  # (A and the taker)
        # A's word, late, after the taker's start: written all the same (not fenced: A no
        # longer holds the lease), and read by its lease, not where it lies
        kinds = [(e.kind, e.data.get("lease")) for e in rt.store.events(run_id)]
        assert kinds[-2:] == [("resumed", taker), ("interrupted", taker - 1)], kinds
        assert crashes_at(rt.store, run_id, 2, taker + 1) == 1  # (the taker alone: A said)
        rt.store.release_lease(run_id, taker)
