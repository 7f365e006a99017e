"""The spans of one cycle: the cycle, its actor and verifier calls laid end to end, the model
calls under them with their costs, its effects (one per idempotency key) and approvals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from .._decide import no_attempt, record_no_attempt
from ..store import Approval, Event, RunRecord
from ._span_model import (
    APPROVAL_KINDS,
    EFFECT_END,
    ERROR_STATUSES,
    MODEL_CALL,
    Occurrence,
    Span,
    evaluation_event,
    span_event,
)


# --- spans of one cycle ----------------------------------------------------------------------
def cycle_spans(
    run: RunRecord, occ: Occurrence, approvals: Sequence[Approval], last_ts: float
) -> list[Span]:
    t0 = occ.started.ts
    items = occ.items
    closing = occ.closed_by
    cycle = Span(
        key=occ.key,
        kind="cycle",
        name=f"cycle {occ.cycle}",
        start=t0,
        end=closing[1].ts if closing else max(ev.ts for _, ev in items),
        parent="run",
        attributes={"loopwright.cycle": occ.cycle, "loopwright.cycle.occurrence": occ.index},
        incomplete=closing is None,
    )
    _cycle_attributes(cycle, occ, closing)

    # Calls, in the order the engine makes them: the actor, then each verifier.
    calls: dict[str, Span] = {}
    durations: dict[str, float] = {}
    failures: dict[str, list[float]] = {}
    gave_up: dict[str, Event] = {}
    models: dict[str, list[tuple[int, Event]]] = {}
    for seq, ev in items:
        scope = _scope_of(ev)
        if scope is None:
            continue
        if scope not in calls:
            calls[scope] = _call_span(run, occ, scope)
        if ev.kind == MODEL_CALL:
            models.setdefault(scope, []).append((seq, ev))
        elif ev.kind in ("proposal", "verdict"):
            durations[scope] = float(ev.data.get("seconds") or 0.0)
        elif ev.kind in ("retry", "gave_up"):
            failures.setdefault(scope, []).append(ev.ts)
            if ev.kind == "gave_up":
                gave_up[scope] = ev
    # The calls ended before the first commit of the cycle (t0), one after the other: lay
    # them out backwards from there with their recorded durations (a call that gave up ends
    # at its last failure; one that failed started before its first failure, and was first
    # tried as soon as the call before it ended: durations cover only the last attempt). A
    # cycle whose first call failed started at the previous commit; nothing starts earlier.
    order = sorted(calls, key=lambda sc: sc != "actor")  # the actor first, then verifiers
    cursor = t0
    for scope in reversed(order):
        span = calls[scope]
        span.end = min(cursor, gave_up[scope].ts) if scope in gave_up else cursor
        span.start = span.end - durations.get(scope, 0.0)
        if scope in failures:
            span.start = min(span.start, failures[scope][0])
        if scope in models:  # its model calls' recorded times are real: it spans them
            starts = [_float(ev.data.get("started_at")) or ev.ts for _, ev in models[scope]]
            ends = [
                t + _float(ev.data.get("seconds"))
                for t, (_, ev) in zip(starts, models[scope], strict=True)
            ]
            span.start = min(span.start, *starts)
            span.end = min(span.end, max(span.start + durations.get(scope, 0.0), *ends))
        cursor = span.start
    # A failed call's start is known only from the model calls it reported, if any.
    guessed = {sc for sc in failures if sc not in models}
    first_failed = bool(order) and order[0] in guessed
    cycle.start = occ.prev_ts if first_failed else max(occ.prev_ts, min(cursor, t0))
    prev_end = cycle.start
    for scope in order:
        span = calls[scope]
        span.start = prev_end if scope in guessed else max(span.start, prev_end)
        span.end = max(span.end, span.start)
        prev_end = span.end
    for scope, span in calls.items():
        if scope in gave_up:
            err = gave_up[scope].data
            span.status = "error"
            span.status_message = str(err.get("error") or "gave up")
            span.attributes["error.type"] = str(err.get("class") or "_OTHER")
        span.attributes["loopwright.attempts"] = len(failures.get(scope, ())) + (
            0 if scope in gave_up else 1
        )
    _call_costs(calls, occ)

    spans = [cycle]
    for scope in order:
        spans.append(calls[scope])
        spans.extend(_model_spans(calls[scope], models.get(scope, ()), occ.cycle))
    effects = effect_spans(cycle, items)
    if occ.record is None and (calls or effects):
        # A cycle the run ended inside (an actor that gave up, a failed effect) has no
        # record: what its calls and effects were billed is its cost.
        c, billed = cycle.attributes, [*calls.values(), *effects]
        c["loopwright.cost_usd"] = sum(
            _float(s.attributes.get("loopwright.cost_usd")) for s in billed
        )
        c["loopwright.usage.total_tokens"] = sum(
            int(_float(s.attributes.get("loopwright.usage.total_tokens"))) for s in billed
        )
    waits = approval_spans(cycle, approvals, items, last_ts)
    spans.extend(sorted([*waits, *effects], key=lambda s: (s.start, s.key)))
    for seq, ev in items:
        scope = _scope_of(ev)
        if ev.kind == MODEL_CALL and scope is not None:
            continue  # on its model span
        if scope is not None:
            target = calls[scope]
            target.events.append(span_event(seq, ev))
            if ev.kind == "verdict":
                target.events.append(evaluation_event(ev))
        elif not claimed(ev, approvals):
            cycle.events.append(span_event(seq, ev))
    return spans


def _cycle_attributes(cycle: Span, occ: Occurrence, closing: tuple[int, Event] | None) -> None:
    rec = occ.record
    a = cycle.attributes
    # judged a person's edit, no actor call (``_decide.no_attempt``): not the cycle of a
    # request denied after an edit beside it, which the actor's attempt began
    scopes = (_scope_of(ev) for _, ev in occ.items)
    if no_attempt(bool(occ.started.data.get("check_only")), scopes) and (
        rec is None or record_no_attempt(rec)
    ):
        a["loopwright.check_only"] = True
    if rec is not None:
        a["loopwright.decision"] = rec.get("decision")
        a["loopwright.score"] = rec.get("score")
        a["loopwright.improved"] = bool(rec.get("improved"))
        a["loopwright.duplicate"] = bool(rec.get("duplicate"))
        a["loopwright.proposal.digest"] = rec.get("digest")
        usage = rec.get("usage") or {}
        _usage_attributes(a, usage)
        if usage.get("seconds") is not None:
            a["loopwright.seconds"] = float(usage["seconds"])
    if closing is not None:
        ev = closing[1]
        if ev.kind == "decision":
            a.setdefault("loopwright.decision", ev.data.get("decision"))
            a["loopwright.best_score"] = ev.data.get("best_score")
        elif ev.kind == "stopped":
            a["loopwright.stop_reason"] = ev.data.get("reason")
            if ev.data.get("status") in ERROR_STATUSES:
                cycle.status = "error"
                cycle.status_message = str(ev.data.get("cause") or ev.data.get("reason"))
        else:
            a["loopwright.decision"] = ev.kind


def _scope_of(ev: Event) -> str | None:
    """Which call span an event belongs to: ``actor``, ``verifier:NAME``, or none."""
    if ev.kind == "proposal":
        return "actor"
    if ev.kind == "verdict":
        return f"verifier:{ev.data.get('verifier')}"
    if ev.kind in ("retry", "gave_up", MODEL_CALL):
        scope = str(ev.data.get("scope") or "")
        if scope == "actor" or scope.startswith("verifier:"):
            return scope
    return None


def _call_span(run: RunRecord, occ: Occurrence, scope: str) -> Span:
    base = f"{occ.key}/"
    if scope == "actor":
        return Span(
            key=base + "actor",
            kind="actor",
            name=f"invoke_agent {run.loop_name}",
            start=0.0,
            end=0.0,
            parent=occ.key,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": run.loop_name,
                "gen_ai.conversation.id": run.run_id,
                "loopwright.cycle": occ.cycle,
            },
        )
    name = scope.split(":", 1)[1]
    return Span(
        key=base + scope,
        kind="verifier",
        name=f"verify {name}",
        start=0.0,
        end=0.0,
        parent=occ.key,
        attributes={
            "gen_ai.conversation.id": run.run_id,
            "gen_ai.evaluation.name": name,
            "loopwright.cycle": occ.cycle,
            "loopwright.verifier.name": name,
        },
    )


def _call_costs(calls: Mapping[str, Span], occ: Occurrence) -> None:
    """What each call reported: the proposal's and verdicts' fields, costs where recorded.
    A call's cost is all it was billed: its failed attempts (``retry``/``gave_up`` events
    carry theirs) and each judgement (a verifier judging again after a person's edit pays
    again; a ``verdict`` event carries its own), so the spans add up to the run's spend."""
    verdicts = occ.verdicts
    billed: dict[str, list[float]] = {}  # scope -> [cost, tokens] of failed attempts, judgements
    judged: set[str] = set()
    for _, ev in occ.items:
        scope = _scope_of(ev)
        d = ev.data
        if scope is not None and ev.kind in ("retry", "gave_up", "verdict"):
            own = d.get("usage")
            if isinstance(own, Mapping):
                b = billed.setdefault(scope, [0.0, 0.0])
                b[0] += _float(own.get("cost_usd"))
                b[1] += _float(own.get("tokens"))
                if ev.kind == "verdict":
                    judged.add(scope)
        if scope is None or ev.kind not in ("proposal", "verdict"):
            continue
        a = calls[scope].attributes
        if ev.kind == "proposal":
            a["loopwright.proposal.kind"] = d.get("kind")
            a["loopwright.proposal.digest"] = d.get("digest")
            a["loopwright.proposal.parts"] = [str(p) for p in d.get("parts") or ()]
            a["loopwright.proposal.effects"] = [str(p) for p in d.get("effects") or ()]
            if d.get("note"):
                a["loopwright.proposal.note"] = str(d["note"])
            _usage_attributes(a, d.get("usage") or {})
        else:
            a["loopwright.verifier.held_out"] = bool(d.get("held_out"))
            a["loopwright.verdict.passed"] = bool(d.get("passed"))
            a["loopwright.verdict.score"] = d.get("score")
            a["loopwright.verdict.findings"] = d.get("findings")
            a["gen_ai.evaluation.score.value"] = d.get("score")
            a["gen_ai.evaluation.score.label"] = "pass" if d.get("passed") else "fail"
            full = verdicts.get(str(d.get("verifier"))) or {}
            if scope not in judged:  # a verdict event of an older store: the record's usage
                _usage_attributes(a, full.get("usage") or {})
            # A model-backed verifier (ChatReviewer) names its model and the call's token
            # split in the evidence: the GenAI attributes of a model call.
            evidence = full.get("evidence") or {}
            if isinstance(evidence.get("model"), str) and evidence["model"]:
                a.setdefault("gen_ai.request.model", evidence["model"])
            _usage_attributes(a, {k: evidence.get(k) for k in ("input_tokens", "output_tokens")})
    for scope, (cost, tokens) in billed.items():
        a = calls[scope].attributes
        a["loopwright.cost_usd"] = _float(a.get("loopwright.cost_usd")) + cost
        a["loopwright.usage.total_tokens"] = int(
            _float(a.get("loopwright.usage.total_tokens")) + tokens
        )


