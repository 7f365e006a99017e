"""The span tree rebuilt from recorded events, its OTLP/JSON encoding and the JSONL trace, on
hand-written event logs (each event placed as the engine commits it)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright.store import Approval, Checkpoint, Event, RunRecord
from loopwright.trace import (
    TRACE_FORMAT,
    Span,
    build_records,
    build_spans,
    span_id_for,
    spans_to_otlp,
    trace_id_for,
    traces_url,
)
from loopwright.trace._otlp import _any_value, nanos
from loopwright.trace._spans import build_window

T = 1_800_000_000.0  # a fixed epoch, so expected times are exact


def run_record(status: str = "accepted", **kw: Any) -> RunRecord:
    base: dict[str, Any] = {
        "run_id": "r1",
        "task_key": "k1",
        "loop_name": "demo",
        "project": "p",
        "status": status,
        "stop_reason": {"accepted": "success", "escalated": "escalated"}.get(status),
        "cycle": 2,
        "best_score": 1.0,
        "cost_usd": 0.3,
        "tokens": 30,
        "seconds": 1.0,
        "spec_ref": None,
        "loop_version": "v1",
        "contract": {},
        "task": {"goal": "g"},
        "packet": None,
        "created_at": T,
        "updated_at": T,
        "ended_at": None,
        "cancel_requested": False,
        "lease_owner": None,
        "lease_expires_at": None,
        "fencing_token": 1,
        "last_seq": 0,
    }
    base.update(kw)
    return RunRecord(**base)


class Log:
    """Builds an event log the way the store numbers it."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, cycle: int, what: str, ts: float, /, **data: Any) -> Log:
        self.events.append(Event(len(self.events) + 1, "r1", cycle, what, T + ts, data))
        return self


def proposal(log: Log, cycle: int, ts: float, seconds: float, digest: str = "d") -> None:
    log.add(
        cycle,
        "proposal",
        ts,
        kind="edit",
        digest=digest,
        note="n",
        parts=["doc/a"],
        effects=[],
        usage={"cost_usd": 0.1, "tokens": 10, "seconds": 0.0},
        seconds=seconds,
    )


def verdict(log: Log, cycle: int, ts: float, name: str, seconds: float, **kw: Any) -> None:
    fields = {"held_out": False, "passed": True, "score": 1.0, "findings": 0} | kw
    log.add(cycle, "verdict", ts, verifier=name, seconds=seconds, **fields)


def approval(aid: str, requested: float, decided: float | None, status: str) -> Approval:
    return Approval(
        approval_id=aid,
        run_id="r1",
        cycle=2,
        kind="effect",
        rule="big",
        what="pay 500",
        why="four eyes",
        evidence={},
        diff=None,
        action_hash="h",
        status=status,
        requested_at=T + requested,
        expires_at=None,
        decided_by="alice" if decided is not None else None,
        decided_at=None if decided is None else T + decided,
        note=None,
    )


def record(cycle: int, decision: str, *, improved: bool = True) -> dict[str, Any]:
    return {
        "cycle": cycle,
        "proposal": {"kind": "edit", "edits": []},
        "digest": f"d{cycle}",
        "duplicate": False,
        "visible": {"v": {"passed": decision == "accepted", "score": 0.5, "usage": None}},
        "held_out": {"h": {"passed": True, "score": 1.0, "usage": None}},
        "score": 0.5,
        "improved": improved,
        "decision": decision,
        "effects": [],
        "usage": {"cost_usd": 0.1, "tokens": 10, "seconds": 0.4},
    }


def checkpoints(*records: dict[str, Any] | None) -> list[Checkpoint]:
    return [Checkpoint("r1", i, 0, {}, r, T) for i, r in enumerate((None, *records))]


