"""Traces and exports of real runs over a real SQLite store: the span tree against what the
store holds, OTLP through the official protobuf classes and to a collector on loopback, eval
cases (replayed) and preference pairs."""

from __future__ import annotations

import base64
import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from doc_loop import TARGET, TASK, fields
from support.ports import refused_port

import loopwright as lw
from loopwright.store import Store
from loopwright.trace import (
    EVAL_CASE_FORMAT,
    PAIR_FORMAT,
    OTLPExportError,
    Span,
    case_actor,
    eval_cases,
    export_otlp,
    otlp_trace,
    preference_pairs,
    run_spans,
    span_id_for,
    trace_id_for,
)

FAST = lw.RetryPolicy(attempts=3, backoff_s=0.01, max_backoff_s=0.02)
POLICY = lw.ApprovalPolicy(
    (
        lw.PolicyRule(kind="spend", action="require", above=100, name="big"),
        lw.PolicyRule(kind="spend", action="allow", name="small"),
    )
)
HELD_TASK: dict[str, Any] = {**TASK, "held_out": {"secret": 42}}
WRONG = lw.Proposal.edit("doc", {"a": 1, "b": 5, "c": 3}, usage=lw.Usage(0.01, 100))
FIX_B = lw.Proposal.edit("doc", {"b": 2}, usage=lw.Usage(0.02, 200))
FULL = lw.Proposal.edit("doc", TARGET, usage=lw.Usage(0.03, 300))


@lw.effect("spend", name="pay")
def pay(invoice: str, amount: float, key: str) -> dict[str, Any]:
    return {"ref": key, "amount": amount}


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    """A held-out reviewer with a cost of its own."""
    ok = state.artifacts["doc"].values() == TARGET
    return lw.Verdict(passed=ok, score=1.0 if ok else 0.5, usage=lw.Usage(0.001, 5))


def paying(p: lw.Proposal, amount: float) -> lw.Proposal:
    return lw.Proposal(
        edits=p.edits, effects=(pay.call(invoice="I-1", amount=amount),), usage=p.usage
    )


def script(*steps: lw.Proposal, flaky: bool = False) -> Callable[[lw.Context], lw.Proposal]:
    """Cycle n proposes steps[n-1] (the last repeats); ``flaky``: the first call fails."""
    calls = itertools.count()

    def actor(ctx: lw.Context) -> lw.Proposal:
        if flaky and next(calls) == 0:
            raise lw.TransientError("flaky once")
        return steps[min(ctx.cycle, len(steps)) - 1]

    return actor


def make_loop(actor: Callable[[lw.Context], lw.Proposal]) -> lw.Loop:
    return lw.Loop(
        name="tr",
        project="traces",
        actor=actor,
        verifiers=[fields, lw.Check(fn=audit, held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5), no_progress=lw.NoProgress(cycles=2)),
        effects=[pay],
        approvals=POLICY,
        retry=FAST,
    )


@dataclass
class World:
    path: Path
    runs: dict[str, str]  # name -> run id

    def store(self) -> Store:
        return lw.store.open_store(str(self.path))


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    path = tmp_path_factory.mktemp("trace") / "store.db"
    runs: dict[str, str] = {}
    with lw.Runtime(str(path)) as rt:
        runs["ok"] = rt.run_sync(
            make_loop(script(WRONG, paying(FIX_B, 50), flaky=True)), HELD_TASK, task_key="ok"
        ).run_id
        runs["good"] = rt.run_sync(make_loop(script(FULL)), HELD_TASK, task_key="good").run_id
        runs["stuck"] = rt.run_sync(make_loop(script(WRONG)), HELD_TASK, task_key="stuck").run_id
        for name, decide in (("appr", rt.approve), ("deny", rt.deny)):
            loop = make_loop(script(paying(FULL, 500)))
            r = rt.run_sync(loop, HELD_TASK, task_key=name)
            assert r.status == "awaiting_approval"
            decide(r.run_id, by="alice" if name == "appr" else "bob", note=name)
            runs[name] = rt.resume_sync(r.run_id, loop).run_id
        parked = rt.run_sync(make_loop(script(paying(FULL, 900))), HELD_TASK, task_key="parked")
        runs["parked"] = parked.run_id
    yield World(path, runs)


def test_the_world_is_what_the_tests_assume(world: World) -> None:
    with world.store() as st:
        got = {k: (st.get_run(v).status, st.get_run(v).stop_reason) for k, v in world.runs.items()}
    assert got == {
        "ok": ("accepted", "success"),
        "good": ("accepted", "success"),
        "stuck": ("stopped", "no_progress"),
        "appr": ("accepted", "success"),
        "deny": ("escalated", "escalated"),
        "parked": ("awaiting_approval", None),
    }


# --- the span tree against the store ---------------------------------------------------------
def _children(spans: list[Span], key: str, kind: str) -> list[Span]:
    return [s for s in spans if s.parent == key and s.kind == kind]