def _float(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _model_spans(call: Span, evs: Iterable[tuple[int, Event]], cycle: int) -> list[Span]:
    """One ``model`` span per reported model call of ``call``, with the GenAI attributes; the
    call span gets the tokens of them all and their model (when they share one) unless it
    already names them (a reviewer's evidence)."""
    out: list[Span] = []
    tokens_in = tokens_out = 0
    names: set[str] = set()
    for i, (seq, ev) in enumerate(evs, 1):
        d = ev.data
        model = str(d.get("model") or "model")
        start = _float(d.get("started_at")) or ev.ts
        a: dict[str, Any] = {
            "gen_ai.operation.name": str(d.get("operation") or "chat"),
            "gen_ai.request.model": model,
            "loopwright.cycle": cycle,
            "loopwright.call.id": ev.id,
            "loopwright.call.scope": str(d.get("scope") or ""),
            "loopwright.attempt": d.get("attempt"),
            "loopwright.call.outcome": d.get("outcome"),
            "loopwright.seconds": _float(d.get("seconds")),
        }
        names.add(model)
        if d.get("response_model"):
            a["gen_ai.response.model"] = str(d["response_model"])
        if d.get("provider"):
            # the current name, and the one older backends read
            a["gen_ai.provider.name"] = a["gen_ai.system"] = str(d["provider"])
        host, port = _server(d.get("server"))
        if host:
            a["server.address"] = host
        if port:
            a["server.port"] = port
        for key in ("input_tokens", "output_tokens"):
            if isinstance(d.get(key), int):
                a[f"gen_ai.usage.{key}"] = d[key]
        tin, tout = d.get("input_tokens") or 0, d.get("output_tokens") or 0
        tokens_in, tokens_out = tokens_in + int(tin), tokens_out + int(tout)
        if d.get("input_tokens") is not None or d.get("output_tokens") is not None:
            a["loopwright.usage.total_tokens"] = int(tin) + int(tout)
        if d.get("cost_usd") is not None:
            a["loopwright.cost_usd"] = _float(d["cost_usd"])
        if d.get("priced_by"):  # which model's price billed it (the asked or the served one)
            a["loopwright.priced_by"] = str(d["priced_by"])
        if d.get("finish_reason"):
            a["gen_ai.response.finish_reasons"] = [str(d["finish_reason"])]
        if d.get("first_token_s") is not None:
            a["loopwright.first_token_s"] = _float(d["first_token_s"])
        if d.get("repair"):
            a["loopwright.repair_turn"] = True
        if d.get("truncated"):
            a["loopwright.call.truncated"] = True
        span = Span(
            key=f"{call.key}/model/{i}",
            kind="model",
            name=f"{a['gen_ai.operation.name']} {model}",
            start=start,
            end=start + _float(d.get("seconds")),
            parent=call.key,
            attributes=a,
            events=[span_event(seq, ev)],
        )
        if d.get("error"):
            span.status = "error"
            span.status_message = str(d["error"])
            status = d.get("http_status")
            a["error.type"] = str(status) if status else str(d["error"]).split(":", 1)[0]
        else:
            span.status = "ok"
        out.append(span)
    if out:
        ca = call.attributes
        if len(names) == 1:
            ca.setdefault("gen_ai.request.model", next(iter(names)))
        if "gen_ai.usage.input_tokens" not in ca:
            ca["gen_ai.usage.input_tokens"] = tokens_in
            ca["gen_ai.usage.output_tokens"] = tokens_out
    return out


def _server(url: Any) -> tuple[str | None, int | None]:
    """``server.address`` and ``server.port`` of an endpoint URL."""
    if not isinstance(url, str) or not url:
        return None, None
    try:
        parts = urlsplit(url)
        return parts.hostname, parts.port
    except ValueError:
        return None, None


def _usage_attributes(a: dict[str, Any], usage: Mapping[str, Any]) -> None:
    """Spend in ``loopwright.*`` (totals are all we record); the GenAI input/output token
    attributes only where a usage reports them separately."""
    if "cost_usd" in usage:
        a["loopwright.cost_usd"] = float(usage["cost_usd"] or 0.0)
    if "tokens" in usage:
        a["loopwright.usage.total_tokens"] = int(usage["tokens"] or 0)
    for key in ("input_tokens", "output_tokens"):
        if usage.get(key) is not None:
            a[f"gen_ai.usage.{key}"] = int(usage[key])
    if usage.get("model"):  # a usage that names the model it was spent on
        a["gen_ai.request.model"] = str(usage["model"])


# --- effects and approvals -------------------------------------------------------------------
def _effect_key(ev: Event) -> str | None:
    if not ev.kind.startswith("effect_") or not ev.data.get("key"):
        return None
    return str(ev.data["key"]).removeprefix("effect:")


def effect_spans(parent: Span, items: Iterable[tuple[int, Event]]) -> list[Span]:
    groups: dict[str, list[tuple[int, Event]]] = {}
    for seq, ev in items:
        key = _effect_key(ev)
        if key is not None:
            groups.setdefault(key, []).append((seq, ev))
    out = []
    for key, evs in groups.items():
        first = evs[0][1]
        final = next((ev for _, ev in reversed(evs) if ev.kind in EFFECT_END), None)
        name = str(first.data.get("effect") or key.split(":", 1)[0])
        span = Span(
            key=f"{parent.key}/effect/{key}",
            kind="effect",
            name=f"execute_tool {name}",
            start=first.ts,
            end=final.ts if final is not None else max(ev.ts for _, ev in evs),
            parent=parent.key,
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": key,
                "loopwright.effect.key": key,
                # (an attempt withdrawn, its call never started, is none: crash53b)
                "loopwright.effect.attempts": sum(
                    (ev.kind == "effect_started") - (ev.kind == "effect_withdrawn") for _, ev in evs
                ),
            },
            incomplete=final is None,
        )
        if parent.kind == "cycle":
            span.attributes["loopwright.cycle"] = parent.attributes["loopwright.cycle"]
        if first.data.get("kind"):
            span.attributes["loopwright.effect.kind"] = str(first.data["kind"])
        status = _effect_status(final)
        span.attributes["loopwright.effect.status"] = status
        if final is not None and final.kind == "effect_reused":
            span.attributes["loopwright.effect.reused"] = True
        if final is not None and final.kind == "effect_reconciled":
            span.attributes["loopwright.effect.reconciled"] = True
        if final is not None and final.kind == "effect_recovered":
            span.attributes["loopwright.effect.recovered"] = True
        if status in ("failed", "in_doubt"):
            span.status = "error"
            span.status_message = str((final.data if final else {}).get("cause") or status)
            span.attributes["error.type"] = status
        elif status == "done":
            span.status = "ok"
        span.events = [span_event(seq, ev) for seq, ev in evs]
        # what it cost: on the event of its doing (done or reconciled; a result recovered or
        # reused after it was charged where it was done)
        billed = [ev.data["usage"] for _, ev in evs if isinstance(ev.data.get("usage"), Mapping)]
        if billed:
            span.attributes["loopwright.cost_usd"] = sum(_float(u.get("cost_usd")) for u in billed)
            span.attributes["loopwright.usage.total_tokens"] = int(
                sum(_float(u.get("tokens")) for u in billed)
            )
        out.append(span)
    return out