def full_run() -> tuple[RunRecord, list[Event], list[Checkpoint], list[Approval]]:
    """A retried actor in cycle 1; a parked, approved cycle 2 that then pays."""
    log = Log()
    log.add(0, "run_created", 0.0).add(0, "started", 0.1)
    log.add(1, "retry", 0.3, scope="actor", attempt=1, error="TransientError: x", delay_s=0.1)
    log.add(1, "cycle_started", 1.0)
    proposal(log, 1, 1.0, 0.2, "d1")
    verdict(log, 1, 1.0, "v", 0.1, passed=False, score=0.5, findings=1)
    verdict(log, 1, 1.0, "h", 0.05, held_out=True)
    log.add(1, "decision", 1.0, decision="revise", score=0.5, best_score=0.5, improved=True)
    log.add(2, "cycle_started", 2.0)
    proposal(log, 2, 2.0, 0.3, "d2")
    verdict(log, 2, 2.0, "v", 0.2)
    verdict(log, 2, 2.0, "h", 0.1, held_out=True)
    log.add(2, "approval_requested", 2.0, approval_id="A1", kind="effect", rule="big", why="w")
    log.add(2, "approval_decided", 10.0, approval_id="A1", status="approved", by="alice")
    log.add(1, "resumed", 11.0, owner="o2")
    log.add(2, "effect_started", 11.1, effect="pay", kind="spend", key="pay:k1", status="intent")
    log.add(2, "effect_done", 11.3, effect="pay", kind="spend", key="pay:k1", status="done")
    log.add(2, "decision", 11.5, decision="accepted", score=1.0, best_score=1.0, improved=True)
    log.add(2, "stopped", 11.5, reason="success", status="accepted", cause=None)
    cps = checkpoints(
        record(1, "revise"),
        {"cycle": 2, "decision": "parked", "approval_id": "A1", "held_out": {}},
        {"cycle": 2, "decision": "effects", "held_out": {}},
        record(2, "accepted"),
    )
    run = run_record(ended_at=T + 11.5)
    return run, log.events, cps, [approval("A1", 2.0, 10.0, "approved")]


def by_key(spans: list[Span]) -> dict[str, Span]:
    return {s.key: s for s in spans}


def event_seqs(spans: list[Span]) -> list[int]:
    return sorted(
        e.attributes["loopwright.event.seq"]
        for s in spans
        for e in s.events
        if "loopwright.event.seq" in e.attributes
    )


def assert_tree(spans: list[Span]) -> None:
    """One root; parents listed before children; every child inside its parent."""
    keys = by_key(spans)
    assert len(keys) == len(spans)
    assert [s.key for s in spans if s.parent is None] == ["run"]
    seen: set[str] = set()
    for s in spans:
        assert s.start <= s.end, s.key
        if s.parent is not None:
            assert s.parent in seen, s.key
            p = keys[s.parent]
            assert p.start <= s.start <= s.end <= p.end, s.key
        for e in s.events:
            assert s.start <= e.ts <= s.end, (s.key, e.name)
        seen.add(s.key)


# --- the tree --------------------------------------------------------------------------------
def test_full_run_tree_times_and_events() -> None:
    run, events, cps, approvals = full_run()
    spans = build_spans(run, events, cps, approvals)
    assert_tree(spans)
    s = by_key(spans)
    c1, c2 = "cycle/1#1", "cycle/2#1"
    assert list(s) == [
        "run",
        c1,
        f"{c1}/actor",
        f"{c1}/verifier:v",
        f"{c1}/verifier:h",
        c2,
        f"{c2}/actor",
        f"{c2}/verifier:v",
        f"{c2}/verifier:h",
        f"{c2}/approval/A1",
        f"{c2}/effect/pay:k1",
    ]
    # every event is on exactly one span
    assert event_seqs(spans) == list(range(1, len(events) + 1))
    # cycle 1 had a retry: it starts at the previous commit, the actor covers the failure
    assert s[c1].start == T + 0.1
    assert s[f"{c1}/actor"].start == T + 0.1
    assert s[f"{c1}/actor"].end == pytest.approx(T + 0.85)
    assert [e.name for e in s[f"{c1}/actor"].events] == ["retry", "proposal"]
    assert s[f"{c1}/actor"].attributes["loopwright.attempts"] == 2
    assert s[f"{c1}/verifier:h"].end == T + 1.0
    # cycle 2: calls laid out backwards from its first commit with their durations
    assert s[c2].start == pytest.approx(T + 1.4)
    assert s[f"{c2}/actor"].end == pytest.approx(T + 1.7)
    assert s[f"{c2}/verifier:v"].end == pytest.approx(T + 1.9)
    assert (s[f"{c2}/approval/A1"].start, s[f"{c2}/approval/A1"].end) == (T + 2.0, T + 10.0)
    assert (s[f"{c2}/effect/pay:k1"].start, s[f"{c2}/effect/pay:k1"].end) == (T + 11.1, T + 11.3)
    assert s[c2].end == T + 11.5
    assert s["run"].end == T + 11.5
    # calls of a cycle are sequential
    for c in (c1, c2):
        calls = [x for x in spans if x.parent == c and x.kind in ("actor", "verifier")]
        assert all(a.end <= b.start for a, b in itertools.pairwise(calls))
    # the proposal's event sits at the call's end, its recorded time kept
    prop = next(e for e in s[f"{c2}/actor"].events if e.name == "proposal")
    assert prop.ts == s[f"{c2}/actor"].end
    assert prop.attributes["loopwright.event.ts"] == T + 2.0


