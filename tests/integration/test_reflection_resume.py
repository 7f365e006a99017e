"""A reflection survives a crash: a run that dies between a cycle's commit and that cycle's
reflection reflects on it when resumed, from the context the actor had and the cycle's
visible verdicts, and the run goes on as an uninterrupted one does (the next cycle's actor is
shown the same notes). A reflection whose note was written just before the crash is not asked
for a second time. Crashes are placed at phase boundaries (``Runtime._on_phase``) or in the
store's write, by a ``BaseException`` no engine handler catches: nothing depends on timing."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, phase_hook
from support.dashboard import dashboard

import loopwright as lw
from loopwright.store import Store

CYCLES = 6
TASK = {"goal": "a doc the checker never accepts", "artifacts": {"doc": {"body": "b0"}}}


def actor(ctx: lw.Context) -> lw.Proposal:
    # The notes the actor is shown go into its work: a lost reflection changes the state.
    seen = sorted(str(m["text"]) for m in ctx.memory)
    return lw.Proposal.edit("doc", {"body": f"c{ctx.cycle} after {seen}"})


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    body = state.values()["doc"]["body"]
    return lw.Verdict(
        passed=False,
        score=0.25,
        findings=(lw.Finding(f"{body[:3]} is not right", "doc", "body", "content"),),
    )


class Reflector:
    """Writes a note from what it is shown, and remembers every call it had."""

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.calls = calls

    def __call__(self, ctx: lw.Context, verdicts: Any) -> str:
        seen = {
            "cycle": ctx.cycle,
            "artifacts": ctx.artifacts,
            "findings": [f.message for f in ctx.findings],
            "memory": sorted(str(m["text"]) for m in ctx.memory),
            "verdicts": {
                k: [f.message for f in v.findings] for k, v in sorted(dict(verdicts).items())
            },
        }
        self.calls.append(seen)
        return f"note on cycle {ctx.cycle}: {seen['verdicts']}"


def make_loop(calls: list[dict[str, Any]]) -> lw.Loop:
    return lw.Loop(
        name="reflecting",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        reflector=Reflector(calls),
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


def outcome(store: Store, run_id: str) -> dict[str, Any]:
    """What a crash must not change: the final part value, the run's end, each cycle's
    reflection (its note, and the cycle it is about) and how each was recorded."""
    rec = store.get_run(run_id)
    notes = sorted(
        (int(m["source"]["cycle"]), str(m["text"]), str(m["status"]))
        for m in store.memory_query(scopes=[("task", rec.task_key)])
        if m["signal"] == "reflection"
    )
    reflected = sorted(e.cycle for e in store.events(run_id) if e.kind == "reflected")
    state = store.latest_checkpoint(run_id).task_state()
    return {
        "end": (rec.status, rec.stop_reason, rec.cycle),
        "body": state.values()["doc"]["body"],
        "notes": notes,
        "reflected": reflected,
    }


def run_crashing(db: Path, crash: tuple[str, int] | None) -> tuple[dict[str, Any], list[Any]]:
    """Run the loop, crashing once at ``crash`` (a new runtime resumes it), to the end."""
    calls: list[dict[str, Any]] = []
    crashed = False
    with lw.Runtime(db) as rt:
        rt._on_phase = phase_hook(crash)
        try:
            rt.run_sync(make_loop(calls), TASK, task_key="k")
        except Crash:
            crashed = True
    assert crashed == (crash is not None)
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        if crashed:
            r = rt.resume_sync(rec.run_id, make_loop(calls))
            assert r.cycles == CYCLES
        return outcome(rt.store, rec.run_id), calls


def crashed_at(db: Path, crash: tuple[str, int]) -> list[dict[str, Any]]:
    """Run the loop into ``db`` until it crashes at ``crash``; the reflector's calls so far
    (the list the resumed run's reflector goes on appending to)."""
    calls: list[dict[str, Any]] = []
    with lw.Runtime(db) as rt:
        rt._on_phase = phase_hook(crash)
        with pytest.raises(Crash):
            rt.run_sync(make_loop(calls), TASK, task_key="k")
    return calls


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[Any]]:
    out, calls = run_crashing(tmp_path_factory.mktemp("ref") / "ref.db", None)
    # What the comparisons below rest on: every cycle but the last is reflected on, and each
    # note reaches the next cycle's actor (its part value names it).
    assert out["reflected"] == list(range(1, CYCLES))
    assert [c["cycle"] for c in calls] == list(range(1, CYCLES))
    assert "note on cycle 1" in calls[1]["memory"][0]
    assert "note on cycle" in out["body"]
    return out, calls


