"""A person's edit is judged before the actor is paid again (``_edit_check``), on SQLite and
PostgreSQL: after ``edit`` the next cycle on ``resume`` calls no actor, the loop's verifiers
(visible, then held-out) judge the edited state and the contract decides. A passing edit is
accepted with no model call; a failing one goes on with the actor shown the new verdicts. The
cycle is recorded, billed and bounded like any other, runs once an edit whatever the crash
(faults at the engine's phase boundaries, in process and by SIGKILL), and judges the latest of
two edits.

Before, the resumed run asked the actor for another cycle first: a paid call for an edit that
already passed, and a context whose findings judged the state before the edit.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, less_owed, phase_hook
from support.dashboard import dashboard

import loopwright as lw
from loopwright import trace

PARTS = ("a", "b", "c")
ACTOR_USD = 0.10
CHECK_USD = 0.01
HELD_USD = 0.02
CHECKED = "judged the person's edit"  # the check-only cycle's proposal note


class Calls:
    """What the loop's user code was asked: the actor's cycles, each check's values judged."""

    def __init__(self, log: Path | None = None) -> None:
        self.actor: list[int] = []
        self.judged: list[dict[str, Any]] = []
        self.held: list[dict[str, Any]] = []
        self.seen: list[lw.Context] = []
        self.log = log

    def note(self, what: str) -> None:
        if self.log is not None:  # (across processes: appended and synced, one line a call)
            with open(self.log, "a") as fh:
                fh.write(what + "\n")
                fh.flush()
                os.fsync(fh.fileno())


