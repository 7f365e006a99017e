"""Live tracing of a run resumed by a new session: what its first commit costs, and what it sends.

Issue 14, invariant 8: resuming a long run traced live cost its whole log (every event, every
checkpoint, every span of the run built again) at the session's first commit: 581 ms at 200
cycles, 3,178 ms at 3,000. The session now reads the log from its end back to where only the
run span was open (trace/_live.py ``_resumed``). These tests count that work at two run lengths
(rows the store returns, events the tree is built from, spans built), and check that a killed
run resumed by a new process is traced as the export has it: each span once, none lost.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_trace_live import _below_the_run, _offline, _Receiver, _redo_loop

import loopwright as lw
from loopwright.store._base import CheckpointRow
from loopwright.store.sqlite import SQLiteStore
from loopwright.trace import _live, otlp_trace, write_otlp

_KILL_IN_EFFECT = "LW_TEST_KILL_IN_EFFECT_OF_CYCLE"
TASK: dict[str, Any] = {"goal": "g", "artifacts": {"doc": {f"p{i}": "" for i in range(4)}}}


@lw.effect("notify", name="note", requires_success=False)
def note(n: int) -> dict[str, Any]:
    if os.environ.get(_KILL_IN_EFFECT) == str(n):  # set in the killed child only
        os.kill(os.getpid(), signal.SIGKILL)
    return {"n": n}


@note.reconciler
def _was_noted(key: str) -> dict[str, Any]:
    return {"reconciled": key}  # the outside world says it was done


def _loop(budget: int, on_cycle: Callable[[int], None] = lambda n: None) -> lw.Loop:
    """A loop with what a window holds: a retry now and then, an effect every third cycle
    (its cycle commits twice), a visible and a held-out verifier."""
    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        on_cycle(ctx.cycle)
        calls.append(1)
        if len(calls) % 5 == 2:
            raise lw.TransientError("flaky")
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {f"p{ctx.cycle % 4}": f"v{ctx.cycle}"}).edits,
            effects=(note.call(n=ctx.cycle),) if ctx.cycle % 3 == 0 else (),
            usage=lw.Usage(0.001, 10),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()  # named by a failing finding: never accepted
        found = (lw.Finding("open", "doc", edit.part, "t"),)
        return lw.Verdict(passed=False, score=0.5, findings=found, checked=(edit.ref,))

    def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="resumed",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=budget)),
        effects=[note],
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002),
    )


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


# --- the cost of the first commit --------------------------------------------------------------
_READS = (
    "events",
    "events_tail",
    "event_positions",
    "cycle_starts",
    "checkpoints",
    "checkpoints_after",
    "_checkpoint_rows",
    "approvals",
    "approval",
)


def _size(got: Any) -> int:
    if isinstance(got, tuple):  # event_positions: (count, rows)
        return 1 + len(got[1])
    if isinstance(got, list | dict):
        return len(got)
    return 1


def _first_commit_work(db: Path, n: int, snapshot_every: int) -> Counter[str]:
    """Run ``n`` cycles (drained there, left to resume), then resume the run in a new traced
    runtime and count what its tracer does at that session's first commit: the rows each
    store read returns, the events the span tree is built from, the spans built."""
    provider, _ = _provider()
    with lw.Runtime(str(db), tracer_provider=provider, snapshot_every=snapshot_every) as rt:
        loop = _loop(n + 1, lambda c: rt.drain() if c == n else None)
        r = rt.run_sync(loop, TASK)
    assert (r.cycles, r.stop_reason) == (n, None), r.to_dict()

    work: Counter[str] = Counter()
    counting = [False]
    provider2, exporter = _provider()
    with lw.Runtime(str(db), tracer_provider=provider2, snapshot_every=snapshot_every) as rt:
        store, tracer = rt.store, rt._live
        assert tracer is not None
        for name in _READS:
            real = getattr(store, name, None)
            if real is None:  # a read this store has not
                continue

            def read(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
                got = _real(*a, **k)
                if counting[0]:
                    work[f"rows:{_name}"] += _size(got)
                return got

            setattr(store, name, read)
        real_build = _live.build_window

        def build(*a: Any, **k: Any) -> Any:
            spans, after = real_build(*a, **k)
            if counting[0]:
                work["events built from"] += len(a[1])
                work["spans built"] += len(spans)
            return spans, after

        real_committed = tracer.committed

        def committed(*a: Any, **k: Any) -> None:
            counting[0] = not work
            try:
                real_committed(*a, **k)
            finally:
                counting[0] = False

        tracer.committed = committed  # type: ignore[method-assign]
        _live.build_window = build
        try:
            done = rt.resume_sync(r.run_id, _loop(n + 1))
        finally:
            _live.build_window = real_build
    assert (done.cycles, done.stop_reason) == (n + 1, "budget_cycles")
    assert exporter.get_finished_spans()  # the session did send
    return work


def test_the_first_commit_of_a_resumed_session_costs_the_same_at_any_run_length(
    tmp_path: Path,
) -> None:
    """Before: the first commit read the whole log and built every span of the run (its
    events and spans grew ×6 from 24 to 144 cycles). Now: the same rows, events and spans at
    both lengths (both drained at the same place of their snapshot interval)."""
    short = _first_commit_work(tmp_path / "short.db", 24, snapshot_every=10)
    long = _first_commit_work(tmp_path / "long.db", 144, snapshot_every=10)
    assert short["events built from"] > 0 and short["spans built"] > 0
    assert long == short, (short, long)


# --- a run killed, resumed by another process: each span once ---------------------------------
_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    import loopwright as lw
    import test_trace_live_resume as t

    db, url, kill_at, where = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url)))

    def die(cycle):
        if cycle == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    if where == "effect":  # in the effect of cycle kill_at: after its cycle's first commit
        os.environ[t._KILL_IN_EFFECT] = str(kill_at)
        on_cycle = lambda c: None
    else:  # in the actor: nothing of cycle kill_at committed
        on_cycle = die
    with lw.Runtime(db, tracer_provider=provider, snapshot_every=4) as rt:
        rt.run_sync(t._loop(20, on_cycle), t.TASK, task_key="killed")
    """
)


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    with _Receiver() as r:
        yield r


