"""Live tracing through the OpenTelemetry SDK, against a loopback OTLP/HTTP receiver.

A real ``Runtime`` runs a ``ChatActor`` and a ``ChatReviewer`` against ``FakeOpenAI`` with a
``TracerProvider`` whose ``BatchSpanProcessor`` exports over OTLP/HTTP (protobuf) to a tiny
``http.server`` in this file, which decodes each body with ``opentelemetry-proto``. The
actor's second call blocks on a ``threading.Event`` until the test has seen cycle 1's spans
arrive (``force_flush`` from the test thread: no timing), so they provably arrived while the
run was going; then the run finishes and everything received is compared with the offline
``otlp_trace`` export of the finished run.
"""

from __future__ import annotations

import gzip
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk.trace")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http.trace_exporter")
pytest.importorskip("openai")

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import loopwright as lw
from loopwright.adapters import ChatActor, ChatReviewer, PriceOverride
from loopwright.store import open_store
from loopwright.testing import FakeOpenAI, Reply, Request, ok
from loopwright.trace import otlp_trace
from loopwright.trace._live import provider_from_env

WANT = {"title": "Hello world", "body": "All good."}
TASK: dict[str, Any] = {
    "goal": "Fix the spelling of the doc",
    "artifacts": {"doc": {"title": "Helo wrld", "body": "Al gud."}},
}
FIX_TITLE = {"edits": [{"artifact": "doc", "part": "title", "value": "Hello world"}]}
FIX_BODY = {"edits": [{"artifact": "doc", "part": "body", "value": "All good."}]}
PASS = {"score": 0.95, "passed": True, "summary": "fine", "findings": []}
WAIT_S = 60.0  # an upper bound on waiting for what must happen, never a measured time


def spelling(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = tuple(
        lw.Finding(f"{k} is misspelt", "doc", k, "spelling")
        for k, v in WANT.items()
        if doc.get(k) != v
    )
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT), findings=bad)


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


class _Receiver:
    """An OTLP/HTTP traces endpoint on loopback: every span received, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                msg = ExportTraceServiceRequest.FromString(body)
                got = [
                    _plain(s, rs.resource)
                    for rs in msg.resource_spans
                    for ss in rs.scope_spans
                    for s in ss.spans
                ]
                with receiver.changed:
                    receiver.spans.extend(got)
                    receiver.changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def names(self) -> list[str]:
        with self.changed:
            return [s["name"] for s in self.spans]

    def __enter__(self) -> _Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, which) if which else None


def _plain(span: Any, resource: Any) -> dict[str, Any]:
    return {
        "name": span.name,
        "kind": span.kind,
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "trace_id": span.trace_id.hex(),
        "attributes": {a.key: _value(a.value) for a in span.attributes},
        "events": [e.name for e in span.events],
        "times": (span.start_time_unix_nano, span.end_time_unix_nano),
        "status": span.status.code,
        "resource": {a.key: _value(a.value) for a in resource.attributes},
    }


def _tree(spans: list[dict[str, Any]], *, key: str) -> list[tuple[str, str | None]]:
    """(name, parent's name) of every span: the structure, whatever the ids."""
    by_id = {s[key]: s for s in spans}
    return sorted((s["name"], by_id[s["parent"]]["name"] if s["parent"] else None) for s in spans)


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    with _Receiver() as r:
        yield r


@pytest.fixture(autouse=True)
def _no_real_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)