def make_loop(
    calls: Calls, *, max_cycles: int = 10, held_ok: bool = True, max_cost: float | None = None
) -> lw.Loop:
    """Fixes nothing it can: a and b stay wrong (``try N``) until a person fixes them; c is
    the actor's (it writes ``good``). Every call is priced."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.actor.append(ctx.cycle)
        calls.seen.append(ctx)
        calls.note(f"actor {ctx.cycle}")
        doc = ctx.artifacts["doc"]
        edits = {p: f"try {ctx.cycle}" for p in ("a", "b") if not ctx.is_accepted("doc", p)}
        if doc["c"] != "good":
            edits["c"] = "good"
        if not edits:  # every part is right or a person's: offer to write over a anyway
            edits = {"a": "the actor's a"}
        return lw.Proposal.edit("doc", edits, usage=lw.Usage(ACTOR_USD, 100))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        calls.judged.append(dict(doc))
        calls.note(f"check {doc['a']}|{doc['b']}|{doc['c']}")
        bad = [lw.Finding(f"{p} is wrong", "doc", p) for p in PARTS if doc[p] != "good"]
        return lw.Verdict(
            passed=not bad,
            score=1 - len(bad) / len(PARTS),
            findings=tuple(bad),
            usage=lw.Usage(CHECK_USD, 10),
        )

    def hidden(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        calls.held.append(dict(doc))
        return lw.Verdict(passed=held_ok, usage=lw.Usage(HELD_USD, 20))

    return lw.Loop(
        name="judged-first",
        actor=actor,
        verifiers=[
            lw.Check(fn=check, name="check"),
            lw.Check(fn=hidden, name="hidden", held_out=True),
        ],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0),
            no_progress=lw.NoProgress(cycles=2),
            budget=lw.Budget(max_cycles=max_cycles, max_cost_usd=max_cost),
        ),
        retry=lw.RetryPolicy(attempts=1),
    )


TASK = {"artifacts": {"doc": dict.fromkeys(PARTS, "bad")}}


def _stuck(rt: lw.Runtime, calls: Calls, **kw: Any) -> lw.RunResult:
    """A run the loop could not finish: c fixed, a and b wrong, stopped by the plateau."""
    r = rt.run_sync(make_loop(calls, **kw), TASK, task_key="t")
    assert (r.stop_reason, r.cycles) == ("no_progress", 3), r.stop_reason
    assert r.state.values()["doc"]["c"] == "good"
    return r


def _records(rt: lw.Runtime, run_id: str) -> list[dict[str, Any]]:
    return [c.record for c in rt.store.checkpoints(run_id) if c.record and "proposal" in c.record]


def test_a_passing_edit_is_accepted_with_no_actor_call(url: str) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls)
        spent = r.spent.cost_usd
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana", note="both by hand")
        calls.actor.clear()
        r = rt.resume_sync(r.run_id, make_loop(calls))
        assert calls.actor == []  # the actor was not paid again (before: asked once more)
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 4)
        assert r.held_out_passed is True
        # the cycle is recorded as the one that judged the person's edit, and billed
        last = _records(rt, r.run_id)[-1]
        assert last["cycle"] == 4 and last["check_only"] is True
        assert last["decision"] == "accepted" and last["proposal"]["kind"] == "noop"
        assert not last["proposal"].get("edits") and last["proposal"]["note"] == CHECKED
        assert [c["who"] for c in last["calls"]] == ["verifier:check", "verifier:hidden"]
        assert r.spent.cost_usd == pytest.approx(spent + CHECK_USD + HELD_USD)
        assert r.state.history[-1]["check_only"] is True
        started = [e for e in rt.store.events(r.run_id) if e.kind == "cycle_started"][-1]
        assert (started.cycle, started.data) == (4, {"check_only": True})
        [judged] = [e.data for e in rt.store.events(r.run_id) if e.kind == "judged_again"]
        assert judged == {"why": "edited", "check_only": True, "parts": ["doc/a", "doc/b"]}
        assert not [e for e in rt.store.events(r.run_id) if e.cycle == 4 and e.kind == "proposal"]
        # the person's versions stand, accepted
        assert r.state.values()["doc"] == dict.fromkeys(PARTS, "good")
        # learning material: the empty proposal is no actor's, never a chosen one
        case = trace.eval_case(rt.store, r.run_id)
        assert case["cycles"][-1]["cycle"] == 4 and case["cycles"][-1]["check_only"] is True
        pairs = trace.preference_pairs(rt.store, match="both")
        assert all(p["chosen"]["cycle"] != 4 for p in pairs)
        # resumed again: nothing more (the check is not made on every resume)
        judged_before = len(calls.judged)
        assert rt.resume_sync(r.run_id, make_loop(calls)).cycles == 4
        assert len(calls.judged) == judged_before


def test_a_failing_edit_stays_and_the_actor_sees_its_verdicts(url: str) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls, max_cycles=5)
        before = {f.part for f in r.state.findings}
        assert before == {"a", "b"}
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b is still wrong
        calls.actor.clear()
        calls.seen.clear()
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=5))
        # cycle 4 judged the edit; cycle 5 was the actor's, shown what cycle 4 found
        assert calls.actor == [5]
        assert {f.part for f in calls.seen[0].findings} == {"b"}  # not the stale {a, b}
        assert calls.seen[0].is_accepted("doc", "a")
        cycles = _records(rt, r.run_id)
        assert [c.get("check_only", False) for c in cycles] == [False] * 3 + [True, False]
        assert cycles[3]["decision"] == "revise" and cycles[3]["improved"] is True
        # not reverted, never overwritten
        assert r.state.values()["doc"]["a"] == "good"
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", 5)


def test_an_edit_that_fails_on_its_own_part_goes_back_to_the_person(url: str) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls)
        rt.edit(r.run_id, "doc/c", "worse", by="ana")  # the person's version fails the check
        calls.actor.clear()
        r = rt.resume_sync(r.run_id, make_loop(calls))
        assert calls.actor == []  # judged, and it fails: no actor call is spent on waiting
        assert (r.status, r.cycles) == ("escalated", 4)
        assert r.packet is not None and "ana's version of doc/c" in r.packet["cause"]
        assert r.state.values()["doc"]["c"] == "worse"  # kept, not silently reverted


def test_an_edit_of_a_run_stopped_on_its_cycles_is_judged_and_accepted(url: str) -> None:
    """The check-only cycle is no attempt: a cycle cap reached does not stop it (edit47).
    Before, the resumed run stopped again on budget_cycles, the edit never judged."""
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cycles=2), TASK, task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 2)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        assert not [e for e in rt.store.events(r.run_id) if e.kind == "edit_unjudged"]
        judged = len(calls.judged)
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=2))
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 3)
        assert len(calls.judged) == judged + 1 and len(calls.actor) == 2  # no actor call
        assert _records(rt, r.run_id)[-1]["check_only"] is True


def test_a_failing_edit_of_a_run_stopped_on_its_cycles_is_judged_then_stops(url: str) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cycles=2), TASK, task_key="t")
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b still wrong
        judged = len(calls.judged)
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=2))
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", 3)
        assert calls.judged[judged:] == [{"a": "good", "b": "try 2", "c": "good"}]
        assert len(calls.actor) == 2  # judged, and the actor not paid past its cap
        assert r.state.values()["doc"]["a"] == "good"


def test_a_spent_cost_budget_stops_the_run_before_judging_and_says_so(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Its checks may cost (a verifier's cost is unknown until it runs): a cost budget used
    up stops the check-only cycle, and the person is told when they edit (edit47)."""
    calls = Calls()
    cost = 2 * (ACTOR_USD + CHECK_USD + HELD_USD)  # used up by two cycles
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cost=cost), TASK, task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_cost", 2)
        with caplog.at_level("WARNING", logger="loopwright.runs"):
            rt.edit(r.run_id, "doc/a", "good", by="ana")
        assert "judged only once the budget allows" in caplog.text
        assert f"loopwright fork {r.run_id[:12]} --at-cycle 2" in caplog.text
        [ev] = [e for e in rt.store.events(r.run_id) if e.kind == "edit_unjudged"]
        assert ev.data["part"] == "doc/a" and "budget_cost" in ev.data["why"]
        ck = rt.store.latest_checkpoint(r.run_id).task_state()
        assert ck.next_action is not None and "raised budget" in ck.next_action
        judged = len(calls.judged)
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cost=cost))
        assert (r.stop_reason, r.cycles) == ("budget_cost", 2)  # no check past the budget
        assert len(calls.judged) == judged and len(calls.actor) == 2


