"""What one look of the dashboard's poller reads does not grow with how long its runs are.

A look reads the open runs' and pending requests' marks through their indexes, then in full
only what changed. A request found new (or decided) was read by reading every request its run
ever made: a run that parks every 25 cycles made one more each time, so the look that found
its newest grew with the run (issue 14, invariant 8). It reads that one request now.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from loopwright.store import NewApproval, NewEvent, Store, open_store
from loopwright.web._feed import Feed


def _request(approval_id: str, cycle: int) -> NewApproval:
    return NewApproval(
        approval_id=approval_id,
        cycle=cycle,
        kind="risk",
        rule="review",
        what=f"look at cycle {cycle}",
        why="a periodic review",
        evidence={"cycle": cycle},
        diff="",
        action_hash=f"hash-{approval_id}",
        expires_at=None,
    )


def _long_run(store: Store, parks: int) -> tuple[str, int, int]:
    """A run that parked ``parks`` times (each request approved), 25 cycles apart, and runs."""
    rec, _ = store.create_run(
        run_id=f"run-{parks}",
        task_key=f"k{parks}",
        loop_name="loop",
        project="p",
        spec_ref=None,
        loop_version=None,
        contract={},
        task={},
        initial_state={"cycle": 0},
    )
    token = store.acquire_lease(rec.run_id, "me", 60)
    seq = 0
    for k in range(1, parks + 1):
        seq += 1
        cycle = 25 * k
        store.commit(
            rec.run_id,
            token,
            seq=seq,
            cycle=cycle,
            state={"cycle": cycle},
            record=None,
            events=[NewEvent(cycle, "approval_requested", {"approval_id": f"{rec.run_id}-{k}"})],
            run={"cycle": cycle, "status": "running"},
            approvals=[_request(f"{rec.run_id}-{k}", cycle)],
        )
        store.decide_approval(
            f"{rec.run_id}-{k}", status="approved", by="bob", note=None, now=float(k)
        )
    return rec.run_id, token, seq


_READS = ("run_marks", "pending_approval_marks", "get_run", "approvals", "approval")


def _look_that_finds_a_request(store: Store, parks: int) -> Counter[str]:
    """Rows each store read returns in the look that finds the run's newest request."""
    run_id, token, seq = _long_run(store, parks)
    feed = Feed(store)
    feed.poll()  # where things stand
    cycle = 25 * (parks + 1)
    store.commit(
        run_id,
        token,
        seq=seq + 1,
        cycle=cycle,
        state={"cycle": cycle},
        record=None,
        events=[],
        run={"cycle": cycle, "status": "awaiting_approval"},
        approvals=[_request(f"{run_id}-new", cycle)],
    )
    rows: Counter[str] = Counter()
    for name in _READS:
        real = getattr(store, name)

        def read(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            got = _real(*a, **k)
            rows[_name] += len(got) if isinstance(got, list) else got is not None
            return got

        setattr(store, name, read)
    changes = feed.poll()
    assert [(c.kind, c.new) for c in changes] == [("run", False), ("approval", True)]
    assert changes[1].approval is not None
    assert changes[1].approval.approval_id == f"{run_id}-new"
    return rows


def test_a_look_reads_the_same_however_many_requests_a_run_made(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "short.db")) as short_store:
        short = _look_that_finds_a_request(short_store, parks=2)
    with open_store(str(tmp_path / "long.db")) as long_store:
        long = _look_that_finds_a_request(long_store, parks=40)
    assert short["approval"] + short["approvals"] >= 1
    assert long == short, (short, long)