# after_checkpoint N: 1 is the run's creation, N = k + 1 the commit of cycle k
@pytest.mark.parametrize("n", range(2, CYCLES + 1))
def test_a_run_killed_before_its_reflection_reflects_when_resumed(
    tmp_path: Path, n: int, reference: tuple[dict[str, Any], list[Any]]
) -> None:
    out, calls = run_crashing(tmp_path / "s.db", ("after_checkpoint", n))
    ref_out, ref_calls = reference
    assert out == ref_out
    # The reflector was shown what the uninterrupted run showed it, the crashed cycle too:
    # the context the actor had (rebuilt from the checkpoint before the cycle) and the
    # cycle's visible verdicts.
    assert calls == ref_calls


def test_a_note_written_before_the_crash_is_not_asked_for_again(
    tmp_path: Path, reference: tuple[dict[str, Any], list[Any]]
) -> None:
    """The note of cycle 2 is in memory when the process dies, before the run records that it
    reflected: resumed, the run records that note and does not call the reflector again."""
    db = tmp_path / "s.db"
    calls: list[dict[str, Any]] = []
    with lw.Runtime(db) as rt:
        put = rt.store.journal_put

        def dying_put(*args: Any, **kw: Any) -> Any:
            if kw.get("kind") == "reflection" and kw.get("cycle") == 2:
                raise Crash("after the note, before the mark")
            return put(*args, **kw)

        rt.store.journal_put = dying_put  # type: ignore[method-assign]
        with pytest.raises(Crash):
            rt.run_sync(make_loop(calls), TASK, task_key="k")
    assert [c["cycle"] for c in calls] == [1, 2]
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        rt.resume_sync(rec.run_id, make_loop(calls))
        out = outcome(rt.store, rec.run_id)
        again = [
            e.data for e in rt.store.events(rec.run_id) if e.kind == "reflected" and e.cycle == 2
        ]
    assert [c["cycle"] for c in calls] == list(range(1, CYCLES))  # cycle 2: asked once
    assert out == reference[0]
    assert len(again) == 1 and again[0].get("recovered") is True


def test_a_reflected_cycle_is_not_reflected_again_on_resume(
    tmp_path: Path, reference: tuple[dict[str, Any], list[Any]]
) -> None:
    """Killed after the reflection of cycle 2 (before cycle 3 starts): nothing is owed, and
    nothing is recorded twice."""
    db = tmp_path / "s.db"
    calls = crashed_at(db, ("before_actor", 3))
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        rt.resume_sync(rec.run_id, make_loop(calls))
        out = outcome(rt.store, rec.run_id)
    assert [c["cycle"] for c in calls] == list(range(1, CYCLES))
    assert out == reference[0]  # one ``reflected`` event a cycle


