"""A cycle finished in a later process than the one whose actor made its proposal — parked for
an approval, or resumed from its effects' write-ahead after a crash — records the feedback
memory that actor was shown (``record["memory"]``, what ``context_reuse_rate`` counts and a
recovered reflection is shown), as the uninterrupted cycle does. Before, it recorded none: an
outside probe's killed runs differed from the uninterrupted one in exactly that."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import loopwright as lw

SHOWN: dict[int, list[str]] = {}


def _actor(ctx: lw.Context) -> lw.Proposal:
    SHOWN[ctx.cycle] = [str(m["memory_id"]) for m in ctx.memory]
    part = "pay" if ctx.cycle == 3 else f"p{ctx.cycle}"
    return lw.Proposal.edit("doc", {part: f"v{ctx.cycle}"})


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=False, score=0.1 * state.cycle, findings=(lw.Finding("open", "doc"),))


def _loop() -> lw.Loop:
    return lw.Loop(
        name="shown",
        actor=_actor,
        verifiers=[lw.Check(fn=_check, name="check")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=4),
            risk=(lw.RiskRule(name="pay", touches=("doc/pay",)),),
        ),
        reflector=lambda ctx, verdicts: f"cycle {ctx.cycle} left a finding open",
    )


def _records(url: str, run_id: str) -> dict[int, dict[str, Any]]:
    with lw.Runtime(url) as rt:
        return {
            int(rec["cycle"]): rec
            for _seq, _n, rec in rt.store.iter_records(run_id)
            if rec and "proposal" in rec
        }


def test_a_parked_cycle_records_the_memory_its_actor_was_shown(url: str) -> None:
    SHOWN.clear()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), {"artifacts": {"doc": {"p0": ""}}}, task_key="t")
        assert r.status == "awaiting_approval" and r.cycles == 2
        rt.approve(r.run_id, by="dave")
    assert SHOWN[3], SHOWN  # the reflections of cycles 1 and 2 were recalled into cycle 3
    with lw.Runtime(url) as rt:  # approved and resumed by another runtime (another process)
        done = rt.resume_sync(r.run_id, _loop())
    assert done.cycles == 4
    recs = _records(url, r.run_id)
    assert recs[3]["memory"] == SHOWN[3], (recs[3]["memory"], SHOWN[3])
    assert recs[4]["memory"] == SHOWN[4]


WORKER = """
import os, signal, sys
sys.path.insert(0, {here!r})
import loopwright as lw
import test_memory_shown_across_a_resume as t

@lw.effect("note", requires_success=False)
def note(n: int, *, key: str) -> dict:
    return {{"n": n}}

def actor(ctx):
    t.SHOWN[ctx.cycle] = [str(m["memory_id"]) for m in ctx.memory]
    print("SHOWN", ctx.cycle, ",".join(t.SHOWN[ctx.cycle]), flush=True)
    return lw.Proposal(edits=(lw.Edit("doc", f"p{{ctx.cycle}}", "v"),),
                       effects=(note.call(n=ctx.cycle),) if ctx.cycle == 3 else ())

loop = lw.Loop(name="shown-fx", actor=actor, verifiers=[lw.Check(fn=t._check, name="check")],
               contract=lw.Contract(budget=lw.Budget(max_cycles=4)), effects=[note],
               reflector=lambda ctx, v: f"cycle {{ctx.cycle}} left a finding open")
with lw.Runtime({url!r}) as rt:
    if os.environ.get("KILL"):
        rt._on_phase = lambda p: p == "before_effect_intent" and os.kill(os.getpid(), signal.SIGKILL)
    r = rt.run_sync(loop, {{"artifacts": {{"doc": {{"p0": ""}}}}}}, task_key="fx")
    print("RUN", r.run_id, r.cycles, flush=True)
"""


def test_a_cycle_resumed_from_its_write_ahead_records_the_memory_shown(
    url: str, tmp_path: Path
) -> None:
    """SIGKILL after cycle 3's write-ahead, before its effect (the engine's phase hook); the
    next process finishes cycle 3 from the write-ahead without asking the actor again."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(here=str(Path(__file__).parent), url=url))
    env = {**os.environ, "KILL": "1"}
    first = subprocess.run(
        [sys.executable, str(script)], check=False, env=env, capture_output=True, text=True
    )
    assert first.returncode == -signal.SIGKILL, first.stderr
    shown = {
        int(line.split()[1]): [m for m in [*line.split(), ""][2].split(",") if m]
        for line in first.stdout.splitlines()
        if line.startswith("SHOWN")
    }
    assert shown[3], first.stdout  # cycle 3's actor was shown the earlier reflections
    env.pop("KILL")
    second = subprocess.run(
        [sys.executable, str(script)], check=False, env=env, capture_output=True, text=True
    )
    assert second.returncode == 0, second.stderr
    assert "SHOWN 3 " not in second.stdout  # finished from the write-ahead, not asked again
    run_id = next(x.split()[1] for x in second.stdout.splitlines() if x.startswith("RUN"))
    assert _records(url, run_id)[3]["memory"] == shown[3]
