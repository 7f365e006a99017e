"""A run's timeline: one row per concluded, parked or unconcluded cycle, and the row of the
cycle an ended run ended inside; values shortened for a page (``short``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .._decide import record_no_attempt
from .._edit_check import behind_text
from .._finishing import ended_inside
from .._mid_cycle_records import (
    asked_before_parked,
    concluded_cycles,
    decided_on,
    never_concluded,
    parked_words,
    unapplied,
)
from .._verdict import undecided_note
from ..store import Approval, Checkpoint, RunRecord, Store
from ._values import is_svg, picture_digest, short

__all__ = ["ended_row", "in_row_order", "timeline", "timeline_row"]


def _verdicts(d: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for name, v in (d or {}).items():
        out.append(
            {
                "name": name,
                "passed": bool(v.get("passed")),
                "score": v.get("score"),
                # a pass resting on tests the candidate's own process decided (stop 54), a
                # failure only on tests judged_only refused (stop 56)
                "note": undecided_note(v),
                "findings": [
                    {
                        "where": "/".join(
                            str(x) for x in (f.get("artifact"), f.get("part")) if x is not None
                        ),
                        "message": str(f.get("message", "")),
                    }
                    for f in v.get("findings") or []
                ],
            }
        )
    return out


def timeline(
    checkpoints: list[Checkpoint],
    *,
    ended: bool = False,
    newest: int | None = None,
    decided: Mapping[str, Approval] | None = None,
) -> list[dict[str, Any]]:
    """One row per concluded or parked cycle, oldest first; also a cycle whose effects never
    completed (the run stopped on a failed effect before the cycle concluded). A parked or
    unconcluded cycle's row shows its proposal and visible verdicts from the write-ahead state,
    marked ``unapplied``: the candidate was judged but is not in the run's state (a parked
    cycle that later concluded keeps a plain "parked" row; its concluded row follows).
    ``ended``: the run has ended, so what was not applied never will be. ``newest``: only
    the last that many rows (built from the end: a checkpoint gives a row at most).
    ``decided``: the run's requests by id (``_mid_cycle_records.by_id``): a parked cycle is
    told by the decision on its request, not by its number alone."""
    concluded = concluded_cycles(checkpoints, lambda c: c.record, lambda c: c.fields.get("pending"))
    rows: list[dict[str, Any]] = []
    for ck in checkpoints if newest is None else reversed(checkpoints):
        if newest is not None and len(rows) >= newest:
            break
        row = timeline_row(ck, concluded, ended=ended, decided=decided)
        if row is not None:
            rows.append(row)
    return list(in_row_order(rows if newest is None else rows[::-1]))


def in_row_order(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``timeline_row``'s rows, oldest first, each question's "asked" row ahead of its
    cycle's parked marker (``asked_before_parked``), as ``loopwright show`` lists them."""
    return asked_before_parked(
        rows,
        lambda r: r.get("cycle") if r.get("parked") else None,
        lambda r: r.get("cycle") if r.get("decision") == "asked" and not r["unapplied"] else None,
    )


def timeline_row(
    ck: Checkpoint,
    concluded: set[Any],
    *,
    ended: bool,
    decided: Mapping[str, Approval] | None = None,
) -> dict[str, Any] | None:
    """``ck``'s row of the timeline (``timeline``), if it has one; ``concluded``: the run's
    ``concluded_cycles``; ``decided``: its requests by id."""
    rec = ck.record
    if not rec:
        return None
    if "proposal" not in rec:
        if rec.get("decision") == "parked" or never_concluded(rec, concluded, decided):
            return _unapplied_row(ck, rec, concluded, ended=ended, decided=decided)
        return None
    return _cycle_row(ck, rec)


