"""A person settles an effect left in doubt (effects53b): ``Runtime.settle_effect``.

An effect whose outcome is unknown (a crash inside the call, a transient error of one that is
not idempotent, a keyless one that failed after it may have acted) is journaled ``in_doubt``:
the run escalates, its business key stays held (another run asking for the action escalates),
and nothing runs it again. Only the outside world knows what happened, and before this a
person who had checked it had no way to say so: the key stayed held for good.

Settled ``done``, the entry is recorded done with the result the person gives (the claim too:
another run asking for the action reuses that result); settled not done, it is recorded
``failed`` with its key kept (the claim freed: the next attempt, by another run or a
rollback's redo, is handed the same key, which a provider that deduplicates answers with what
it did if the person was wrong). The run is not reopened here: a rollback to before the
effect's cycle redoes it, reusing the settled result or running the action again.
"""

from __future__ import annotations

from typing import Any

from ._audit import audit_entry, takes_audit
from ._authority import may_operate, refused
from ._crash_bound import unknown_tail
from ._effect_keys import args_digest
from ._errors import ConfigError
from ._hints import settle_command
from ._host import RuntimeHost
from ._json import check_given_text, check_value
from ._packet import SETTLE_TAIL, settle_first
from ._people import printable_note
from ._person_turn import person_op
from ._redact import redact, redact_text
from ._settle_refund import is_refund, settle_undoing, settled_packet, undone_words
from ._stored_run_words import run_stop_cause
from .store import JournalEntry, JournalWrite, NewEvent, RunRecord, Store

__all__ = ["Settling", "settle_hint", "settled_run_packet", "settled_words"]