def test_attributes_and_statuses() -> None:
    run, events, cps, approvals = full_run()
    s = by_key(build_spans(run, events, cps, approvals))
    root = s["run"].attributes
    assert root["loopwright.stop_reason"] == "success"
    assert root["loopwright.cost_usd"] == 0.3
    assert root["loopwright.usage.total_tokens"] == 30
    assert s["run"].status == "ok"
    actor = s["cycle/2#1/actor"].attributes
    assert actor["gen_ai.operation.name"] == "invoke_agent"
    assert actor["loopwright.usage.total_tokens"] == 10
    assert "gen_ai.usage.input_tokens" not in actor  # only totals are recorded
    ver = s["cycle/1#1/verifier:v"]
    assert ver.attributes["loopwright.verdict.passed"] is False
    assert ver.attributes["gen_ai.evaluation.score.label"] == "fail"
    assert [e.name for e in ver.events] == ["verdict", "gen_ai.evaluation.result"]
    assert s["cycle/1#1/verifier:h"].attributes["loopwright.verifier.held_out"] is True
    eff = s["cycle/2#1/effect/pay:k1"]
    assert eff.attributes["gen_ai.operation.name"] == "execute_tool"
    assert eff.attributes["gen_ai.tool.call.id"] == "pay:k1"
    assert eff.status == "ok"
    cycle2 = s["cycle/2#1"].attributes
    assert (cycle2["loopwright.decision"], cycle2["loopwright.seconds"]) == ("accepted", 0.4)
    assert s["cycle/2#1/approval/A1"].attributes["loopwright.approval.wait_s"] == pytest.approx(8)


def test_parked_run_is_incomplete_and_ends_at_its_last_record() -> None:
    _, events, cps, _ = full_run()
    events = events[:13]  # up to approval_requested
    rec = run_record(status="awaiting_approval", ended_at=None)
    spans = build_spans(rec, events, cps[:3], [approval("A1", 2.0, None, "pending")])
    assert_tree(spans)
    s = by_key(spans)
    assert s["run"].incomplete and s["cycle/2#1"].incomplete
    wait = s["cycle/2#1/approval/A1"]
    assert wait.incomplete and wait.start == wait.end == T + 2.0
    assert s["run"].status == "unset"
    assert "loopwright.stop_reason" not in s["run"].attributes
    assert event_seqs(spans) == list(range(1, 14))


def test_gave_up_verifier_escalates_with_error_statuses() -> None:
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.1)
    log.add(1, "retry", 0.5, scope="verifier:v", attempt=1, error="Timeout: t", delay_s=0.1)
    log.add(1, "gave_up", 0.9, scope="verifier:v", attempt=2, error="Timeout: t", delay_s=None)
    log.add(1, "cycle_started", 1.0)
    proposal(log, 1, 1.0, 0.2)
    log.add(1, "stopped", 1.0, reason="escalated", status="escalated", cause="verifier v failed")
    rec = run_record(status="escalated", packet={"cause": "verifier v failed"}, ended_at=T + 1)
    spans = build_spans(rec, log.events, checkpoints(), [])
    assert_tree(spans)
    s = by_key(spans)
    ver = s["cycle/1#1/verifier:v"]
    assert ver.status == "error" and ver.status_message == "Timeout: t"
    assert ver.end == T + 0.9
    assert ver.attributes["loopwright.attempts"] == 2
    assert s["cycle/1#1"].status == "error"
    assert s["cycle/1#1"].attributes["loopwright.stop_reason"] == "escalated"
    assert (s["run"].status, s["run"].status_message) == ("error", "verifier v failed")
    assert event_seqs(spans) == list(range(1, len(log.events) + 1))