@pytest.mark.parametrize("name", ["ok", "good", "stuck", "appr", "deny", "parked"])
def test_span_tree_matches_the_store(world: World, name: str) -> None:
    with world.store() as st:
        rec, spans = run_spans(st, world.runs[name])
        events = st.events(rec.run_id)
        effects = st.journal(rec.run_id, kind="effect")
        approvals = st.approvals(run_id=rec.run_id)
    keys = {s.key: s for s in spans}
    assert len(keys) == len(spans)
    # the tree: one root, each child inside its parent, calls of a cycle one after the other
    assert [s.key for s in spans if s.parent is None] == ["run"]
    for s in spans:
        assert s.start <= s.end
        if s.parent is not None:
            p = keys[s.parent]
            assert p.start <= s.start and s.end <= p.end
    cycles = [s for s in spans if s.kind == "cycle"]
    assert len(cycles) == sum(1 for e in events if e.kind == "cycle_started")
    assert all(a.end <= b.start for a, b in itertools.pairwise(cycles))
    for c in cycles:
        calls = [s for s in spans if s.parent == c.key and s.kind in ("actor", "verifier")]
        assert all(a.end <= b.start for a, b in itertools.pairwise(calls))
        n = c.attributes["loopwright.cycle"]
        verdicts = [e.data["verifier"] for e in events if e.kind == "verdict" and e.cycle == n]
        assert [s.attributes["loopwright.verifier.name"] for s in calls[1:]] == verdicts
    # effects and approvals: one span each, as the journal and the approvals table hold them
    effect_spans = [s for s in spans if s.kind == "effect"]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in effect_spans) == sorted(
        e.key.removeprefix("effect:") for e in effects
    )
    waits = {s.attributes["loopwright.approval.id"]: s for s in spans if s.kind == "approval"}
    assert set(waits) == {a.approval_id for a in approvals}
    for a in approvals:
        assert waits[a.approval_id].attributes["loopwright.approval.status"] == a.status
        assert waits[a.approval_id].start == a.requested_at
    # every event of the store is on exactly one span
    seqs = sorted(
        e.attributes["loopwright.event.seq"]
        for s in spans
        for e in s.events
        if "loopwright.event.seq" in e.attributes
    )
    assert seqs == list(range(1, len(events) + 1))
    # spend: the calls add up to what the run was charged
    cost = sum(
        s.attributes.get("loopwright.cost_usd", 0.0)
        for s in spans
        if s.kind in ("actor", "verifier", "effect")
    )
    tokens = sum(
        s.attributes.get("loopwright.usage.total_tokens", 0)
        for s in spans
        if s.kind in ("actor", "verifier", "effect")
    )
    assert cost == pytest.approx(rec.cost_usd)
    assert tokens == rec.tokens
    root = keys["run"]
    assert root.attributes.get("loopwright.stop_reason") == rec.stop_reason
    assert root.status == {"accepted": "ok", "escalated": "error"}.get(rec.status, "unset")
    assert root.incomplete == (rec.ended_at is None)


def test_retry_and_approval_details(world: World) -> None:
    with world.store() as st:
        _, ok = run_spans(st, world.runs["ok"])
        _, deny = run_spans(st, world.runs["deny"])
    s = {x.key: x for x in ok}
    actor = s["cycle/1#1/actor"]
    assert actor.attributes["loopwright.attempts"] == 2
    assert [e.name for e in actor.events] == ["retry", "proposal"]
    assert s["cycle/1#1"].start == s["run"].events[1].ts  # started right after "started"
    [effect] = _children(ok, "cycle/2#1", "effect")
    assert effect.attributes["gen_ai.tool.name"] == "pay"
    assert effect.status == "ok"
    d = {x.key: x for x in deny}
    [wait] = _children(deny, "cycle/1#1", "approval")
    assert wait.status == "error" and wait.attributes["loopwright.approval.decided_by"] == "bob"
    assert d["cycle/1#1"].status == "error"
    assert "denied" in d["run"].status_message