class Settling(RuntimeHost):
    """``settle_effect`` (mixed into ``Runtime``)."""

    @person_op(leased=True)
    def settle_effect(
        self,
        run_id: str,
        key: str,
        *,
        done: bool,
        by: str,
        note: str | None = None,
        result: Any = None,
        origin: str = "python",
    ) -> JournalEntry:
        """Record what a person found out about run ``run_id``'s effect in doubt ``key`` (its
        key as the packet names it, the key it was handed, or the effect's name when only one
        of that name is in doubt). ``done``: it happened, with ``result`` (recorded as an
        effect's result is, secrets masked; strict JSON, or a ``ConfigError``); a redo, or another run asking for the action,
        reuses it. Not ``done``: it did not; it is recorded failed, its key kept for the next
        attempt. Only an entry in doubt is settled (``ConfigError`` otherwise); ``by`` must
        may operate (in a store with users); audited (``settle_effect``) and an
        ``effect_settled`` event on the run. Returns the entry as written."""
        if not isinstance(done, bool):
            raise ConfigError("must be True or False", field="done")
        if not isinstance(by, str) or not by.strip():
            raise ConfigError("settling an effect needs the name of who checked it", field="by")
        rec = self.store.get_run(run_id)
        on = f"run {rec.run_id}"
        # who before what, as every other action of a person: one who may not operate learns
        # nothing of what would be accepted, and what is refused of one who may is audited
        # (a result that is not strict JSON, a key or note holding a NUL or a lone surrogate
        # were refused before the role check, with no record)
        who = may_operate(self.store, by, "settle_effect", on, origin=origin)
        try:
            check_given_text(key, field="key")
            if note is not None:
                check_given_text(note, field="note")
            # (a note holding an escape sequence refused here, audited as a pause's is)
            printable = printable_note(note) if note else None
            if done:
                # what a person gives is stored as given or refused, as an edit's value: a NaN
                # was written as null, a set as its text, a value nested too deep failed
                check_value(result, field="result")
        except ConfigError as exc:
            refused(self.store, who, "settle_effect", on, origin=origin, why=exc)
            raise
        busy = (
            f"run {rec.run_id} is executing elsewhere; let it stop (it escalates on an effect "
            "in doubt) first"
        )
        token = self._lease_or_refused(rec.run_id, who, "settle_effect", origin=origin, busy=busy)
        with self._holding(rec.run_id, token):
            try:
                entry = self._in_doubt_entry(rec.run_id, key)
            except ConfigError as exc:
                refused(self.store, who, "settle_effect", on, origin=origin, why=exc)
                raise
            ikey = entry.key.removeprefix("effect:")
            settled: dict[str, Any] = {"by": by.strip(), "done": done}
            if printable:
                settled["note"] = printable
            # the doubt as it was (its cause, its error) kept beside what the person said
            data = {k: v for k, v in entry.data.items() if k not in ("cause", "error")}
            data["settled"] = settled
            data["doubt"] = {k: entry.data[k] for k in ("cause", "error") if k in entry.data}
            if done:
                status = "done"
                from ._effect_journal import jsonable  # (not at start-up: test_layering)

                data["result"] = jsonable(result)
            else:
                status = "failed"
                data["cause"] = redact_text(
                    f"{entry.data.get('name')} ({ikey}) was settled not done by {by.strip()}"
                )
                data.pop("spent", None)  # its key kept: the next attempt is handed the same
            action = entry.data.get("action")
            claim = (
                (str(entry.data.get("kind")), str(action), args_digest(entry.data.get("args")))
                if action is not None
                else None
            )
            event = {"effect": entry.data.get("name"), "key": ikey, "status": status} | settled
            # its record written in the settling's transaction: a failed audit write (or a
            # process gone between the two) left an effect settled with no record of who
            record = audit_entry(who, "settle_effect", on, origin=origin, key=ikey, done=done,
                                 note=settled.get("note"))  # fmt: skip
            write = JournalWrite(
                entry.key,
                "effect",
                entry.cycle,
                status,
                redact(data),
                expect_status="in_doubt",
                events=[NewEvent(entry.cycle, "effect_settled", redact(event))],
                claim=claim,
            )
            if is_refund(entry):
                # the action it undoes (undone, or standing: its claim), the cancelled run's
                # packet and the record, in the compensation's transaction: written one by one,
                # a cut between them left the payment refunded, the refund in doubt, no record
                undone = redact(data.get("result"))
                undoing = settle_undoing(self.store, rec.run_id, entry, done=done, result=undone)
                # (read under the lease: the packet as the last commit before it left it)
                now = self.store.get_run(rec.run_id)
                packet = settled_packet(self.store, now, entry, settled, undone)
                *_, written = self.store.journal_put_all(
                    rec.run_id,
                    token,
                    [*undoing, write],
                    packet=None if packet is None else redact(packet),
                    audit=record,
                )
                return written
            # the escalated run's packet said to settle this one: rewritten in the settling's
            # transaction, as a refund's is (else `show`, the run page and the API kept
            # telling the person to do what they had just done)
            packet = settled_run_packet(self.store, rec, entry, settled, status)
            if packet is not None:
                *_, written = self.store.journal_put_all(
                    rec.run_id, token, [write], packet=redact(packet), audit=record
                )
                return written
            in_tx = takes_audit(self.store.journal_put)
            with_record: dict[str, Any] = {"audit": record} if in_tx else {}
            written = self.store.journal_put(
                rec.run_id,
                token,
                key=write.key,
                kind=write.kind,
                cycle=write.cycle,
                status=write.status,
                data=write.data,
                expect_status=write.expect_status,
                events=write.events,
                claim=write.claim,
                **with_record,
            )
            if not in_tx:  # a store of one's own written before ``audit=``: after, as it was
                self.store.audit_put(**record)
        return written

    def _in_doubt_entry(self, run_id: str, key: str) -> JournalEntry:
        """The run's effect in doubt that ``key`` names, or a ``ConfigError`` saying why none
        is (and which are in doubt)."""
        # (a compensation's too: a refund in doubt held its action's claim ``undoing``)
        doubts = self.store.journal_where(run_id, kind="effect", statuses=("in_doubt",))
        named = [
            e
            for e in doubts
            if key in (e.key, e.key.removeprefix("effect:"), e.data.get("call_key"))
        ] or [e for e in doubts if e.data.get("name") == key]
        listed = ", ".join(
            f"{e.data.get('name')} ({e.key.removeprefix('effect:')})" for e in doubts
        )
        if not named:
            other = self.store.journal(run_id, key=f"effect:{key}")
            why = f"is {other[0].status}, not in doubt" if other else "names no effect of the run"
            if other and other[0].status == "intent":
                # a crash's intent: the resume settles it as the effect declares (its hook,
                # idempotent), or marks it in doubt
                why += " yet (a crash left it started: resume the run first)"
            raise ConfigError(
                f"{key!r} {why}; in doubt: {listed or 'none'}",
                field="key",
            )
        if len(named) > 1:
            raise ConfigError(
                f"{key!r} names {len(named)} effects in doubt; give one's key: {listed}",
                field="key",
            )
        entry = named[0]
        if entry.data.get("from_run"):
            # in doubt about another run's claim (that run was doing or undoing it): the
            # action is that run's to settle
            raise ConfigError(
                f"{key!r} is in doubt about run {entry.data['from_run']}'s action: settle it "
                "on that run",
                field="key",
            )
        return entry


