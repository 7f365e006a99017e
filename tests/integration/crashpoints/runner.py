"""Run (or resume) the crash-point loop: ``runner.py DB TASK_KEY``.

Environment:

* ``CP_DIR``: the folder of the workload's files (effects log, call logs, ``phases.log``);
* ``CP_MODE``: the workload (see ``workload.py``);
* ``CP_CRASH=PHASE:N``: SIGKILL this process the N-th time it reaches phase ``PHASE`` (a
  phase boundary of the engine's cycle, reported through ``Runtime._on_phase``).

Every phase reached is appended to ``$CP_DIR/phases.log`` as ``<pid> <phase>`` (before the
kill, so the log shows where each process died). On a normal return it prints the run's
result as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import loopwright as lw

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload
from killpoint import kill_point, phase_hook


def main(argv: list[str]) -> int:
    db, key = argv
    on_phase = phase_hook(Path(os.environ["CP_DIR"]) / "phases.log", kill_point("CP_CRASH"))
    loop = workload.build_loop()
    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        result = rt.run_sync(loop, workload.TASK, task_key=key)
    print(json.dumps(result.to_dict(), default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