def test_the_cli_edit_says_when_the_edit_waits_for_budget(url: str, capsys: Any) -> None:
    from loopwright.cli import main

    calls = Calls()
    cost = 2 * (ACTOR_USD + CHECK_USD + HELD_USD)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cost=cost), TASK, task_key="t")
    assert (
        main(["edit", r.run_id, "doc/a", "--value", '"good"', "--by", "ana", "--store", url]) == 0
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "judged only once the budget allows" in out and "--at-cycle 2" in out, out


def test_the_cli_edit_says_it_once(url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Outside probe probe47b: the CLI printed why the edit waits and the Python API's warning
    said it again on stderr (Python's last-resort handler), the same paragraph twice. The
    warning is the Python API's; the CLI's edit says it itself."""
    from loopwright.cli import main

    calls = Calls()
    cost = 2 * (ACTOR_USD + CHECK_USD + HELD_USD)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cost=cost), TASK, task_key="t")
    with caplog.at_level("WARNING", logger="loopwright.runs"):
        argv = ["edit", r.run_id, "doc/a", "--value", '"good"', "--by", "ana", "--store", url]
        assert main(argv) == 0
    assert "judged only once" not in caplog.text


def test_the_dashboards_edit_says_when_the_edit_waits_for_budget(url: str) -> None:
    """Outside probe probe47b: the dashboard's edit of a run its cost budget stopped answered
    "Resume the run to go on from it" (a resume stops again before judging the edit), where
    the CLI says why it waits and how to have it judged."""

    calls = Calls()
    cost = 2 * (ACTOR_USD + CHECK_USD + HELD_USD)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cost=cost), TASK, task_key="t")
    token = "test-token-0123456789"
    c = dashboard(url, token=token, identity="ana")
    got = c.post(
        f"/api/runs/{r.run_id}/parts/doc/a",
        json={"value": "good", "resume": True},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert got.status_code == 200, got.text
    msg = got.json()["message"]
    assert "judged only once the budget allows" in msg and "--at-cycle 2" in msg, msg
    assert "Resume the run" not in msg and "resuming" not in msg, msg


@pytest.mark.parametrize("where", ["cli", "dashboard"])
def test_why_an_edit_waits_is_worked_out_once(
    url: str, where: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The CLI's and the dashboard's edit say what the edit found under its lease: they read
    the run's latest state again once ``Runtime.edit`` returned and worked it out a second
    time (the budget check, twice per edit; and a worker that took the run in between could
    make it say nothing)."""
    from loopwright import _decide

    calls = Calls()
    cost = 2 * (ACTOR_USD + CHECK_USD + HELD_USD)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls, max_cost=cost), TASK, task_key="t")
    asked: list[str | None] = []
    real = _decide.check_stop

    def counting(*args: Any, **kwargs: Any) -> str | None:
        asked.append(real(*args, **kwargs))
        return asked[-1]

    monkeypatch.setattr(_decide, "check_stop", counting)
    if where == "cli":
        from loopwright.cli import main

        argv = ["edit", r.run_id, "doc/a", "--value", '"good"', "--by", "ana", "--store", url]
        assert main(argv) == 0
        said = " ".join(capsys.readouterr().out.split())
    else:
        token = "test-token-0123456789"
        c = dashboard(url, token=token, identity="ana")
        got = c.post(
            f"/api/runs/{r.run_id}/parts/doc/a",
            json={"value": "good"},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert got.status_code == 200, got.text
        said = got.json()["message"]
    assert "judged only once the budget allows" in said, said
    assert asked == ["budget_cost"]  # once, by the edit itself


def test_an_idle_run_edited_before_its_first_cycle_is_judged_first(url: str) -> None:
    calls = Calls()
    loop = make_loop(calls)
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "good"}}})
        rt.edit(rec.run_id, "doc/a", "good", by="ana")
        r = rt.resume_sync(rec.run_id, loop)
        assert (r.status, r.cycles, calls.actor) == ("accepted", 1, [])