def settle_hint(store: Store, run_id: str, key: str) -> str:
    """What an escalation's cause adds for the run's own effect ``key`` left in doubt: how a
    person who checked says what happened (``""`` for any other stop: a failure, or a doubt
    about another run's action)."""
    found = store.journal(run_id, key=f"effect:{key}")
    if not found or found[0].status != "in_doubt" or found[0].data.get("from_run"):
        return ""
    # (runnable as printed, kept whole by a clipped cause: ``_packet.clip``; polish55)
    return (
        f"{SETTLE_TAIL}`{settle_command(run_id, key)}` if it happened "
        "(or `--not-done`), then roll the run back and resume it"
    )


# The hint and the advice's first words as releases before polish55 wrote them into packets
# (`--result JSON`, a placeholder): found and replaced when such a run's effect is settled.
_HINT_BEFORE_POLISH55 = (
    f"{SETTLE_TAIL}`loopwright settle {{run}} {{key}} --done --result JSON` (or `--not-done`), "
    "then roll the run back and resume it"
)
_FIRST_BEFORE_POLISH55 = (
    "A person must check the outside world and settle the effect in doubt first: "
    "`loopwright settle {run} {key} --done --result JSON` if it happened, "
    "`loopwright settle {run} {key} --not-done` if not; then "
)


