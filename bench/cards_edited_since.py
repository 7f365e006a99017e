"""What saying "edited since the request" costs a listing of requests (``_reuse_now.as_now``):
its runs' ``edited`` events since each run's newest ``approval_requested`` are read in one
query (``Store.events_of_runs``), found from the end of the events' (run_id, id) index. A run
of 200,000 events before it parked, edited while it waits: the listing, and the same read of
the whole log (``since=None``, as the first version of this change read it).

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
            rec, _new = rt.create(_loop(), TASK, task_key="x")
            st = rt.store
            for i in range(200):
                pad = "x" * 200
                st.append_events(
                    rec.run_id, [NewEvent(0, "cycle_started", {"n": i, "pad": pad})] * 1000
                )
            r = rt.resume_sync(rec.run_id, _loop())
            assert r.status == "awaiting_approval", r.status
            rt.edit(r.run_id, "inv/x", 2, by="bo")  # beside the request
            reqs = st.approvals(run_id=r.run_id)
            for _ in range(3):
                t = time.perf_counter()
                shown = as_now(st, reqs)
                took = time.perf_counter() - t
                t = time.perf_counter()
                st.events_of_runs([r.run_id], ("edited",))
                whole = time.perf_counter() - t
                print(f"as_now {took:.4f} s; the whole log's edits {whole:.4f} s")
            assert any("edited since the request: inv/x by bo" in a.what for a in shown)


if __name__ == "__main__":
    main()