# --- OTLP ------------------------------------------------------------------------------------
def _proto_parse(doc: dict[str, Any]) -> Any:
    """``json_format.Parse`` of the document into ``ExportTraceServiceRequest``; OTLP/JSON
    writes ids in hex where protobuf's JSON mapping expects base64, so they are converted."""
    pytest.importorskip("opentelemetry.proto")
    import base64

    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    conv = json.loads(json.dumps(doc))
    for span in conv["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        for obj in (span, *span.get("links", ())):
            for k in ("traceId", "spanId", "parentSpanId"):
                if k in obj:
                    obj[k] = base64.b64encode(bytes.fromhex(obj[k])).decode()
    return json_format.Parse(json.dumps(conv), ExportTraceServiceRequest())


def test_otlp_json_round_trips_through_the_official_protobuf_classes(world: World) -> None:
    with world.store() as st:
        doc = otlp_trace(st, world.runs["appr"])
        rec, spans = run_spans(st, world.runs["appr"])
    msg = _proto_parse(doc)
    [rs] = msg.resource_spans
    [ss] = rs.scope_spans
    assert ss.scope.name == "loopwright.trace"
    assert len(ss.spans) == len(spans)
    ids = {sp.span_id for sp in ss.spans}
    for sp, ours in zip(ss.spans, spans, strict=True):
        assert sp.trace_id == bytes.fromhex(trace_id_for(rec.run_id))
        assert sp.span_id == bytes.fromhex(span_id_for(rec.run_id, ours.key))
        assert sp.name == ours.name
        assert sp.start_time_unix_nano <= sp.end_time_unix_nano
        if ours.parent is None:
            assert sp.parent_span_id == b""
        else:
            assert sp.parent_span_id in ids
    by_name = {sp.name: sp for sp in ss.spans}
    actor = by_name["invoke_agent tr"]
    attrs = {a.key: a.value for a in actor.attributes}
    assert attrs["gen_ai.operation.name"].string_value == "invoke_agent"
    assert attrs["loopwright.usage.total_tokens"].int_value == 300
    wait = by_name["approval effect"]
    assert wait.status.code == 1  # approved
    assert {a.key: a.value for a in by_name["run tr"].attributes}[
        "loopwright.stop_reason"
    ].string_value == "success"
    # deterministic: a second export is identical
    with world.store() as st:
        assert otlp_trace(st, world.runs["appr"]) == doc


class _Collector:
    """An OTLP/HTTP collector on loopback that records what it is sent."""

    def __init__(self, status: int = 200, answer: bytes | None = None) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        outer = self
        if answer is None:
            answer = b'{"partialSuccess":{}}' if status == 200 else b"overloaded"

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.requests.append((self.path, dict(self.headers), body))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Collector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_export_otlp_posts_the_document_to_a_collector(world: World) -> None:
    with world.store() as st, _Collector() as col:
        res = export_otlp(st, world.runs["ok"], col.url, headers={"Authorization": "Bearer t"})
        doc = otlp_trace(st, world.runs["ok"])
    [(path, headers, body)] = col.requests
    assert path == "/v1/traces"
    assert headers["Content-Type"] == "application/json"
    assert headers["Authorization"] == "Bearer t"
    assert json.loads(body) == doc
    assert (res.status, res.spans, res.body_bytes, res.rejected_spans) == (
        200,
        len(doc["resourceSpans"][0]["scopeSpans"][0]["spans"]),
        len(body),
        0,
    )


def test_export_otlp_sends_a_urls_credentials_as_basic_auth(world: World) -> None:
    """``http://user:password@collector``: urllib sends no credentials from a URL and looked
    the whole ``user:password@host`` up as the host, so such a collector was never reached
    ("Name or service not known"). They go as the Basic header; the URL reported has none."""
    with world.store() as st, _Collector() as col:
        url = col.url.replace("http://", "http://otel%40ops:pa%3Ass@")
        res = export_otlp(st, world.runs["ok"], url)
        export_otlp(st, world.runs["ok"], url, headers={"authorization": "Bearer given"})
    [(_, first, _), (_, second, _)] = col.requests
    assert first["Authorization"] == "Basic " + base64.b64encode(b"otel@ops:pa:ss").decode()
    assert second["Authorization"] == "Bearer given"  # a header given wins over the URL's
    assert res.url == col.url + "/v1/traces"


class _Redirector:
    """A collector that answers every POST with a redirect to ``to``, and records the
    requests it is sent (a GET too: where a redirect followed would land)."""

    def __init__(self, to: str = "") -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.requests.append((self.command, self.path, dict(self.headers)))
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(302 if to else 200)
                if to:
                    self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> _Redirector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def test_export_otlp_follows_no_redirect_and_sends_no_credentials_on(world: World) -> None:
    """A collector answering the POST with a redirect: urllib followed it as a GET with no
    body, and with the Authorization header made of the URL's ``user:password@`` (or given),
    to whatever host the redirect named; the export then reported the spans sent. The
    redirect is an error now, and nothing goes to the other host."""
    elsewhere = _Redirector()
    col = _Redirector(to=elsewhere.url + "/steal")
    with world.store() as st, elsewhere, col:
        url = col.url.replace("http://", "http://otel:s3cret-pass@")
        with pytest.raises(OTLPExportError, match="HTTP 302") as err:
            export_otlp(st, world.runs["ok"], url)
        with pytest.raises(OTLPExportError, match="HTTP 302"):
            export_otlp(st, world.runs["ok"], col.url, headers={"Authorization": "Bearer t"})
    assert elsewhere.requests == []
    assert [m for m, _, _ in col.requests] == ["POST", "POST"]
    assert "s3cret" not in str(err.value)


def test_export_otlp_refuses_a_header_http_cannot_carry(world: World) -> None:
    """A value with a line break was http.client's ValueError, its text the value (a key);
    now a ConfigError naming the header, not its value, before anything is sent."""
    for headers, said in (
        ({"X-Key": "tok3nSECRET\r\nX-Evil: 1"}, "the value of X-Key holds a line break"),
        ({"X-Key": "tok3nSECRET\u20ac"}, "outside Latin-1"),
        ({"X-Key:tok3nSECRET": "v"}, "header name 'X-Key' is followed by ':'"),
    ):
        with world.store() as st, refused_port() as port, pytest.raises(lw.ConfigError) as info:
            export_otlp(st, world.runs["good"], f"http://127.0.0.1:{port}", headers=headers)
        assert info.value.field == "headers" and said in str(info.value)
        assert "tok3nSECRET" not in str(info.value)


def test_export_otlp_protobuf_body(world: World) -> None:
    pytest.importorskip("opentelemetry.proto")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    with world.store() as st, _Collector() as col:
        res = export_otlp(st, world.runs["deny"], col.url + "/custom/path", encoding="protobuf")
        _, spans = run_spans(st, world.runs["deny"])
    [(path, headers, body)] = col.requests
    assert path == "/custom/path"
    assert headers["Content-Type"] == "application/x-protobuf"
    msg = ExportTraceServiceRequest.FromString(body)
    out = msg.resource_spans[0].scope_spans[0].spans
    assert [sp.name for sp in out] == [s.name for s in spans]
    assert res.spans == len(spans)
    assert {sp.name: sp.status.code for sp in out}["run tr"] == 2  # ERROR: escalated


def test_export_otlp_reports_a_refusal_and_an_unreachable_collector(world: World) -> None:
    with world.store() as st:
        with _Collector(status=503) as col, pytest.raises(OTLPExportError, match="HTTP 503"):
            export_otlp(st, world.runs["ok"], col.url)
        # a port that refuses every connection (a stopped collector's could be taken meanwhile)
        with refused_port() as port, pytest.raises(OTLPExportError, match="cannot reach"):
            export_otlp(st, world.runs["ok"], f"http://127.0.0.1:{port}", timeout_s=2)
        with pytest.raises(lw.ConfigError, match="not an http"):
            export_otlp(st, world.runs["ok"], "localhost:4318")
        with pytest.raises(lw.RunNotFoundError):
            export_otlp(st, "no-such-run", "http://127.0.0.1:9")


def _read_request(conn: socket.socket) -> bytes:
    """One whole HTTP request from ``conn`` (its headers, then Content-Length bytes of body),
    so that the answer never comes while the client is still sending."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536) or b"\r\n\r\n"
    head, _, body = data.partition(b"\r\n\r\n")
    size = next(
        (int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:])
         if k.strip().lower() == b"content-length"),
        0,
    )  # fmt: skip
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            break
        body += more
    return head + b"\r\n\r\n" + body


ODD_ANSWERS = {
    "a count that is no number": b'{"partialSuccess": {"rejectedSpans": "many"}}',
    "a count that is a list": b'{"partialSuccess": {"rejectedSpans": [1]}}',
    "a count past a float": b'{"partialSuccess": {"rejectedSpans": 1e999}}',
    "a part that is text": b'{"partialSuccess": "none"}',
    "nested past the stack": b'{"partialSuccess": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
}


@pytest.mark.parametrize("answer", ODD_ANSWERS.values(), ids=ODD_ANSWERS.keys())
def test_a_collectors_odd_answer_counts_no_rejected_spans(world: World, answer: bytes) -> None:
    """A 200 whose JSON is not an ``ExportTraceServiceResponse`` raised ValueError, TypeError,
    OverflowError, AttributeError or RecursionError from ``export_otlp`` after the spans were
    delivered; it says nothing usable, as a body that is not JSON: none rejected."""
    with world.store() as st, _Collector(answer=answer) as col:
        res = export_otlp(st, world.runs["ok"], col.url)
    assert len(col.requests) == 1 and (res.status, res.rejected_spans) == (200, 0)


def test_a_collector_answering_something_not_http_is_an_export_error(world: World) -> None:
    """A bad status line (http.client's BadStatusLine, no OSError) escaped ``export_otlp`` as
    itself: `loopwright trace --send` ended in a traceback, not in one line."""
    listening = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        conn, _ = listening.accept()
        with conn:
            _read_request(conn)
            conn.sendall(b"HELLO\r\n\r\n")

    server = threading.Thread(target=answer, daemon=True)
    server.start()
    try:
        with world.store() as st, pytest.raises(OTLPExportError, match="not HTTP"):
            export_otlp(st, world.runs["ok"], f"http://127.0.0.1:{listening.getsockname()[1]}")
    finally:
        server.join(timeout=30)
        listening.close()


def test_a_forks_trace_names_and_links_its_origin(tmp_path: Path) -> None:
    """A fork's OTLP trace is its own, its run span carrying the lineage (the run and cycle it
    was forked from) and a span link to its origin's run span; a run that is no fork has
    neither."""
    loop = make_loop(script(WRONG, FIX_B, FULL))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        origin = rt.run_sync(loop, TASK, task_key="origin")
        fork = rt.fork(origin.run_id, 1)
        rt.resume_sync(fork.run_id, loop)
        docs = {r: otlp_trace(rt.store, r) for r in (origin.run_id, fork.run_id)}
    roots = {}
    for run, doc in docs.items():
        [root] = [
            sp
            for sp in _proto_parse(doc).resource_spans[0].scope_spans[0].spans
            if not sp.parent_span_id
        ]
        roots[run] = root
    attrs = {a.key: a.value for a in roots[fork.run_id].attributes}
    assert attrs["loopwright.run.forked_from"].string_value == origin.run_id
    assert attrs["loopwright.run.forked_at"].int_value == 1
    [link] = roots[fork.run_id].links
    assert link.trace_id == roots[origin.run_id].trace_id != roots[fork.run_id].trace_id
    assert link.span_id == roots[origin.run_id].span_id
    assert {a.key: a.value.int_value for a in link.attributes} == {"loopwright.run.forked_at": 1}
    mine = {a.key for a in roots[origin.run_id].attributes}
    assert "loopwright.run.forked_from" not in mine and not roots[origin.run_id].links


def test_otlp_json_is_written_a_span_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``trace --format otlp-json`` writes the same bytes as the document, without building it:
    it held the document and its JSON text at once (12x the output at 200 cycles, 134 MB at
    2,000); now about the spans alone. Allocation is measured, not time or RSS."""
    import tracemalloc

    from loopwright.cli import main

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"a": ctx.cycle}, usage=lw.Usage(0.0001, 1))

    def judge(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    n = 200
    loop = lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=judge)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=n), no_progress=lw.NoProgress(cycles=n)),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        run_id = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="long").run_id
        doc = otlp_trace(rt.store, run_id)
    out = tmp_path / "t.json"
    args = ["trace", "long", "--format", "otlp-json", "--out", str(out), "--store", db]
    assert main(args) == 0  # first: whatever the command imports is loaded before measuring
    tracemalloc.start()
    try:
        assert main(args) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = out.read_text(encoding="utf-8")
    assert text == json.dumps(doc, separators=(",", ":")) + "\n"
    assert f"wrote {len(doc['resourceSpans'][0]['scopeSpans'][0]['spans'])} span(s)" in " ".join(
        capsys.readouterr().err.split()
    )
    assert peak < 7 * len(text), (peak, len(text))


