"""A run under a spend-only contract whose cycles spend nothing ends at the engine's default
cycle ceiling (stop 50). Stop 49's seed 200615: ``Success(min_score=1.0)`` and
``Budget(max_cost_usd=0.5)`` only; cycle 1 passes its check and its part is accepted at 0.9;
from cycle 2 the actor proposes the accepted part again, refused each time, no check runs, $0
spent: the only exit never came. The contract a run is given carries ``budget.max_cycles`` =
``DEFAULT_MAX_CYCLES`` (1,000), so the run ends ``budget_cycles`` at cycle 1,000 (not one
more), and its snapshot, packet, ``show``, the metrics and replay all see that stop.

A run stored before (its snapshot spend-only, without the ceiling) resumes under its snapshot,
and replay of it under its snapshot stays as it ran; a fork of it is a new run, given the
ceiling. Each actor here raises past cycle 1,000 rather than run for ever on a tree without
the ceiling."""

from __future__ import annotations

import io
import json
import sqlite3
import sys
from pathlib import Path

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright._contract import contract_from_snapshot
from loopwright.replay import load_contract, replay, simulate, trace_of_run

CEILING = 1000
SPEND_ONLY = lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cost_usd=0.5))
TASK = {"artifacts": {"doc": {"a": "", "b": ""}}}  # (both accepted at cycle 2)


class Runaway(BaseException):
    """Out of the engine (not the actor's error): a run went past the ceiling."""