def test_a_held_out_failure_is_recorded_from_the_judged_edit(url: str) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        held = len(calls.held)
        r = rt.resume_sync(r.run_id, make_loop(calls, held_ok=False))
        # the held-out check judged the person's state too (never shown to an actor)
        assert calls.held[held:] == [dict.fromkeys(PARTS, "good")]
        assert r.status == "accepted" and r.held_out_passed is False


# --- crashes: the check-only cycle runs once an edit --------------------------------------------
# Phases of the resumed process: its status commit (before/after_checkpoint 1), then the
# check-only cycle (before_check 1, before/after_checkpoint 2).
KILLS = [("before_check", 1), ("before_checkpoint", 2), ("after_checkpoint", 2)]


def _reference(url: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls, max_cycles=5)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        r = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=5))
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 5)
        return _end(r), _records(rt, r.run_id)


def _end(r: lw.RunResult) -> dict[str, Any]:
    return {
        "status": r.status,
        "stop_reason": r.stop_reason,
        "cycles": r.cycles,
        "values": r.state.values(),
        "statuses": {ref: p.status for ref, p in r.state.iter_parts()},
        "cost_usd": round(r.spent.cost_usd, 9),
        "held_out_passed": r.held_out_passed,
    }


def _same_cycles(
    got: list[dict[str, Any]], want: list[dict[str, Any]], *, twice: bool
) -> dict[str, Any]:
    """The cycles as the uninterrupted run recorded them, but for what a killed attempt of the
    check-only cycle was billed (invariant 7: its verifiers answered, so they were paid),
    listed in its record before the calls made again. Returns ``_end``'s figures corrected."""
    keys = ("cycle", "decision", "check_only", "score", "improved", "calls", "usage")
    assert len(got) == len(want)
    owed_usd = 0.0
    for mine, theirs in zip(got, want, strict=True):
        mine, owed = less_owed(mine, theirs)
        if mine.get("check_only") and twice:
            assert [c["who"] for c in owed] == ["verifier:check", "verifier:hidden"]
        else:
            assert owed == []
        owed_usd += sum(c["cost_usd"] for c in owed)
        assert {k: mine.get(k) for k in keys if k != "usage"} == {
            k: theirs.get(k) for k in keys if k != "usage"
        }
    return {"owed_usd": owed_usd}