# --- eval cases ------------------------------------------------------------------------------
def test_eval_cases_hold_what_the_store_holds(world: World) -> None:
    with world.store() as st:
        cases = {c["task_key"]: c for c in eval_cases(st)}
        records = {
            k: [c.record for c in st.checkpoints(v) if c.record and "proposal" in c.record]
            for k, v in world.runs.items()
        }
    assert set(cases) == {"ok", "good", "stuck", "appr", "deny"}  # ended runs only
    for name, case in cases.items():
        json.dumps(case)  # valid JSON as it is
        assert case["format"] == EVAL_CASE_FORMAT
        assert case["held_out_keys"] == ["held_out"]
        assert case["task"]["held_out"] == {"secret": 42}
        assert case["initial_artifacts"] == TASK["artifacts"]
        concluded = [c for c in case["cycles"] if c["concluded"]]
        assert len(concluded) == len(records[name])
        for c, r in zip(concluded, records[name], strict=True):
            assert (c["cycle"], c["proposal"], c["decision"]) == (
                r["cycle"],
                r["proposal"],
                r["decision"],
            )
            assert set(c["visible"]) == {"fields"} and set(c["held_out"]) == {"audit"}
    assert cases["good"]["accepted_artifacts"] == {"doc": TARGET}
    assert cases["ok"]["stop_reason"] == "success"
    assert [c["decision"] for c in cases["stuck"]["cycles"]] == ["revise"] * 3
    assert cases["stuck"]["escalation"]["stop_reason"] == "no_progress"
    [approved] = cases["appr"]["human_decisions"]
    assert (approved["status"], approved["by"], approved["note"]) == ("approved", "alice", "appr")
    assert approved["at"] is not None
    # a denied cycle never concluded: its proposal and verdicts are still in the case
    [denied] = cases["deny"]["human_decisions"]
    assert (denied["status"], denied["by"]) == ("denied", "bob")
    [parked] = cases["deny"]["cycles"]
    assert (parked["concluded"], parked["decision"]) == (False, "parked")
    assert parked["proposal"]["effects"][0]["args"]["amount"] == 500
    assert set(parked["visible"]) == {"fields"} and set(parked["held_out"]) == {"audit"}


