"""A process that dies in a cycle's effects, or after them before the cycle is concluded, every
time, ends at the crash bound (``budget.max_crashes``) as one dying anywhere else in a cycle
does, on SQLite and PostgreSQL (crash55).

The bound was judged only on a resume that drives a cycle from its start: one that finishes a
cycle's effects (its write-ahead stored, the run ``running``) went on to them, and its start
event was written only with the cycle's commit. A process that died there every time (a kill
in the commit, an effect whose client crashes in native code) was resumed for ever, bounded by
the spend budgets alone. Each case places its fault at a fixed point: ``os._exit(137)`` after
cycle 1's effects (``crashbound/crash_runner.py``'s ``CB_EXIT_AFTER_EFFECTS``), or a kill at an
effect's call (``crashpoints``, ``test_crash_points.py``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from support.crash_bound import expire, held, resumer, stall_gates
from test_crash_bound import DIED, _calls, _effects, _run, _until_done

import loopwright as lw


def test_dying_after_the_effects_every_time_escalates_at_the_bound(
    url: str, tmp_path: Path
) -> None:
    work = tmp_path / "w"
    died, result = _until_done(url, "after", work, CB_EXIT_AFTER_EFFECTS="1000")
    # (before: every resume finished the effects again and died, past the 20 processes)
    assert died == lw.DEFAULT_MAX_CRASHES + 1 == 6
    assert result["status"] == "escalated", result
    packet = result["packet"]
    assert "crashed 6 times at cycle 1" in packet["stop_cause"], packet["stop_cause"]
    assert "done ['notify:w:1']" in packet["cause"], packet
    assert packet["evidence"] == {
        "crashes": 6,
        "cycle": 1,
        "max_crashes": 5,
        "effects": {"done": ["notify:w:1"], "unknown": []},
    }
    assert _effects(work) == ["notify:w:1"]  # run once, reused by each resume after
    assert _calls(work) == [1]  # the actor of cycle 1 once: its write-ahead was resumed
    # the effect's cost (never committed: each process died before the cycle's commit) is
    # charged to the ended run, with the actor's
    assert result["spent"]["cost_usd"] == 0.01 + 0.25
    assert result["cycles"] == 0
    with lw.Runtime(url) as rt:
        run_id = rt.store.get_run("after").run_id
        assert rt.store.latest_checkpoint(run_id).state.get("pending") is None
        # each execution's start event, naming its lease, is in the log: what was counted
        starts = [e for e in rt.store.events(run_id) if e.kind in ("started", "resumed")]
        assert len(starts) == 7 and all(isinstance(e.data["lease"], int) for e in starts)
    # ended: resuming it calls nothing
    rc, again = _run(url, "after", work, CB_EXIT_AFTER_EFFECTS="1000")
    assert rc == 0 and again is not None and again["status"] == "escalated"
    assert _effects(work) == ["notify:w:1"]


def test_dying_after_the_effects_within_the_bound_ends_as_uninterrupted(
    url: str, tmp_path: Path
) -> None:
    rc, clean = _run(url, "clean", tmp_path / "clean", CB_EXIT_AFTER_EFFECTS="0")
    assert rc == 0 and clean is not None
    work = tmp_path / "w"
    died, result = _until_done(url, "after", work, CB_EXIT_AFTER_EFFECTS="5")
    assert died == 5
    same = ("status", "stop_reason", "cycles", "best_score", "packet")
    assert {k: result[k] for k in same} == {k: clean[k] for k in same}
    assert result["status"] == "accepted"
    assert result["spent"]["cost_usd"] == clean["spent"]["cost_usd"]  # charged once
    assert _effects(work) == ["notify:w:1"]


def test_dying_after_the_effects_with_no_crash_allowed(url: str, tmp_path: Path) -> None:
    work = tmp_path / "w"
    rc, _ = _run(url, "after", work, CB_EXIT_AFTER_EFFECTS="1000", CB_MAX_CRASHES="0")
    assert rc == DIED
    died, result = _until_done(url, "after", work, CB_EXIT_AFTER_EFFECTS="1000", CB_MAX_CRASHES="0")
    assert died == 0
    assert "crashed 1 time at cycle 1" in result["packet"]["stop_cause"]
    assert _effects(work) == ["notify:w:1"]


def _effect_loop(max_crashes: int) -> lw.Loop:
    """``doc.n`` edited to the cycle, accepted at 2; cycle 1 also sends one effect."""

    @lw.effect("send", name="notify", key=lambda a: f"n:{a['cycle']}", requires_success=False)
    def notify(cycle: int, *, key: str) -> dict[str, Any]:
        return {"sent": key}

    def actor(ctx: lw.Context) -> lw.Proposal:
        effects = (notify.call(cycle=ctx.cycle),) if ctx.cycle == 1 else ()
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),), effects=effects)

    def done(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        n = int(state.values()["doc"].get("n", 0))
        return lw.Verdict(passed=n == 2, score=n / 2)

    return lw.Loop(
        name="stall-effects",
        actor=actor,
        verifiers=[done],
        effects=[notify],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="send", action="allow"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=5, max_crashes=max_crashes)),
    )


def test_a_stall_after_the_effects_repeating_at_one_cycle_ends_at_the_bound(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each executor stalls after cycle 1's effects, before the cycle's commit (held on an
    # event, its heartbeat with it, until the test ends: a stall that never says otherwise),
    # and is taken over once its lease lapses. A takeover counts the stalled one as a crash
    # (nothing tells it otherwise then): with max_crashes = 1 the third execution ends the run.
    # Before, one that finished the effects wrote its start event only with the cycle's
    # commit, so each taker counted the first stall alone and the loop went on for ever (here:
    # the third execution, never stalled, concluded the cycle and the run was accepted).
    gates = stall_gates(2)
    conclude = lw.Runtime._conclude

    def stalling(self: Any, ex: Any, n: int, *args: Any, **kw: Any) -> bool:
        if n == 1:
            held(gates)
        return conclude(self, ex, n, *args, **kw)

    monkeypatch.setattr(lw.Runtime, "_conclude", stalling)
    loop = _effect_loop(max_crashes=1)
    threads: list[threading.Thread] = []
    with lw.Runtime(url) as rt:
        run_id = rt.create(loop, {"artifacts": {"doc": {"n": 0}}}, task_key="stalls")[0].run_id
        drive, ended = resumer(url, run_id, loop)
        try:
            for name, (entered, _go) in gates.items():
                if threads:
                    expire(rt, run_id)
                t = threading.Thread(target=drive, name=name, daemon=True)
                t.start()
                threads.append(t)
                while not entered.wait(0.05):
                    assert t.is_alive(), ended.get(name)
            expire(rt, run_id)
            r = rt.resume_sync(run_id, loop)
        finally:
            for _entered, go in gates.values():
                go.set()
            for t in threads:
                t.join()
        assert (r.status, r.stop_reason) == ("escalated", "escalated"), r.packet
        assert "crashed 2 times at cycle 1" in r.packet["cause"], r.packet
        assert r.packet["evidence"].get("effects") == {"done": ["notify:n:1"], "unknown": []}, (
            r.packet
        )
        assert all(isinstance(ended[t.name], lw.StaleLeaseError) for t in threads), ended


def test_dying_as_an_answered_cycle_concludes_every_time_escalates_at_the_bound(
    url: str, tmp_path: Path
) -> None:
    # Cycle 1 asks a question and the run parks; once it is answered, each resume dies as it
    # concludes that cycle (before any commit of its own). The run stays ``awaiting_approval``
    # with its request decided, and the crash bound was judged only for a run resumed while
    # ``running``: resumed for ever. Now the executions since the park that died count.
    work = tmp_path / "w"
    rc, parked = _run(url, "ask", work, CB_ASK="1", CB_EXIT_AFTER_EFFECTS="1000")
    assert rc == 0 and parked is not None and parked["status"] == "awaiting_approval", parked
    with lw.Runtime(url) as rt:
        rt.answer(rt.store.get_run("ask").run_id, "three", by="ana")
    died, result = _until_done(url, "ask", work, CB_ASK="1", CB_EXIT_AFTER_EFFECTS="1000")
    # (before: every resume concluded the answered cycle again and died, past 20 processes)
    assert died == lw.DEFAULT_MAX_CRASHES + 1 == 6
    assert result["status"] == "escalated", result
    assert "crashed 6 times at cycle 1" in result["packet"]["cause"], result["packet"]
    assert result["packet"]["evidence"] == {"crashes": 6, "cycle": 1, "max_crashes": 5}
    with lw.Runtime(url) as rt:
        run_id = rt.store.get_run("ask").run_id
        assert rt.store.latest_checkpoint(run_id).state.get("pending") is None
    # within the bound, it goes on as it would have: answered, then accepted
    work = tmp_path / "v"
    rc, parked = _run(url, "ask2", work, CB_ASK="1", CB_EXIT_AFTER_EFFECTS="5")
    assert rc == 0 and parked is not None
    with lw.Runtime(url) as rt:
        rt.answer(rt.store.get_run("ask2").run_id, "three", by="ana")
    died, result = _until_done(url, "ask2", work, CB_ASK="1", CB_EXIT_AFTER_EFFECTS="5")
    assert died == 5
    assert (result["status"], result["cycles"]) == ("accepted", 3), result


def test_ctrl_c_after_the_effects_at_one_cycle_is_no_crash(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ten Ctrl-Cs after cycle 1's effects, before its commit (twice the default bound): each
    # resume that finishes the effects writes its start event first and, stopping alive, says
    # so by its lease, so none is counted and the run ends as it would have.
    hits = [0]
    conclude = lw.Runtime._conclude

    def interrupted(self: Any, ex: Any, n: int, *args: Any, **kw: Any) -> bool:
        if n == 1 and hits[0] < 10:
            hits[0] += 1
            raise KeyboardInterrupt
        return conclude(self, ex, n, *args, **kw)

    monkeypatch.setattr(lw.Runtime, "_conclude", interrupted)
    loop = _effect_loop(max_crashes=5)
    task = {"artifacts": {"doc": {"n": 0}}}
    with lw.Runtime(url) as rt:
        for _ in range(10):
            with pytest.raises(KeyboardInterrupt):
                rt.run_sync(loop, task, task_key="ctrl-c")
        r = rt.run_sync(loop, task, task_key="ctrl-c")
        assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 2), r.packet
        words = [e for e in rt.store.events(r.run_id) if e.kind == "interrupted"]
        assert len(words) == 10 and {e.data["why"] for e in words} == {"KeyboardInterrupt"}