def test_spans_arrive_while_the_run_goes_and_equal_the_offline_export(
    tmp_path: Path, receiver: _Receiver
) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "live-test"}))
    # A long schedule delay: spans go out only when the test flushes (never by a timer race).
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url), schedule_delay_millis=600_000)
    )
    release, held = threading.Event(), threading.Event()
    actor_calls: list[int] = []

    def actor_reply(req: Request) -> Reply:
        actor_calls.append(1)
        if len(actor_calls) == 1:
            return ok(FIX_TITLE, prompt_tokens=1000, completion_tokens=100)
        held.set()  # cycle 1 is committed (and its spans ended) before cycle 2's call
        release.wait(WAIT_S)  # held until the test saw cycle 1's spans arrive
        return ok(FIX_BODY, prompt_tokens=2000, completion_tokens=200)

    db = tmp_path / "s.db"
    result: list[lw.RunResult] = []
    errors: list[BaseException] = []
    with FakeOpenAI() as server:
        server.script(actor_reply, model="actor-m")
        server.script(lambda req: ok(PASS, prompt_tokens=300, completion_tokens=30), model="rev-m")
        loop = lw.Loop(
            name="live-doc",
            actor=ChatActor(
                "actor-m",
                base_url=server.base_url,
                provider="openai",  # the provider it stands for: gen_ai.provider.name
                price=PriceOverride(input_per_mtok=1.0, output_per_mtok=2.0),
                timeout_s=WAIT_S * 2,
            ),
            verifiers=[
                lw.Check(fn=spelling),
                lw.Check(
                    fn=ChatReviewer(
                        "rev-m",
                        base_url=server.base_url,
                        rubric="Plain, correct English.",
                        price=PriceOverride(input_per_mtok=3.0, output_per_mtok=6.0),
                        timeout_s=WAIT_S,
                    ),
                    name="review",
                ),
                lw.Check(fn=audit, held_out=True),
            ],
            contract=lw.Contract(success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=4)),
        )

        def drive() -> None:
            try:
                with lw.Runtime(str(db), tracer_provider=provider) as rt:
                    result.append(rt.run_sync(loop, TASK))
            except BaseException as exc:  # reported by the test thread
                errors.append(exc)
                release.set()

        t = threading.Thread(target=drive, daemon=True)
        t.start()
        try:
            # Cycle 2's actor call is held: cycle 1 is committed and its spans ended in the
            # SDK. A flush exports them; the receiver has them when the POST is answered.
            assert held.wait(WAIT_S) and not errors, errors
            assert provider.force_flush()
            with receiver.changed:
                live_early = list(receiver.spans)
            assert "cycle 1" in [s["name"] for s in live_early]
            # The run is still going: cycle 2's actor call is held, nothing stopped it.
            assert len(actor_calls) == 2 and not release.is_set() and not result
            with open_store(str(db)) as st:
                rid = st.list_runs()[0].run_id
                assert "stopped" not in [e.kind for e in st.events(rid)]
            assert "run live-doc" not in [s["name"] for s in live_early]
        finally:
            release.set()
            t.join(WAIT_S)
    assert not errors, errors
    assert result and result[0].accepted and result[0].cycles == 2
    assert provider.force_flush()

    live = list(receiver.spans)
    with open_store(str(db)) as st:
        doc = otlp_trace(st, result[0].run_id)
    offline = [
        {
            "name": s["name"],
            "span_id": s["spanId"],
            "parent": s.get("parentSpanId"),
            "events": [e["name"] for e in s["events"]],
            "times": (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])),
            "attributes": {a["key"]: a["value"] for a in s["attributes"]},
        }
        for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ]
    # Same spans, same parent/child structure as the export of the finished run.
    assert _tree(live, key="span_id") == _tree(offline, key="span_id")
    # ... with the same times and the same events (one span model, two ways out).
    assert sorted((s["name"], s["times"], s["events"]) for s in live) == sorted(
        (s["name"], s["times"], s["events"]) for s in offline
    )
    assert len({s["trace_id"] for s in live}) == 1
    assert live[0]["resource"]["service.name"] == "live-test"

    by_name = {s["name"]: s for s in live}
    off = {s["name"]: s for s in offline}
    for name, span in by_name.items():
        assert set(span["attributes"]) == set(off[name]["attributes"]), name
    # The model calls: GenAI attributes, tokens and cost from the adapters' usage.
    actor = [s for s in live if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"]
    assert len(actor) == 2
    a1 = next(s for s in actor if s["attributes"]["loopwright.cycle"] == 1)["attributes"]
    assert a1["gen_ai.agent.name"] == "live-doc"
    assert a1["gen_ai.conversation.id"] == result[0].run_id
    assert a1["loopwright.usage.total_tokens"] == 1100
    assert a1["loopwright.cost_usd"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    review = [s for s in live if s["name"] == "verify review"]
    assert len(review) == 2
    r1 = review[0]["attributes"]
    assert r1["gen_ai.request.model"] == "rev-m"
    assert (r1["gen_ai.usage.input_tokens"], r1["gen_ai.usage.output_tokens"]) == (300, 30)
    assert r1["gen_ai.evaluation.name"] == "review"
    assert r1["loopwright.usage.total_tokens"] == 330
    assert r1["loopwright.cost_usd"] == pytest.approx((300 * 3.0 + 30 * 6.0) / 1e6)
    assert "gen_ai.evaluation.result" in review[0]["events"]
    # Each request to a model: a CLIENT span under the call that made it, with the GenAI
    # semantic-convention attributes and its cost (what the adapter reported, per request).
    chats = [s for s in live if s["attributes"].get("gen_ai.operation.name") == "chat"]
    assert sorted(s["name"] for s in chats) == ["chat actor-m"] * 2 + ["chat rev-m"] * 2
    assert {s["kind"] for s in chats} == {3}  # SPAN_KIND_CLIENT
    spans_by_id = {s["span_id"]: s for s in live}
    c1 = next(
        s for s in chats if s["name"] == "chat actor-m" and s["attributes"]["loopwright.cycle"] == 1
    )
    assert spans_by_id[c1["parent"]]["name"] == "invoke_agent live-doc"
    ca = c1["attributes"]
    assert ca["gen_ai.request.model"] == ca["gen_ai.response.model"] == "actor-m"
    assert ca["gen_ai.provider.name"] == "openai"
    assert (ca["gen_ai.usage.input_tokens"], ca["gen_ai.usage.output_tokens"]) == (1000, 100)
    assert ca["loopwright.cost_usd"] == pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)
    assert ca["gen_ai.response.finish_reasons"] == ["stop"]
    assert ca["server.address"] == "localhost" and ca["loopwright.attempt"] == 1
    assert c1["events"] == ["model_call"]
    c2 = next(s for s in chats if s is not c1 and s["name"] == "chat actor-m")["attributes"]
    assert (c2["gen_ai.usage.input_tokens"], c2["gen_ai.usage.output_tokens"]) == (2000, 200)
    rv = next(s for s in chats if s["name"] == "chat rev-m")
    assert spans_by_id[rv["parent"]]["name"] == "verify review"
    assert rv["attributes"]["loopwright.cost_usd"] == pytest.approx((300 * 3.0 + 30 * 6.0) / 1e6)
    # ... and the agent span sums its requests' token split
    assert (a1["gen_ai.usage.input_tokens"], a1["gen_ai.usage.output_tokens"]) == (1000, 100)
    assert a1["gen_ai.request.model"] == "actor-m"
    # loopwright's own: held-out marked, the stop reason on the run.
    audits = [s for s in live if s["name"] == "verify audit"]
    assert audits and all(s["attributes"]["loopwright.verifier.held_out"] for s in audits)
    run = by_name["run live-doc"]
    assert run["parent"] is None
    assert run["attributes"]["loopwright.stop_reason"] == result[0].stop_reason
    assert run["attributes"]["loopwright.status"] == "accepted"
    assert "loopwright.incomplete" not in run["attributes"]
    for name in ("run live-doc", "cycle 1", "cycle 2"):
        assert by_name[name]["attributes"] == {
            k: _value_of(v) for k, v in off[name]["attributes"].items()
        }, name


def _value_of(v: dict[str, Any]) -> Any:
    """An OTLP/JSON AnyValue as a plain value (as ``_value`` reads the protobuf)."""
    ((kind, x),) = v.items()
    if kind == "intValue":
        return int(x)
    if kind == "arrayValue":
        return [_value_of(i) for i in x.get("values", [])]
    return x


def test_tracing_is_off_unless_configured(tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        assert rt._live is None
    assert provider_from_env({}) is None
    off = {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318"}
    assert provider_from_env(off) is None


def test_the_environment_configures_the_exporter(
    receiver: _Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=loops")
    provider = provider_from_env()  # what live_tracer uses (once per process) without one
    assert provider is not None
    provider.get_tracer("t").start_span("probe").end()
    assert provider.force_flush()
    provider.shutdown()
    (got,) = receiver.spans
    assert got["name"] == "probe"
    assert got["resource"]["service.name"] == "loopwright"
    assert got["resource"]["deployment.environment"] == "test"
    assert got["resource"]["team"] == "loops"


# --- a run that parks for a person and is driven again -----------------------------------------
@lw.effect("spend", name="pay")
def pay(invoice: str, amount: float) -> dict[str, Any]:
    return {"ref": invoice, "amount": amount}


def _paying_loop(fail_first: bool) -> lw.Loop:
    calls: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(1)
        if fail_first and len(calls) == 1:
            raise lw.TransientError("flaky once")
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", WANT).edits,
            effects=(pay.call(invoice="I-1", amount=500),),
            usage=lw.Usage(0.01, 100),
        )

    return lw.Loop(
        name="pay-doc",
        actor=actor,
        verifiers=[lw.Check(fn=spelling), lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        approvals=lw.ApprovalPolicy(
            (lw.PolicyRule(kind="spend", action="require", above=100, name="big"),)
        ),
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02),
    )


def _attrs(span: Any) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_parked_run_sends_each_session_and_ends_equal_to_the_export(
    tmp_path: Path, decision: str
) -> None:
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    db = str(tmp_path / "s.db")
    with lw.Runtime(db, tracer_provider=provider) as rt:
        loop = _paying_loop(fail_first=True)
        parked = rt.run_sync(loop, TASK)
        assert parked.status == "awaiting_approval"
        first = exporter.get_finished_spans()
        # The park ended this session: what was open went out marked incomplete.
        assert sorted(s.name for s in first if _attrs(s).get("loopwright.incomplete")) == [
            "approval effect",
            "cycle 1",
            "run pay-doc",
        ]
        getattr(rt, decision)(parked.run_id, by="alice", note="ok")
        done = rt.resume_sync(parked.run_id, loop)
        assert done.status == ("accepted" if decision == "approve" else "escalated")
        doc = otlp_trace(rt.store, done.run_id)
    live = exporter.get_finished_spans()
    assert sum(1 for s in live if s.parent is None) == 2  # one run span per session
    by_id = {s.context.span_id: s for s in live}
    # What the sessions sent complete is the export of the finished run, span for span.
    complete = [s for s in live if not _attrs(s).get("loopwright.incomplete")]
    got = [(s.name, by_id[s.parent.span_id].name if s.parent else None) for s in complete]
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    off_id = {s["spanId"]: s for s in spans}
    want = [
        (s["name"], off_id[s["parentSpanId"]]["name"] if "parentSpanId" in s else None)
        for s in spans
    ]
    assert sorted(got) == sorted(want)
    actor = next(s for s in complete if s.name == "invoke_agent pay-doc")
    assert _attrs(actor)["loopwright.attempts"] == 2  # the flaky first call, retried
    assert [e.name for e in actor.events] == ["retry", "proposal"]
    if decision == "approve":
        effect = next(s for s in complete if s.name == "execute_tool pay")
        assert effect.kind.name == "CLIENT" and _attrs(effect)["loopwright.effect.status"] == "done"
    else:
        assert "execute_tool pay" not in [s.name for s in live]


# --- a long run: the tracer holds one window, and reads no state ----------------------------------
@lw.effect("notify", name="ping", requires_success=False)
def ping(n: int) -> dict[str, Any]:
    return {"n": n}


def _listed(attrs: Any) -> dict[str, Any]:
    """SDK attributes as the export reads them (the SDK keeps a list as a tuple)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in (attrs or {}).items()}


def test_a_long_run_is_traced_holding_one_window_and_equals_the_export(
    tmp_path: Path, resolved: list[int]
) -> None:
    """Issue 14: a cycle costs the same at cycle 5,000 as at cycle 5, traced too. What the
    tracer holds stays the same from cycle to cycle (the windows sent are dropped), it
    resolves no checkpoint's state (every part's versions) at a commit, and what it sends,
    window by window, is still the export of the finished run: the same spans, times, events
    and attributes — with retries, effects run in a write-ahead commit, and snapshots."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    cycles, parts = 40, 12
    held: dict[int, int] = {}
    resolved_at: dict[int, int] = {}
    calls: list[int] = []
    runtime: list[lw.Runtime] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.append(1)
        tracer = runtime[0]._live
        held[ctx.cycle], resolved_at[ctx.cycle] = tracer.held(), resolved[0]
        if len(calls) % 7 == 3:
            raise lw.TransientError("flaky")  # a retry event in the cycle's window
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {f"p{ctx.cycle % parts}": f"v{ctx.cycle}"}).edits,
            effects=(ping.call(n=ctx.cycle),) if ctx.cycle % 4 == 0 else (),
            usage=lw.Usage(0.001, 10),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        [edit] = proposal.changes()
        found = (lw.Finding("open", "doc", edit.part, "t"),)
        return lw.Verdict(passed=False, score=0.5, findings=found, checked=(edit.ref,))

    loop = lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
        effects=[ping],
        retry=lw.RetryPolicy(attempts=3, backoff_s=0.001, max_backoff_s=0.002),
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    task = {"goal": "g", "artifacts": {"doc": {f"p{i}": "" for i in range(parts)}}}
    with lw.Runtime(str(tmp_path / "s.db"), tracer_provider=provider, snapshot_every=4) as rt:
        runtime.append(rt)
        r = rt.run_sync(loop, task)
        assert (r.cycles, r.stop_reason) == (cycles, "budget_cycles")
        doc = otlp_trace(rt.store, r.run_id)
    assert not rt._live._runs  # the session ended: nothing held
    # the same at cycle 40 as at cycle 3: nothing of the cycles sent is kept
    assert {held[n] for n in range(3, cycles + 1)} == {held[3]}, held
    # no state resolved at a commit (the engine resolves none either while it runs)
    assert resolved_at[cycles] == resolved_at[2], resolved_at

    live = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in live}
    got = sorted(
        (
            s.name,
            by_id[s.parent.span_id].name if s.parent else None,
            (s.start_time, s.end_time),
            [(e.name, e.timestamp, _listed(e.attributes)) for e in s.events],
            _listed(s.attributes),
        )
        for s in live
    )
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    off_id = {s["spanId"]: s for s in spans}
    want = sorted(
        (
            s["name"],
            off_id[s["parentSpanId"]]["name"] if "parentSpanId" in s else None,
            (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])),
            [
                (
                    e["name"],
                    int(e["timeUnixNano"]),
                    {a["key"]: _value_of(a["value"]) for a in e.get("attributes", [])},
                )
                for e in s["events"]
            ],
            {a["key"]: _value_of(a["value"]) for a in s["attributes"]},
        )
        for s in spans
    )
    assert len(got) == len(want) > 4 * cycles
    assert [n for n, *_ in got if n == "execute_tool ping"] == ["execute_tool ping"] * 10
    assert got == want


