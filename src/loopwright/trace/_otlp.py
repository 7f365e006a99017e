"""OpenTelemetry export: a run's span tree as one OTLP/JSON ``ExportTraceServiceRequest``, and
a POST of it to an OTLP/HTTP collector.

IDs are derived from the run id, never drawn at random: the trace id is the first 16 bytes of
``sha256("loopwright/trace/" + run_id)`` and a span id the first 8 bytes of
``sha256("loopwright/span/" + run_id + "/" + span_key)``, so exporting a run twice (or again after
it went on) gives the same ids for the same spans. The JSON follows the OTLP/JSON rules: ids in
hex, times as decimal strings of nanoseconds, enums as integers.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import importlib
import io
import json
import math
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any, Literal
from urllib.parse import urlsplit

from .._errors import ConfigError, LoopwrightError, check_choice
from .._otel_env import register_header_values
from .._redact import redact, redact_text
from .._userinfo import NoRedirect, without_userinfo
from ..store import RunRecord, Store
from ._spans import Span, exported_attributes, is_client_span, iter_spans, run_spans

__all__ = [
    "OTLPExportError",
    "OTLPExportResult",
    "export_otlp",
    "otlp_message",
    "otlp_to_protobuf",
    "otlp_trace",
    "span_id_for",
    "spans_to_otlp",
    "trace_id_for",
    "traces_url",
    "write_otlp",
]

# OTLP enum values (opentelemetry/proto/trace/v1/trace.proto).
_SPAN_KIND_INTERNAL = 1
_SPAN_KIND_CLIENT = 3
_STATUS = {"unset": 0, "ok": 1, "error": 2}
SCOPE = "loopwright.trace"


class OTLPExportError(LoopwrightError):
    """The collector could not be reached, or refused the export."""


@dataclass(frozen=True, slots=True)
class OTLPExportResult:
    """What one export sent and how the collector answered."""

    url: str
    status: int
    spans: int
    body_bytes: int
    rejected_spans: int = 0
    message: str = ""


def trace_id_for(run_id: str) -> str:
    """The run's trace id: 32 hex digits derived from the run id."""
    return _nonzero(hashlib.sha256(f"loopwright/trace/{run_id}".encode()).hexdigest()[:32])


def span_id_for(run_id: str, key: str) -> str:
    """The id of the span ``key`` of the run: 16 hex digits derived from both."""
    return _nonzero(hashlib.sha256(f"loopwright/span/{run_id}/{key}".encode()).hexdigest()[:16])


def _nonzero(h: str) -> str:
    # An all-zero id is invalid in OTLP; sha256 giving one is a curiosity, but be exact.
    return h if int(h, 16) else h[:-1] + "1"


def otlp_trace(store: Store, run_id: str, *, service_name: str = "loopwright") -> dict[str, Any]:
    """The run (id, unique prefix or task key) as an OTLP/JSON ``ExportTraceServiceRequest``."""
    rec, spans = run_spans(store, run_id)
    return spans_to_otlp(rec, spans, service_name=service_name)


def spans_to_otlp(
    run: RunRecord, spans: Sequence[Span], *, service_name: str = "loopwright"
) -> dict[str, Any]:
    """Encode a span tree (``build_spans``) as an OTLP/JSON ``ExportTraceServiceRequest``."""
    tid = trace_id_for(run.run_id)
    return _request(run, [_otlp_span(run, tid, s) for s in spans], service_name)