@pytest.mark.parametrize("kill", KILLS, ids=[f"{p}-{n}" for p, n in KILLS])
def test_a_crash_around_the_check_only_cycle_ends_as_an_uninterrupted_run(
    url: str, tmp_path: Path, kill: tuple[str, int]
) -> None:
    want_end, want_cycles = _reference(f"sqlite:///{tmp_path / 'ref.db'}")
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls, max_cycles=5)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        calls.actor.clear()
        judged = len(calls.judged)
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(kill)
        with pytest.raises(Crash):
            rt.resume_sync(r.run_id, make_loop(calls, max_cycles=5))
        committed = kill == ("after_checkpoint", 2)
        assert rt.store.latest_checkpoint(r.run_id).cycle == (4 if committed else 3)
    twice = kill == ("before_checkpoint", 2)
    with lw.Runtime(url) as rt:
        done = rt.resume_sync(r.run_id, make_loop(calls, max_cycles=5))
        owed = _same_cycles(_records(rt, done.run_id), want_cycles, twice=twice)["owed_usd"]
        assert owed == pytest.approx(CHECK_USD + HELD_USD if twice else 0.0)
        assert _end(done) == {**want_end, "cost_usd": round(want_end["cost_usd"] + owed, 9)}
    # the edited state judged once, or twice when the crash came after its check ran and
    # before that cycle's commit (the redone cycle judges again, its killed attempt paid)
    edited = {"a": "good", "b": "try 3", "c": "good"}
    assert calls.judged[judged:].count(edited) == (2 if twice else 1)
    assert calls.actor == [5]  # the actor's one cycle, after the check


def test_an_edit_made_after_a_crash_before_the_check_is_judged_once_at_its_latest(
    url: str,
) -> None:
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
    with lw.Runtime(url) as rt:
        rt._on_phase = phase_hook(("before_check", 1))
        with pytest.raises(Crash):
            rt.resume_sync(r.run_id, make_loop(calls))
    with lw.Runtime(url) as rt:
        rt.edit(r.run_id, "doc/b", "good", by="bo")  # a second edit before it was judged
        judged = len(calls.judged)
        calls.actor.clear()
        done = rt.resume_sync(r.run_id, make_loop(calls))
        assert calls.judged[judged:] == [dict.fromkeys(PARTS, "good")]  # the latest, once
        assert (done.status, done.cycles, calls.actor) == ("accepted", 4, [])
        checked = [c for c in _records(rt, done.run_id) if c.get("check_only")]
        assert len(checked) == 1


# --- the same with a real SIGKILL -------------------------------------------------------------
def _child(db: str, log: str, run_id: str, phase: str, nth: int) -> None:
    seen: dict[str, int] = {}

    def on_phase(p: str) -> None:
        seen[p] = seen.get(p, 0) + 1
        if (p, seen[p]) == (phase, nth):
            os.kill(os.getpid(), signal.SIGKILL)

    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        rt.resume_sync(run_id, make_loop(Calls(Path(log)), max_cycles=5))


