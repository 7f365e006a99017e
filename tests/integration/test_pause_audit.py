"""Who pauses and unpauses, in the audit log (stop 53): ``Runtime.unpause`` asks who first and
audits its refusals (a run not paused, an ended run), as a pause does; a pause's note is
refused after the role, audited; and the record of a pause is written in the transaction that
files it, so a pause filed always has its record and one refused or failed has none. SQLite
and PostgreSQL (``url``)."""

from __future__ import annotations

import time

import pytest
from doc_loop import TASK
from test_engine_core import make_loop

import loopwright as lw
from loopwright._authority import hash_token

ROLES = {"root": "admin", "op": "operator", "ap": "approver", "rd": "viewer"}


def _tok(name: str) -> str:
    return f"tok-{name}-0123456789"


def _people(url: str) -> None:
    with lw.Runtime(url) as rt:
        for name, role in ROLES.items():
            rt.store.add_user(name, roles=[role], limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(_tok(name)), now=time.time())


def _runs(url: str) -> tuple[str, str]:
    """(a run not started, a run that ended accepted), made before the store has users."""
    with lw.Runtime(url) as rt:
        ended = rt.run_sync(make_loop(), TASK, task_key="ended")
        assert ended.status == "accepted"
        open_run = rt.create(make_loop(), TASK, task_key="open")[0].run_id
    return open_run, ended.run_id


def test_unpause_asks_who_first_and_audits_its_refusals(url: str) -> None:
    """``Runtime.unpause`` of a run not paused was an unaudited ``ApprovalError``, to one who
    may not unpause too (the role was asked only of a pause found); a pause's note with an
    escape sequence was refused before the role, and unaudited. Who first, each refusal in the
    log; and a pause the store fails to file leaves no record claiming it was filed."""
    rid, ended = _runs(url)
    _people(url)
    with lw.Runtime(url) as rt:
        with pytest.raises(lw.NotPermittedError, match="operator role"):
            rt.unpause(rid, by="ap")
        with pytest.raises(lw.NotPermittedError, match="operator role"):
            rt.pause(rid, by="ap", note="\x1b[2J")
        with pytest.raises(lw.ApprovalError, match="is not paused"):
            rt.unpause(rid, by="op", origin="cli")
        with pytest.raises(lw.ApprovalError, match=r"already ended \(accepted\)"):
            rt.unpause(ended, by="op")
        with pytest.raises(lw.ConfigError, match="control character"):
            rt.pause(rid, by="op", note="\x1b[2J", origin="cli")
        with pytest.raises(lw.ConfigError, match="who lifts"):
            rt.unpause(rid, by=" ")

        def fails(*args: object, **kwargs: object) -> lw.Approval:
            raise lw.StoreError("the disk is full")

        real = rt.store.request_pause
        rt.store.request_pause = fails  # type: ignore[method-assign]
        with pytest.raises(lw.StoreError):
            rt.pause(rid, by="op", origin="cli")
        rt.store.request_pause = real  # type: ignore[method-assign]
        assert rt.store.approvals(run_id=rid) == []
        filed = rt.pause(rid, by="op", origin="cli")
        rt.unpause(rid, by="op", origin="cli")
        rows = [(a.actor, a.action, a.target, a.outcome, a.origin) for a in rt.store.audit()]
    on = f"run {rid}"
    assert ("ap", "unpause", on, "refused", "python") in rows
    assert ("ap", "pause", on, "refused", "python") in rows
    assert ("op", "unpause", on, "refused", "cli") in rows
    assert ("op", "unpause", f"run {ended}", "refused", "python") in rows
    assert ("op", "pause", on, "refused", "cli") in rows  # the note
    # one pause filed, one record of it: none for the one the store failed to file
    assert [r for r in rows if r[1:4] == ("pause", on, "allowed")] == [
        ("op", "pause", on, "allowed", "cli")
    ]
    # the lift: the run's unpause (it was the request's approve: not found by the run)
    assert [r for r in rows if r[1:4] == ("unpause", on, "allowed")] == [
        ("op", "unpause", on, "allowed", "cli")
    ]
    assert not [r for r in rows if r[2] == f"request {filed.approval_id}"]


def test_a_filed_pause_always_has_its_audit_record(url: str) -> None:
    """The record of a pause was written after the store had filed it: an audit write that
    failed there (a process gone, the connection lost) left a pause filed that no record
    said was made, and its caller an error. It is written in the filing's transaction."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:

        def fails(**kwargs: object) -> int:
            raise lw.StoreError("the audit write failed")

        rt.store.audit_put = fails  # type: ignore[method-assign]
        filed = rt.pause(rid, by="op", note="one look", origin="cli")
        del rt.store.audit_put  # (the instance's: the class's again)
        rows = [
            (a.actor, a.action, a.outcome, a.origin, a.detail)
            for a in rt.store.audit(target=f"run {rid}")
        ]
    assert rows == [
        ("op", "pause", "allowed", "cli", {"request": filed.approval_id, "note": "one look"})
    ]


def test_a_store_written_before_the_audit_argument_still_records_a_pause(url: str) -> None:
    """A store of one's own whose ``request_pause`` takes no ``audit`` (written before it):
    the engine writes the record after the filing, as it did (``audit_put``)."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:
        real = rt.store.request_pause

        def older(run_id: str, request: object, *, by: str, now: float) -> lw.Approval:
            return real(run_id, request, by=by, now=now)  # type: ignore[arg-type]

        rt.store.request_pause = older  # type: ignore[method-assign]
        filed = rt.pause(rid, by="op")
        rows = [(a.actor, a.action, a.detail) for a in rt.store.audit(target=f"run {rid}")]
    assert rows == [("op", "pause", {"request": filed.approval_id})]