def settled_run_packet(
    store: Store, rec: RunRecord, entry: JournalEntry, settled: dict[str, Any], status: str
) -> dict[str, Any] | None:
    """The escalated run's packet once its effect in doubt ``entry`` is settled (``settled``:
    who, done or not; ``status``: the entry's as written), for the settling's transaction: its
    cause, summary and stop cause no longer say "once checked, settle it", its advice says who
    settled it and what is left (roll back, resume), its evidence shows the effect settled.
    Read before the settling's write (``settle_hint`` reads the entry still in doubt).
    ``None``: the packet asks for no settling of it (the run went on since)."""
    packet = dict(rec.packet or {})
    evidence = packet.get("evidence")
    ikey = entry.key.removeprefix("effect:")
    said = "done" if settled["done"] else "not done"
    what = f"{entry.data.get('name')} ({ikey}) was settled {said} by {settled['by']}"
    if isinstance(evidence, dict) and isinstance(bound := evidence.get("effects"), dict):
        return _bound_packet(rec, packet, evidence, bound, ikey, said, what)
    if not isinstance(evidence, dict) or evidence.get("settle") != ikey:
        return None
    hint = settle_hint(store, rec.run_id, ikey)
    # (in this release's words, or an earlier one's: a run escalated before polish55 reworded
    # them kept "once checked, settle it" once settled; review55a)
    hints = (hint, _HINT_BEFORE_POLISH55.format(run=rec.run_id[:12], key=ikey)) if hint else ()
    for field in ("cause", "summary"):
        text = packet.get(field)
        worded = next((h for h in hints if isinstance(text, str) and h in text), None)
        if worded is not None and isinstance(text, str):
            packet[field] = text.replace(
                worded, f"; {what}: roll the run back to before cycle {entry.cycle} and resume it"
            )
    advice = str(packet.get("recommended_action") or "")
    firsts = (
        settle_first(rec.run_id, ikey),
        _FIRST_BEFORE_POLISH55.format(run=rec.run_id[:12], key=ikey),
    )
    first = next((f for f in firsts if f in advice), None)
    packet["recommended_action"] = (
        advice.replace(first, f"{what} (its cycle: {entry.cycle}); now ", 1)
        if first is not None
        else f"{what}. {advice}".strip()  # (a packet worded otherwise: it says so first)
    )
    evidence = {k: v for k, v in evidence.items() if k != "settle"}
    if isinstance(evidence.get("effect"), dict):
        evidence["effect"] = {**evidence["effect"], "status": status, "settled": settled}
    evidence["settled"] = ikey
    packet["evidence"] = evidence
    if packet.get("stop_cause"):  # (derived from the cause, as the engine derived it)
        packet["stop_cause"] = run_stop_cause(
            rec, {k: v for k, v in packet.items() if k != "stop_cause"}
        )
    return packet


def _bound_packet(
    rec: RunRecord,
    packet: dict[str, Any],
    evidence: dict[str, Any],
    bound: dict[str, Any],
    ikey: str,
    said: str,
    what: str,
) -> dict[str, Any] | None:
    """The packet of a run ended by its crash bound once ``ikey``, one of the effects it
    named of unknown outcome, is settled: its cause and summary name it settled and ask to
    check and settle only those left (they asked for all of them still: crash55c), and its
    evidence lists it settled. ``None``: the packet names no such effect."""
    unknown = bound.get("unknown")
    if not isinstance(unknown, list) or ikey not in unknown:
        return None
    left = [k for k in unknown if k != ikey]
    tail = unknown_tail(unknown, rec.run_id)
    now = f"; {what}" + (unknown_tail(left, rec.run_id) if left else "")
    for field in ("cause", "summary"):
        text = packet.get(field)
        if isinstance(text, str) and tail in text:
            packet[field] = text.replace(tail, now, 1)
    earlier = bound.get("settled")
    done = {**(earlier if isinstance(earlier, dict) else {}), ikey: said}
    packet["evidence"] = {**evidence, "effects": {**bound, "unknown": left, "settled": done}}
    if packet.get("stop_cause"):  # (derived from the cause, as the engine derived it)
        packet["stop_cause"] = run_stop_cause(
            rec, {k: v for k, v in packet.items() if k != "stop_cause"}
        )
    return packet


def settled_words(store: Store, entry: JournalEntry, run_id: str, by: str) -> str:
    """What a settling says it did, and what a person does next (the CLI's and the
    dashboard's words alike)."""
    name, ikey = entry.data.get("name"), entry.key.removeprefix("effect:")
    said = "done" if entry.status == "done" else "not done"
    if is_refund(entry):  # (the run is not redone: it was cancelled, or rolled back)
        return f"settled {name} ({ikey}) as {said} for run {run_id[:12]} by {by}" + undone_words(
            store, run_id, entry
        )
    return (
        f"settled {name} ({ikey}) as {said} for run {run_id[:12]} by {by}; to go on, roll the "
        f"run back to before cycle {entry.cycle} (`loopwright rollback {run_id[:12]} "
        f"--to-cycle {max(entry.cycle - 1, 0)}`) and resume it"
    )