def test_eval_case_filters_and_bad_selection(world: World) -> None:
    with world.store() as st:
        assert len(list(eval_cases(st, project="traces"))) == 5
        assert list(eval_cases(st, project="other")) == []
        assert len(list(eval_cases(st, loop_name="tr"))) == 5
        assert [c["run_id"] for c in eval_cases(st, run_ids=["good"])] == [world.runs["good"]]
        with pytest.raises(lw.ConfigError, match="not ended"):
            list(eval_cases(st, run_ids=["parked"]))


@pytest.mark.parametrize("name", ["ok", "stuck", "good"])
def test_an_eval_case_replays_to_the_same_outcome(world: World, name: str, tmp_path: Path) -> None:
    with world.store() as st:
        [case] = eval_cases(st, run_ids=[name])
    with lw.Runtime(str(tmp_path / "replay.db")) as rt:
        r = rt.run_sync(make_loop(case_actor(case)), case["task"], task_key="replay")
        replayed = [c.record for c in rt.store.checkpoints(r.run_id) if c.record]
    assert (r.status, r.stop_reason) == (case["status"], case["stop_reason"])
    assert [(x["cycle"], x["decision"], x["score"]) for x in replayed if "proposal" in x] == [
        (c["cycle"], c["decision"], c["score"]) for c in case["cycles"]
    ]
    assert r.state.accepted_values() == case["accepted_artifacts"]