def test_events_of_no_cycle_go_to_the_run_and_rollback_redoes_a_cycle() -> None:
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.1)
    log.add(1, "cycle_started", 1.0)
    proposal(log, 1, 1.0, 0.1, "a")
    log.add(1, "decision", 1.0, decision="revise", score=0.5, best_score=0.5, improved=True)
    log.add(1, "rolled_back", 2.0, to_cycle=0, by="bob")
    log.add(1, "cycle_started", 3.0)  # the same cycle number, again
    proposal(log, 1, 3.0, 0.1, "b")
    log.add(1, "decision", 3.0, decision="revise", score=0.6, best_score=0.6, improved=True)
    # a crash lost the commit of cycle 2: only its journaled effect is left
    log.add(2, "effect_started", 4.0, effect="pay", kind="spend", key="pay:x", status="intent")
    log.add(2, "effect_in_doubt", 5.0, key="effect:pay:x", cause="cancelled")
    log.add(1, "stopped", 5.0, reason="cancelled", status="cancelled", cause="c")
    rec = run_record(status="cancelled", ended_at=T + 5)
    spans = build_spans(rec, log.events, checkpoints(record(1, "revise"), None), [])
    assert_tree(spans)
    s = by_key(spans)
    assert {"cycle/1#1", "cycle/1#2"} <= set(s)
    assert s["cycle/1#1"].attributes["loopwright.cycle.occurrence"] == 1
    assert s["cycle/1#2"].attributes["loopwright.cycle.occurrence"] == 2
    assert span_id_for("r1", "cycle/1#1") != span_id_for("r1", "cycle/1#2")
    eff = s["run/effect/pay:x"]
    assert eff.parent == "run"
    assert eff.status == "error" and eff.attributes["loopwright.effect.status"] == "in_doubt"
    assert event_seqs(spans) == list(range(1, len(log.events) + 1))


def test_an_effect_recovered_after_a_crash_is_done_and_says_so() -> None:
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.1)
    log.add(1, "cycle_started", 1.0)
    proposal(log, 1, 1.0, 0.1)
    log.add(1, "effect_started", 2.0, effect="pay", kind="spend", key="pay:k", status="intent")
    log.add(1, "effect_done", 2.1, effect="pay", kind="spend", key="pay:k", status="done")
    # killed here; the resume reads the result back from the run's journal
    log.add(1, "resumed", 3.0, owner="o2")
    log.add(1, "effect_recovered", 3.1, effect="pay", kind="spend", key="pay:k", status="done")
    log.add(1, "decision", 3.2, decision="accepted", score=1.0, best_score=1.0, improved=True)
    log.add(1, "stopped", 3.3, reason="success", status="accepted", cause="")
    rec = run_record(cycle=1, ended_at=T + 3.3)
    spans = build_spans(rec, log.events, checkpoints(record(1, "accepted")), [])
    assert_tree(spans)
    [eff] = [sp for sp in spans if sp.kind == "effect"]
    assert eff.end == T + 3.1
    assert eff.attributes["loopwright.effect.status"] == "done"
    assert eff.attributes["loopwright.effect.recovered"] is True
    assert "loopwright.effect.reused" not in eff.attributes
    assert eff.attributes["loopwright.effect.attempts"] == 1


