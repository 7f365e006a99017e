"""Run, resume or roll back the large-values loop: ``runner.py STORE_URL TASK_KEY``.

Environment:

* ``BK_DIR``: the folder of the workload's files (``proposed.jsonl``, ``effects.log``,
  ``phases.log``);
* ``BK_ACTION``: ``run`` (run or resume the run of the task key to its end, the default) or
  ``rollback:K`` (roll the run back to cycle ``K``, then exit);
* ``BK_CRASH=PHASE:N``: SIGKILL this process the N-th time it reaches phase ``PHASE``;
* ``BK_COMMIT_KILL=N``: SIGKILL this process inside its N-th checkpoint commit, after the
  commit's writes and before its transaction commits.

On a normal return it prints ``{"status": ..., "cycles": ...}`` as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import loopwright as lw

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "crashpoints"))  # killpoint
sys.path.insert(0, str(Path(__file__).resolve().parent))  # this workload, not crashpoints'


import workload
from killpoint import kill_point, phase_hook


def kill_inside_commits(store: Any, n: int) -> None:
    """SIGKILL the process inside its ``n``-th checkpoint commit (``commit_request`` or
    ``commit_many``; a rollback's too): once the commit's statements ran, before the
    transaction commits."""
    local = threading.local()
    seen = [0]
    tx = store._tx

    @contextmanager
    def killing_tx() -> Iterator[Any]:
        with tx() as conn:
            yield conn
            if getattr(local, "committing", False):
                seen[0] += 1
                if seen[0] == n:
                    with open(Path(os.environ["BK_DIR"]) / "phases.log", "a") as fh:
                        fh.write(f"{os.getpid()} inside_commit\n")
                    os.kill(os.getpid(), signal.SIGKILL)

    def flagged(name: str) -> None:
        real = getattr(store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            local.committing = True
            try:
                return real(*args, **kwargs)
            finally:
                local.committing = False

        setattr(store, name, call)

    store._tx = killing_tx
    for name in ("commit_request", "commit_many", "commit"):
        flagged(name)


def main(argv: list[str]) -> int:
    url, key = argv
    on_phase = phase_hook(Path(os.environ["BK_DIR"]) / "phases.log", kill_point("BK_CRASH"))
    action = os.environ.get("BK_ACTION", "run")
    loop = workload.build_loop()
    with lw.Runtime(url) as rt:
        if os.environ.get("BK_COMMIT_KILL"):
            kill_inside_commits(rt.store, int(os.environ["BK_COMMIT_KILL"]))
        rt._on_phase = on_phase
        if action.startswith("rollback:"):
            run_id = rt.store.get_run(key).run_id
            rt.rollback(run_id, int(action.removeprefix("rollback:")), by="tester")
            result = rt.result(run_id)
        else:
            result = rt.run_sync(loop, workload.TASK, task_key=key)
    print(json.dumps({"status": result.status, "cycles": result.cycles}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
