"""A settling and one vote of several have their audit record written in the transaction that
does them (settle54). Before, each record was written after its action, in a transaction of its
own: an audit write that failed (or a process gone between the two) left an effect settled, or
a vote that counts, with no record of who did it. The failure is placed at the audit row's
write: neither the action nor its record lands, and done again, both land. SQLite and
PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK
from test_keyless_effect_failures import _paying
from test_people import FOUR_EYES, make_loop, people, task

import loopwright as lw


class _AuditDown(Exception):
    pass


def _audit_fails(store: Any) -> None:
    def down(conn: Any, entry: Any) -> int:
        raise _AuditDown(f"audit write failed ({entry['action']})")

    store._audit_row = down  # (the instance's: the class's method is put back by ``del``)


def test_a_settling_and_its_record_stand_or_fall_together(url: str) -> None:
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], ValueError), TASK, task_key="A")
        assert a.status == "escalated"
        _audit_fails(rt.store)
        try:
            with pytest.raises(_AuditDown):
                rt.settle_effect(a.run_id, "pay:I6", done=True, by="ops", result={"id": "c"})
        finally:
            del rt.store._audit_row  # type: ignore[attr-defined]
        [entry] = rt.store.journal(a.run_id, kind="effect")
        assert entry.status == "in_doubt"  # not settled without its record
        assert not [e for e in rt.store.events(a.run_id) if e.kind == "effect_settled"]
        assert not [r for r in rt.store.audit() if r.action == "settle_effect"]
        # done again: both
        rt.settle_effect(a.run_id, "pay:I6", done=True, by="ops", result={"id": "c"})
        [entry] = rt.store.journal(a.run_id, kind="effect")
        assert entry.status == "done"
        [rec] = [r for r in rt.store.audit() if r.action == "settle_effect"]
        assert (rec.actor, rec.outcome, rec.detail["done"]) == ("ops", "allowed", True)


def test_a_vote_and_its_record_stand_or_fall_together(url: str) -> None:
    with lw.Runtime(url) as rt:
        people(rt)
        big = rt.run_sync(make_loop(FOUR_EYES), task("INV-7", 50000), task_key="b", by="rita")
        req = rt.pending_approval(big.run_id)
        _audit_fails(rt.store)
        try:
            with pytest.raises(_AuditDown):
                rt.approve(big.run_id, by="ben", note="checked")
        finally:
            del rt.store._audit_row  # type: ignore[attr-defined]
        assert rt.store.votes(req.approval_id) == []  # no vote without its record
        assert not [r for r in rt.store.audit() if r.action == "approve"]
        assert rt.approve(big.run_id, by="ben", note="checked").status == "pending"
        [vote] = rt.store.votes(req.approval_id)
        [rec] = [r for r in rt.store.audit() if r.action == "approve"]
        assert (vote.by, rec.actor, rec.detail["votes"]) == ("ben", "ben", "1 of 2")


def test_a_settling_refused_for_its_note_is_audited(url: str) -> None:
    # a note with an escape sequence was refused after the entry was found, with no record
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_paying([], ValueError), TASK, task_key="A")
        with pytest.raises(lw.ConfigError, match="note"):
            rt.settle_effect(a.run_id, "pay:I6", done=False, by="ops", note="ok\x1b[2J")
        [rec] = [r for r in rt.store.audit() if r.action == "settle_effect"]
        assert (rec.actor, rec.outcome) == ("ops", "refused")
        assert rt.store.journal(a.run_id, kind="effect")[0].status == "in_doubt"