@st.composite
def event_logs(draw: st.DrawFn) -> tuple[RunRecord, list[Event], list[Approval]]:
    """Random runs: cycles with random call durations, retries, approvals and effects, and
    gaps between commits; maybe ending, maybe parked."""
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.01)
    now = 0.01
    approvals: list[Approval] = []
    n = draw(st.integers(1, 5))
    for c in range(1, n + 1):
        durations = draw(st.lists(st.floats(0.0, 0.5), min_size=1, max_size=3))
        retries = draw(st.integers(0, 2))
        gap = draw(st.floats(0.0, 1.0))
        for i in range(retries):
            log.add(c, "retry", now + 0.01 * (i + 1), scope="actor", attempt=i + 1)
        now += gap + sum(durations) + 0.01 * (retries + 1)
        log.add(c, "cycle_started", now)
        proposal(log, c, now, durations[0], f"d{c}")
        for j, d in enumerate(durations[1:]):
            verdict(log, c, now, f"v{j}", d)
        if draw(st.booleans()):
            aid, requested = f"A{c}", now
            log.add(c, "approval_requested", now, approval_id=aid)
            now += draw(st.floats(0.0, 5.0))
            log.add(c, "approval_decided", now, approval_id=aid, status="approved")
            approvals.append(approval(aid, requested, now, "approved"))
        if draw(st.booleans()):
            log.add(c, "effect_started", now + 0.01, effect="e", key=f"e:{c}", status="intent")
            now += 0.02
            log.add(c, "effect_done", now, effect="e", key=f"e:{c}", status="done")
        now += 0.01
        log.add(c, "decision", now, decision="revise", improved=False)
    ended = draw(st.booleans())
    if ended:
        log.add(n, "stopped", now, reason="budget_cycles", status="stopped", cause=None)
    rec = run_record(
        status="stopped" if ended else "running", ended_at=T + now if ended else None, cycle=n
    )
    return rec, log.events, approvals


@given(event_logs())
def test_any_log_gives_a_well_formed_tree(
    data: tuple[RunRecord, list[Event], list[Approval]],
) -> None:
    rec, events, approvals = data
    spans = build_spans(rec, events, [], approvals)
    assert_tree(spans)
    assert event_seqs(spans) == list(range(1, len(events) + 1))
    assert sum(1 for s in spans if s.kind == "cycle") == sum(
        1 for e in events if e.kind == "cycle_started"
    )
    assert sum(1 for s in spans if s.kind == "approval") == len(approvals)
    for s in spans:
        if s.kind == "cycle":
            calls = [x for x in spans if x.parent == s.key and x.kind in ("actor", "verifier")]
            assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(calls))
    # deterministic: the same inputs give the same tree
    again = build_spans(rec, events, [], approvals)
    assert [(s.key, s.start, s.end) for s in again] == [(s.key, s.start, s.end) for s in spans]


# --- OTLP encoding ---------------------------------------------------------------------------
def test_ids_are_deterministic_hex_and_distinct() -> None:
    assert re.fullmatch(r"[0-9a-f]{32}", trace_id_for("r1"))
    assert re.fullmatch(r"[0-9a-f]{16}", span_id_for("r1", "run"))
    assert trace_id_for("r1") == trace_id_for("r1") != trace_id_for("r2")
    assert span_id_for("r1", "run") != span_id_for("r2", "run")
    assert span_id_for("r1", "run") != span_id_for("r1", "cycle/1#1")


