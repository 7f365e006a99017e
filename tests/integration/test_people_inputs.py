"""A person's decision or operation given a wrong-typed argument through the Python API (a
note that is a number, a name that is not text or holds a NUL): refused with a ConfigError
naming the field, before anything is recorded, and the request stays pending. Before, each
failed deep inside (``len`` of an int, a list bound as a column, ``.strip`` of a number), and
a NUL in a name was kept by SQLite where PostgreSQL refuses it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw


@lw.effect("spend", key=lambda a: a["invoice"])
def _pay(invoice: str, *, key: str) -> dict[str, str]:
    return {"paid": invoice}


LOOP = lw.Loop(
    name="people-inputs",
    actor=lambda ctx: lw.Proposal(
        edits=(lw.Edit("inv", "paid", True),), effects=(_pay.call(invoice="INV-1"),)
    ),
    verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="check")],
    contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    effects=[_pay],
)

Act = Callable[[lw.Runtime, str], Any]


@pytest.mark.parametrize(
    ("act", "field"),
    [
        (lambda rt, r: rt.approve(r, by="ann", note=5), "note"),
        (lambda rt, r: rt.deny(r, by="ann", note=["too", "much"]), "note"),
        (lambda rt, r: rt.approve(r, by="ann", note=b"ok"), "note"),
        (lambda rt, r: rt.approve(r, by=7), "by"),
        (lambda rt, r: rt.approve(r, by="a\x00nn"), "by"),
        (lambda rt, r: rt.approve(r, by="ann", approval_id=3), "request"),
        (lambda rt, r: rt.cancel(r, by=7), "by"),
        (lambda rt, r: rt.cancel(r, by="a\x00nn"), "by"),
        (lambda rt, r: rt.fork(r, 0, by=7), "by"),
        (lambda rt, r: rt.rollback(r, 0, by="a\x00nn"), "by"),
        (lambda rt, r: rt.edit(r, "inv/note", "x", by="ann", note=5), "note"),
    ],
)
def test_a_wrong_typed_person_argument_is_refused_naming_it(
    tmp_path: Path, act: Act, field: str
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(LOOP, {"artifacts": {"inv": {"paid": False, "note": ""}}})
        assert r.status == "awaiting_approval"
        with pytest.raises(lw.ConfigError) as err:
            act(rt, r.run_id)
        assert err.value.field == field
        assert rt.store.get_run(r.run_id).status == "awaiting_approval"
        assert rt.pending_approval(r.run_id).status == "pending"
        assert rt.store.list_runs() == [rt.store.get_run(r.run_id)]  # nothing forked
