"""A settling cut short: the process gone at the settling transaction's last write, its audit
record (``PeopleSQL._audit_row``), a fault at a fixed point; nothing of it may stay written."""

from __future__ import annotations

from typing import Any

import pytest

import loopwright as lw
from loopwright.store._people_sql import PeopleSQL


class Cut(Exception):
    """The process gone mid-settling (a fault at a fixed point of the transaction)."""


def _cut(*_args: Any, **_kw: Any) -> None:
    raise Cut("cut at the audit record: the entries and the packet are written before it")


def settle_cut_short(url: str, run_id: str, key: str, *, done: bool, by: str) -> None:
    """Settles ``key`` of ``run_id`` with the process gone at its audit record (``Cut``
    raised), and asserts that the run's packet and journal are as they were before it."""
    with lw.Runtime(url) as rt:
        before = (rt.store.get_run(run_id).packet, rt.store.journal(run_id))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PeopleSQL, "_audit_row", _cut)
        with lw.Runtime(url) as rt, pytest.raises(Cut):
            rt.settle_effect(run_id, key, done=done, by=by)
    with lw.Runtime(url) as rt:
        assert (rt.store.get_run(run_id).packet, rt.store.journal(run_id)) == before