def test_a_failing_reflectors_error_is_stored_masked(tmp_path: Path) -> None:
    secret = "sk-" + "A1b2C3d4E5f6G7h8J9k0"

    def failing(ctx: lw.Context, verdicts: Any) -> str:
        raise RuntimeError(f"the model refused the key {secret}")

    loop = lw.Loop(
        name="failing-reflector",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        reflector=failing,
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        failed = [e.data for e in rt.store.events(r.run_id) if e.kind == "reflection_failed"]
        marks = rt.store.journal(r.run_id, kind="reflection")
    assert len(failed) == 2
    assert all(
        secret not in d["error"] and "the model refused the key" in d["error"] for d in failed
    )
    assert [(m.cycle, m.status) for m in marks] == [(2, "failed")]


def test_the_reflection_mark_is_no_effect_on_the_run_page(tmp_path: Path) -> None:

    db = tmp_path / "s.db"
    run_crashing(db, None)
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        assert [m.kind for m in rt.store.journal(rec.run_id)] == ["reflection"]
    token = "test-token-0123456789"
    c = dashboard(str(db), token=token)
    c.headers["Authorization"] = f"Bearer {token}"
    page = c.get(f"/runs/{rec.run_id}").text
    effects = page.split('id="effects"')[1].split('id="retries"')[0]
    assert "No effects were performed." in effects
    assert 'data-kind="reflected"' in page


def _parking_loop(calls: list[dict[str, Any]]) -> lw.Loop:
    """The reflecting loop, with cycle 2's proposal waiting for a person (a risk rule)."""

    def asks(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return "cycle 2 needs a person" if proposal.note == "park" else None

    def parking_actor(ctx: lw.Context) -> lw.Proposal:
        p = actor(ctx)
        return lw.Proposal(edits=p.edits, note="park" if ctx.cycle == 2 else "")

    loop = make_loop(calls)
    return lw.Loop(
        name="reflecting-parked",
        actor=parking_actor,
        verifiers=loop.verifiers,
        reflector=loop.reflector,
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=4), risk=(lw.RiskRule(name="asks", check=asks),)
        ),
    )


@pytest.mark.parametrize("beside", [False, True], ids=["alone", "beside-another-run"])
def test_a_cycle_concluded_after_its_approval_is_reflected_on(tmp_path: Path, beside: bool) -> None:
    """Cycle 2 waits for a person; approved, it concludes (not accepted) when the run resumes
    and is reflected on like any other — also when the resume shares the event loop with
    another run, where the conclusion's commit is grouped and durable only later."""
    calls: list[dict[str, Any]] = []
    with lw.Runtime(tmp_path / "s.db") as rt:
        parked = rt.run_sync(_parking_loop(calls), TASK, task_key="k")
        assert parked.status == "awaiting_approval"
        assert [a.cycle for a in rt.store.approvals(run_id=parked.run_id)] == [2]
        rt.approve(parked.run_id, by="ann")

        async def both() -> lw.RunResult:
            # the other run is under way first: the resume's commits are grouped with its
            other = asyncio.create_task(rt.run(make_loop([]), TASK, task_key="other"))
            await asyncio.sleep(0)
            assert rt._active == 1
            done = await rt.resume(parked.run_id, _parking_loop(calls))
            await other
            return done

        done = (
            asyncio.run(both()) if beside else rt.resume_sync(parked.run_id, _parking_loop(calls))
        )
        assert done.cycles == 4
        out = outcome(rt.store, parked.run_id)
    assert out["reflected"] == [1, 2, 3]
    assert [c["cycle"] for c in calls] == [1, 2, 3]


def test_an_edit_before_the_resume_does_not_cancel_what_is_owed(
    tmp_path: Path, reference: tuple[dict[str, Any], list[Any]]
) -> None:
    """Killed after cycle 2's commit; a person edits the run (allowed: nobody holds it) before
    it is resumed. The resumed run still reflects on cycle 2, from cycle 2's own context (the
    edit came after it)."""
    db = tmp_path / "s.db"
    calls = crashed_at(db, ("after_checkpoint", 3))  # 1 is the creation, 3 cycle 2's commit
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        rt.edit(rec.run_id, "doc/body", "edited by a person", by="ann")
        rt.resume_sync(rec.run_id, make_loop(calls))
        reflected = sorted(e.cycle for e in rt.store.events(rec.run_id) if e.kind == "reflected")
    # (the person's version of doc/body is accepted: the cycles after it go otherwise)
    assert reflected[:2] == [1, 2] and reflected.count(2) == 1
    assert [c["cycle"] for c in calls][:2] == [1, 2]
    assert calls[1] == reference[1][1]  # what cycle 2's actor had, as uninterrupted