@pytest.mark.parametrize("where", ["actor", "effect"])
def test_a_killed_run_resumed_by_another_process_sends_each_span_once(
    tmp_path: Path, receiver: _Receiver, where: str
) -> None:
    """SIGKILL at cycle 9 (in its actor: nothing of it committed; or in its effect: after its
    first commit, the cycle open), then a new process resumes the run to its end. Over both
    sessions every span id is sent once, and the spans below a run span are the export's of
    the finished run, each once (none lost, none twice); the resumed session's run span is
    the export's (its times, its events with their positions in the log)."""
    db = str(tmp_path / "s.db")
    here = str(Path(__file__).resolve().parent)
    child = subprocess.run(
        [sys.executable, "-c", _CHILD, here, db, receiver.url, "9", where],
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    sent_before = len(receiver.spans)
    assert sent_before > 0  # the killed session sent its cycles as they committed

    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url), schedule_delay_millis=600_000)
    )
    try:
        with lw.Runtime(db, tracer_provider=provider, snapshot_every=4) as rt:
            [run] = rt.store.list_runs()
            done = rt.resume_sync(run.run_id, _loop(20))
            offline = _offline(otlp_trace(rt.store, run.run_id))
        assert (done.cycles, done.stop_reason) == (20, "budget_cycles"), done.to_dict()
        assert provider.force_flush()
    finally:
        provider.shutdown()
    live = list(receiver.spans)
    ids = [s["span_id"] for s in live]
    assert len(ids) == len(set(ids))  # no span id twice across the kill
    # The killed session never ended what it had open (its run span; with the kill in the
    # effect, cycle 9 too, sent complete by the resumed session under another id): the
    # spans it sent under those name a parent that never arrived. Every span is there once
    # all the same, and every other parent is the export's.
    got, want = _below_the_run(live), _below_the_run(offline)
    orphans = [g for g in got if g[1] == "(a parent never sent)"]
    assert orphans and {g[4] for g in orphans if not g[0].startswith("cycle ")} <= {9}
    assert sorted((g[0], *g[2:]) for g in got) == sorted((w[0], *w[2:]) for w in want)
    rest = list(want)
    for g in got:
        if g not in orphans:
            rest.remove(g)  # ValueError: a span the export has not (or not that often)
    [last_run] = [s for s in live[sent_before:] if s["parent"] is None]
    [whole] = [s for s in offline if s["parent"] is None]
    assert (last_run["times"], last_run["events"]) == (whole["times"], whole["events"])
    assert last_run["attributes"] == whole["attributes"]