def ended_row(store: Store, rec: RunRecord) -> list[dict[str, Any]]:
    """The row of the cycle an ended run ended inside (the actor asked for a person, a
    verifier gave up, a budget crossed mid-cycle), which has no record: what it cost and why
    it ended (``_finishing.ended_inside``); none if the run ended otherwise."""
    end = ended_inside(store, rec)
    if end is None:
        return []
    usage = end["usage"]
    return [
        {
            "cycle": end["cycle"],
            "at": None,
            "parked": False,
            "unapplied": False,
            "ended_inside": True,
            "kind": "ended inside this cycle",
            "replace": [],
            "edits": [],
            "note": str(end["cause"]),
            "effects": [],
            "duplicate": False,
            "visible": [],
            "held_out": [],
            "score": None,
            "improved": False,
            "decision": str(end["decision"]),
            "cost_usd": float(usage.get("cost_usd") or 0.0),
            "tokens": int(usage.get("tokens") or 0),
        }
    ]


def _unapplied_row(
    ck: Checkpoint,
    rec: dict[str, Any],
    concluded: set[Any],
    *,
    ended: bool,
    decided: Mapping[str, Approval] | None,
) -> dict[str, Any] | None:
    shown = unapplied(rec, ck.fields.get("pending"), ended=ended, decided=decided)
    if shown is None or not never_concluded(rec, concluded, decided):
        if rec.get("decision") != "parked":
            return None
        return {  # concluded later (its own row follows), or an older store: a plain marker
            "cycle": rec.get("cycle"),
            "at": ck.created_at,
            "parked": True,
            "unapplied": False,
            "held_out": _verdicts(rec.get("held_out")),
            "outcome": decided_on(rec, decided),  # the decision on its request, once made
            "parked_for": parked_words(rec, decided),  # an approval, or a question's answer
        }
    row = _cycle_row(ck, shown)
    row["unapplied"] = True
    for e in row["edits"]:
        # a proposed value, not a version of the run: shown as text (the routes that serve
        # an SVG part or a picture serve the run's versions only; the approval card shows it)
        e["svg"] = False
        e["picture"] = None
    return row


def _cycle_row(ck: Checkpoint, rec: dict[str, Any]) -> dict[str, Any]:
    prop = rec["proposal"] or {}
    edits = [
        {
            "ref": f"{e.get('artifact')}/{e.get('part')}",
            "value": short(e.get("value"), 80),
            "svg": is_svg(e.get("value")),  # a drawn panel: shown as a thumbnail
            "picture": picture_digest(e.get("value")),  # a picture kept as a blob
        }
        for e in prop.get("edits") or ()
    ]
    usage = rec.get("usage") or {}
    checked = record_no_attempt(rec)  # (``_decide.no_attempt``)
    return {
        "cycle": rec.get("cycle"),
        "at": ck.created_at,  # when the cycle was committed
        "parked": False,
        "unapplied": False,
        # a cycle that judged a person's edit, no actor call (its note says so); not the
        # cycle of a request denied after an edit beside it: the actor's attempt began it
        "kind": "check only"
        if checked
        else ("request denied" if rec.get("check_only") else prop.get("kind")),
        "check_only": checked,
        # effects run with the values the person's edit replaced, not run again
        "effects_not_rerun": behind_text(rec["effects_not_rerun"])
        if rec.get("effects_not_rerun")
        else "",
        "replace": list(prop.get("replace") or []),
        "edits": edits,
        "note": prop.get("note") or "",
        "question": _question_text(prop),  # (what it asked, as ``show`` prints it)
        "effects": [str(e.get("name")) for e in prop.get("effects") or ()],
        "duplicate": bool(rec.get("duplicate")),
        "visible": _verdicts(rec.get("visible")),
        "held_out": _verdicts(rec.get("held_out")),
        "score": rec.get("score"),
        "improved": bool(rec.get("improved")),
        "decision": rec.get("decision") or "-",
        "cost_usd": float(usage.get("cost_usd") or 0.0),
        "tokens": int(usage.get("tokens") or 0),
    }


def _question_text(prop: Mapping[str, Any]) -> str:
    """The text of the question ``prop`` asked ("" for none), cut as a cell shows it."""
    question = prop.get("question")
    if not isinstance(question, Mapping) or not question.get("text"):
        return ""
    return short(str(question["text"]), 200)
