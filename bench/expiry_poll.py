"""What a worker's poll pays to find the requests expired on the store's clock (expiry49).

Each poll with a free slot asks ``Store.expired_requests`` before it claims. This script
counts what that read costs on SQLite as the store fills with pending requests that will
expire later, decided requests, and requests that never expire: the SQLite VM steps of the
read (a progress handler called every step: a count of the rows and index entries visited,
not a time), with 0 and with 5 requests expired. Flat across sizes means the read walks only
the expired end of the partial index ``approvals_expiring``.

    PYTHONPATH=src python bench/expiry_poll.py [--sizes 100,1000,10000]
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from loopwright.store import NewApproval
from loopwright.store.sqlite import SQLiteStore


def _request(approval_id: str, expires_at: float | None) -> NewApproval:
    return NewApproval(
        approval_id=approval_id, cycle=1, kind="effect", rule=None, what="pay", why="w",
        evidence={}, diff=None, action_hash="h", expires_at=expires_at,
    )  # fmt: skip


def _fill(store: SQLiteStore, n: int) -> None:
    """``n`` parked runs, each with a request expiring in an hour, a decided request and a
    request that never expires."""
    later = time.time() + 3600
    for i in range(n):
        rid, _ = store.create_run(
            run_id=f"r{i:06d}", task_key=f"k{i}", loop_name="l", project="p", spec_ref=None,
            loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
        )  # fmt: skip
        token = store.acquire_lease(rid.run_id, "bench", 60)
        reqs = [_request(f"a{i:06d}{j}", exp) for j, exp in enumerate((later, later, None))]
        store.commit(
            rid.run_id, token, seq=1, cycle=1, state={"cycle": 1}, record=None, events=[],
            run={"status": "awaiting_approval"}, approvals=reqs,
        )  # fmt: skip
        store.release_lease(rid.run_id, token)
        store.decide_approval(f"a{i:06d}1", status="approved", by="b", note=None, now=1.0)


def _steps(store: SQLiteStore) -> tuple[int, int]:
    """The requests one poll's read finds, and the VM steps it took."""
    ticks = itertools.count()
    store._db.set_progress_handler(lambda: next(ticks) * 0, 1)  # (0: go on)
    try:
        found = len(store.expired_requests(limit=100))
    finally:
        store._db.set_progress_handler(None, 1)
    return found, next(ticks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100,1000,10000")
    sizes = [int(x) for x in ap.parse_args().sizes.split(",")]
    print("| parked runs | requests stored | expired | VM steps |")
    print("|---:|---:|---:|---:|")
    for n in sizes:
        with tempfile.TemporaryDirectory() as d, SQLiteStore(Path(d) / "s.db") as s:
            _fill(s, n)
            found, steps = _steps(s)
            print(f"| {n:,} | {3 * n:,} | {found} | {steps:,} |")
            s._db.execute(
                "UPDATE approvals SET expires_at = 1 WHERE approval_id IN "
                "(SELECT approval_id FROM approvals WHERE status = 'pending' "
                "AND expires_at IS NOT NULL LIMIT 5)"
            )
            s._db.commit()
            found, steps = _steps(s)
            print(f"| {n:,} | {3 * n:,} | {found} | {steps:,} |")


if __name__ == "__main__":
    main()