def test_a_resumed_session_sends_the_run_span_with_every_event_of_the_log(tmp_path: Path) -> None:
    """The run span a resumed session sends carries the run-level events of the sessions
    before it (read with their positions, not by reading the log), as the export's does:
    names, times and every attribute, ``loopwright.event.seq`` included."""
    db = str(tmp_path / "s.db")
    for n in (5, 11):  # two drained sessions, then one to the end
        provider, _ = _provider()
        with lw.Runtime(db, tracer_provider=provider) as rt:
            loop = _loop(16, lambda c, rt=rt, n=n: rt.drain() if c == n else None)
            runs = rt.store.list_runs()
            r = rt.resume_sync(runs[0].run_id, loop) if runs else rt.run_sync(loop, TASK)
        assert r.cycles == n
    provider, exporter = _provider()
    with lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, _loop(16))
        doc = otlp_trace(rt.store, r.run_id)
    assert done.cycles == 16
    [root] = [s for s in exporter.get_finished_spans() if s.parent is None]
    [whole] = [
        s for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"] if "parentSpanId" not in s
    ]
    got = [(e.name, e.timestamp, dict(e.attributes or {})) for e in root.events]
    want = [
        (
            e["name"],
            int(e["timeUnixNano"]),
            {a["key"]: next(iter(a["value"].values())) for a in e.get("attributes", [])},
        )
        for e in whole["events"]
    ]
    assert [n for n, *_ in got].count("resumed") == 2
    assert _plain_numbers(got) == _plain_numbers(want)
    assert (root.start_time, root.end_time) == (
        int(whole["startTimeUnixNano"]),
        int(whole["endTimeUnixNano"]),
    )


def _plain_numbers(events: list[tuple[str, int, dict[str, Any]]]) -> list[Any]:
    """OTLP/JSON writes 64-bit integers as text: compare them as numbers."""
    return [
        (n, t, {k: int(v) if isinstance(v, str) and v.isdigit() else v for k, v in a.items()})
        for n, t, a in events
    ]


# --- wherever a session opened the run: the spans the whole log's rebuild sends -----------------
def _sent(store: Any, run_id: str, opened_at: int, monkeypatch: pytest.MonkeyPatch | None) -> Any:
    """What a tracer's first commit sends for a session that opened the run at checkpoint
    ``opened_at`` (the run has ended: that commit sends everything it has); with
    ``monkeypatch``, as the tracer did before it read from the log's end (the whole log)."""
    provider, exporter = _provider()
    tracer = _live.LiveTracer(store, provider)
    if monkeypatch is not None:
        monkeypatch.setattr(tracer, "_resumed", lambda run_id, opened_at: None)
    tracer.committed(run_id, opened_at=opened_at)
    assert not tracer._failed
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    return sorted(
        (
            s.name,
            by_id[s.parent.span_id].name if s.parent else None,
            (s.start_time, s.end_time),
            [(e.name, e.timestamp, dict(e.attributes or {})) for e in s.events],
            dict(s.attributes or {}),
            s.status.status_code.name,
        )
        for s in spans
    )