def test_a_cycle_redone_after_a_rollback_is_sent_as_its_second_occurrence(
    tmp_path: Path,
) -> None:
    """The tracer keeps how often each cycle started as a range plus exceptions (not an entry
    a cycle): a cycle a rollback redoes, in the same runtime, is sent numbered as the export
    numbers it."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    stop = [True]

    def actor(ctx: lw.Context) -> lw.Proposal:
        if stop[0] and ctx.cycle == 4:
            return lw.Proposal(escalate="a person should look")
        return lw.Proposal.edit("doc", {"title": f"v{ctx.cycle}"})

    loop = lw.Loop(
        name="redo",
        actor=actor,
        verifiers=[lw.Check(fn=spelling)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with lw.Runtime(str(tmp_path / "s.db"), tracer_provider=provider) as rt:
        r = rt.run_sync(loop, TASK)
        assert r.status == "escalated"
        rt.rollback(r.run_id, 2, by="bob", loop=loop)
        stop[0] = False
        assert rt.resume_sync(r.run_id, loop).cycles == 6
        doc = otlp_trace(rt.store, r.run_id)

    def occurrence(attrs: Any) -> tuple[int, int]:
        return (attrs["loopwright.cycle"], attrs["loopwright.cycle.occurrence"])

    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    want = {
        occurrence({a["key"]: _value_of(a["value"]) for a in s["attributes"]})
        for s in spans
        if s["name"].startswith("cycle ")
    }
    assert want == {(1, 1), (2, 1), (3, 1), (4, 1), (4, 2), (5, 1), (6, 1)}
    cycles = [s for s in exporter.get_finished_spans() if s.name.startswith("cycle ")]
    # each once: the rollback's commit sends none of the cycles the first session sent
    assert sorted(occurrence(s.attributes) for s in cycles) == sorted(want)


# --- a person's operation through another traced runtime: nothing sent twice -------------------
def _redo_loop(stop: list[bool]) -> lw.Loop:
    """Escalates at cycle 4 while ``stop[0]``; else revises up to its budget of 6 cycles."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if stop[0] and ctx.cycle == 4:
            return lw.Proposal(escalate="a person should look")
        return lw.Proposal.edit("doc", {"title": f"v{ctx.cycle}"})

    return lw.Loop(
        name="redo",
        actor=actor,
        verifiers=[lw.Check(fn=spelling)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )


def _offline(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The export's spans as ``_plain`` gives the received ones (the fields compared)."""
    return [
        {
            "name": s["name"],
            "span_id": s["spanId"],
            "parent": s.get("parentSpanId"),
            "events": [e["name"] for e in s["events"]],
            "times": (int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])),
            "attributes": {a["key"]: _value_of(a["value"]) for a in s["attributes"]},
        }
        for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    ]


