"""The escalation packet of a run started from Python resumes it in Python (helper
newuser52): its advice said "then `loopwright resume RUN`", which refuses such a run ("started
from Python, not from a spec file: resume it with Runtime.resume(run_id, loop)"). A run whose
loop was loaded from a spec keeps the command, which works for it."""

from __future__ import annotations

from pathlib import Path

import loopwright as lw

ACTOR = """
import loopwright as lw

def actor(ctx):
    return None  # the wrong type: the run escalates, advising a rollback and a resume

def check(state, proposal):
    return lw.Verdict(passed=True)
"""


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=False, score=0.1)


def _advice(loop: lw.Loop, store: Path) -> tuple[str, str]:
    with lw.Runtime(str(store)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"a": {"x": 1}}}, task_key="k")
        assert r.packet is not None
        return r.run_id[:12], str(r.packet["recommended_action"])


def _editing() -> lw.Loop:
    """A Python loop whose actor edits every cycle, never passing: it spends its 2 cycles."""
    return lw.Loop(
        name="e",
        actor=lambda ctx: lw.Proposal.edit("a", {"x": ctx.cycle}),
        verifiers=[lw.Check(fn=_check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


def _spec(tmp_path: Path) -> lw.Loop:
    (tmp_path / "code.py").write_text(ACTOR)
    (tmp_path / "loop.toml").write_text(
        'name = "s"\n[actor]\nref = "code.py:actor"\n[[verifiers]]\nref = "code.py:check"\n'
        "[contract.budget]\nmax_cycles = 2\n"
    )
    return lw.load_spec(tmp_path / "loop.toml")


def test_a_python_runs_advice_resumes_it_in_python(tmp_path: Path) -> None:
    wrong = lw.Loop(
        name="e",
        actor=lambda ctx: None,  # type: ignore[arg-type,return-value]
        verifiers=[lw.Check(fn=_check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    run, said = _advice(wrong, tmp_path / "a.db")
    assert f"`loopwright rollback {run} --to-cycle 0`" in said, said
    assert f"then `Runtime.resume('{run}', loop)` in Python" in said, said
    assert "loopwright resume" not in said, said
    run, said = _advice(_editing(), tmp_path / "b.db")
    assert f"`loopwright fork {run} --at-cycle 2 --contract FILE`" in said, said
    assert "then `Runtime.resume(NEW_RUN, loop)` in Python" in said, said
    assert "loopwright resume" not in said, said


def test_a_spec_runs_advice_keeps_the_command(tmp_path: Path) -> None:
    run, said = _advice(_spec(tmp_path), tmp_path / "c.db")
    assert f"then `loopwright resume {run}`" in said, said
    assert "Runtime.resume" not in said, said


def _cancelled_without_its_loop(loop: lw.Loop, store: Path) -> tuple[str, str]:
    with lw.Runtime(str(store)) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"a": {"x": 1}}}, task_key="k")
        done = rt.cancel(rec.run_id, by="ana")  # no loop given: its record says where it began
        assert done.status == "cancelled" and done.packet is not None
        return rec.run_id[:12], str(done.packet["recommended_action"])


def test_a_python_run_cancelled_without_its_loop_is_resumed_in_python(tmp_path: Path) -> None:
    """(polish52) A cancel without the loop read no spec_ref off the loop: the packet of a
    run started from Python named `loopwright resume`, which refuses it."""
    run, said = _cancelled_without_its_loop(_editing(), tmp_path / "p.db")
    assert f"`loopwright fork {run} --at-cycle 0`" in said, said
    assert "then `Runtime.resume(NEW_RUN, loop)` in Python" in said, said
    assert "loopwright resume" not in said, said
    run, said = _cancelled_without_its_loop(_spec(tmp_path), tmp_path / "s.db")
    assert "then `loopwright resume` the new run" in said, said
    assert "Runtime.resume" not in said, said
