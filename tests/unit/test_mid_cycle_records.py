"""``in_order_with_concluded``: a run's records read once, in order, each mid-cycle record with
whether its cycle concluded anywhere in the run — what reading every record first
(``concluded_cycles``) told, whichever way the records come (a rollback concludes a cycle
before its parked record; a cycle parked last never concludes), however many it holds back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright import _mid_cycle_records as mid
from loopwright._mid_cycle_records import in_order_with_concluded

Row = tuple[int, int, dict[str, Any] | None]

_RECORDS = st.one_of(
    st.none(),
    st.builds(
        lambda c, d: {"cycle": c, "decision": d},
        st.integers(0, 5),
        st.sampled_from(["parked", "effects", "edited", "stopped"]),
    ),
    st.builds(
        lambda c, d: {"cycle": c, "decision": d, "proposal": {}},
        st.integers(0, 5),
        st.sampled_from(["accepted", "revise", "refused"]),
    ),
)


def _read(rows: list[Row], rereads: list[int]) -> list[tuple[Row, bool | None]]:
    """Each row as it comes, and for a mid-cycle record whether the set given with it holds
    its cycle (``None`` for the others)."""

    def again() -> list[Row]:
        rereads.append(1)
        return rows

    out: list[tuple[Row, bool | None]] = []
    for row, concluded in in_order_with_concluded(iter(rows), lambda r: r[2], again):
        rec = row[2]
        mid_cycle = rec is not None and "proposal" not in rec and rec["decision"] in mid.MID_CYCLE
        out.append((row, rec["cycle"] in concluded if mid_cycle and rec else None))
    return out


def _as_read_twice(rows: list[Row]) -> list[tuple[Row, bool | None]]:
    concluded = {r.get("cycle") for _s, _c, r in rows if r and "proposal" in r}
    return [
        (
            row,
            row[2]["cycle"] in concluded
            if row[2] and "proposal" not in row[2] and row[2]["decision"] in mid.MID_CYCLE
            else None,
        )
        for row in rows
    ]


@given(st.lists(_RECORDS, max_size=40), st.integers(0, 6))
def test_as_the_records_read_twice_said(records: list[dict[str, Any] | None], hold: int) -> None:
    rows: list[Row] = [(i, (r or {}).get("cycle", 0), r) for i, r in enumerate(records)]
    saved = mid.HOLD
    mid.HOLD = hold
    try:
        rereads: list[int] = []
        got = _read(rows, rereads)
    finally:
        mid.HOLD = saved
    assert got == _as_read_twice(rows)
    assert len(rereads) <= 1


def test_the_records_are_read_again_only_past_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    parked: Row = (1, 1, {"cycle": 1, "decision": "parked"})
    after: list[Row] = [
        (s, s, {"cycle": s, "decision": "accepted", "proposal": {}}) for s in (2, 3)
    ]
    concluding: Row = (4, 1, {"cycle": 1, "decision": "accepted", "proposal": {}})
    rows = [parked, *after, concluding]
    rereads: list[int] = []
    assert _read(rows, rereads) == [(parked, True), *[(r, None) for r in after], (concluding, None)]
    assert rereads == []  # held back: three rows, then told by the fourth
    monkeypatch.setattr(mid, "HOLD", 1)
    assert _read(rows, rereads) == _as_read_twice(rows)
    assert rereads == [1]  # two held: the concluded cycles read from every record, once


def _fates(rows: list[tuple[dict[str, Any] | None, object]]) -> list[bool]:
    """Of each mid-cycle record of ``rows`` (record, its checkpoint's write-ahead state),
    whether its cycle never concluded, as the views read it."""
    numbered = [(i, 0, r, p) for i, (r, p) in enumerate(rows)]
    return [
        mid.never_concluded(row[2], concluded)
        for row, concluded in in_order_with_concluded(
            iter(numbered), lambda r: r[2], list, lambda r: r[3]
        )
        if row[2] and row[2].get("decision") in mid.MID_CYCLE
    ]


PARKED = {"cycle": 1, "decision": "parked", "approval_id": "A"}
WAITS = {"approval_id": "A", "cycle": 1}
CHECK_ONLY = {"cycle": 1, "decision": "accepted", "proposal": {}, "check_only": True}


def test_a_parked_cycle_let_go_never_concluded_whatever_cycle_carries_its_number() -> None:
    # denied, the run escalated (its write-ahead state let go), edited, a check-only cycle 1
    assert _fates([(PARKED, WAITS), (None, None), (CHECK_ONLY, None)]) == [True]
    # denied while an edit stood beside it: the check-only cycle went on from its state
    edit = {"decision": "edit", "part": "inv/x"}
    assert _fates([(PARKED, WAITS), (edit, WAITS), (CHECK_ONLY, None)]) == [False]
    # approved: its effects' record carries what it spent; they failed and were let go
    effects = {"cycle": 1, "decision": "effects"}
    running = {"stage": "effects", "cycle": 1}
    got = _fates([(PARKED, WAITS), (effects, running), (None, None), (CHECK_ONLY, None)])
    assert got == [False, True]
    # approved and concluded: neither lists what the concluding record holds
    done = {"cycle": 1, "decision": "accepted", "proposal": {}}
    assert _fates([(PARKED, WAITS), (effects, running), (done, None)]) == [False, False]