def _effect_status(final: Event | None) -> str:
    if final is None:
        return "in_flight"
    if final.kind in ("effect_reused", "effect_reconciled"):
        return "done"
    return str(final.data.get("status") or final.kind.removeprefix("effect_"))


def approval_spans(
    parent: Span,
    approvals: Sequence[Approval],
    items: Sequence[tuple[int, Event]],
    last_ts: float,
) -> list[Span]:
    out = []
    # The request's times are the store's clock (its expiry's; PostgreSQL: the server's), the
    # run's events the writers': the span starts at its ``approval_requested`` event, on the
    # run's timeline as its cycle is, and lasts the request's own wait (edit47: an hour's skew
    # between them fitted the span into its cycle as nothing, or an hour too long).
    asked = {
        ev.data.get("approval_id"): ev.ts for _seq, ev in items if ev.kind == "approval_requested"
    }
    for a in approvals:
        decided = a.decided_at is not None and a.status != "pending"
        start = asked.get(a.approval_id, a.requested_at)
        span = Span(
            key=f"{parent.key}/approval/{a.approval_id}",
            kind="approval",
            name=f"approval {a.kind}",
            start=start,
            end=(
                start + max(0.0, float(a.decided_at) - a.requested_at)
                if decided and a.decided_at
                else max(start, last_ts)
            ),
            parent=parent.key,
            attributes={
                "loopwright.approval.id": a.approval_id,
                "loopwright.approval.kind": a.kind,
                "loopwright.approval.status": a.status,
                "loopwright.approval.what": a.what,
                "loopwright.approval.why": a.why,
                "loopwright.cycle": a.cycle,
            },
            incomplete=not decided,
        )
        if a.rule:
            span.attributes["loopwright.approval.rule"] = a.rule
        if a.decided_by:
            span.attributes["loopwright.approval.decided_by"] = a.decided_by
        if decided:
            span.attributes["loopwright.approval.wait_s"] = span.end - span.start
        if a.status in ("denied", "expired"):
            span.status = "error"
            span.status_message = f"approval {a.status}" + (
                f" by {a.decided_by}" if a.decided_by else ""
            )
        elif a.status in ("approved", "answered"):
            span.status = "ok"
        span.events = [
            span_event(seq, ev)
            for seq, ev in items
            if ev.kind in APPROVAL_KINDS and ev.data.get("approval_id") == a.approval_id
        ]
        out.append(span)
    return out


def claimed(ev: Event, approvals: Sequence[Approval]) -> bool:
    """Whether an event went onto an effect or approval span rather than its container."""
    if _effect_key(ev) is not None:
        return True
    ids = {a.approval_id for a in approvals}
    return ev.kind in APPROVAL_KINDS and ev.data.get("approval_id") in ids