def _loop(
    contract: lw.Contract = SPEND_ONLY, *, calls: list[int] | None = None, done_at: int = 0
) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle > CEILING + 10:
            raise Runaway(f"a run still going at cycle {ctx.cycle}")
        if calls is not None:
            calls.append(ctx.cycle)
        if ctx.cycle == 1 and not ctx.notes:
            return lw.Proposal(question=lw.Question("which way?"))
        if done_at and ctx.cycle >= done_at:
            return lw.Proposal.edit("doc", {"c": "done"})  # (a new part: not accepted)
        # the accepted part proposed again: refused, no check, nothing spent
        return lw.Proposal.edit("doc", {"a": f"x{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        done = state.values()["doc"].get("c") == "done"
        return lw.Verdict(passed=True, score=1.0 if done else 0.9, usage=lw.Usage(0.01, 10))

    return lw.Loop(name="stall", actor=actor, verifiers=[lw.Check(fn=check)], contract=contract)


def _show_text(url: str, run_id: str, monkeypatch: pytest.MonkeyPatch) -> str:
    from loopwright.cli import _app

    monkeypatch.setenv("COLUMNS", "400")  # (one line a row: the words are asserted whole)
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        _app.show(run_id, store=url)
    finally:
        sys.stdout = old
    return out.getvalue()


def test_a_free_spend_only_run_ends_at_the_default_ceiling(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(calls=calls), TASK, task_key="stall")
        assert r.status == "awaiting_approval"  # (the question: a resume under a new Loop)
        rt.answer(r.run_id, "left", by="ana")
        r = rt.resume_sync(r.run_id, _loop(calls=calls))
        assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", CEILING)
        assert calls[-1] == CEILING and len(calls) == CEILING
        rec = rt.store.get_run(r.run_id)
        ended = rt.resume_sync(r.run_id, _loop())  # an ended run, returned as it is
        assert (ended.stop_reason, ended.cycles) == ("budget_cycles", CEILING)
        trace = trace_of_run(rt.store, rec)
        [m] = [m for m in lw.compute_metrics(rt.store).per_run if m.run_id == r.run_id]
    budget = rec.contract["budget"]
    assert (budget["max_cycles"], budget["max_cycles_default"]) == (CEILING, True)
    assert contract_from_snapshot(rec.contract) == _loop().contract  # the store's round trip
    assert rec.cost_usd == pytest.approx(0.01)  # cycle 2's check alone
    packet = rec.packet or {}
    choose = "set budget.max_cycles, max_seconds or a no_progress rule"
    assert packet["stop_cause"].startswith(
        "stopped after 1000 cycles: the default cycle ceiling of 1,000 is used up"
    )
    assert choose in packet["stop_cause"] and choose in packet["recommended_action"]
    assert packet["summary"].startswith("stopped: the default cycle ceiling (1,000) is spent")
    shown = _show_text(url, r.run_id, monkeypatch)
    assert "the default cycle ceiling (1,000) is spent" in shown and choose in shown
    assert (m.stop_reason, m.cycles) == ("budget_cycles", CEILING)
    # replay: under the run's own contract, and under the contract the loop was written with
    assert trace is not None
    o = simulate(trace, contract_from_snapshot(rec.contract))
    assert (o.reason, o.cycles) == ("budget_cycles", CEILING)
    [(_, [what_if])] = replay([trace], {"written": SPEND_ONLY}).contracts
    assert (what_if.reason, what_if.cycles) == ("budget_cycles", CEILING)


def _stored_before_the_ceiling(db: Path, run_id: str) -> None:
    """The run's snapshot as an earlier release wrote it: spend-only, no ceiling."""
    con = sqlite3.connect(db)
    with con:
        con.execute(
            "UPDATE runs SET contract = ? WHERE run_id = ?",
            (json.dumps(SPEND_ONLY.to_dict()), run_id),
        )
    con.close()


def test_a_run_stored_spend_only_before_the_ceiling_resumes_and_replays_under_its_snapshot(
    tmp_path: Path,
) -> None:
    db = tmp_path / "s.db"
    with lw.Runtime(str(db)) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="old")
    _stored_before_the_ceiling(db, r.run_id)
    with lw.Runtime(str(db)) as rt:
        rt.answer(r.run_id, "left", by="ana")
        # resumed with a Loop whose contract now has the ceiling: the snapshot rules
        done = rt.resume_sync(r.run_id, _loop(done_at=CEILING + 3))
        assert (done.stop_reason, done.cycles) == ("success", CEILING + 3)
        rec = rt.store.get_run(r.run_id)
        assert rec.contract == SPEND_ONLY.to_dict()
        trace = trace_of_run(rt.store, rec)
        # a fork of it is a new run: given the ceiling (its contract kept otherwise)
        fork = rt.fork(r.run_id, 2)
    assert trace is not None
    o = simulate(trace, contract_from_snapshot(rec.contract))  # as it ran
    assert (o.reason, o.cycles) == ("success", CEILING + 3)
    [(_, [what_if])] = replay([trace], {"today": SPEND_ONLY}).contracts
    assert (what_if.reason, what_if.cycles) == ("budget_cycles", CEILING)
    assert fork.contract == _loop().contract.to_dict()
    assert fork.contract["budget"]["max_cycles_default"] is True


def test_a_fork_given_a_spend_only_contract_ends_at_the_default_ceiling(tmp_path: Path) -> None:
    url = str(tmp_path / "s.db")
    capped = lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=3))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(capped), TASK, task_key="capped")
        rt.answer(r.run_id, "left", by="ana")
        r = rt.resume_sync(r.run_id, _loop(capped))
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 3)
        fork = rt.fork(r.run_id, 3, contract=SPEND_ONLY)
        budget = fork.contract["budget"]
        assert (budget["max_cycles"], budget["max_cycles_default"]) == (CEILING, True)
        f = rt.resume_sync(fork.run_id, _loop())
        assert (f.stop_reason, f.cycles) == ("budget_cycles", CEILING)
        said = (rt.store.get_run(fork.run_id).packet or {})["stop_cause"]
    assert said.startswith("stopped after 1000 cycles: the default cycle ceiling of 1,000")