@pytest.mark.parametrize("kill", KILLS, ids=[f"{p}-{n}" for p, n in KILLS])
def test_sigkill_around_the_check_only_cycle(tmp_path: Path, kill: tuple[str, int]) -> None:
    want_end, want_cycles = _reference(f"sqlite:///{tmp_path / 'ref.db'}")
    db, log = str(tmp_path / "s.db"), tmp_path / "calls.log"
    with lw.Runtime(db) as rt:
        r = _stuck(rt, Calls(), max_cycles=5)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
    here = str(Path(__file__).parent)
    code = (
        f"import sys; sys.path[:0] = [{here!r}, {str(Path(here).parent)!r}]; "
        "import test_edit_judged_first as t; "
        f"t._child({db!r}, {str(log)!r}, {r.run_id!r}, {kill[0]!r}, {kill[1]})"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    twice = kill == ("before_checkpoint", 2)
    with lw.Runtime(db) as rt:
        done = rt.resume_sync(r.run_id, make_loop(Calls(log), max_cycles=5))
        owed = _same_cycles(_records(rt, done.run_id), want_cycles, twice=twice)["owed_usd"]
        assert _end(done) == {**want_end, "cost_usd": round(want_end["cost_usd"] + owed, 9)}
    lines = log.read_text().splitlines()
    # the actor once (cycle 5), after the edit was judged; judged twice only when killed
    # after the check ran and before its commit
    assert [x for x in lines if x.startswith("actor")] == ["actor 5"]
    edited_checks = [x for x in lines if x == "check good|try 3|good"]
    assert len(edited_checks) == (2 if twice else 1)


def test_the_metrics_count_the_check_only_cycle_as_the_persons_fix(url: str) -> None:
    """``cycles_to_accepted`` counts it (a cycle), ``edits_per_accepted_part`` counts the edits
    (it writes no version), ``spend_after_last_improvement`` is measured from it (it improved),
    and ``context_reuse_rate`` leaves it out (it showed no actor a context)."""
    calls = Calls()
    with lw.Runtime(url) as rt:
        r = _stuck(rt, calls)
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        r = rt.resume_sync(r.run_id, make_loop(calls))
        assert (r.status, r.cycles) == ("accepted", 4)
        m = lw.compute_metrics(rt.store)
    assert m.value("cycles_to_accepted") == 4
    # two edits over a, b and c (each has a version the loop wrote before its accepted one)
    assert m.value("edits_per_accepted_part") == pytest.approx(2 / 3)
    assert m.value("spend_after_last_improvement_usd") == pytest.approx(0.0)
    # cycles 2 and 3 carried no note; cycle 4 (the edit's notes) showed no actor anything
    assert m.value("context_reuse_rate") == 0.0


def test_a_risk_rule_on_the_edited_state_parks_the_check_only_cycle(url: str) -> None:
    """A risk rule that reads the state asks a person about the edited state too: the
    check-only cycle parks, and once approved it concludes as the check-only cycle it is."""
    calls = Calls()

    def by_hand(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return "a person wrote doc/a" if state.values()["doc"]["a"] == "good" else None

    base = make_loop(calls)
    rule = lw.RiskRule(name="hand", check=by_hand, reason="checked twice")
    loop = dataclasses.replace(base, contract=dataclasses.replace(base.contract, risk=(rule,)))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="t")
        assert r.stop_reason == "no_progress"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        calls.actor.clear()
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval" and calls.actor == []
        assert rt.pending_approval(r.run_id).rule == "hand"
        rt.approve(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles, calls.actor) == ("accepted", 4, [])
        last = _records(rt, r.run_id)[-1]
        assert (last["cycle"], last["check_only"], last["decision"]) == (4, True, "accepted")


def _asking_loop(calls: Calls) -> lw.Loop:
    """``make_loop`` whose actor asks a question in cycle 1 (counted in ``calls.actor``)."""
    base = make_loop(calls)

    def asking(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 1:
            calls.actor.append(ctx.cycle)
            return lw.Proposal(question=lw.Question("which a?"), usage=lw.Usage(ACTOR_USD, 100))
        return base.actor(ctx)  # type: ignore[no-any-return]

    return dataclasses.replace(base, actor=asking)


def test_an_edit_beside_a_question_is_judged_once_the_question_is_answered(url: str) -> None:
    """The actor asked a question; a person edited the run beside it and answered. The asked
    cycle concludes as before; the next one judges the edit, no actor call (before: the actor
    was asked again, the edit unjudged). The asked cycle can still be forked from."""
    calls = Calls()
    loop = _asking_loop(calls)
    with lw.Runtime(url) as rt:
        task = {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "good"}}}
        r = rt.run_sync(loop, task, task_key="q")
        assert r.status == "awaiting_approval" and calls.actor == [1]
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.answer(r.run_id, "the good one", by="ana")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles, calls.actor) == ("accepted", 2, [1])
        decisions = [
            (c["cycle"], c["decision"], c.get("check_only")) for c in _records(rt, r.run_id)
        ]
        assert decisions == [(1, "asked", None), (2, "accepted", True)]
        fork = rt.fork(r.run_id, 1)  # the asked cycle concluded (its commit owed the check)
        assert fork.forked_at == 1


def test_the_check_after_a_question_names_the_parts_edited_beside_it(url: str) -> None:
    """The check-only cycle owed once an asked cycle concludes names the parts a person edited
    while the question waited, as one owed by an edit of an idle run does (docs/trace.md:
    ``judged_again``'s ``parts``); it named none."""
    loop = _asking_loop(Calls())
    with lw.Runtime(url) as rt:
        task = {"artifacts": {"doc": {"a": "bad", "b": "bad", "c": "good"}}}
        r = rt.run_sync(loop, task, task_key="q")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/b", "good", by="ana")
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.answer(r.run_id, "the good one", by="ana")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 2)
        [judged] = [e.data for e in rt.store.events(r.run_id) if e.kind == "judged_again"]
        assert judged == {"why": "edited", "check_only": True, "parts": ["doc/b", "doc/a"]}