def test_from_any_checkpoint_a_session_sends_what_the_whole_log_rebuild_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run with retries, effects (their cycle commits twice: a session can open it with the
    cycle open), drains, a park approved and a rollback redoing cycles. For a session opened
    at each of its checkpoints, the first commit's spans (names, parents, times, events with
    their positions, attributes, statuses) are those the whole log's rebuild sends."""
    db = str(tmp_path / "s.db")
    park, escalate = [False], [False]

    def review(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        if park[0]:
            park[0] = False
            return "a look at this cycle"
        return None

    def loop(budget: int, drain_at: int, rt: lw.Runtime) -> lw.Loop:
        base = _loop(budget, lambda c: rt.drain() if c == drain_at else None)

        def actor(ctx: lw.Context) -> lw.Proposal:
            if escalate[0] and ctx.cycle == 10:
                return lw.Proposal(escalate="a person should look")
            return base.actor(ctx)

        return lw.Loop(
            name=base.name,
            actor=actor,
            verifiers=base.verifiers,
            contract=lw.Contract(
                budget=lw.Budget(max_cycles=budget),
                risk=(lw.RiskRule(name="review", check=review),),
            ),
            effects=base.effects,
            retry=base.retry,
        )

    with lw.Runtime(db, snapshot_every=3) as rt:
        r = rt.run_sync(loop(12, 4, rt), TASK)  # drained after cycle 4
    park[0] = True
    with lw.Runtime(db, snapshot_every=3) as rt:
        r = rt.resume_sync(r.run_id, loop(12, 0, rt))  # parks in cycle 5
        assert r.status == "awaiting_approval", r.to_dict()
        rt.approve(r.run_id, by="bob")
    escalate[0] = True
    with lw.Runtime(db, snapshot_every=3) as rt:
        r = rt.resume_sync(r.run_id, loop(12, 0, rt))  # escalates at cycle 10
        assert r.status == "escalated", r.to_dict()
        rt.rollback(r.run_id, 8, by="bob", loop=loop(12, 0, rt))
    escalate[0] = False
    with lw.Runtime(db, snapshot_every=3) as rt:
        r = rt.resume_sync(r.run_id, loop(12, 0, rt))  # cycles 9 and 10 again
        assert r.stop_reason == "budget_cycles", r.to_dict()
        store, run_id = rt.store, r.run_id
        last = store.get_run(run_id).last_seq
        kinds = Counter(e.kind for e in store.events(run_id))
        assert kinds["rolled_back"] == 1 and kinds["resumed"] >= 3 and kinds["effect_done"] > 2
        assert kinds["cycle_started"] > r.cycles  # cycles redone after the rollback
        read_back = _live.LiveTracer(store, _provider()[0])
        # from the log's end wherever a decision came before (not at cycle 1's checkpoints)
        late = [seq for seq in range(1, last + 1) if read_back._resumed(run_id, seq) is not None]
        assert len(late) >= last - 3, (late, last)
        for seq in range(1, last + 1):
            assert _sent(store, run_id, seq, None) == _sent(store, run_id, seq, monkeypatch), seq


def test_a_session_whose_clock_is_behind_the_earlier_ones_sends_its_cycles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session that resumes the run runs on a clock an hour behind the one that drove it
    first (another host): its own decisions are older, by their times, than the earlier
    session's last commit. It still sends the cycles it ran, each once."""
    db = str(tmp_path / "s.db")
    provider, _ = _provider()
    with lw.Runtime(db, tracer_provider=provider) as rt:
        r = rt.run_sync(_loop(9, lambda c: rt.drain() if c == 6 else None), TASK)
    assert r.cycles == 6
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600.0)
    provider, exporter = _provider()
    with lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, _loop(9))
    monkeypatch.undo()
    assert done.cycles == 9
    cycles = sorted(s.name for s in exporter.get_finished_spans() if s.name.startswith("cycle "))
    assert cycles == ["cycle 7", "cycle 8", "cycle 9"]


# --- hosts whose clocks disagree: what was sent is judged by the log's order -------------------
_REAL_TIME = time.time


@contextmanager
def _clock(offset: float) -> Iterator[None]:
    """This process's clock ``offset`` seconds off (the store stamps checkpoints and events
    with it): a session on another host."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "time", lambda: _REAL_TIME() + offset)
        yield


def _spans_sent(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Every span sent complete under a run span, times included (``_below_the_run``): where
    a session's clock steps back, live tracing and the export start a cycle no earlier than
    the event placed before it, a time a window of the log carries or reads with it."""
    return _below_the_run(spans)


def _received(spans: Any) -> list[dict[str, Any]]:
    """The SDK's finished spans as ``_below_the_run`` reads the received ones."""
    return [
        {
            "name": s.name,
            "span_id": s.context.span_id,
            "parent": s.parent.span_id if s.parent else None,
            "events": [e.name for e in s.events],
            "times": (s.start_time, s.end_time),
            "attributes": dict(s.attributes or {}),
        }
        for s in spans
    ]


