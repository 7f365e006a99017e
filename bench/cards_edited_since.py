"""What saying "edited since the request" costs a listing of requests (``_reuse_now.as_now``):
its runs' ``edited`` events are read in one query (``Store.events_of_runs``), through the
events' (run_id, id) index, so a run's whole log is walked. One parked run with 200,000 events.

    PYTHONPATH=src .venv/bin/python bench/cards_edited_since.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import loopwright as lw
from loopwright._reuse_now import as_now
from loopwright.store import NewEvent

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "integration"), os.path.join(HERE, "..", "tests")]
from test_show_parked_cost import TASK, _loop  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ev.db"
        with lw.Runtime(url) as rt:
            r = rt.run_sync(_loop(), TASK, task_key="x")
            st = rt.store
            for i in range(200):
                pad = "x" * 200
                st.append_events(
                    r.run_id, [NewEvent(1, "cycle_started", {"n": i, "pad": pad})] * 1000
                )
            rt.edit(r.run_id, "inv/x", 2, by="ana")
            reqs = st.approvals(run_id=r.run_id)
            for _ in range(3):
                t = time.perf_counter()
                as_now(st, reqs)
                print(f"as_now, a run of 200,000 events: {time.perf_counter() - t:.4f} s")


if __name__ == "__main__":
    main()