def test_otlp_document_links_and_times() -> None:
    run, events, cps, approvals = full_run()
    spans = build_spans(run, events, cps, approvals)
    doc = json.loads(json.dumps(spans_to_otlp(run, spans)))
    [rs] = doc["resourceSpans"]
    attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
    assert attrs["service.name"] == {"stringValue": "loopwright"}
    [ss] = rs["scopeSpans"]
    out = ss["spans"]
    assert len(out) == len(spans)
    ids = {sp["spanId"] for sp in out}
    assert len(ids) == len(out)
    assert {sp["traceId"] for sp in out} == {trace_id_for("r1")}
    roots = [sp for sp in out if "parentSpanId" not in sp]
    assert [r["name"] for r in roots] == ["run demo"]
    starts = {sp["spanId"]: int(sp["startTimeUnixNano"]) for sp in out}
    ends = {sp["spanId"]: int(sp["endTimeUnixNano"]) for sp in out}
    for sp in out:
        assert re.fullmatch(r"\d+", sp["startTimeUnixNano"])
        assert starts[sp["spanId"]] <= ends[sp["spanId"]]
        if "parentSpanId" in sp:
            p = sp["parentSpanId"]
            assert p in ids
            assert starts[p] <= starts[sp["spanId"]] <= ends[sp["spanId"]] <= ends[p]
    kinds = {sp["name"]: sp["kind"] for sp in out}
    assert kinds["execute_tool pay"] == 3  # CLIENT: it acts outside the run
    assert kinds["cycle 1"] == 1
    run_span = roots[0]
    assert run_span["status"] == {"code": 1}
    ra = {a["key"]: a["value"] for a in run_span["attributes"]}
    assert ra["loopwright.stop_reason"] == {"stringValue": "success"}
    assert ra["loopwright.cycles"] == {"intValue": "2"}


def test_any_value_encoding() -> None:
    assert _any_value(True) == {"boolValue": True}
    assert _any_value(3) == {"intValue": "3"}
    assert _any_value(0.5) == {"doubleValue": 0.5}
    assert _any_value(float("nan")) == {"stringValue": "nan"}
    assert _any_value(["a", 1]) == {
        "arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}]}
    }
    assert _any_value({"b": 1}) == {"stringValue": '{"b": 1}'}


@given(st.floats(1e9, 4e9), st.floats(0.0, 10.0))
def test_nanos_is_monotone(ts: float, delta: float) -> None:
    assert nanos(ts) <= nanos(ts + delta)
    assert abs(nanos(ts) - ts * 1e9) < 1e3


def test_protobuf_round_trip_of_the_document() -> None:
    pytest.importorskip("opentelemetry.proto")
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from loopwright.trace import otlp_message

    run, events, cps, approvals = full_run()
    spans = build_spans(run, events, cps, approvals)
    doc = spans_to_otlp(run, spans)
    msg = otlp_message(doc)
    assert isinstance(msg, ExportTraceServiceRequest)
    out = msg.resource_spans[0].scope_spans[0].spans
    assert len(out) == len(spans)
    assert out[0].trace_id == bytes.fromhex(trace_id_for("r1"))
    assert out[1].parent_span_id == bytes.fromhex(span_id_for("r1", "run"))
    assert out[0].start_time_unix_nano == nanos(T)
    errors = json_format.MessageToDict(msg)  # serialises back without complaint
    assert errors["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "run demo"


def test_traces_url() -> None:
    assert traces_url("http://h:4318") == "http://h:4318/v1/traces"
    assert traces_url("http://h:4318/") == "http://h:4318/v1/traces"
    assert traces_url("https://h/otlp/v1/traces") == "https://h/otlp/v1/traces"
    with pytest.raises(ValueError, match="not an http"):
        traces_url("h:4318")


# --- JSONL -----------------------------------------------------------------------------------
def test_jsonl_records_schema() -> None:
    run, events, _, _ = full_run()
    lines = [json.loads(json.dumps(r)) for r in build_records(run, events)]
    header, rest = lines[0], lines[1:]
    keys = {"format", "run_id", "seq", "ts", "cycle", "kind", "data"}
    assert set(header) == keys
    assert (header["kind"], header["seq"], header["format"]) == ("run", 0, TRACE_FORMAT)
    assert header["data"]["events"] == len(events)
    assert header["data"]["trace_id"] == trace_id_for("r1")
    assert "task" not in header["data"]
    assert all(set(r) == keys | {"event_id"} for r in rest)
    assert [r["seq"] for r in rest] == list(range(1, len(events) + 1))
    assert [r["kind"] for r in rest] == [e.kind for e in events]
    assert [r["ts"] for r in rest] == sorted(r["ts"] for r in rest)


def test_the_live_tracers_cycle_counts_hold_a_range_not_an_entry_a_cycle() -> None:
    from loopwright.trace._live import _Counts

    c = _Counts()
    for n in range(1, 5001):
        c.add(n)
    assert not c.other and (c.lo, c.hi) == (1, 5000)  # 5,000 cycles: two numbers
    c.add(4998)  # redone after a rollback
    c.add(4998)
    c.add(7000)  # a cycle after a gap
    assert c.other == {4998: 3, 7000: 1}
    assert [c.get(n) for n in (0, 1, 4997, 4998, 5000, 5001, 7000)] == [0, 1, 1, 3, 1, 0, 1]
    fresh = _Counts()
    fresh.add(41)  # a window that starts at cycle 41 (a fork's, a resumed run's)
    fresh.add(42)
    assert (fresh.lo, fresh.hi, fresh.other) == (41, 42, {})


# --- a host's clock that steps back: the time rule is local ------------------------------------
def _drained_then_behind(behind: float) -> Log:
    """Cycle 1 committed at +100 s on the first host, drained; resumed on a host ``behind``
    seconds behind it, whose cycle 2 starts its actor (0.5 s) after the resume."""
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.1)
    log.add(1, "cycle_started", 100.0)
    proposal(log, 1, 100.0, 0.2)
    log.add(1, "decision", 100.0, decision="revise", improved=False)
    log.add(1, "stopped", 100.0, reason="drained", status="running", cause=None)
    log.add(1, "resumed", 110.0 - behind)
    log.add(2, "cycle_started", 111.0 - behind)
    proposal(log, 2, 111.0 - behind, 0.5)
    log.add(2, "decision", 111.0 - behind, decision="revise", improved=False)
    return log