def test_a_run_that_ended_and_was_reopened_owes_nothing(tmp_path: Path) -> None:
    """The last cycle ended the run (its budget); a person's edit reopens it. The cycle that
    ended the run was not reflected on and is not owed a reflection when it resumes."""
    db = tmp_path / "s.db"
    calls: list[dict[str, Any]] = []
    with lw.Runtime(db) as rt:
        r = rt.run_sync(make_loop(calls), TASK, task_key="k")
        assert (r.stop_reason, r.cycles) == ("budget_cycles", CYCLES)
        rt.edit(r.run_id, "doc/body", "edited by a person", by="ann")
        rt.resume_sync(r.run_id, make_loop(calls))
    assert [c["cycle"] for c in calls] == list(range(1, CYCLES))


def test_a_run_without_marks_is_read_from_its_events(tmp_path: Path) -> None:
    """A run stored before reflections were marked (here: its marks deleted) killed after it
    reflected on cycle 2: its events say so, and cycle 2 is not reflected on again."""
    import sqlite3

    db = tmp_path / "s.db"
    calls = crashed_at(db, ("before_actor", 3))
    with contextlib.closing(sqlite3.connect(db)) as conn, conn:
        assert conn.execute("DELETE FROM journal WHERE kind = 'reflection'").rowcount == 1
    with lw.Runtime(db) as rt:
        [rec] = rt.store.list_runs()
        rt.resume_sync(rec.run_id, make_loop(calls))
        reflected = sorted(e.cycle for e in rt.store.events(rec.run_id) if e.kind == "reflected")
    assert [c["cycle"] for c in calls] == [1, 2, 3, 4, 5]
    assert reflected == [1, 2, 3, 4, 5]


def test_a_resumed_reflection_is_shown_the_memory_as_the_actor_was(tmp_path: Path) -> None:
    """A reflection owed on resume rebuilds the cycle's context from the store's rows as they
    were read: a strength PostgreSQL kept as ``-0.0`` (written before ``add`` made it 0.0) was
    shown to the reflector as ``-0`` where the cycle's actor, and an uninterrupted run's
    reflector, were shown ``0``. (SQLite reads -0.0 back as 0.0: the read is made to say -0.0
    here as PostgreSQL's does.)"""

    def strengths(calls: list[str]) -> Any:
        def reflector(ctx: lw.Context, verdicts: Any) -> str:
            calls.append(" ".join(f"{m['strength']:g}" for m in ctx.memory))
            return f"note {ctx.cycle}"

        return reflector

    def loop(calls: list[str]) -> lw.Loop:
        return lw.Loop(
            name="zero",
            actor=actor,
            verifiers=[lw.Check(fn=check, name="check")],
            reflector=strengths(calls),
            reflections_kept=1,
            contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        )

    def add_zero(rt: lw.Runtime) -> None:
        rt.memory.add(
            scope="task", scope_key="k", signal="edit", text="zero weight", by="ann", strength=0.0
        )

    ref: list[str] = []
    with lw.Runtime(tmp_path / "ref.db") as rt:
        add_zero(rt)
        rt.run_sync(loop(ref), TASK, task_key="k")
    assert ref and all("0" in c.split() for c in ref)  # the actor's item, shown as 0

    calls: list[str] = []
    db = tmp_path / "s.db"
    with lw.Runtime(db) as rt:
        add_zero(rt)
        rt._on_phase = phase_hook(("after_checkpoint", 3))  # cycle 2 committed, not reflected
        with pytest.raises(Crash):
            rt.run_sync(loop(calls), TASK, task_key="k")
    with lw.Runtime(db) as rt:
        query = rt.store.memory_query

        def as_postgres_reads(**kw: Any) -> list[dict[str, Any]]:
            rows = query(**kw)
            return [{**r, "strength": -0.0} if r["strength"] == 0 else r for r in rows]

        rt.store.memory_query = as_postgres_reads  # type: ignore[method-assign]
        [rec] = rt.store.list_runs()
        rt.resume_sync(rec.run_id, loop(calls))
    assert calls == ref