def _below_the_run(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Every span under a run span, complete: (name, parent's name, times, events, cycle,
    occurrence). A span sent twice is there twice."""
    by_id = {s["span_id"]: s for s in spans}
    return sorted(
        (
            s["name"],
            by_id.get(s["parent"], {}).get("name", "(a parent never sent)"),
            s["times"],
            s["events"],
            s["attributes"].get("loopwright.cycle"),
            s["attributes"].get("loopwright.cycle.occurrence"),
        )
        for s in spans
        if s["parent"] and not s["attributes"].get("loopwright.incomplete")
    )


@pytest.fixture
def sent(receiver: _Receiver) -> Iterator[TracerProvider]:
    """A provider exporting to ``receiver`` only when flushed (never by a timer), shut down
    before the receiver closes."""
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver.url), schedule_delay_millis=600_000)
    )
    yield provider
    provider.shutdown()


def test_a_rollback_through_another_traced_runtime_sends_no_span_twice(
    tmp_path: Path, receiver: _Receiver, sent: TracerProvider
) -> None:
    """A rollback commits through the runtime's tracer, which sees the run for the first time
    and with no ``resumed`` of its own: what the session that ran the cycles sent must not be
    sent again, by the rollback or by the session that redoes them. Over the three sessions
    the spans received under a run span are the export's, each once, the redone cycles as
    their second occurrences."""
    provider = sent
    db = str(tmp_path / "s.db")
    stop = [True]
    loop = _redo_loop(stop)
    with lw.Runtime(db, tracer_provider=provider) as rt:
        r = rt.run_sync(loop, TASK)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    with lw.Runtime(db, tracer_provider=provider) as rt:
        assert rt.rollback(r.run_id, 2, by="bob", loop=loop).status == "pending"
    stop[0] = False
    with lw.Runtime(db, tracer_provider=provider) as rt:
        done = rt.resume_sync(r.run_id, loop)
        assert (done.cycles, done.stop_reason) == (6, "budget_cycles")
        offline = _offline(otlp_trace(rt.store, r.run_id))
    assert provider.force_flush()
    live = list(receiver.spans)

    want = _below_the_run(offline)
    # the escalated cycle 4 ended the first session unconcluded; the resume redid it
    assert [o for n, *_, o in want if n == "cycle 4"] == [1, 2]
    assert _below_the_run(live) == want
    # One run span a session that committed: the first and the last complete, the rollback's
    # sent when it ended, open (the run was pending then).
    runs = [s for s in live if s["parent"] is None]
    assert [s["attributes"]["loopwright.status"] for s in runs] == [
        "escalated",
        "pending",
        "stopped",
    ]
    assert [bool(s["attributes"].get("loopwright.incomplete")) for s in runs] == [
        False,
        True,
        False,
    ]
    last = {s["name"]: s for s in offline if s["parent"] is None}[runs[-1]["name"]]
    assert (runs[-1]["times"], runs[-1]["events"]) == (last["times"], last["events"])


def test_a_runtime_that_operated_on_a_run_does_not_follow_it_after(
    tmp_path: Path, receiver: _Receiver, sent: TracerProvider
) -> None:
    """An operation is a session of one commit: the runtime that rolled a run back does not
    hold it (nor its ``run`` span) open, so when another runtime has driven it on, a later
    edit through the first sends none of that one's spans again."""
    db = str(tmp_path / "s.db")
    stop = [True]
    loop = _redo_loop(stop)
    with lw.Runtime(db, tracer_provider=sent) as rt:
        r = rt.run_sync(loop, TASK)
    with lw.Runtime(db, tracer_provider=sent) as person:
        person.rollback(r.run_id, 2, by="bob", loop=loop)
        stop[0] = False
        with lw.Runtime(db, tracer_provider=sent) as rt:
            assert rt.resume_sync(r.run_id, loop).stop_reason == "budget_cycles"
        assert person.edit(r.run_id, "doc/body", "Edited.", by="bob").status == "pending"
        held = dict(person._live._runs)
        offline = _offline(otlp_trace(person.store, r.run_id))
    assert sent.force_flush()
    live = list(receiver.spans)
    assert _below_the_run(live) == _below_the_run(offline)
    runs = [s for s in live if s["parent"] is None]
    assert [s["attributes"]["loopwright.status"] for s in runs] == [
        "escalated",
        "pending",
        "stopped",
        "pending",
    ]
    assert not held  # the edit's session ended with its commit


def test_a_cancel_of_a_parked_run_through_another_runtime_sends_no_span_twice(
    tmp_path: Path, receiver: _Receiver, sent: TracerProvider
) -> None:
    """A cancel commits through the runtime's tracer too, with no ``resumed`` of its own."""
    db = str(tmp_path / "s.db")
    loop = _paying_loop(fail_first=True)
    with lw.Runtime(db, tracer_provider=sent) as rt:
        parked = rt.run_sync(loop, TASK)
    assert parked.status == "awaiting_approval"
    with lw.Runtime(db, tracer_provider=sent) as rt:
        assert rt.cancel(parked.run_id, by="carol", loop=loop).status == "cancelled"
        offline = _offline(otlp_trace(rt.store, parked.run_id))
    assert sent.force_flush()
    live = list(receiver.spans)
    # The spans the parking session sent complete are not sent again; the cycle the cancel
    # closes is sent complete once, and so is its approval span: the request is closed in the
    # cancel's own commit, which the tracer sees.
    got = Counter(n for n, *_ in _below_the_run(live))
    assert got == {
        "cycle 1": 1,
        "invoke_agent pay-doc": 1,
        "verify spelling": 1,
        "verify audit": 1,
        "approval effect": 1,
    }
    assert set(got) <= {n for n, *_ in _below_the_run(offline)}
    [sent_approval] = [s for s in _below_the_run(live) if s[0] == "approval effect"]
    assert sent_approval in _below_the_run(offline)  # as the export has it: closed, cancelled