def test_a_cycle_after_a_clock_step_back_keeps_its_own_times() -> None:
    """A cycle starts no earlier than the event placed before it (here the ``resumed`` of
    the host behind), not the latest time before it: the cycles of a host whose clock is
    behind are not all held at the earlier host's last time, zero seconds long."""
    log = _drained_then_behind(50.0)
    s = by_key(build_spans(run_record(status="running"), log.events, checkpoints(), []))
    assert (s["cycle/2#1"].start, s["cycle/2#1"].end) == (T + 60.5, T + 61.0)
    assert (s["cycle/2#1/actor"].start, s["cycle/2#1/actor"].end) == (T + 60.5, T + 61.0)
    # where clocks agree the rule is the one it was (the latest time is the last one)
    log = _drained_then_behind(0.0)
    s = by_key(build_spans(run_record(status="running"), log.events, checkpoints(), []))
    assert (s["cycle/2#1"].start, s["cycle/2#1"].end) == (T + 110.5, T + 111.0)


@st.composite
def stepping_logs(draw: st.DrawFn) -> tuple[RunRecord, list[Event], list[int]]:
    """Sessions of one to three cycles each on a host of its own (its clock a random offset
    from the first's, back or forward), each ended by a drain (``stopped``), some cycles
    retried before their first commit; and the positions after each drain (where only the
    run span is open: a live tracer's windows start there)."""
    log = Log().add(0, "run_created", 0.0).add(0, "started", 0.01)
    now, c, cuts = 0.01, 0, []
    for k in range(draw(st.integers(1, 4))):
        offset = 0.0 if k == 0 else draw(st.sampled_from([-3.0, -1.0, 0.0, 1.0, 4.0]))
        if k:
            log.add(c, "resumed", now + offset)
        for _ in range(draw(st.integers(1, 3))):
            c += 1
            durations = draw(st.lists(st.floats(0.0, 0.5), min_size=1, max_size=3))
            if draw(st.booleans()):  # journaled before the cycle's first commit
                log.add(c, "retry", now + offset + 0.01, scope="actor", attempt=1)
            now += 0.05 + sum(durations)
            log.add(c, "cycle_started", now + offset)
            proposal(log, c, now + offset, durations[0], f"d{c}")
            for j, d in enumerate(durations[1:]):
                verdict(log, c, now + offset, f"v{j}", d)
            log.add(c, "decision", now + offset, decision="revise", improved=False)
        log.add(c, "stopped", now + offset, reason="drained", status="running", cause=None)
        cuts.append(len(log.events))
    return run_record(status="running", cycle=c), log.events, cuts


