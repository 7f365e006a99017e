"""Run (or pause) the pause-kill loop in a process of its own: ``pause_runner.py DB WORK MODE``.

``MODE`` ``run``: run the doc loop (task key ``pk``); its actor logs each call to
``WORK/calls.log`` and, at call ``PK_PAUSE_AT``, files a person's pause from another runtime.
``MODE`` ``pause``: pause the run (created, not started) as a person does, from this process.
``PK_KILL=PHASE:N``: SIGKILL this process the N-th time it reaches ``PHASE`` (the engine's
phase boundaries, and ``pause_filed``: the pause's request written, the run not parked yet).
Every phase reached goes to ``WORK/phases.log`` first."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import loopwright as lw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "crashpoints"))

from doc_loop import TASK, fields  # noqa: E402
from killpoint import kill_point, phase_hook  # noqa: E402
from test_engine_core import fixer  # noqa: E402


def make_loop(db: str, work: Path, pause_at: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        log = work / "calls.log"
        with open(log, "a") as fh:
            fh.write(f"{ctx.cycle}\n")
        if len(log.read_text().split()) == pause_at:
            with lw.Runtime(db) as person:
                person.pause(ctx.run_id, by="ann")
        return fixer(ctx)

    contract = lw.Contract(budget=lw.Budget(max_cycles=10))
    return lw.Loop(name="pk", actor=actor, verifiers=[fields], contract=contract)


def main(argv: list[str]) -> int:
    db, work_s, mode = argv
    work = Path(work_s)
    on_phase = phase_hook(work / "phases.log", kill_point("PK_KILL"))
    loop = make_loop(db, work, int(os.environ.get("PK_PAUSE_AT", "0")))
    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        if mode == "run":
            rt.run_sync(loop, TASK, task_key="pk")
        else:
            rec, _ = rt.create(loop, TASK, task_key="pk")
            rt.pause(rec.run_id, by="ann")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