def _one_a_cycle(target: dict[str, int]) -> Callable[[lw.Context], lw.Proposal]:
    """Fixes the first wrong field each cycle (cycle n's proposal depends only on its state)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        wrong = sorted(f.part for f in ctx.findings)[:1]
        return lw.Proposal.edit(
            "doc", {k: target[k] for k in wrong} or {"a": 1}, usage=lw.Usage(0.01, 10)
        )

    return actor


def _budgeted(act: Callable[[lw.Context], lw.Proposal], budget: lw.Budget) -> lw.Loop:
    """The doc loop under ``budget``, its actor's failed attempts retried at once."""
    return lw.Loop(
        name="tr",
        actor=act,
        verifiers=[fields],
        contract=lw.Contract(budget=budget),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0),
    )


class _Billed(lw.TransientError):
    """A failed attempt the server billed (as a model adapter's malformed reply is)."""

    usage = lw.Usage(0.04, 40)


def test_an_eval_case_replays_the_spend_of_failed_attempts(tmp_path: Path) -> None:
    """Each cycle's first actor attempt fails billed, the retry proposes: the recorded run
    pays for both and stops by its cost budget at cycle 2. Replayed from its case, the run
    spends what it spent and stops there too; it used to charge each proposal's own usage
    only, so the replay started a third cycle, had no proposal for it and escalated."""
    failed: set[int] = set()

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle not in failed:
            failed.add(ctx.cycle)
            raise _Billed("a malformed reply")
        return _one_a_cycle(TARGET)(ctx)

    loop = partial(_budgeted, budget=lw.Budget(max_cycles=9, max_cost_usd=0.12))

    with lw.Runtime(str(tmp_path / "runs.db")) as rt:
        recorded = rt.run_sync(loop(actor), TASK, task_key="billed")
        [case] = eval_cases(rt.store)
    assert (recorded.stop_reason, recorded.cycles) == ("budget_cost", 2)
    assert recorded.spent.cost_usd == pytest.approx(0.10)
    assert [c["usage"]["cost_usd"] for c in case["cycles"]] == pytest.approx([0.05, 0.05])
    with lw.Runtime(str(tmp_path / "replay.db")) as rt:
        r = rt.run_sync(loop(case_actor(case)), case["task"], task_key="replay")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 2)
    assert (r.spent.cost_usd, r.spent.tokens) == pytest.approx(
        (case["spent"]["cost_usd"], case["spent"]["tokens"])
    )