@pytest.mark.parametrize(
    "offsets",
    [(0, -3600), (0, 3600), (0, 3600, 0, 7200, -3600)],
    ids=["behind", "ahead", "alternating"],
)
def test_sessions_on_clocks_that_disagree_send_each_span_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offsets: tuple[int, ...]
) -> None:
    """Each session drives the run on a clock of its own (hours behind or ahead of the one
    before), drained after its second cycle (an effect every third cycle: some sessions open
    the run after one), the last to the end. Over all sessions the spans sent complete under
    a run span are the export's, times included, each once: none taken for sent because its
    times are older than the earlier session's last commit, none sent again because they are
    newer.
    And wherever a session opened the run, the window read from the log's end sends what
    the whole log's rebuild sends, times included."""
    db = str(tmp_path / "s.db")
    provider, exporter = _provider()
    budget = 2 * len(offsets) + 1
    run_id = None
    for k, offset in enumerate(offsets):
        last = k == len(offsets) - 1
        with _clock(offset), lw.Runtime(db, tracer_provider=provider) as rt:
            drain = (
                (lambda c, rt=rt, n=2 * k + 2: rt.drain() if c == n else None)
                if not last
                else (lambda c: None)
            )
            loop = _loop(budget, drain)
            r = rt.resume_sync(run_id, loop) if run_id else rt.run_sync(loop, TASK)
        run_id = r.run_id
        assert r.cycles == (budget if last else 2 * k + 2), (k, r.to_dict())
    with lw.Runtime(db) as rt:
        offline = _offline(otlp_trace(rt.store, run_id))
        live = _received(exporter.get_finished_spans())
        got, want = _spans_sent(live), _spans_sent(offline)
        # (a drained session leaves its run span open: its cycles name a parent never sent)
        assert {g[0] for g in got if g[1] == "(a parent never sent)"} <= {
            w[0] for w in want if w[1] == "run resumed"
        }
        assert [(g[0], *g[2:]) for g in got] == [(w[0], *w[2:]) for w in want]
        for seq in range(1, rt.store.get_run(run_id).last_seq + 1):
            window = _sent(rt.store, run_id, seq, None)
            assert window == _sent(rt.store, run_id, seq, monkeypatch), seq


@pytest.mark.parametrize("offset", [3600, -3600], ids=["ahead", "behind"])
def test_a_rollback_on_another_clock_between_sessions_sends_each_span_once(
    tmp_path: Path, offset: int
) -> None:
    """A person rolls the run back from a host whose clock is an hour off; the session that
    redoes the cycles runs on the first host's clock. Over the three sessions the spans sent
    complete under a run span are the export's, times included, each once (the redone cycles as their second
    occurrences)."""
    db = str(tmp_path / "s.db")
    provider, exporter = _provider()
    stop = [True]
    loop = _redo_loop(stop)
    with lw.Runtime(db, tracer_provider=provider) as rt:
        r = rt.run_sync(loop, TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    with _clock(offset), lw.Runtime(db, tracer_provider=provider) as rt:
        assert rt.rollback(r.run_id, 2, by="bob", loop=loop).status == "pending"
    stop[0] = False
    with lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, loop)
        assert (done.cycles, done.stop_reason) == (6, "budget_cycles")
        offline = _offline(otlp_trace(rt.store, r.run_id))
    want = _below_the_run(offline)
    assert [o for n, *_, o in want if n == "cycle 4"] == [1, 2]
    assert _spans_sent(_received(exporter.get_finished_spans())) == _spans_sent(offline)


def test_live_times_equal_the_exports_where_a_clock_steps_back(tmp_path: Path) -> None:
    """A run resumed on a clock an hour behind: the times of the spans sent live are the
    export's, as they are where clocks agree."""
    db = str(tmp_path / "s.db")
    provider, exporter = _provider()
    with lw.Runtime(db, tracer_provider=provider) as rt:
        r = rt.run_sync(_loop(5, lambda c: rt.drain() if c == 2 else None), TASK)
    with _clock(-3600), lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, _loop(5))
        offline = _offline(otlp_trace(rt.store, r.run_id))
    assert done.cycles == 5
    got = _below_the_run(_received(exporter.get_finished_spans()))
    want = _below_the_run(offline)
    assert [(g[0], *g[2:]) for g in got] == [(w[0], *w[2:]) for w in want]


