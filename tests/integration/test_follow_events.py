"""``Runtime.events`` / ``events_sync``: a run's trace followed while another process drives it
(stream52). The lines are those ``loopwright trace`` prints after its header, each once, in
order; a follower that reconnects with the last ``seq`` it handled gets the rest exactly once.
SQLite and PostgreSQL. The child's actor waits for a file the test writes once it has seen the
cycle before (``follow_runner``): no step depends on how long anything takes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import follow_runner as fr
import pytest

import loopwright as lw
from loopwright import trace
from loopwright.trace import _follow

RUNNER = Path(fr.__file__)


def _child(url: str, run_id: str, gates: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(RUNNER), url, run_id, str(gates), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _ended(child: subprocess.Popen[str], status: str) -> None:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert out.split()[-1] == status, out


def _opened(rec: dict[str, Any], gates: Path) -> None:
    """Let the child's next cycle go once this cycle's decision is seen."""
    if rec["kind"] == "decision":
        (gates / f"go-{rec['cycle'] + 1}").touch()


def _stored(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return list(trace.iter_trace_records(rt.store, run_id))[1:]


def test_a_run_driven_elsewhere_is_followed_and_a_reconnect_gets_the_rest_once(
    url: str, tmp_path: Path
) -> None:
    with lw.Runtime(url) as rt:
        run, _ = rt.create(fr.make_loop(), fr.TASK, task_key="followed-1")
        child = _child(url, run.run_id, tmp_path)
        try:
            first: list[dict[str, Any]] = []

            async def until_first_decision() -> None:
                async for rec in rt.events(run.run_id, poll_s=0.01):
                    first.append(rec)
                    if rec["kind"] == "decision":
                        return  # the follower is left mid-run: cycle 2 waits for go-2

            asyncio.run(until_first_decision())
            assert first[-1]["cycle"] == 1
            # the child cannot have ended: its cycle 2 waits for the file written only now
            assert rt.store.get_run(run.run_id).status == "running"
            (tmp_path / "go-2").touch()
            rest = []
            for rec in rt.events_sync(run.run_id, after_seq=first[-1]["seq"], poll_s=0.01):
                rest.append(rec)
                _opened(rec, tmp_path)
        finally:
            _ended(child, "accepted")
        got = first + rest
        assert [r["seq"] for r in got] == list(range(1, len(got) + 1))
        assert got == _stored(rt, run.run_id)
        events = list(rt.store.iter_events(run.run_id))
        assert [(r["event_id"], r["kind"], r["cycle"], r["data"]) for r in got] == [
            (e.id, e.kind, e.cycle, e.data) for e in events
        ]
        assert got[-1]["kind"] == "stopped"
        assert sum(r["kind"] == "decision" for r in got) == fr.CYCLES
        # a held-out verifier's findings are shown to people (show, the dashboard), never
        # in the trace: an event carries their count only
        held = [r for r in got if r["kind"] == "verdict" and r["data"]["held_out"]]
        assert held and all(r["data"]["findings"] == 1 for r in held)
        assert fr.HIDDEN not in json.dumps(got)
        # reconnecting after any line gives exactly the lines after it
        for n in (0, 1, len(got) - 1, len(got)):
            assert list(rt.events_sync(run.run_id, after_seq=n, follow=False)) == got[n:]


def test_until_parked_stops_at_the_park_and_until_ended_follows_through_the_resume(
    url: str, tmp_path: Path
) -> None:
    with lw.Runtime(url) as rt:
        run, _ = rt.create(fr.make_loop(), fr.TASK, task_key="followed-2")
        asker = _child(url, run.run_id, tmp_path, "ask")
        parked = list(rt.events_sync(run.run_id, poll_s=0.01))  # ends at the park
        _ended(asker, "awaiting_approval")
        assert parked[-1]["kind"] == "approval_requested"
        assert rt.store.get_run(run.run_id).status == "awaiting_approval"
        rt.answer(run.run_id, "yes", by="ops")
        child = _child(url, run.run_id, tmp_path)
        try:
            after = []
            for rec in rt.events_sync(
                run.run_id, after_seq=parked[-1]["seq"], until="ended", poll_s=0.01
            ):
                after.append(rec)
                _opened(rec, tmp_path)
        finally:
            _ended(child, "accepted")
        got = parked + after
        assert got == _stored(rt, run.run_id)
        kinds = [r["kind"] for r in after]
        assert "approval_decided" in kinds and kinds[-1] == "stopped"


def test_a_secret_registered_after_the_run_wrote_it_is_not_yielded(tmp_path: Path) -> None:
    secret = "tok-Zq81-registered-later-9f3"

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"n": 3}, note=f"used {secret}")

    def fine(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    loop = lw.Loop(
        name="leaky",
        actor=actor,
        verifiers=[lw.Check(fn=fine)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        res = rt.run_sync(loop, fr.TASK, task_key="leaky-1")
        assert secret in json.dumps([e.data for e in rt.store.iter_events(res.run_id)])
        lw.register_secret(secret)
        got = list(rt.events_sync(res.run_id, follow=False))
        assert got and secret not in json.dumps(got)
        assert got == _stored(rt, res.run_id)  # masked as the export masks it


def test_waits_back_off_while_nothing_comes_and_start_again_when_something_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The follower of a run nobody drives yet looks after 0.5 s, then 1, 2, 4, 5, 5 (never a
    busy loop); once lines come it looks after 0.5 s again. The waits are recorded, not slept:
    the run is driven to its park from inside the seventh wait, answered and driven to its end
    from inside the ninth."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run, _ = rt.create(fr.make_loop(), fr.TASK, task_key="waited-1")
        waits: list[float] = []

        def fake_sleep(s: float) -> None:
            waits.append(s)
            if len(waits) == 7:
                assert rt.resume_sync(run.run_id, fr.make_loop(ask=True)).status == (
                    "awaiting_approval"
                )
            if len(waits) == 9:
                rt.answer(run.run_id, "yes", by="ops")
                assert rt.resume_sync(run.run_id, fr.make_loop()).status == "accepted"

        monkeypatch.setattr(_follow, "_sleep", fake_sleep)
        # (after run_created, read already: nothing comes until the seventh wait)
        got = list(rt.events_sync(run.run_id, after_seq=1, until="ended"))
        assert waits == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 0.5, 1.0]
        assert got == _stored(rt, run.run_id)[1:]


def test_mistakes_are_typed_errors_at_the_call(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        res = rt.run_sync(fr.make_loop(), fr.TASK, task_key="m-1")
        n = len(_stored(rt, res.run_id))
        with pytest.raises(lw.RunNotFoundError):
            rt.events("no-such-run")
        for bad, field in (
            ({"after_seq": -1}, "after_seq"),
            ({"after_seq": True}, "after_seq"),
            ({"after_seq": n + 1}, "after_seq"),
            ({"until": "stopped"}, "until"),
            ({"poll_s": 0}, "poll_s"),
            ({"follow": "no"}, "follow"),
        ):
            with pytest.raises(lw.ConfigError) as e:
                rt.events_sync(res.run_id, **bad)
            assert e.value.field == field


def test_the_stores_pages_and_positions_agree_with_the_protocols_defaults(url: str) -> None:
    from loopwright.store._protocol_commit import CommitStore

    with lw.Runtime(url) as rt:
        res = rt.run_sync(fr.make_loop(), fr.TASK, task_key="pages-1")
        st, rid = rt.store, res.run_id
        n = len(_stored(rt, rid))
        for seq in range(n + 2):
            assert st.event_id_at(rid, seq) == CommitStore.event_id_at(st, rid, seq)
        ids = [e.id for e in st.iter_events(rid)]
        for after in (0, ids[0], ids[3], ids[-1]):
            for limit in (1, 3, n):
                assert st.events_page(rid, after_id=after, limit=limit) == (
                    CommitStore.events_page(st, rid, after_id=after, limit=limit)
                )


def test_following_synchronously_inside_a_running_event_loop_is_refused(tmp_path: Path) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        res = rt.run_sync(fr.make_loop(), fr.TASK, task_key="loop-1")

        async def inside() -> list[dict[str, Any]]:
            with pytest.raises(RuntimeError, match=r"async for line in rt\.events"):
                rt.events_sync(res.run_id)
            return list(rt.events_sync(res.run_id, follow=False))  # no wait: allowed

        assert asyncio.run(inside()) == _stored(rt, res.run_id)


def test_a_parked_run_whose_request_is_decided_is_followed_through_its_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """polish52b: ``until="parked"`` on a run parked when following starts, its question
    answered since (a worker about to resume it), returned at once: the resume unseen. It
    waits on a resume, not on a person: followed through it. Unanswered, it stops at once.
    The resume is driven from inside the first wait (recorded, not slept)."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        run = rt.run_sync(fr.make_loop(ask=True), fr.TASK, task_key="decided-1")
        assert run.status == "awaiting_approval"
        waiting = list(rt.events_sync(run.run_id))  # a person is asked: stops at once
        assert waiting == _stored(rt, run.run_id)
        rt.answer(run.run_id, "yes", by="ops")
        waits: list[float] = []

        def fake_sleep(s: float) -> None:
            waits.append(s)
            assert rt.resume_sync(run.run_id, fr.make_loop()).status == "accepted"

        monkeypatch.setattr(_follow, "_sleep", fake_sleep)
        after = list(rt.events_sync(run.run_id, after_seq=waiting[-1]["seq"]))
        assert len(waits) == 1
        assert waiting + after == _stored(rt, run.run_id)
        assert after[-1]["kind"] == "stopped"


def test_the_async_follower_reads_the_store_off_the_event_loop(tmp_path: Path) -> None:
    """polish52b: each look read the store on the event loop (a PostgreSQL round trip stopped
    it, and a run driven on it). The reads run in another thread, the lines in order."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        res = rt.run_sync(fr.make_loop(), fr.TASK, task_key="thread-1")
        threads: set[int] = set()
        page = rt.store.events_page

        def events_page(*a: Any, **kw: Any) -> Any:
            threads.add(threading.get_ident())
            return page(*a, **kw)

        rt.store.events_page = events_page  # type: ignore[method-assign]

        async def follow() -> tuple[int, list[dict[str, Any]]]:
            return threading.get_ident(), [r async for r in rt.events(res.run_id)]

        loop_thread, got = asyncio.run(follow())
        assert threads and loop_thread not in threads
        assert got == _stored(rt, res.run_id)