def test_a_failed_check_only_cycle_is_no_rejected_proposal(url: str) -> None:
    """The check-only cycle proposed nothing: failed, it lists no rejected proposal, and it is
    never a duplicate of an actor's empty proposal rejected before. Before, its empty proposal
    was recorded rejected (as if the actor had proposed nothing), and after an actor's empty
    proposal was rejected the person's edit was judged a duplicate: its rise in score counted
    as no improvement and its state was not the best candidate."""
    calls = Calls()
    base = make_loop(calls, max_cycles=4)

    def idle(ctx: lw.Context) -> lw.Proposal:  # fixes c, then has nothing to offer
        calls.actor.append(ctx.cycle)
        if ctx.artifacts["doc"]["c"] != "good":
            return lw.Proposal.edit("doc", {"c": "good"}, usage=lw.Usage(ACTOR_USD, 100))
        return lw.Proposal(note="nothing to add", usage=lw.Usage(ACTOR_USD, 100))

    loop = dataclasses.replace(base, actor=idle)
    empty = lw.Proposal().digest()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="t")
        assert (r.stop_reason, r.cycles, calls.actor) == ("no_progress", 3, [1, 2, 3])
        assert empty in rt.store.rejected_digests(r.run_id)  # the actor's own empty proposals
        assert r.state.best_score == pytest.approx(1 / 3)
        rt.edit(r.run_id, "doc/a", "good", by="ana")  # b is still wrong: the check fails
        r = rt.resume_sync(r.run_id, loop)
        assert (r.stop_reason, r.cycles, calls.actor) == ("budget_cycles", 4, [1, 2, 3])
        last = _records(rt, r.run_id)[-1]
        assert (last["cycle"], last["check_only"], last["decision"]) == (4, True, "revise")
        assert last["duplicate"] is False and last["improved"] is True
        assert r.state.best_score == pytest.approx(2 / 3) and r.state.best_cycle == 4
        assert r.packet is not None and r.packet["best_candidate"]["cycle"] == 4


def test_a_failed_check_only_cycle_adds_no_rejected_digest(url: str) -> None:
    empty = lw.Proposal().digest()
    calls2 = Calls()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(make_loop(calls2, max_cycles=5), TASK, task_key="t2")
        assert (r.stop_reason, r.cycles) == ("no_progress", 3)
        before = list(rt.store.rejected_digests(r.run_id))
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        r = rt.resume_sync(r.run_id, make_loop(calls2, max_cycles=5))
        assert [c.get("check_only", False) for c in _records(rt, r.run_id)][3] is True
        assert _records(rt, r.run_id)[3]["decision"] == "revise"
        # the failed check-only cycle added no rejected digest (the actor's cycle 5 may)
        after = rt.store.rejected_digests(r.run_id)
        assert empty not in after and after[: len(before)] == before


def _risky_c(calls: Calls) -> lw.Loop:
    """The actor writes c (and only c); a change to c waits for a person."""
    base = make_loop(calls)

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls.actor.append(ctx.cycle)
        calls.seen.append(ctx)
        return lw.Proposal.edit("doc", {"c": "good"}, usage=lw.Usage(ACTOR_USD, 100))

    rule = lw.RiskRule(name="c", touches=("doc/c",), reason="c is checked by a person")
    contract = dataclasses.replace(base.contract, risk=(rule,))
    return dataclasses.replace(base, actor=actor, contract=contract)


def test_an_edit_beside_a_denied_request_is_judged_before_the_run_escalates(url: str) -> None:
    """A person edited the run while it waited on a request, then denied the request: the
    denied proposal is not applied and the decided cycle judges the state as the person left
    it (check-only, no actor call); short of success the run escalates on the denial, its
    packet holding those verdicts. Before, it escalated on the verdicts of the state before the
    edit, which was never judged; the packet's rollback to go on dropped the edit."""
    calls = Calls()
    loop = _risky_c(calls)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert (r.status, calls.actor) == ("awaiting_approval", [1])
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo", note="not c")
        judged = len(calls.judged)
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.stop_reason, r.cycles, calls.actor) == (
            "escalated",
            "escalated",
            1,
            [1],
        )
        edited = {"a": "good", "b": "good", "c": "bad"}  # the person's a; the denied c not applied
        assert calls.judged[judged:] == [edited] and calls.held[-1] == edited
        assert r.state.values()["doc"] == edited
        assert r.packet is not None and r.packet["cause"] == "approval denied by bo: not c"
        # the packet's findings are the edited state's: a is no longer wrong
        assert [f["part"] for f in r.packet["unresolved_findings"]] == ["c"]
        last = _records(rt, r.run_id)[-1]
        assert (last["cycle"], last["check_only"], last["decision"]) == (1, True, "revise")
        assert not last["proposal"].get("edits") and last["proposal"]["note"] == CHECKED
        # billed: the denied cycle's actor and first checks, and the checks judging the edit
        assert [c["who"] for c in last["calls"]] == [
            "actor",
            "verifier:check",
            "verifier:hidden",
            "verifier:check",
            "verifier:hidden",
        ]
        [again] = [e.data for e in rt.store.events(r.run_id) if e.kind == "judged_again"]
        assert again["check_only"] is True and again["denied"] is True
        # going on as the packet says (a rollback to its last cycle) keeps the person's edit
        rt.rollback(r.run_id, r.cycles, by="ana")
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval" and calls.actor == [1, 2]
        assert calls.seen[-1].artifacts["doc"]["a"] == "good"