def test_replay_of_a_spec_reads_its_contract_as_a_run_is_given_it(tmp_path: Path) -> None:
    spec = tmp_path / "c.toml"
    spec.write_text("[contract.success]\nmin_score = 1.0\n[contract.budget]\nmax_cost_usd = 0.5\n")
    read = load_contract(spec)
    assert (read.budget.max_cycles, read.budget.max_cycles_default) == (CEILING, True)
    assert read == _loop().contract  # as the loop of that spec has it
    own = tmp_path / "own.toml"
    own.write_text("[contract.budget]\nmax_cost_usd = 0.5\nmax_seconds = 60\n")
    assert load_contract(own).budget.max_cycles is None


KEYED = lw.Contract(
    success=lw.Success(min_score=1.0), budget=lw.Budget(max_cost_usd=0.5, max_cycles_key="cap")
)


def test_a_task_without_its_cap_key_beside_spend_budgets_ends_at_the_default_ceiling(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a per-task cap (max_cycles_key) beside money only: a task lacking the key had no cycle
    # limit; it falls back to the default ceiling, and a task carrying it keeps its own cap
    budget = _loop(KEYED).contract.budget
    assert (budget.max_cycles, budget.max_cycles_default) == (CEILING, True)
    runs = {}
    with lw.Runtime(url) as rt:
        for key, task in (("bare", TASK), ("own", {**TASK, "cap": 5})):
            r = rt.run_sync(_loop(KEYED), task, task_key=key)
            rt.answer(r.run_id, "left", by="ana")
            r = rt.resume_sync(r.run_id, _loop(KEYED))
            rec = rt.store.get_run(r.run_id)
            runs[key] = (r, rec, trace_of_run(rt.store, rec))
    (bare, bare_rec, _), (own, own_rec, _) = runs["bare"], runs["own"]
    assert (bare.stop_reason, bare.cycles) == ("budget_cycles", CEILING)
    assert (own.stop_reason, own.cycles) == ("budget_cycles", 5)
    said = (bare_rec.packet or {})["stop_cause"]
    assert said.startswith("stopped after 1000 cycles: the default cycle ceiling of 1,000")
    own_said = (own_rec.packet or {})["stop_cause"]
    assert "the cycle budget of 5 is used up" in own_said and "default" not in own_said
    assert "default" not in (own_rec.packet or {})["summary"]
    assert "the default cycle ceiling (1,000) is spent" in _show_text(url, bare.run_id, monkeypatch)
    assert "default cycle ceiling" not in _show_text(url, own.run_id, monkeypatch)
    # replay agrees: under the runs' own contract, and under the contract as written
    for (_, rec, trace), cycles in ((runs["bare"], CEILING), (runs["own"], 5)):
        assert trace is not None
        o = simulate(trace, contract_from_snapshot(rec.contract))
        assert (o.reason, o.cycles) == ("budget_cycles", cycles)
        [(_, [what_if])] = replay([trace], {"written": KEYED}).contracts
        assert (what_if.reason, what_if.cycles) == ("budget_cycles", cycles)


def _budget_of(url: str, run_id: str) -> dict[str, object]:
    with lw.Runtime(url) as rt:
        return dict(rt.store.get_run(run_id).contract["budget"])


def test_a_max_cycles_a_person_writes_over_the_default_ceiling_is_their_cap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``loopwright fork --contract`` laid the file over the origin's snapshot, mark and all: a
    ``max_cycles = 1000`` written beside a time budget was taken for the default ceiling and
    dropped, and the fork ran with no cycle cap (stall51), as a spec's was before stall50b."""
    from loopwright.cli import main

    url = str(tmp_path / "s.db")
    with lw.Runtime(url) as rt:
        origin = rt.run_sync(_loop(), TASK, task_key="o").run_id
    assert _budget_of(url, origin)["max_cycles_default"] is True
    own = tmp_path / "own.toml"
    own.write_text("[contract.budget]\nmax_cycles = 1000\nmax_seconds = 60\n")
    store = ["--store", url]
    assert (
        main(["fork", origin, "--at-cycle", "0", "--contract", str(own), "--key", "f", *store]) == 0
    )
    budget = _budget_of(url, "f")
    assert (budget["max_cycles"], budget["max_seconds"]) == (CEILING, 60)
    assert "max_cycles_default" not in budget
    # a file that leaves max_cycles alone keeps the ceiling
    money = tmp_path / "money.toml"
    money.write_text("[contract.budget]\nmax_cost_usd = 0.25\n")
    assert (
        main(["fork", origin, "--at-cycle", "0", "--contract", str(money), "--key", "g", *store])
        == 0
    )
    kept = _budget_of(url, "g")
    assert (kept["max_cycles"], kept["max_cycles_default"], kept["max_cost_usd"]) == (
        CEILING,
        True,
        0.25,
    )
    capsys.readouterr()


def test_the_rerun_form_shows_the_default_ceiling_as_no_cap_of_the_persons(
    tmp_path: Path,
) -> None:
    """The dashboard's rerun form showed the default ceiling as ``max cycles 1000``: sent back
    beside a time budget the person added, the ceiling was dropped and the rerun had no cycle
    cap although the form had said 1000 (stall51). Its box is empty now, with a note; the form
    sent as shown gives the rerun the ceiling again, and a 1000 typed in is the person's cap."""
    import re

    url = str(tmp_path / "s.db")
    with lw.Runtime(url) as rt:
        origin = rt.run_sync(_loop(), TASK, task_key="o").run_id
    token = "server-token-0123456789"
    c = dashboard(url, token=token, identity="oscar")
    c.post("/login", data={"token": token})
    page = c.get(f"/runs/{origin}/confirm", params={"action": "rerun"}).text
    shown = dict(re.findall(r'<input name="(max_[a-z_]+)" value="([^"]*)"', page))
    assert shown == {"max_cycles": "", "max_cost_usd": "0.5", "max_tokens": "", "max_seconds": ""}
    assert 'id="default-ceiling"' in page and "default ceiling of 1,000 cycles" in page
    csrf = page.split('name="csrf" value="', 1)[1].split('"', 1)[0]

    def rerun(**changed: str) -> dict[str, object]:
        form = {**shown, **changed, "at_cycle": "0", "csrf": csrf, "start": "no"}
        r = c.post(f"/runs/{origin}/rerun", data=form, follow_redirects=False)
        assert r.status_code == 303, r.text[:300]
        new = r.headers["location"].split("/runs/")[1].split("?")[0]
        return _budget_of(url, new)

    same = rerun()
    assert (same["max_cycles"], same["max_cycles_default"]) == (CEILING, True)
    timed = rerun(max_seconds="60")  # empty max cycles beside a time budget: no cycle cap
    assert (timed["max_cycles"], timed.get("max_cycles_default")) == (None, None)
    mine = rerun(max_cycles="1000", max_seconds="60")
    assert (mine["max_cycles"], mine.get("max_cycles_default")) == (CEILING, None)


def test_an_eval_case_of_a_spend_only_run_is_read_by_from_dict(tmp_path: Path) -> None:
    """An eval case's contract is the run's snapshot as its author wrote it: the default ceiling
    the engine gave it left out. With the mark kept, the documented
    ``Contract.from_dict(case["contract"])`` refused every spend-only run's case (the public
    loader refuses the engine's mark, stop 51); a loop built on the case's contract is given
    the ceiling again, so the case replays under the contract the run had."""
    from loopwright.trace import eval_case

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(0.01, 10))

    loop = lw.Loop(
        name="once",
        actor=lambda ctx: lw.Proposal.edit("doc", {"c": "done"}),
        verifiers=[lw.Check(fn=check)],
        contract=SPEND_ONLY,
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.status == "accepted"
        snapshot = rt.store.get_run(r.run_id).contract
        assert snapshot["budget"]["max_cycles_default"] is True
        case = eval_case(rt.store, r.run_id)
    budget = case["contract"]["budget"]
    assert "max_cycles" not in budget and "max_cycles_default" not in budget
    assert budget["max_cost_usd"] == 0.5
    contract = lw.Contract.from_dict(case["contract"])
    assert contract == SPEND_ONLY
    assert contract.with_default_ceiling() == contract_from_snapshot(snapshot)