@given(stepping_logs())
def test_windows_of_a_log_whose_clocks_step_give_the_whole_logs_times(
    data: tuple[RunRecord, list[Event], list[int]],
) -> None:
    """Built a window at a time (as a live tracer does, each window after the time
    ``build_window`` gave for the one before), every span below the run has the times it
    has in the whole log's tree, however the hosts' clocks stepped back or forward."""
    rec, events, cuts = data
    whole = {s.key: (s.start, s.end) for s in build_spans(rec, events, [], []) if s.kind != "run"}
    pieces: dict[str, tuple[float, float]] = {}
    after: float | None = None
    begin = 0
    for cut in cuts:
        spans, after = build_window(
            rec, events[begin:cut], [], [], first_seq=begin + 1, after_ts=after
        )
        pieces.update({s.key: (s.start, s.end) for s in spans if s.kind != "run"})
        begin = cut
    assert pieces == whole


def test_otlp_masks_a_spans_attributes_and_each_events_as_each_alone() -> None:
    # A span's attributes and its events' are masked in one pass: each comes out as masking
    # it alone gives, a secret in any one of them masked, the clean ones as they were.
    from loopwright._redact import REDACTED, redact
    from loopwright.trace._span_model import Span, SpanEvent

    run, *_ = full_run()
    key = "sk-" + "A1b2C3d4" * 4
    dirty = Span(
        key="cycle/1#1/actor",
        kind="actor",
        name="actor",
        start=1.0,
        end=2.0,
        parent="run",
        attributes={"note": f"uses {key}", "n": 3, "password": "hunter22", "tags": ["a", key]},
        events=[
            SpanEvent("proposal", 1.5, {"loopwright.event.seq": 4, "text": "clean"}),
            SpanEvent("retry", 1.6, {"error": f"401 for Bearer-less {key}", "api_key": "k" * 9}),
            SpanEvent("verdict", 1.7, {}),
        ],
    )
    clean = Span(key="cycle/1#1", kind="cycle", name="cycle 1", start=1.0, end=2.0, parent="run")
    [rs] = spans_to_otlp(run, [clean, dirty])["resourceSpans"]
    _, got = rs["scopeSpans"][0]["spans"]
    text = json.dumps(got)
    assert key not in text and "hunter22" not in text and "k" * 9 not in text
    assert REDACTED in text
    one = spans_to_otlp(run, [dirty])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert one == got
    attrs = {a["key"]: a["value"] for a in got["attributes"]}
    assert attrs["note"] == {"stringValue": redact({"note": f"uses {key}"})["note"]}
    assert attrs["n"] == {"intValue": "3"}
    assert [[a["key"] for a in e["attributes"]] for e in got["events"]] == [
        ["loopwright.event.seq", "text"],
        ["error", "api_key"],
        [],
    ]
    assert got["events"][0]["attributes"][1]["value"] == {"stringValue": "clean"}


def test_jsonl_trace_masks_each_line_as_alone_across_batches() -> None:
    # The lines are masked a batch at a time: every one comes out as masking it alone gives,
    # the secret in a line of the second batch masked, the clean lines around it untouched.
    from loopwright._redact import redact
    from loopwright.trace._jsonl import _BATCH, build_records, iter_trace_records

    key = "sk-" + "Zz9Yy8Xx" * 4
    log = Log()
    for i in range(2 * _BATCH + 5):
        log.add(1 + i // 3, "retry", 0.01 * i, error=f"401 {key}" if i == _BATCH + 3 else "x")
    run = run_record()

    class _Store:
        def get_run(self, run_id: str) -> RunRecord:
            return run

        def event_counts(self, run_id: str) -> dict[str, int]:
            return {"retry": len(log.events)}

        def iter_events(self, run_id: str) -> Any:
            return iter(log.events)

    got = list(iter_trace_records(_Store(), "r1"))  # type: ignore[arg-type]
    assert got == build_records(run, log.events)
    assert key not in json.dumps(got) and key in json.dumps([e.data for e in log.events])
    assert got[_BATCH + 4]["data"] == redact({"error": f"401 {key}"})
    assert [line["data"]["error"] for line in got[1:4]] == ["x", "x", "x"]