def test_an_edit_beside_a_denied_request_that_meets_the_contract_is_accepted(url: str) -> None:
    """The person's version succeeds without the denied change: the run is accepted with no
    further actor call, the denied proposal not applied."""
    calls = Calls()
    loop = _risky_c(calls)

    def write_c(ctx: lw.Context) -> lw.Proposal:
        calls.actor.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"c": "worse"}, usage=lw.Usage(ACTOR_USD, 100))

    loop = dataclasses.replace(loop, actor=write_c)
    with lw.Runtime(url) as rt:
        task = {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "good"}}}
        r = rt.run_sync(loop, task, task_key="ok")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.stop_reason, r.cycles, calls.actor) == ("accepted", "success", 1, [1])
        assert r.state.values()["doc"] == dict.fromkeys(PARTS, "good")  # "worse" never written
        assert r.held_out_passed is True


def test_a_denied_requests_judged_edit_parked_by_a_risk_rule_still_escalates(url: str) -> None:
    """The edit judged after the denial parks on a risk rule that reads the state; once that
    request is approved the cycle concludes, and escalates on the first denial (it is stored
    with the parked cycle), not as an ordinary cycle that goes on to the actor."""
    calls = Calls()
    base = _risky_c(calls)

    def by_hand(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return "a person wrote doc/a" if state.values()["doc"]["a"] == "good" else None

    rules = (*base.contract.risk, lw.RiskRule(name="hand", check=by_hand))
    loop = dataclasses.replace(base, contract=dataclasses.replace(base.contract, risk=rules))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "bad"}}})
        assert rt.pending_approval(r.run_id).rule == "c"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        rt.deny(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        assert r.status == "awaiting_approval" and rt.pending_approval(r.run_id).rule == "hand"
        rt.approve(r.run_id, by="bo")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles, calls.actor) == ("escalated", 1, [1])
        assert r.packet is not None and r.packet["cause"] == "approval denied by bo"
        last = _records(rt, r.run_id)[-1]
        assert (last["cycle"], last["check_only"]) == (1, True)


def test_an_edit_beside_an_expired_request_is_judged_as_beside_a_denied_one(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request that expires escalates as a denied one does: an edit made beside it is
    judged first, in the same way (accepted here: the person's version meets the contract)."""
    calls = Calls()
    base = _risky_c(calls)
    rule = dataclasses.replace(base.contract.risk[0], expires_after_s=60.0)
    loop = dataclasses.replace(base, contract=dataclasses.replace(base.contract, risk=(rule,)))

    def write_c(ctx: lw.Context) -> lw.Proposal:
        calls.actor.append(ctx.cycle)
        return lw.Proposal.edit("doc", {"c": "worse"}, usage=lw.Usage(ACTOR_USD, 100))

    loop = dataclasses.replace(loop, actor=write_c)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": "bad", "b": "good", "c": "good"}}})
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/a", "good", by="ana")
        later = rt.store.clock() + 3600.0  # (the request's clock, an hour on: past its expiry)
        monkeypatch.setattr(rt.store, "clock", lambda: later)
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.stop_reason, r.cycles, calls.actor) == ("accepted", "success", 1, [1])
        assert r.state.values()["doc"] == dict.fromkeys(PARTS, "good")
        assert [n["decision"] for n in r.state.notes if n.get("kind") == "approval"] == ["expired"]
