"""Settling a compensation left in doubt (settle54): a refund whose outcome is unknown (a crash
inside it with no hook to ask and no deduplicating provider, or its hook failing) left the
claim of the action it undoes ``undoing`` for good: another run asking for the action
escalated, and no command let the person who checked with the provider say what happened.

``Runtime.settle_effect`` settles it as it settles an effect (``_settle``), and records what
a compensation's own outcome records (``_reversal.run_compensations``): the refund happened,
the original is ``compensated`` and its claim freed (the next request runs it again, a new
generation); it did not, the original stands ``done`` and its claim with it (another run
asking for the action reuses its result). These writes, the compensation's own, the cancelled
run's packet rewritten (``settled_packet``: its compensation no longer shown in doubt, nor its
advice saying to settle it) and the audit record are ONE transaction (``journal_put_all``):
written one by one, a settling cut short between them left the payment recorded refunded, the
compensation still in doubt, and no record of who said so."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._hints import settle_command
from .store import JournalEntry, JournalWrite, RunRecord, Store

__all__ = [
    "compensation_advice",
    "is_refund",
    "refund_settle_hint",
    "settle_undoing",
    "settled_packet",
    "undone_words",
]


def is_refund(entry: JournalEntry) -> bool:
    """Whether the journal entry is a compensation (``<effect>.compensate``)."""
    return str(entry.data.get("name", "")).endswith(".compensate")


def _undone(store: Store, run_id: str, entry: JournalEntry) -> JournalEntry | None:
    """The run's entry of the effect compensation ``entry`` undoes."""
    key = (entry.data.get("args") or {}).get("compensates")
    found = store.journal(run_id, key=f"effect:{key}") if key else []
    return found[0] if found else None


def settle_undoing(
    store: Store, run_id: str, entry: JournalEntry, *, done: bool, result: Any
) -> list[JournalWrite]:
    """What compensation ``entry``'s settling means for the effect it undoes (and its
    store-wide claim, ``undoing`` until now): the writes that record it, for the settling's
    own transaction (``journal_put_all``)."""
    orig = _undone(store, run_id, entry)
    if orig is None:
        return []  # (an original never journaled: nothing claimed, nothing to free)
    action = orig.data.get("action")
    claim = (str(orig.data.get("kind")), str(action), "") if action else None
    ikey = orig.key.removeprefix("effect:")
    undo = store.journal(run_id, key=f"undo:{ikey}")
    writes: list[JournalWrite] = []
    if claim is not None and undo and undo[0].status == "undoing":
        # refunded: undone; not: the action stands, its result reused by whoever asks
        status = "compensated" if done else "done"
        data = {"name": orig.data.get("name"), "result": orig.data.get("result")}
        writes.append(JournalWrite(f"undo:{ikey}", "undo", orig.cycle, status, data, claim=claim))
    if done:  # the original undone, and the claim of its business key freed for any run
        data = {**orig.data, "compensation": result}
        writes.append(
            JournalWrite(orig.key, "effect", orig.cycle, "compensated", data, claim=claim)
        )
    return writes


def settled_packet(
    store: Store, rec: RunRecord, entry: JournalEntry, settled: dict[str, Any], result: Any
) -> dict[str, Any] | None:
    """The cancelled run's packet once compensation ``entry`` is settled (``settled``: who,
    done or not, the note), for the settling's transaction: its compensation no longer
    ``in_doubt``, and the advice that said to undo it by hand and settle it rewritten (read
    before the settling's writes: the journal still holds it in doubt). ``None``: no packet
    names it (a run rolled back, not cancelled)."""
    packet = dict(rec.packet or {})
    notes = packet.get("compensations")
    key = (entry.data.get("args") or {}).get("compensates")
    hit = [
        i
        for i, n in enumerate(notes or ())
        if isinstance(n, dict) and n.get("key") == key and n.get("status") == "in_doubt"
    ]
    if not hit or not isinstance(notes, list):
        return None
    before = compensation_advice(store, rec.run_id, notes)
    n = dict(notes[hit[0]])
    n["doubt"] = n.pop("cause", None)
    n["settled"] = settled
    if settled["done"]:
        n["status"], n["result"] = "done", result
    else:
        n["status"] = "failed"
        n["cause"] = (
            f"the refund of {n.get('effect')} ({key}) was settled not done by {settled['by']}"
        )
    notes = [*notes[: hit[0]], n, *notes[hit[0] + 1 :]]
    packet["compensations"] = notes
    after = compensation_advice(store, rec.run_id, notes, settled=entry.key)
    advice = str(packet.get("recommended_action", ""))
    if before and before in advice:
        advice = advice.replace(before, after, 1)
    else:  # (a packet worded otherwise: at least not told to settle what is settled)
        advice = advice.replace(_settle_sentence(rec.run_id, entry), "")
    packet["recommended_action"] = " ".join(advice.split())
    return packet


def compensation_advice(
    store: Store, run_id: str, notes: Sequence[Mapping[str, Any]], *, settled: str = ""
) -> str:
    """What a cancelled run's advice starts with when some of its compensations ``notes``
    failed or are in doubt (``""`` when none): undo by hand, and the commands that settle
    those in doubt (``settled``: the key of one being settled, no longer listed)."""
    bad = [n for n in notes if n.get("status") in ("failed", "in_doubt")]
    if not bad:
        return ""
    causes = "; ".join(str(n.get("cause")) for n in bad)
    return f"Undo by hand what the compensations could not ({causes})." + refund_settle_hint(
        store, run_id, settled=settled
    )


def undone_words(store: Store, run_id: str, entry: JournalEntry) -> str:
    """What a compensation's settling means for the effect it undoes, in words."""
    orig = _undone(store, run_id, entry)
    if orig is None:
        return ""
    what = f"{orig.data.get('name')} ({orig.key.removeprefix('effect:')})"
    if entry.status == "done":
        return f"; {what} is recorded undone: a later request for it runs it again"
    return (
        f"; {what} stands, done: another run asking for it reuses its result (undo it by "
        "hand if it must be)"
    )


def refund_settle_hint(store: Store, run_id: str, *, settled: str = "") -> str:
    """The commands that settle the run's compensations left in doubt, for the cancelled
    run's advice (``""`` when none is; ``settled``: the key of one being settled, left
    out)."""
    doubts = [
        e
        for e in store.journal_where(run_id, kind="effect", statuses=("in_doubt",))
        if is_refund(e) and not e.data.get("from_run") and e.key != settled
    ]
    return "".join(_settle_sentence(run_id, e) for e in doubts)


def _settle_sentence(run_id: str, e: JournalEntry) -> str:
    """The advice's command that settles compensation ``e``."""
    return (
        f" Once checked with the provider, settle {e.data.get('name')}: "
        f"`{settle_command(run_id, e.key.removeprefix('effect:'))}` (the refund happened) or "
        "`--not-done` (it did not)."
    )
