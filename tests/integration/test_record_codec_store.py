"""A real run's cycle records, written compact (built packed or packed by the engine before it
masks them, or packed by the store) and read back whole: every checkpoint's record equals, key for key and in order, the
one the engine built."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

import loopwright as lw
from loopwright import _checkpoint
from loopwright._record_codec import unpack
from loopwright.store import _rows

TASK = {"goal": "g", "artifacts": {"doc": {"body": "", "title": ""}}}


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=(lw.Edit("doc", "body", f"d{ctx.cycle}"),),
            note="why" if ctx.cycle % 2 else "",
            usage=lw.Usage(0.001 * ctx.cycle, ctx.cycle, 0.0),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        body = state.artifacts["doc"].values()["body"]
        ok = body == "d4"
        findings = () if ok else (lw.Finding("not yet", "doc", "body"),)
        return lw.Verdict(passed=ok, score=1.0 if ok else 0.25, findings=findings)

    def held(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, evidence={"n": 0})

    return lw.Loop(
        name="codec",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check"), lw.Check(fn=held, name="held", held_out=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8)),
    )


def test_records_read_back_as_the_engine_built_them(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed: list[dict[str, Any]] = []
    built: list[dict[str, Any]] = []  # the cycle records the engine built packed
    pack = _rows.pack_record
    masked = _checkpoint._masked

    def spy(record: dict[str, Any]) -> dict[str, Any]:
        # (whole: the record that ends a run is the one built packed, with its mark)
        handed.append(unpack(copy.deepcopy(record)))
        return pack(record)

    def spy_masked(record: Any, events: Any, cols: Any, packed: bool = False) -> Any:
        if record is not None and packed:
            built.append(copy.deepcopy(record))
            handed.append(unpack(copy.deepcopy(record)))  # the whole record it stands for
        return masked(record, events, cols, packed)

    # Wherever a record is packed or built packed: the engine's cycle commits (a cycle that
    # goes on is built packed, ``Proposal.to_packed_dict``; one that ends the run is packed
    # with its ``ended`` mark), the store's for the others.
    monkeypatch.setattr(_checkpoint, "pack_record", spy)
    monkeypatch.setattr(_checkpoint, "_masked", spy_masked)
    monkeypatch.setattr(_rows, "pack_record", spy)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="codec")
        assert (r.status, r.cycles) == ("accepted", 4), (r.stop_reason, r.cycles, r.packet)
        stored = [c.record for c in rt.store.checkpoints(r.run_id) if c.record]
    cycle_records = [h for h in handed if "proposal" in h]
    assert len(cycle_records) == 4
    # A record built packed is ``pack``'s form of the whole one (nothing left to drop).
    assert len(built) == 3
    assert [json.dumps(pack(unpack(b))) for b in built] == [json.dumps(b) for b in built]
    # Every record handed over comes back, in order, exactly (types and key order included).
    assert [json.dumps(s) for s in stored] == [json.dumps(h) for h in handed]
    # The compact form is what was stored: the defaults are not in the row.
    packed = [json.dumps(pack(h)) for h in cycle_records]
    assert all(len(p) < len(json.dumps(h)) for p, h in zip(packed, cycle_records, strict=True))