def test_an_eval_case_replays_a_cycle_the_run_ended_inside(tmp_path: Path) -> None:
    """The actor asks for a person in cycle 3, its call billed: the cycle never concludes, so
    the case has no proposal for it. Replayed, cycle 3 escalates with the run's reason and is
    billed what it cost; it used to escalate "no more recorded proposals" for nothing, so the
    replayed run spent less than the recorded one."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 3:
            return lw.Proposal(escalate="the PO is missing", usage=lw.Usage(0.05, 50))
        return _one_a_cycle(TARGET)(ctx)

    loop = partial(_budgeted, budget=lw.Budget(max_cycles=9))

    with lw.Runtime(str(tmp_path / "runs.db")) as rt:
        recorded = rt.run_sync(loop(actor), TASK, task_key="asked")
        [case] = eval_cases(rt.store)
    assert (recorded.stop_reason, recorded.cycles) == ("escalated", 2)
    assert [c["cycle"] for c in case["cycles"]] == [1, 2]
    with lw.Runtime(str(tmp_path / "replay.db")) as rt:
        r = rt.run_sync(loop(case_actor(case)), case["task"], task_key="replay")
    assert (r.status, r.stop_reason, r.cycles) == ("escalated", "escalated", 2)
    assert (r.spent.cost_usd, r.spent.tokens) == pytest.approx((0.07, 70))
    assert (r.spent.cost_usd, r.spent.tokens) == pytest.approx(
        (case["spent"]["cost_usd"], case["spent"]["tokens"])
    )
    assert case["unfinished"] == {
        "cycle": 3,
        "cost_usd": pytest.approx(0.05),
        "tokens": 50,
        "cause": "the PO is missing",
    }
    assert r.packet is not None and recorded.packet is not None
    assert r.packet["cause"] == recorded.packet["cause"]


def test_an_eval_case_of_a_fork_replays_from_its_task(tmp_path: Path) -> None:
    """A fork's case carries the cycles it inherited (its origin's up to the fork point, along
    a fork of a fork too): replayed from ``case["task"]`` under its contract, it ends as the
    fork did, where it used to escalate at its first cycle (no recorded proposal for it)."""
    nine = lw.Loop(
        name="tr",
        project="traces",
        actor=_one_a_cycle(TARGET),
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=9), no_progress=lw.NoProgress(cycles=5)),
    )
    with lw.Runtime(str(tmp_path / "runs.db")) as rt:
        origin = rt.run_sync(nine, TASK, task_key="origin")
        assert (origin.status, origin.cycles) == ("accepted", 3)
        fork = rt.fork(origin.run_id, 1)
        rt.resume_sync(fork.run_id, nine)
        again = rt.fork(fork.run_id, 2)  # a fork of the fork, at one of its own cycles
        rt.resume_sync(again.run_id, nine)
        cases = {c["run_id"]: c for c in eval_cases(rt.store)}
    for run, at, origin_id in ((fork, 1, origin.run_id), (again, 2, fork.run_id)):
        case = cases[run.run_id]
        assert case["forked_from"] == {"run_id": origin_id, "cycle": at}
        assert [c["cycle"] for c in case["inherited_cycles"]] == list(range(1, at + 1))
        assert [c["cycle"] for c in case["cycles"]] == list(range(at + 1, 4))
        replay = lw.Loop(
            name="tr",
            project="traces",
            actor=case_actor(case),
            verifiers=[fields],
            contract=lw.Contract.from_dict(case["contract"]),
        )
        with lw.Runtime(str(tmp_path / f"replay-{at}.db")) as rt:
            r = rt.run_sync(replay, case["task"], task_key="replay")
            replayed = [c.record for c in rt.store.checkpoints(r.run_id) if c.record]
        assert (r.status, r.stop_reason, r.cycles) == (case["status"], case["stop_reason"], 3)
        assert [(x["cycle"], x["decision"], x["score"]) for x in replayed if "proposal" in x] == [
            (c["cycle"], c["decision"], c["score"])
            for c in case["inherited_cycles"] + case["cycles"]
        ]
        assert r.state.accepted_values() == case["accepted_artifacts"]
        assert r.spent.cost_usd == pytest.approx(case["spent"]["cost_usd"])


# --- preference pairs ------------------------------------------------------------------------
def test_preference_pairs(world: World) -> None:
    with world.store() as st:
        pairs = preference_pairs(st)
        state = preference_pairs(st, match="state")
        hindsight = preference_pairs(st, match="hindsight")
        cases = {c["run_id"]: c for c in eval_cases(st)}
    assert pairs == state + hindsight
    assert {p["match"] for p in state} == {"state"} and {p["match"] for p in hindsight} == {
        "hindsight"
    }
    for p in pairs:
        json.dumps(p)
        assert p["format"] == PAIR_FORMAT
        ch, rj = p["chosen"], p["rejected"]
        assert ch["digest"] != rj["digest"]
        assert rj["decision"] in ("revise", "refused")
        assert ch["decision"] == "accepted" or (ch["improved"] and not rj["improved"])
        assert "held_out" not in p["context"]["task"]  # the actor's view
        assert p["context_id"] == rj["context_id"]
        # each side is the store's record of that cycle
        for side in (ch, rj):
            [cyc] = [c for c in cases[side["run_id"]]["cycles"] if c["cycle"] == side["cycle"]]
            assert (cyc["proposal"], cyc["context_id"]) == (side["proposal"], side["context_id"])
    # state pairs: every run's first cycle starts from the initial context, where the full
    # fix (and the approved payment) beat the wrong edit ("stuck" made the same edit as "ok":
    # one pair per two changes); and "stuck" repeated that edit from the very state where
    # "ok" made the repair that was accepted
    got = {
        (p["chosen"]["task_key"], p["rejected"]["task_key"], p["rejected"]["cycle"]) for p in state
    }
    assert got == {("good", "ok", 1), ("appr", "ok", 1), ("ok", "stuck", 2)}
    assert len(state) == 3
    # hindsight: in "ok", the wrong first edit against the repair that got accepted; its net
    # edits, counted from the rejected proposal's context, are the whole fix
    [h] = hindsight
    assert (h["chosen"]["task_key"], h["chosen"]["cycle"], h["rejected"]["cycle"]) == (
        "ok",
        2,
        1,
    )
    net = {e["part"]: e["value"] for e in h["chosen"]["net_edits"] if e["artifact"] == "doc"}
    assert net == TARGET
    assert h["chosen"]["proposal"]["edits"] == [{"artifact": "doc", "part": "b", "value": 2}]


def test_a_run_named_twice_is_exported_once(world: World) -> None:
    """``--run ID --run ID`` (or an id and a prefix of it) exported the run's case twice, in
    silence: an eval set that counted it twice (outside probe, stop 51). Pairs were once."""
    good, stuck = world.runs["good"], world.runs["stuck"]
    with world.store() as st:
        twice = [c["run_id"] for c in eval_cases(st, run_ids=["good", good, good[:10]])]
        assert twice == [good]
        once = preference_pairs(st, run_ids=["ok", "stuck"])
        assert once  # the check below compares something
        assert preference_pairs(st, run_ids=["ok", "stuck", stuck, "ok"]) == once


def test_run_with_a_project_or_loop_filter_is_refused(world: World) -> None:
    """``--run ID --project other`` exported the run whatever its project, the filter dropped
    in silence (outside probe, stop 51): the two together are refused, named for a Python
    caller by the parameters it passed (the CLI's ``--run`` was said to it too); a run not
    ended likewise."""
    with world.store() as st:
        for kw in ({"project": "other"}, {"loop_name": "other"}, {"project": "traces"}):
            for export in (eval_cases, preference_pairs):
                with pytest.raises(lw.ConfigError, match="names the runs itself") as err:
                    list(export(st, run_ids=["good"], **kw))
                assert err.value.field == "run_ids" and "--" not in str(err.value)
        with pytest.raises(lw.ConfigError, match="not ended") as err:
            list(eval_cases(st, run_ids=[world.runs["parked"]]))
        assert err.value.field == "run_ids"


def test_preference_pairs_bad_match(world: World) -> None:
    """The Python API's parameter is ``match`` (the CLI checks its ``--match`` first)."""
    with world.store() as st, pytest.raises(lw.ConfigError, match="match") as err:
        preference_pairs(st, match="nope")  # type: ignore[arg-type]
    assert err.value.field == "match"


def test_model_calls_export_as_genai_client_spans(tmp_path: Path) -> None:
    """A run against the loopback fake OpenAI server: each request is a CLIENT span under the
    call that made it, with the GenAI attributes and cost; the prompt and reply stay in the
    store (the span event carries their sizes, never the text or a secret)."""
    pytest.importorskip("openai")
    from test_model_calls import SECRET, make_model_run

    db, rid = make_model_run(tmp_path)
    with lw.store.open_store(db) as st:
        doc = otlp_trace(st, rid)
    spans = doc["resourceSpans"][0]["scopeSpans"][0]["spans"]
    by_id = {s["spanId"]: s for s in spans}

    def attrs(s: dict[str, Any]) -> dict[str, Any]:
        return {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}

    chats = [s for s in spans if attrs(s).get("gen_ai.operation.name") == "chat"]
    assert [s["name"] for s in chats] == ["chat actor-m", "chat actor-m", "chat rev-m"]
    assert {s["kind"] for s in chats} == {3}  # SPAN_KIND_CLIENT
    failed, good, review = chats
    assert [by_id[s["parentSpanId"]]["name"] for s in chats] == [
        "invoke_agent doc-model",
        "invoke_agent doc-model",
        "verify review",
    ]
    assert failed["status"]["code"] == 2 and attrs(failed)["error.type"] == "503"
    assert int(attrs(failed)["loopwright.attempt"]) == 1
    g = attrs(good)
    assert g["gen_ai.request.model"] == "actor-m" and int(g["loopwright.attempt"]) == 2
    assert (int(g["gen_ai.usage.input_tokens"]), int(g["gen_ai.usage.output_tokens"])) == (
        1000,
        100,
    )
    assert g["loopwright.cost_usd"] == pytest.approx(0.0012)
    assert int(attrs(review)["gen_ai.usage.output_tokens"]) == 30
    # the failed attempt starts before the retried one, both inside the agent span
    assert int(failed["startTimeUnixNano"]) < int(good["startTimeUnixNano"])
    agent = by_id[good["parentSpanId"]]
    assert int(agent["startTimeUnixNano"]) <= int(failed["startTimeUnixNano"])
    assert int(good["endTimeUnixNano"]) <= int(agent["endTimeUnixNano"])
    (ev,) = good["events"]
    keys = {a["key"] for a in ev["attributes"]}
    assert ev["name"] == "model_call" and {"prompt_chars", "reply_chars"} <= keys
    assert not {"prompt", "reply"} & keys
    text = json.dumps(doc)
    assert SECRET not in text and "Helo wrld" not in text


def test_a_collector_echoing_the_urls_password_has_it_masked_in_the_error(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A collector that refuses the credentials and echoes them in its error body: the URL's
    password and the Basic token made of it were not registered secrets (the chat adapter's
    are), so the error printed them."""
    from loopwright import _redact

    _redact.reset()
    password = "otlp-url-pw-4c2d9e"

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got = self.headers.get("Authorization", "")
            token = got.removeprefix("Basic ")
            body = f"refused {got} ({base64.b64decode(token).decode()})".encode()
            self.send_response(401)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://otel:{password}@127.0.0.1:{server.server_address[1]}"
        with world.store() as st, pytest.raises(OTLPExportError) as err:
            export_otlp(st, world.runs["ok"], url)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    text = str(err.value)
    assert "answered HTTP 401: refused" in text, text  # the body is shown, masked
    token = base64.b64encode(f"otel:{password}".encode()).decode()
    assert password not in text and token not in text, text
