"""Settling a compensation left in doubt (settle54): a refund whose outcome is unknown (a crash
inside it with no hook to ask and no deduplicating provider, or its hook failing) left the
claim of the action it undoes ``undoing`` for good: another run asking for the action
escalated, and no command let the person who checked with the provider say what happened.

``Runtime.settle_effect`` settles it as it settles an effect (``_settle``), and records what
a compensation's own outcome records (``_reversal.run_compensations``): the refund happened,
the original is ``compensated`` and its claim freed (the next request runs it again, a new
generation); it did not, the original stands ``done`` and its claim with it (another run
asking for the action reuses its result). These writes come before the compensation's own
(which carries the audit record): a settling cut short between them leaves the compensation in
doubt, and settled again, writes them again, as the engine writes a claim's ``compensated``
twice."""

from __future__ import annotations

from typing import Any

from .store import JournalEntry, Store

__all__ = ["is_refund", "refund_settle_hint", "settle_undoing", "undone_words"]


def is_refund(entry: JournalEntry) -> bool:
    """Whether the journal entry is a compensation (``<effect>.compensate``)."""
    return str(entry.data.get("name", "")).endswith(".compensate")


def _undone(store: Store, run_id: str, entry: JournalEntry) -> JournalEntry | None:
    """The run's entry of the effect compensation ``entry`` undoes."""
    key = (entry.data.get("args") or {}).get("compensates")
    found = store.journal(run_id, key=f"effect:{key}") if key else []
    return found[0] if found else None


def settle_undoing(
    store: Store, run_id: str, token: int, entry: JournalEntry, *, done: bool, result: Any
) -> None:
    """Record what compensation ``entry``'s settling means for the effect it undoes (and its
    store-wide claim, ``undoing`` until now), under the run's lease ``token``."""
    orig = _undone(store, run_id, entry)
    if orig is None:
        return  # (an original never journaled: nothing claimed, nothing to free)
    action = orig.data.get("action")
    claim = (str(orig.data.get("kind")), str(action), "") if action else None
    ikey = orig.key.removeprefix("effect:")
    undo = store.journal(run_id, key=f"undo:{ikey}")
    if claim is not None and undo and undo[0].status == "undoing":
        store.journal_put(
            run_id,
            token,
            key=f"undo:{ikey}",
            kind="undo",
            cycle=orig.cycle,
            # refunded: undone; not: the action stands, its result reused by whoever asks
            status="compensated" if done else "done",
            data={"name": orig.data.get("name"), "result": orig.data.get("result")},
            claim=claim,
        )
    if done:  # the original undone, and the claim of its business key freed for any run
        store.journal_put(
            run_id,
            token,
            key=orig.key,
            kind="effect",
            cycle=orig.cycle,
            status="compensated",
            data={**orig.data, "compensation": result},
            claim=claim,
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


def refund_settle_hint(store: Store, run_id: str) -> str:
    """The commands that settle the run's compensations left in doubt, for the cancelled
    run's advice (``""`` when none is)."""
    doubts = [
        e
        for e in store.journal_where(run_id, kind="effect", statuses=("in_doubt",))
        if is_refund(e) and not e.data.get("from_run")
    ]
    return "".join(
        f" Once checked with the provider, settle {e.data.get('name')}: `loopwright settle "
        f"{run_id[:12]} {e.key.removeprefix('effect:')} --done` (the refund happened) or "
        "`--not-done` (it did not)."
        for e in doubts
    )
