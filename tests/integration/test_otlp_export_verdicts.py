"""The OTLP export keeps, of each cycle's verdicts, what the call spans read of them (a cost,
a model and its tokens), and nothing for a verdict that reported none: every cycle held a
dict per verifier (``{"usage": None, "evidence": {}}``) for the whole export. Counted with
tracemalloc at two lengths, never timed; the document written is the same."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import loopwright as lw
from loopwright.trace import otlp_trace, write_otlp


def _loop(cycles: int) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "body"),))

    def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="otlp",
        actor=actor,
        verifiers=[
            lw.Check(fn=check, name="check"),
            lw.Check(fn=audit, name="audit", held_out=True),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _peak(tmp_path: Path, cycles: int) -> int:
    with lw.Runtime(str(tmp_path / f"{cycles}.db")) as rt:
        run = rt.run_sync(_loop(cycles), {"artifacts": {"doc": {"body": "x"}}}, task_key="k")
        write_otlp(rt.store, run.run_id, io.StringIO())  # imports, before anything is counted
        out = io.StringIO()
        tracemalloc.start()
        try:
            write_otlp(rt.store, run.run_id, _Discard())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        write_otlp(rt.store, run.run_id, out)
        assert json.loads(out.getvalue()) == otlp_trace(rt.store, run.run_id)
    return peak


class _Discard(io.StringIO):
    def write(self, s: str) -> int:
        return len(s)


def test_the_export_does_not_hold_empty_verdicts_per_cycle(tmp_path: Path) -> None:
    """Two verifiers that report no cost: 1.2 KB a cycle held before (two dicts of a key
    each, in a dict per cycle), about 0.4 KB now (the positions of the cycle's events)."""
    _peak(tmp_path, 3)
    short, long = _peak(tmp_path, 100), _peak(tmp_path, 600)
    per_cycle = (long - short) / 500
    assert per_cycle < 800, (short, long, per_cycle)
