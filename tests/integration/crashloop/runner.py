"""Run (or resume) one crash/resume task in a subprocess: ``runner.py DB SPEC TASK.json KEY``.

With ``CRASHLOOP_KILL=PHASE:N`` the process SIGKILLs itself the N-th time the engine reports
phase ``PHASE`` (a phase boundary of the cycle, through ``Runtime._on_phase``): the kill lands
at a known point of the cycle whatever the machine's load. Every phase reached is appended to
``DB.phases`` as ``<pid> <phase>`` before the kill, so the log shows where each process died.
On a normal return it prints the run's result as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import loopwright as lw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "crashpoints"))

from killpoint import kill_point, phase_hook


def main(argv: list[str]) -> int:
    db, spec, task_path, key = argv
    on_phase = phase_hook(Path(db + ".phases"), kill_point("CRASHLOOP_KILL"))
    loop = lw.load_spec(spec)
    task = json.loads(Path(task_path).read_text())
    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        result = rt.run_sync(loop, task, task_key=key)
    print(json.dumps(result.to_dict(), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
