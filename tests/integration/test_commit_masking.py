"""Invariant 9's last net on the store: the record, events and run columns a commit writes are
the masked ones, whether the commit goes alone (one run) or in a group commit (several)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

from support.records import cycle_record

import loopwright as lw
from loopwright._checkpoint import _masked
from loopwright._record_codec import pack, unpack
from loopwright.store import NewEvent

SECRET = "sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcd"
TASK = {"goal": "g", "artifacts": {"doc": {"body": ""}}}


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        # The note is the actor's own text: the engine masks it before the store sees it.
        return lw.Proposal(edits=(lw.Edit("doc", "body", f"d{ctx.cycle}"),), note=f"k {SECRET}")

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(
        name="mask",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def _raw(db: Path) -> bytes:
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return b"".join(p.read_bytes() for p in db.parent.glob(db.name + "*"))


def test_a_lone_commit_writes_the_masked_record_and_events(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="k")
        assert r.cycles == 3
        ck = rt.store.latest_checkpoint(r.run_id)
        assert ck.record is not None and ck.record["proposal"]["note"] == "k ***"
        notes = [e.data.get("note") for e in rt.store.events(r.run_id) if e.kind == "proposal"]
        assert notes == ["k ***"] * 3
    assert SECRET.encode() not in _raw(db)


def test_grouped_commits_write_the_masked_record_and_events(tmp_path: Path) -> None:
    db = tmp_path / "s.db"

    async def both(rt: lw.Runtime) -> list[lw.RunResult]:
        return list(
            await asyncio.gather(*(rt.run(_loop(), TASK, task_key=f"k{i}") for i in range(2)))
        )

    with lw.Runtime(db) as rt:
        results = asyncio.run(both(rt))
        assert [r.cycles for r in results] == [3, 3]
    assert SECRET.encode() not in _raw(db)


def test_the_net_masks_the_packed_record_and_every_column_that_is_not_a_number() -> None:
    """``_masked`` hands the store the record in its stored form (defaults left out) and scans
    the columns only when one is not a number: a secret in a string column (a packet, a stop
    cause) is masked as before, numbers come back as they were."""
    record = cycle_record(note=f"k {SECRET}")
    events = [NewEvent(1, "proposal", {"note": f"k {SECRET}"}), NewEvent(1, "decision", {})]
    numbers = {"cycle": 1, "best_score": None, "cost_usd": 0.0, "tokens": 3, "seconds": 0.5}
    rec, evs, cols = _masked(record, events, numbers)
    assert rec is not None and "held_out" not in rec and "duplicate" not in rec  # packed
    assert unpack(rec)["proposal"]["note"] == "k ***"
    assert rec == pack({**record, "proposal": {**record["proposal"], "note": "k ***"}})
    assert [e.data for e in evs] == [{"note": "k ***"}, {}]
    assert cols is numbers
    clean = cycle_record()
    rec, evs, cols = _masked(clean, events[1:], numbers)
    assert rec == pack(clean) and evs == events[1:] and cols is numbers
    packet = {**numbers, "status": "escalated", "packet": {"stop_cause": f"saw {SECRET}"}}
    rec, evs, cols = _masked(clean, events[1:], packet)
    assert cols["packet"] == {"stop_cause": "saw ***"} and cols["tokens"] == 3
    assert rec == pack(clean)


def test_a_commit_record_is_scanned_but_not_kept_in_the_clean_texts_cache(
    tmp_path: Path,
) -> None:
    """A cycle's commit names its cycle, so its text never repeats: the net scans it without
    keeping it among the clean texts (which would hold up to 256 such texts, and empty them
    all, a repeating verdict's too, every 256 cycles). A repeating verdict stays cached."""
    from loopwright import _redact

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "body", f"d{ctx.cycle}"),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("still open"),))

    loop = lw.Loop(
        name="clean",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=12)),
    )
    _redact._clean_texts.clear()
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.cycles == 12
        records = [c.record for c in rt.store.checkpoints(r.run_id) if c.record is not None]
    assert len(records) == 12
    kept = list(_redact._clean_texts)
    assert not [t for t in kept if '"proposal":' in t], kept  # no cycle's record
    assert any('"still open"' in t for t in kept), kept  # the verdict, cached once
    assert len(kept) < 12, kept


LATE = "q7late-exported-value-42"  # no shape of its own: masked only as an environment secret


def test_a_secret_exported_mid_run_is_masked_from_then_on(url: str, monkeypatch: Any) -> None:
    """Invariant 9 with a changed environment: the actor exports a secret-named variable in
    cycle 2; from then on its value is masked in every record, event and verdict the run
    stores, and in the findings the actor is shown — the verifier's verdict too, whose text
    is the same every cycle and was found clean in cycle 1 (before the export it is no
    secret: stored as it is). No cache of the environment or of clean texts may answer with
    what held before the export."""
    monkeypatch.delenv("LATE_API_KEY", raising=False)
    shown: dict[int, list[str]] = {}

    def actor(ctx: lw.Context) -> lw.Proposal:
        shown[ctx.cycle] = [f.message for f in ctx.findings]
        if ctx.cycle == 2:
            monkeypatch.setenv("LATE_API_KEY", LATE)
        return lw.Proposal(edits=(lw.Edit("doc", "body", f"d{ctx.cycle}"),), note=f"n {LATE}")

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding(f"saw {LATE}"),))

    loop = lw.Loop(
        name="late",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.cycles == 4
        records = {c.cycle: c.record for c in rt.store.checkpoints(r.run_id) if c.record}
        events = list(rt.store.events(r.run_id))
    assert sorted(records) == [1, 2, 3, 4]
    # cycle 1: not yet a secret, stored as it is (the test can tell masked from not)
    assert LATE in json.dumps(records[1])
    for cycle in (2, 3, 4):
        text = json.dumps(records[cycle])
        assert LATE not in text, (cycle, text)
        assert "n ***" in text and "saw ***" in text, (cycle, text)
    late = [e for e in events if e.cycle >= 2 and LATE in json.dumps(e.data, default=str)]
    assert late == []
    assert shown[2] == [f"saw {LATE}"]  # cycle 1's verdict, before the export
    assert shown[3] == shown[4] == ["saw ***"]
