"""One step of a ``newpaths_kill`` scenario in a process of its own:
``runner.py DB WORK SCENARIO STEP`` (``STEP``: ``run``, ``resume`` or a person's operation).

With ``NP_KILL=PHASE:N`` the process SIGKILLs itself the N-th time the engine reports phase
``PHASE`` (``crashpoints/killpoint.py``); every phase reached is logged to
``$WORK/phases.log`` first. On a normal return it prints the run's status as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "crashpoints"), str(HERE.parents[1])]

import newpaths_kill as nk  # noqa: E402
from killpoint import kill_point, phase_hook  # noqa: E402

import loopwright as lw  # noqa: E402


def main(argv: list[str]) -> int:
    db, work, scenario, step = argv
    with lw.Runtime(db) as rt:
        if step not in nk.ENGINE_STEPS:
            nk.person_step(rt, step)
            print(json.dumps({"status": "done"}))
            return 0
        rt._on_phase = phase_hook(Path(work) / "phases.log", kill_point("NP_KILL"))
        r = nk.engine_step(rt, nk.loop_for(scenario, Path(work)), step)
    print(json.dumps({"status": r.status}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