def test_live_times_equal_the_exports_over_clocks_stepping_back_and_forward_and_a_rollback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is created on a host two hours behind; sessions follow on hosts that step the
    clock forward, back and forward again (each drained after a cycle or two, every time
    after the run's creation: no time is held at its start), one escalates, and a person rolls
    it back from a host between them; the last session redoes the cycles. Every span sent
    complete under a run span is the export's, times included, each once; and wherever a
    session opened the run, the window read from the log's end sends what the whole log's
    rebuild sends, times included."""
    db = str(tmp_path / "s.db")
    provider, exporter = _provider()
    escalate = [False]

    def loop(budget: int, drain_at: int, rt: lw.Runtime) -> lw.Loop:
        base = _loop(budget, lambda c: rt.drain() if c == drain_at else None)

        def actor(ctx: lw.Context) -> lw.Proposal:
            if escalate[0] and ctx.cycle == 7:
                return lw.Proposal(escalate="a person should look")
            return base.actor(ctx)

        return dataclasses.replace(base, actor=actor)

    run_id = ""
    for offset, drain_at in [(-7200, 2), (0, 4), (-3600, 5), (-1800, 0)]:
        escalate[0] = drain_at == 0
        with _clock(offset), lw.Runtime(db, tracer_provider=provider) as rt:
            lp = loop(9, drain_at, rt)
            r = rt.resume_sync(run_id, lp) if run_id else rt.run_sync(lp, TASK)
        run_id = r.run_id
    assert (r.status, r.cycles) == ("escalated", 6), r.to_dict()
    escalate[0] = False
    with _clock(-5400), lw.Runtime(db, tracer_provider=provider) as rt:
        assert rt.rollback(run_id, 4, by="bob", loop=loop(9, 0, rt)).status == "pending"
    with _clock(-600), lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(run_id, loop(9, 0, rt))
        assert (done.cycles, done.stop_reason) == (9, "budget_cycles"), done.to_dict()
        offline = _offline(otlp_trace(rt.store, run_id))
    want = _spans_sent(offline)
    assert [o for n, *_, o in want if n == "cycle 7"] == [1, 2]  # redone after the rollback
    # the export keeps the steps: cycle 5 (an hour behind) starts before cycle 4 (on the
    # clock ahead) and cycle 6 (half an hour behind), not held at the latest time before it
    start = {(n, o): times[0] for n, _parent, times, _events, _c, o in want}
    assert start["cycle 5", 1] < min(start["cycle 4", 1], start["cycle 6", 1])
    got = _spans_sent(_received(exporter.get_finished_spans()))
    assert [(g[0], *g[2:]) for g in got] == [(w[0], *w[2:]) for w in want]
    with lw.Runtime(db) as rt:
        for seq in range(1, rt.store.get_run(run_id).last_seq + 1):
            window = _sent(rt.store, run_id, seq, None)
            assert window == _sent(rt.store, run_id, seq, monkeypatch), seq
        # the export streamed a page at a time places the cycles as the document built whole
        out = io.StringIO()
        write_otlp(rt.store, run_id, out)
        assert json.loads(out.getvalue()) == otlp_trace(rt.store, run_id)


class _LaterCheckpointTimes(SQLiteStore):
    """A store of another make that stamps a commit's checkpoint a moment after its events
    (two ``time.time()`` readings: the events written first): nothing in the ``Store``
    contract says a commit's events carry its checkpoint's time."""

    def _checkpoint_rows(self, run_id: str, **kw: Any) -> list[CheckpointRow]:
        return [
            dataclasses.replace(r, created_at=r.created_at + 0.001)
            for r in super()._checkpoint_rows(run_id, **kw)
        ]


def test_a_store_whose_events_do_not_carry_the_checkpoints_time_sends_each_span_once(
    tmp_path: Path,
) -> None:
    """Where no event carries its commit's checkpoint time, what the earlier session had is
    judged by time, as before the log's order was used: its cycles are not sent again."""
    store = _LaterCheckpointTimes(tmp_path / "s.db")
    provider, exporter = _provider()
    with lw.Runtime(store, tracer_provider=provider) as rt:
        r = rt.run_sync(_loop(5, lambda c: rt.drain() if c == 3 else None), TASK)
    assert r.cycles == 3
    with lw.Runtime(store, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, _loop(5))
        assert done.cycles == 5
        offline = _offline(otlp_trace(rt.store, r.run_id))
    sent = Counter(g[0] for g in _spans_sent(_received(exporter.get_finished_spans())))
    want = Counter(w[0] for w in _spans_sent(offline))
    assert sent == want