def write_otlp(store: Store, run_id: str, out: IO[str], *, service_name: str = "loopwright") -> int:
    """Write the run's ``otlp_trace`` document to ``out`` (the same bytes as
    ``json.dumps(doc, separators=(",", ":"))``, then a newline), a cycle's spans at a time
    (``iter_spans``): neither the document nor the tree is built, so a long run's export holds
    a window of its log (504 MB at 20,000 cycles when the tree was built first). The run span
    comes first in the document but is known last: the others wait in a temporary file.
    Returns how many spans were written."""
    rec = store.get_run(run_id)
    tid = trace_id_for(rec.run_id)
    # The envelope with no spans, cut where they go: `"spans":[]` cannot occur inside a JSON
    # string (its quotes would be escaped), so the cut is the list's place.
    head, tail = _dumps(_request(rec, [], service_name)).split('"spans":[]')
    n = 0
    rest = new_spool()
    try:
        for s in iter_spans(store, rec):
            if s.parent is None:  # the run span, yielded last
                spooled(rest.seek, 0)  # (flushes what is buffered: a full disk shows here)
                out.write(head + '"spans":[' + _dumps(_otlp_span(rec, tid, s)))
                shutil.copyfileobj(rest, out)
            else:
                spooled(rest.write, "," + _dumps(_otlp_span(rec, tid, s)))
            n += 1
    finally:
        # A full disk fails the close's flush of what it could not write again: the error
        # raised already says so (and a close raising here would replace it).
        with contextlib.suppress(OSError):
            rest.close()
    out.write("]" + tail + "\n")
    return n


def new_spool() -> IO[str]:
    """Where the spans before the run span wait: a temporary file, or memory where no
    temporary directory is usable (a read-only root: no writable ``TMPDIR``, /tmp, /var/tmp
    or working directory): their JSON, a fraction of the tree held before it streamed."""
    try:
        return tempfile.TemporaryFile("w+", encoding="utf-8")
    except OSError:
        return io.StringIO()


def spooled(op: Callable[[Any], Any], arg: Any) -> None:
    # A temporary directory that fills up is the machine's, not an internal error: say which.
    try:
        op(arg)
    except OSError as exc:
        raise LoopwrightError(
            f"cannot keep the trace's spans in the temporary directory "
            f"{tempfile.gettempdir()}: {exc.strerror or exc}; set TMPDIR to one with room"
        ) from None


def _dumps(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))


def _request(run: RunRecord, spans: list[dict[str, Any]], service_name: str) -> dict[str, Any]:
    from .. import __version__

    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": _attributes(
                        {
                            "service.name": service_name,
                            "service.version": __version__,
                            "loopwright.project": run.project,
                        }
                    )
                },
                "scopeSpans": [{"scope": {"name": SCOPE, "version": __version__}, "spans": spans}],
            }
        ]
    }


def _otlp_span(run: RunRecord, tid: str, s: Span) -> dict[str, Any]:
    # A trace leaves the engine: secrets masked (invariant 9), as in the JSON-lines trace. The
    # span's attributes and its events' in one pass: ``redact`` masks a list's items as it
    # masks each alone, and most spans are clean, which one scan of their text tells.
    attrs, *events = redact([dict(exported_attributes(s)), *(dict(e.attributes) for e in s.events)])
    span: dict[str, Any] = {
        "traceId": tid,
        "spanId": span_id_for(run.run_id, s.key),
        "name": s.name,
        "kind": _SPAN_KIND_CLIENT if is_client_span(s) else _SPAN_KIND_INTERNAL,
        "startTimeUnixNano": str(nanos(s.start)),
        "endTimeUnixNano": str(nanos(s.end)),
        "attributes": _encoded(attrs),
        "events": [
            {
                "timeUnixNano": str(nanos(e.ts)),
                "name": e.name,
                "attributes": _encoded(masked),
            }
            for e, masked in zip(s.events, events, strict=True)
        ],
        "status": {"code": _STATUS[s.status]}
        | ({"message": redact_text(s.status_message)} if s.status_message else {}),
    }
    if s.parent is not None:
        span["parentSpanId"] = span_id_for(run.run_id, s.parent)
    elif run.forked_from:
        # A fork is a trace of its own, linked to its origin's run span (the ids are
        # derived from run ids, so the link holds whenever either is exported).
        span["links"] = [
            {
                "traceId": trace_id_for(run.forked_from),
                "spanId": span_id_for(run.forked_from, "run"),
                "attributes": _attributes({"loopwright.run.forked_at": run.forked_at}),
            }
        ]
    return span


