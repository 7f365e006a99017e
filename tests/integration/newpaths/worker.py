"""A worker driving the ``newpaths_kill`` runs of a store: ``worker.py DB WORK``.

With ``NP_PAUSE=PHASE:N`` the process stops itself (SIGSTOP) the N-th time the engine reports
phase ``PHASE``, holding the run's lease, until the test continues it (SIGCONT) or kills it
(SIGKILL): the test acts on the run at that exact point (no timing)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "crashpoints"), str(HERE.parents[1])]

import newpaths_kill as nk  # noqa: E402
from killpoint import kill_point  # noqa: E402

import loopwright as lw  # noqa: E402


def main(argv: list[str]) -> int:
    db, work = argv
    pause = kill_point("NP_PAUSE")
    seen: Counter[str] = Counter()

    def on_phase(phase: str) -> None:
        seen[phase] += 1
        if pause == (phase, seen[phase]):
            os.kill(os.getpid(), signal.SIGSTOP)

    loop = nk.loop_for("cap_then_edit", Path(work))
    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        stats = asyncio.run(lw.Worker(rt, loops={loop.name: loop}).run(once=True))
    print(json.dumps(stats.to_dict()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
