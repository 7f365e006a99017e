"""Eval cases: one replayable case per ended run (its task, contract, each cycle's context,
proposal and verdicts, the decisions made, the run's outcome), redacted, written as JSON lines
through a spool so a failed write leaves no half file."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import IO, Any

from .._concluded import concluded_at, concluded_in
from .._contract import snapshot_as_written
from .._cycle import ASKED
from .._decide import record_no_attempt
from .._engine import HELD_OUT_KEY
from .._errors import ConfigError
from .._inherited import fork_seq
from .._redact import redact
from .._state import TaskState
from .._verdict import held_out_words
from ..store import Approval, Checkpoint, RunRecord, Store
from ._otlp import new_spool, spooled
from ._run_cycles import Cycle, ended_run_ids, iter_cycles

__all__ = ["EVAL_CASE_FORMAT", "eval_case", "eval_cases", "write_eval_case"]

EVAL_CASE_FORMAT = "loopwright.eval_case/1"


# --- eval cases ------------------------------------------------------------------------------
def eval_cases(
    store: Store,
    *,
    project: str | None = None,
    loop_name: str | None = None,
    run_ids: Sequence[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """One eval case per ended run (oldest first), optionally of one project or loop, or of
    the given runs (each must have ended)."""
    for run_id in ended_run_ids(store, project=project, loop_name=loop_name, run_ids=run_ids):
        yield eval_case(store, run_id)


def eval_case(store: Store, run_id: str) -> dict[str, Any]:
    """The run (id, unique prefix or task key) as a replayable eval case."""
    cycles: list[dict[str, Any]] = []
    before, after = _case_halves(store, store.get_run(run_id), cycles.append)
    return dict(redact({**before, "cycles": cycles, **after}))


def write_eval_case(store: Store, run_id: str, out: IO[str]) -> None:
    """Write ``eval_case(store, run_id)`` to ``out`` as one line, the bytes ``write_jsonl``
    writes for it, its cycles as they are read: the case is not held (a 5,000-cycle run's case
    peaked at 109 MB to write 8 MB). Its cycles wait in a temporary file until the end of the
    case, known last, is (as ``write_otlp``'s spans). Each piece is masked on its own, as the
    whole case is (a mask follows a key's name, and none of the case's own keys is one)."""
    spool = new_spool()
    try:
        sep = ""

        def each(c: dict[str, Any]) -> None:
            nonlocal sep
            spooled(spool.write, sep + _line(redact(c)))
            sep = ","

        before, after = _case_halves(store, store.get_run(run_id), each)
        spooled(spool.seek, 0)  # (flushes what is buffered: a full disk shows here)
        out.write(_line(redact(before))[:-1] + ',"cycles":[')
        shutil.copyfileobj(spool, out)
        out.write("]," + _line(redact(after))[1:] + "\n")
    finally:
        with contextlib.suppress(OSError):  # (as write_otlp: the error raised says it)
            spool.close()


def _line(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"), default=str)  # as write_jsonl


def _case_halves(
    store: Store, rec: RunRecord, each: Callable[[dict[str, Any]], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An eval case of ``rec`` without its masks: the fields before ``cycles`` and those
    after, each cycle given to ``each`` as it is read, in order."""
    ends: list[Checkpoint] = []  # the first checkpoint and the last, as they are read
    concluded: list[Checkpoint] = []  # the checkpoint of the last cycle with a proposal

    def read() -> Iterator[Checkpoint]:
        for ck in store.iter_checkpoints(rec.run_id):
            ends[1:] = [ck]  # the first stays; the last is replaced
            if ck.record and "proposal" in ck.record:
                concluded[:] = [ck]
            yield ck

    for c in iter_cycles(read(), rec.loop_name, keep=None):
        each(_case_cycle(c))
    initial = TaskState.from_dict(ends[0].state)
    final = TaskState.from_dict(ends[-1].state)
    before = {
        "format": EVAL_CASE_FORMAT,
        "case_id": rec.run_id,
        "run_id": rec.run_id,
        "task_key": rec.task_key,
        "loop_name": rec.loop_name,
        "loop_version": rec.loop_version,
        "project": rec.project,
        "spec_ref": rec.spec_ref,
        "task": rec.task,
        "held_out_keys": [HELD_OUT_KEY] if HELD_OUT_KEY in rec.task else [],
        "contract": snapshot_as_written(rec.contract),
        "initial_artifacts": initial.values(),
        "forked_from": (
            {"run_id": rec.forked_from, "cycle": rec.forked_at} if rec.forked_from else None
        ),
        "inherited_cycles": _inherited_cycles(store, rec),
    }
    after = {
        "status": rec.status,
        "stop_reason": rec.stop_reason,
        "best_score": rec.best_score,
        "held_out_passed": rec.held_out_passed,
        # any: the verdict rests on tests not decided outside the candidate's process
        "held_out_self_reported": rec.held_out_self_reported,
        # the two as one word, as /api/runs and ``RunRecord.to_dict`` say it
        # (``_verdict.held_out_words``): None, pass, fail, pass_self_reported, fail_not_judged
        "held_out_verdict": held_out_words(rec.held_out_passed, rec.held_out_self_reported).kind,
        "human_decisions": [_decision(a) for a in store.approvals(run_id=rec.run_id)],
        "final_artifacts": final.values(),
        "accepted_artifacts": final.accepted_values(),
        "spent": {"cost_usd": rec.cost_usd, "tokens": rec.tokens, "seconds": rec.seconds},
        "created_at": rec.created_at,
        "ended_at": rec.ended_at,
        "escalation": rec.packet,
        "unfinished": _unfinished(rec, concluded[0] if concluded else ends[0]),
    }
    return before, after


def _unfinished(rec: RunRecord, last: Checkpoint) -> dict[str, Any] | None:
    """The cycle an escalated run ended inside (the actor asked for a person, a call gave up)
    with what it was billed after ``last`` (the checkpoint of its last cycle with a proposal)
    and the reason it escalated: no record holds that cycle's proposal, so a replay is told it
    here. None for a run that did not escalate."""
    if rec.status != "escalated":
        return None
    spent = last.fields.get("spent")
    before = spent if isinstance(spent, dict) else {}
    return {
        "cycle": last.cycle + 1,
        "cost_usd": max(0.0, rec.cost_usd - float(before.get("cost_usd") or 0.0)),
        "tokens": max(0, rec.tokens - int(before.get("tokens") or 0)),
        # the actor's own words when it asked (its replay asks with them again)
        "cause": str((rec.packet or {}).get("cause") or "escalated").removeprefix(ASKED),
    }


def _case_cycle(c: Cycle) -> dict[str, Any]:
    rec = c.record
    calls = list(rec.get("calls") or ())
    no_attempt = record_no_attempt(rec)  # (``_decide.no_attempt``: no actor called)
    if rec.get("check_only") and not no_attempt and c.parked is not None:
        # A request denied (or expired) after an edit beside it: the actor was called and its
        # proposal judged, then parked; the cycle concluded judging the person's edit
        # check-only. The case says both, in that order (packet48: it said ``check_only``
        # with the empty proposal, the actor's only in the parked checkpoint).
        return {
            **_case_cycle(replace(c, record={**rec, "check_only": False}, parked=None)),
            "proposal": c.parked.proposal,
            "digest": c.parked.digest,
            "visible": c.parked.visible,
            "held_out": c.parked.held_out,
            "edit_judged": {
                "check_only": True,
                "proposal": c.proposal,
                "digest": c.digest,
                "visible": c.visible,
                "held_out": c.held_out,
                "score": rec.get("score"),
            },
        }
    return {
        "cycle": c.cycle,
        "concluded": c.concluded,
        "decision": c.decision,
        "context_id": c.context_id,
        "proposal": c.proposal,
        "digest": c.digest,
        "duplicate": bool(rec.get("duplicate", False)),
        "visible": c.visible,
        "held_out": c.held_out,
        "score": rec.get("score"),
        "improved": bool(rec.get("improved", False)),
        "effects": list(rec.get("effects") or ()),
        "usage": rec.get("usage"),
        "calls": calls,
        # judged a person's edit, no actor call: its proposal is no actor's
        **({"check_only": True} if no_attempt else {}),
    }


def _inherited_cycles(store: Store, run: RunRecord) -> list[dict[str, Any]]:
    """The cycles a fork started from: its origin's up to the fork point (the origin's own
    inherited ones first, along a fork of a fork), each with the ``run_id`` that ran it, so the
    case replays from its task. The origin's cycles are read as they stood when the fork was
    made: a rollback of the origin after that rewrote them."""
    if not run.forked_from or run.forked_at is None:
        return []
    origin = store.get_run(run.forked_from)
    # The origin's checkpoint the fork started from, as recorded when it was made; then the
    # checkpoints up to it a page at a time: what comes after the fork point is not read.
    start = fork_seq(store, run)
    if start is None:
        # A fork made before the seq was recorded: the fork point among the origin's first
        # checkpoint and those of its cycle (a fork early in a long run reads those, not the
        # origin's every checkpoint), as at the fork by the times written (right where the
        # hosts' clocks agree), else the last.
        marks = store.checkpoints_at(origin.run_id, run.forked_at)
        then = [c for c in marks if c.created_at <= run.created_at]
        try:
            start = concluded_at(then or marks, origin.run_id, run.forked_at, "forked_at").seq
        except ConfigError:
            start = concluded_in(store, origin.run_id, run.forked_at, "forked_at").seq
    upto = itertools.takewhile(lambda c: c.seq <= start, store.iter_checkpoints(origin.run_id))
    # the last occurrence of each cycle up to the fork point (a rollback redid the later ones)
    own = {
        c.cycle: c
        for c in iter_cycles(upto, origin.loop_name, keep=None)
        if c.concluded and c.cycle <= run.forked_at
    }
    return [
        *(c for c in _inherited_cycles(store, origin) if c["cycle"] not in own),
        *({"run_id": origin.run_id, **_case_cycle(own[n])} for n in sorted(own)),
    ]


def _decision(a: Approval) -> dict[str, Any]:
    return {
        "approval_id": a.approval_id,
        "cycle": a.cycle,
        "kind": a.kind,
        "rule": a.rule,
        "what": a.what,
        "why": a.why,
        "question": (a.evidence or {}).get("question"),
        "status": a.status,
        "by": a.decided_by,
        "at": a.decided_at,
        "requested_at": a.requested_at,
        "note": a.note,
        "answer": a.answer,
    }