def nanos(ts: float) -> int:
    """Seconds since the epoch as integer nanoseconds (monotone in ``ts``)."""
    whole = math.floor(ts)
    return whole * 1_000_000_000 + round((ts - whole) * 1e9)


def _attributes(attrs: Mapping[str, Any]) -> list[dict[str, Any]]:
    # A trace leaves the engine: secrets masked (invariant 9), as in the JSON-lines trace.
    return _encoded(redact(dict(attrs)))


def _encoded(masked: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attributes already masked (``redact``) as OTLP ``KeyValue``s, the empty ones left out."""
    return [
        {"key": k, "value": _any_value(v)}
        for k, v in masked.items()
        if v is not None and not (isinstance(v, list) and not v)
    ]


def _any_value(v: Any) -> dict[str, Any]:
    # (the exact types first: most values are text or integers)
    t = type(v)
    if t is str:
        return {"stringValue": v}
    if t is int:
        return {"intValue": str(v)}
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v} if math.isfinite(v) else {"stringValue": str(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, list | tuple):
        return {"arrayValue": {"values": [_any_value(x) for x in v if x is not None]}}
    return {"stringValue": json.dumps(v, sort_keys=True, default=str)}


# --- sending ---------------------------------------------------------------------------------
def traces_url(endpoint: str, *, field: str = "endpoint") -> str:
    """The OTLP/HTTP traces URL for ``endpoint``: a bare ``http(s)://host:port`` (or one
    ending in ``/``) gets ``/v1/traces`` appended; a URL with a path is used as it is.
    ``ConfigError`` (naming ``field``) when it is not an http(s) URL."""
    try:
        parts = urlsplit(endpoint)
        parts.port  # noqa: B018 - raises on a port that is not a number in 0-65535
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        raise ConfigError(f"{endpoint!r} is not a valid URL ({exc})", field=field) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{endpoint!r} is not an http(s) URL (e.g. http://localhost:4318)", field=field
        )
    if parts.path in ("", "/"):
        return endpoint.rstrip("/") + "/v1/traces"
    return endpoint


# An HTTP header's name is a token (RFC 9110 5.1, 5.6.2); its value is Latin-1 text without
# control characters but the tab (5.5). http.client refuses the rest with a ValueError (or a
# UnicodeEncodeError) whose text holds the value: a key typed with a line break in it.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEADER_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


def check_headers(headers: Mapping[str, str], field: str = "headers") -> None:
    """``ConfigError`` naming the header (never its value: it is often a key) that HTTP cannot
    carry: a name that is not a token, a value holding a line break, another control
    character or a character outside Latin-1."""
    for name, value in headers.items():
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            # shown up to the character at fault: what follows may be the value
            # ("Authorization: Bearer …=" split at its "=")
            text = name if isinstance(name, str) else ""
            ok = _HEADER_NAME.match(text)
            at = ok.end() if ok else 0
            bad = repr(text[at]) if at < len(text) else "nothing"
            raise ConfigError(
                f"header name {text[:at]!r} is followed by {bad}: a name holds letters, "
                "digits and !#$%&'*+-.^_`|~ only (NAME=VALUE, not NAME: VALUE)",
                field=field,
            )
        if not isinstance(value, str) or not _HEADER_VALUE.fullmatch(value):
            raise ConfigError(
                f"the value of {name} holds a line break, another control character or a "
                "character outside Latin-1, which a header cannot carry (value not shown)",
                field=field,
            )


def export_otlp(
    store: Store,
    run_id: str,
    endpoint: str,
    *,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
    encoding: Literal["json", "protobuf"] = "json",
    service_name: str = "loopwright",
) -> OTLPExportResult:
    """POST the run's trace to an OTLP/HTTP collector (``endpoint`` as in ``traces_url``).

    ``encoding="json"`` needs nothing beyond the standard library; ``"protobuf"`` needs the
    ``otel`` extra (``opentelemetry-proto``). Raises ``OTLPExportError`` when the collector
    cannot be reached or answers with an error status, ``ConfigError`` for a bad endpoint.
    """
    check_choice(encoding, ("json", "protobuf"), "encoding")
    check_headers(headers or {})
    register_header_values(headers or {})  # a collector echoing a key given as a header
    url, auth = without_userinfo(traces_url(endpoint))
    sent = {**auth, **(headers or {})}  # an Authorization header given wins
    doc = otlp_trace(store, run_id, service_name=service_name)
    n = sum(len(ss["spans"]) for rs in doc["resourceSpans"] for ss in rs["scopeSpans"])
    if encoding == "json":
        body = json.dumps(doc, separators=(",", ":")).encode()
        ctype = "application/json"
    else:
        body = otlp_to_protobuf(doc)
        ctype = "application/x-protobuf"
    req = urllib.request.Request(
        url, data=body, method="POST", headers={**sent, "Content-Type": ctype}
    )
    try:
        with _OPENER.open(req, timeout=timeout_s) as resp:
            status = int(resp.status)
            answer = resp.read()
            rtype = resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        # (masked: a collector may echo the credentials it refused; ``without_userinfo``
        # registered the URL's)
        detail = redact_text(exc.read()[:300].decode(errors="replace").strip())
        raise OTLPExportError(
            f"the collector at {url} answered HTTP {exc.code}" + (f": {detail}" if detail else "")
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise OTLPExportError(f"cannot reach the collector at {url}: {reason}") from None
    except http.client.HTTPException as exc:  # a bad status line, a body cut short: no OSError
        raise OTLPExportError(
            f"the collector at {url} answered with something that is not HTTP: "
            f"{type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    rejected, message = _partial_success(answer, rtype)
    return OTLPExportResult(url, status, n, len(body), rejected, message)


# a collector answering with a redirect is an error: no span was delivered
_OPENER = urllib.request.build_opener(NoRedirect)


def _partial_success(answer: bytes, content_type: str) -> tuple[int, str]:
    """Rejected spans reported in a JSON ``ExportTraceServiceResponse`` (0 when none or not
    JSON)."""
    if not answer or "json" not in content_type:
        return 0, ""
    try:
        part = json.loads(answer).get("partialSuccess") or {}
        # the collector's JSON is its own: a count that is no number, a part that is no object
        # or a body nested past the stack says nothing usable, as a body that is not JSON
        return int(part.get("rejectedSpans") or 0), str(part.get("errorMessage") or "")
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return 0, ""


def otlp_to_protobuf(doc: Mapping[str, Any]) -> bytes:
    """Encode an OTLP/JSON document as the binary protobuf ``ExportTraceServiceRequest``
    (needs ``opentelemetry-proto``: ``pip install 'loopwright[otel]'``)."""
    msg = otlp_message(doc)
    data: bytes = msg.SerializeToString()
    return data


def otlp_message(doc: Mapping[str, Any]) -> Any:
    """The OTLP/JSON document parsed into the official protobuf class (ids, which OTLP/JSON
    writes in hex, converted to the base64 that protobuf's JSON mapping expects)."""
    try:
        # Imported by name: protobuf ships no type stubs, and this is an optional extra.
        json_format = importlib.import_module("google.protobuf.json_format")
        service = importlib.import_module(
            "opentelemetry.proto.collector.trace.v1.trace_service_pb2"
        )
    except ImportError as exc:
        raise ConfigError(
            f"protobuf encoding needs the otel extra: pip install 'loopwright[otel]' ({exc})",
            field="encoding",
        ) from None
    converted = json.loads(json.dumps(doc))
    for rs in converted.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for span in ss.get("spans", ()):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
    return json_format.ParseDict(converted, service.ExportTraceServiceRequest())
