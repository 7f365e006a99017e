"""What-if replay: the recorded policy reproduces recorded totals, and replaying a contract
agrees exactly with re-running the loop under it (property-based)."""

from __future__ import annotations

import itertools
import json
import types
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import loopwright as lw
import loopwright._call_retry as call_retry
from loopwright._contract import contract_from_snapshot
from loopwright.replay import (
    Call,
    CycleTrace,
    RunTrace,
    fit_stop,
    load_contract,
    load_source,
    read_traces,
    recorded_outcomes,
    replay,
    simulate,
    traces_from_store,
    write_traces,
)

ROOT = Path(__file__).resolve().parents[2]
LDB = ROOT / "tests" / "data" / "ldb" / "humaneval"
FILES = [
    LDB / "gpt-3.5-turbo-0613" / "results.jsonl",
    LDB / "reflexion" / "gpt-4o-2024-05-13.jsonl",
]
LDB_POLICY = ROOT / "examples" / "code_repair" / "ldb_policy.toml"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)
def test_the_recorded_policy_reproduces_the_recorded_totals(path: Path) -> None:
    raw = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    traces = load_source(str(path))
    report = replay(traces, {"ldb": load_contract(LDB_POLICY)})
    (totals, outcomes) = report.contracts[0]
    assert totals.runs == len(raw) == 164
    assert totals.accepted == sum(r["is_passing"] for r in raw)
    assert totals.held_out_passed == sum(r["is_solved"] for r in raw)
    assert totals.cycles == sum(len(r["implementations"]) for r in raw)  # attempts
    assert totals.accepted_lost == 0 and totals.censored == 0
    # Exactly, to the bit: on Python 3.13 the recorded spend was sum()'s (compensated since
    # 3.12) and the replayed one added call by call; the table printed "-0.0%" saved.
    assert totals.cost_usd == report.recorded.cost_usd
    # run by run, too
    for o, r, rec in zip(outcomes, raw, recorded_outcomes(traces), strict=True):
        assert (o.accepted, o.held_out_passed, o.cycles) == (
            r["is_passing"],
            r["is_solved"],
            len(r["implementations"]),
        )
        assert o.cost_usd == rec.cost_usd, o.run_id


def test_a_plateau_rule_saves_spend_on_the_recorded_runs() -> None:
    traces = load_source(str(FILES[0]))
    plateau = lw.Contract.from_dict(
        {
            "success": {"min_score": 1.0},
            "no_progress": {"cycles": 3, "min_delta": 0.001},
            "budget": {"max_cycles": 11},
        }
    )
    report = replay(traces, {"ldb": load_contract(LDB_POLICY), "plateau": plateau})
    ldb, plateau_t = report.contracts[0][0], report.contracts[1][0]
    assert plateau_t.cost_usd < 0.5 * ldb.cost_usd
    assert plateau_t.accepted >= 0.95 * ldb.accepted
    assert plateau_t.stop_reasons.get("no_progress", 0) > 0


def test_traces_round_trip_through_the_file_format(tmp_path: Path) -> None:
    traces = load_source(str(FILES[1]))
    out = tmp_path / "t.jsonl"
    assert write_traces(traces, out) == 164
    again = list(read_traces(out))
    assert again == traces
    first = json.loads(out.read_text().splitlines()[0])
    assert first["format"] == "loopwright.run-trace/1"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**first, "format": "loopwright.run-trace/9"}) + "\n")
    with pytest.raises(lw.ConfigError, match="format"):
        list(read_traces(bad))


@pytest.mark.parametrize(
    ("where", "value", "said"),
    [
        ("recorded.cost_usd", "abc", "recorded.cost_usd must be a number"),
        ("recorded.cost_usd", float("nan"), "recorded.cost_usd must be a number"),
        ("recorded.tokens", 1.5, "recorded.tokens must be a whole number"),
        ("recorded.held_out_passed", "yes", "recorded.held_out_passed must be true, false"),
        ("cycle.score", float("inf"), "score must be a number or null"),
        ("cycle.seconds", "1", "seconds must be a number"),
        ("cycle.improved", "no", "improved must be true, false or null"),
        ("tail.cost_usd", -1, "tail.cost_usd must be a number, 0 or more"),
    ],
)
def test_a_bad_number_in_a_trace_file_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, value: Any, said: str
) -> None:
    """A run-trace file holding text or NaN where replay adds or compares numbers is refused
    where it is read, naming the line and the field: it was an internal error (ValueError)
    later, or NaN totals (and ``NaN`` in --json, which is not JSON)."""
    from loopwright.cli import main

    [first] = load_source(str(FILES[1]))[:1]
    doc = first.to_dict()
    doc["tail"] = {"kind": "crossed", "cost_usd": 0.1, "tokens": 1, "seconds": 1.0}
    part, key = where.split(".")
    (doc["cycles"][0] if part == "cycle" else doc[part])[key] = value
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(doc) + "\n")  # NaN and Infinity as Python's json writes them
    with pytest.raises(lw.ConfigError, match=said):
        list(read_traces(bad))
    assert main(["replay", str(bad), "--contract", str(LDB_POLICY)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert f"{bad}:1: malformed run trace: " in err and said in err


# --- replay agrees with re-running the loop ---------------------------------------------------
cycle_st = st.fixed_dictionaries(
    {
        "actor": st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.4]),
        "verifier": st.sampled_from([0.0, 0.0, 0.05]),
        "held": st.sampled_from([0.0, 0.05]),
        "score": st.sampled_from([0.2, 0.4, 0.5, 0.6, 0.8, 0.9, 1.0]),
        "passed": st.booleans(),
        "held_passed": st.booleans(),
        # the actor asks a person instead (answered: a cycle that judges nothing)
        "asks": st.sampled_from([False, False, False, False, True]),
        # an effect run after the checks (``requires_success=False``): none, one returning
        # a plain value (no usage), or one reporting what it cost
        "effect": st.sampled_from([None, None, "plain", 0.0, 0.05]),
        # and one declared free (``free=True``): no priced call, no row
        "free_effect": st.sampled_from([False, False, True]),
    }
)

CONTRACT_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "min_score": st.sampled_from([0.5, 0.8, 1.0]),
    "no_progress": st.sampled_from([None, (1, 0.0), (2, 0.0), (2, 0.1), (3, 0.05)]),
    "max_cycles": st.sampled_from([None, 1, 2, 3, 5, 8]),
    "max_cost_usd": st.sampled_from([None, 0.1, 0.3, 0.6, 1.0, 2.0]),
    "max_tokens": st.sampled_from([None, 50, 200]),
    "marginal": st.sampled_from([None, 0.2, 1.0, 4.0]),
    "hazard": st.sampled_from([(), (((1, 2), (0, 3)), ((2, 4), (1, 9)))]),
}
contract_st = st.fixed_dictionaries(CONTRACT_FIELDS)


def _contract(c: dict[str, Any], n_cycles: int) -> lw.Contract:
    data: dict[str, Any] = {
        "success": {"min_score": c["min_score"]},
        "budget": {
            k: c[k] for k in ("max_cycles", "max_cost_usd", "max_tokens") if c[k] is not None
        },
    }
    if c["no_progress"]:
        data["no_progress"] = {"cycles": c["no_progress"][0], "min_delta": c["no_progress"][1]}
    if c["marginal"] is not None:
        data["marginal_return"] = {
            "value_per_success_usd": c["marginal"],
            "hazard": [[list(x) for x in row] for row in c["hazard"]],
        }
    if not data["budget"] and not data.get("no_progress"):
        # an exit that stops whatever the cycles cost (a loop refuses a marginal_return alone)
        data["budget"]["max_cycles"] = n_cycles + 2
    return lw.Contract.from_dict(data)


def _cycle_trace(i: int, c: dict[str, Any]) -> CycleTrace:
    actor = Call("actor", c["actor"], int(c["actor"] * 1000))
    if c.get("asks"):
        return CycleTrace(cycle=i, calls=(actor,), asked=True)
    effect = c.get("effect")
    paid = () if effect is None else (Call("effect:e", 0.0 if effect == "plain" else effect, 0),)
    return CycleTrace(
        cycle=i,
        calls=(
            actor,
            Call("verifier:v", c["verifier"], 0),
            Call("verifier:h", c["held"], 0),
            *paid,
        ),
        verdicts={"v": {"passed": c["passed"], "score": c["score"]}},
        score=c["score"],
        held_out_passed=c["held_passed"],
    )


def _trace(cycles: list[dict[str, Any]]) -> RunTrace:
    return RunTrace(
        run_id="r",
        task_key="r",
        cycles=tuple(_cycle_trace(i, c) for i, c in enumerate(cycles, 1)),
        required=("v",),
    )


def _loop(cycles: list[dict[str, Any]], contract: lw.Contract) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle > len(cycles):
            return lw.Proposal(escalate="no more recorded cycles")
        c = cycles[ctx.cycle - 1]
        if c.get("asks"):
            usage = lw.Usage(cost_usd=c["actor"], tokens=int(c["actor"] * 1000))
            return lw.Proposal(question=lw.Question(f"cycle {ctx.cycle}?"), usage=usage)
        # a new part every cycle: no proposal repeats, none touches an accepted part
        return lw.Proposal(
            edits=[lw.Edit("doc", f"p{ctx.cycle}", ctx.cycle)],
            effects=([] if c.get("effect") is None else [e.call(n=ctx.cycle)])
            + ([f.call(n=ctx.cycle)] if c.get("free_effect") else []),
            usage=lw.Usage(cost_usd=c["actor"], tokens=int(c["actor"] * 1000)),
        )

    @lw.effect("publish", requires_success=False)
    def e(n: int) -> Any:
        cost = cycles[n - 1]["effect"]
        return {"n": n} if cost == "plain" else lw.EffectResult({"n": n}, lw.Usage(cost))

    @lw.effect("publish", requires_success=False, free=True)
    def f(n: int) -> Any:
        return {"n": n}

    def v(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        c = cycles[state.cycle]  # the candidate's cycle is the one being judged, minus one
        return lw.Verdict(
            passed=c["passed"], score=c["score"], usage=lw.Usage(cost_usd=c["verifier"])
        )

    def h(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        c = cycles[state.cycle]
        return lw.Verdict(passed=c["held_passed"], usage=lw.Usage(cost_usd=c["held"]))

    return lw.Loop(
        name="replay-oracle",
        actor=actor,
        verifiers=[lw.Check(fn=v, name="v"), lw.Check(fn=h, name="h", held_out=True)],
        contract=contract,
        retry=lw.RetryPolicy(attempts=1),
        effects=[e, f],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="publish", action="allow")]),
    )


def _ends_as(r: lw.RunResult, outcome: Any) -> None:
    """The run ended as replay says it would: reason, cycles, acceptance and spend."""
    assert (r.stop_reason, r.cycles, r.accepted) == (
        outcome.reason,
        outcome.cycles,
        outcome.accepted,
    ), (outcome, r.packet and r.packet.get("cause"))
    assert r.spent.cost_usd == pytest.approx(outcome.cost_usd)
    assert r.spent.tokens == outcome.tokens


@settings(max_examples=150)
@given(cycles=st.lists(cycle_st, min_size=1, max_size=7), c=contract_st)
def test_replay_agrees_with_rerunning_the_loop(
    tmp_path_factory: pytest.TempPathFactory, cycles: list[dict[str, Any]], c: dict[str, Any]
) -> None:
    contract = _contract(c, len(cycles))
    outcome = simulate(_trace(cycles), contract)
    event(outcome.reason)
    path = tmp_path_factory.mktemp("oracle") / "s.db"
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        loop = _loop(cycles, contract)
        r = rt.run_sync(loop, {"artifacts": {"doc": {"p0": 0}}})
        while r.status == "awaiting_approval":  # the actor's question: a person answers
            rt.answer(r.run_id, "yes", by="ann")
            r = rt.resume_sync(r.run_id, loop)
        if outcome.reason == "censored":
            # the contract would go past the recording: the re-run asks for a cycle more
            assert r.stop_reason == "escalated" and r.cycles == len(cycles)
            return
        _ends_as(r, outcome)
        if outcome.reason == "success" or outcome.reason in ("no_progress",):
            assert r.held_out_passed == outcome.held_out_passed
        # and the store's own trace of the run replays to the same end
        (again,) = list(traces_from_store(rt.store))
        mirrored = simulate(again, contract)
        assert (mirrored.reason, mirrored.cycles, mirrored.accepted) == (
            outcome.reason,
            outcome.cycles,
            outcome.accepted,
        )
        assert mirrored.cost_usd == pytest.approx(outcome.cost_usd)


def _edited_loop(cycles: list[dict[str, Any]], contract: lw.Contract) -> lw.Loop:
    """``_loop``, whose checks take the entry of the cycle they judge whoever proposed it (a
    check-only cycle, which calls no actor, takes its own), the last one past the end."""

    def entry(state: lw.TaskState) -> dict[str, Any]:
        return cycles[min(state.cycle, len(cycles) - 1)]

    def v(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        c = entry(state)
        return lw.Verdict(
            passed=c["passed"], score=c["score"], usage=lw.Usage(cost_usd=c["verifier"])
        )

    def h(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        c = entry(state)
        return lw.Verdict(passed=c["held_passed"], usage=lw.Usage(cost_usd=c["held"]))

    base = _loop(cycles, contract)
    return replace(
        base, verifiers=[lw.Check(fn=v, name="v"), lw.Check(fn=h, name="h", held_out=True)]
    )


# Budgets that mostly leave room for the cycle after an edit (a spent one stops the resumed
# run before it, as ``contract_st``'s mostly do), the rest of ``contract_st`` as it is.
edited_contract_st = st.fixed_dictionaries(
    {
        **CONTRACT_FIELDS,
        "max_cycles": st.sampled_from([None, 2, 4, 8]),
        "max_cost_usd": st.sampled_from([None, None, 0.6, 2.0]),
        "max_tokens": st.sampled_from([None, None, 200, 2000]),
    }
)


@settings(max_examples=80)
@given(
    cycles=st.lists(cycle_st, min_size=1, max_size=6),
    c=edited_contract_st,
    edits=st.integers(min_value=1, max_value=2),
)
def test_replay_agrees_with_a_run_a_person_edited_and_resumed(
    tmp_path_factory: pytest.TempPathFactory,
    cycles: list[dict[str, Any]],
    c: dict[str, Any],
    edits: int,
) -> None:
    """Whatever ended the run, a person edits it (once or twice) and resumes it: the cycle that
    judges the edit calls no actor (``_edit_check``), and the store's trace of the run
    replays under its contract to the end the engine reached, at its cost."""
    contract = _contract(c, len(cycles) + 1)
    loop = _edited_loop(cycles, contract)
    path = tmp_path_factory.mktemp("edited") / "s.db"
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"p0": 0}}})
        while r.status == "awaiting_approval":  # the actor's question: a person answers
            rt.answer(r.run_id, "yes", by="ann")
            r = rt.resume_sync(r.run_id, loop)
        ended = r.cycles
        for i in range(edits):
            rt.edit(r.run_id, "doc/p0", f"by hand {i}", by="ann")
        r = rt.resume_sync(r.run_id, loop)
        while r.status == "awaiting_approval":  # a question after the edit's cycle
            rt.answer(r.run_id, "yes", by="ann")
            r = rt.resume_sync(r.run_id, loop)
        (trace,) = list(traces_from_store(rt.store))
    checked = [x.cycle for x in trace.cycles if x.check_only]
    # one check-only cycle for the edits, right after the end, unless a budget stopped the run
    # before it (then none)
    assert checked in ([ended + 1], []), (checked, ended)
    assert not checked or not [x for x in trace.cycles[ended].calls if x.who == "actor"]
    outcome = simulate(trace, contract)
    event(f"{outcome.reason} {'judged' if checked else 'not judged'}")
    if outcome.reason == "censored":
        # past the recording: the re-run's actor ran out of recorded cycles
        assert r.stop_reason == "escalated"
        return
    # Not judged: a budget stopped the resumed run before any cycle, named as replay names it
    # (a budget crossed mid-cycle before one only projected: _decide.budget_stop).
    _ends_as(r, outcome)


# --- what a run recorded after its last concluded cycle, and what the engine knew ------------
def _scripted(
    name: str,
    costs: list[float],
    verdicts: list[tuple[bool, float]],
    contract: lw.Contract,
    *,
    extra: Sequence[lw.Check] = (),
) -> lw.Loop:
    """A loop whose cycle ``n`` actor call costs ``costs[n-1]`` and whose check ``main``
    returns ``verdicts[n-1]`` (passed, score); ``extra`` checks are added after it."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit(
            "doc", {"x": f"v{ctx.cycle}"}, usage=lw.Usage(cost_usd=costs[ctx.cycle - 1])
        )

    def main(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        passed, score = verdicts[state.cycle]
        return lw.Verdict(passed=passed, score=score)

    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[lw.Check(fn=main, name="main"), *extra],
        contract=contract,
        retry=lw.RetryPolicy(attempts=1),
    )


def _runs(path: Path, loops: dict[str, lw.Loop]) -> list[RunTrace]:
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        for key, loop in loops.items():
            rt.run_sync(loop, {"artifacts": {"doc": {"x": "v0"}}}, task_key=key)
        return sorted(traces_from_store(rt.store), key=lambda t: t.task_key)


def test_a_censored_run_counts_at_its_recorded_cost(tmp_path: Path) -> None:
    """A run stopped mid-cycle by a cost cap, replayed without the cap, goes on past its
    recording (censored): it spent its whole recorded cost, the runaway call included, so no
    contract is credited with saving it (it was counted at $0.01 of its $5.01)."""
    capped = lw.Contract(budget=lw.Budget(max_cycles=5, max_cost_usd=1.0))
    ok = [(False, 0.5), (True, 1.0)]
    traces = _runs(
        tmp_path / "s.db",
        {
            "ok1": _scripted("c", [0.1, 0.1], ok, capped),
            "ok2": _scripted("c", [0.1, 0.1], ok, capped),
            "runaway": _scripted("c", [0.01, 5.0], [(False, 0.3)] * 2, capped),
        },
    )
    runaway = traces[2]
    assert runaway.recorded["stop_reason"] == "budget_cost" and len(runaway.cycles) == 1
    assert runaway.tail["kind"] == "crossed"
    uncapped = lw.Contract(budget=lw.Budget(max_cycles=5))
    report = replay(traces, {"uncapped": uncapped, "capped": capped})
    (totals, outs), (same, same_outs) = report.contracts
    assert outs[2].reason == "censored" and not outs[2].accepted
    assert outs[2].cost_usd == pytest.approx(5.01)
    assert outs[2].spend_after_last_improvement_usd == pytest.approx(5.0)
    assert totals.cost_usd == pytest.approx(report.recorded.cost_usd) == pytest.approx(5.41)
    # under its own contract it ends as recorded
    assert (same_outs[2].reason, same_outs[2].cost_usd) == ("budget_cost", pytest.approx(5.01))
    assert same.cost_usd == pytest.approx(5.41)
    # fit-stop's objective counts it so too: nothing here can be saved (the $5 is one call)
    fit = fit_stop(traces, keep=1.0, folds=2, seed=0)
    assert fit.all_data.cost_usd == pytest.approx(5.41)
    assert fit.all_data.spend_saved_share == pytest.approx(0.0)


@pytest.mark.parametrize("kind", ["parked", "unfinished", "crossed", "none"])
def test_every_censored_end_counts_the_whole_recorded_spend(kind: str) -> None:
    tail = {"kind": kind, "cost_usd": 0.3, "tokens": 30, "seconds": 2.0}
    trace = RunTrace(
        run_id="r",
        task_key="r",
        cycles=(
            CycleTrace(
                cycle=1,
                calls=(Call("actor", 0.1, 10),),
                verdicts={"v": {"passed": False, "score": 0.2}},
                score=0.2,
                seconds=1.0,
            ),
        ),
        required=("v",),
        recorded={
            "status": "stopped",
            "stop_reason": "x",
            "cycles": 1,
            "cost_usd": 0.4,
            "tokens": 40,
        },
        tail=tail if kind != "none" else {"kind": "none"},
    )
    o = simulate(trace, lw.Contract(budget=lw.Budget(max_cycles=9)))
    assert (o.reason, o.cycles, o.accepted) == ("censored", 1, False)
    # "none": the recorded totals hold spend the cycles do not list (an old record's effects)
    assert (o.cost_usd, o.tokens) == (pytest.approx(0.4), 40)
    if kind != "none":
        assert o.seconds == pytest.approx(3.0)


def test_checks_the_loop_does_not_require_are_judged_as_the_engine_judged_them(
    tmp_path: Path,
) -> None:
    """Replay takes the required checks from the loop's ``Check.required`` flags (the cycle
    records note the others), not from the recorded contract: a run accepted by the engine is
    accepted when replayed under its own contract, and a check that is not required passing
    for the first time is no progress."""

    def style(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:  # advisory, never passes
        return lw.Verdict(passed=False, score=0.0)

    def lint(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:  # passes from cycle 2 on
        return lw.Verdict(passed=state.cycle >= 1, score=0.5)

    accepts = lw.Contract(success=lw.Success(min_score=0.5), budget=lw.Budget(max_cycles=4))
    plateau = lw.Contract(
        no_progress=lw.NoProgress(cycles=1, min_delta=0.0), budget=lw.Budget(max_cycles=4)
    )
    loops = {
        "accepts": _scripted(
            "a",
            [0.0] * 4,
            [(False, 0.0), (True, 1.0), (True, 1.0), (True, 1.0)],
            accepts,
            extra=[lw.Check(fn=style, name="style", required=False)],
        ),
        "plateau": _scripted(
            "p",
            [0.0] * 4,
            [(False, 0.5)] * 4,
            plateau,
            extra=[lw.Check(fn=lint, name="lint", required=False)],
        ),
    }
    path = tmp_path / "s.db"
    traces = _runs(path, loops)
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        recs = {r.task_key: r for r in rt.store.list_runs()}
        assert (recs["accepts"].stop_reason, recs["accepts"].cycle) == ("success", 2)
        assert (recs["plateau"].stop_reason, recs["plateau"].cycle) == ("no_progress", 2)
        ck = [c for c in rt.store.checkpoints(recs["accepts"].run_id) if c.record][-1]
    a = simulate(traces[0], accepts)
    assert (a.reason, a.cycles, a.accepted) == ("success", 2, True)
    p = simulate(traces[1], plateau)
    assert (p.reason, p.cycles) == ("no_progress", 2)
    # what the engine knew: the cycle records name the checks it does not require
    assert ck.record["not_required"] == ["style"]
    assert [t.required for t in traces] == [("main",), ("main",)]
    # the fit's template keeps the engine's success rule: the runs' required checks
    assert fit_stop(traces, keep=0.5, folds=2).contract.success.required == ("main",)


def test_the_recorded_contracts_named_checks_are_the_fits_success_rule(tmp_path: Path) -> None:
    """Without a base, fit-stop's success rule names the checks the recorded contract named,
    not every check the loop requires (a run accepted as recorded stays accepted)."""

    def other(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:  # required, never passes
        return lw.Verdict(passed=False, score=1.0)

    named = lw.Contract(success=lw.Success(required=("main",)), budget=lw.Budget(max_cycles=3))
    loops = {
        k: _scripted(
            "n",
            [0.1] * 3,
            [(False, 1.0), (True, 1.0), (True, 1.0)],
            named,
            extra=[lw.Check(fn=other, name="other")],
        )
        for k in ("t1", "t2")
    }
    traces = _runs(tmp_path / "s.db", loops)
    assert [t.required for t in traces] == [("main", "other")] * 2
    assert [t.recorded["success_required"] for t in traces] == [["main"]] * 2
    fit = fit_stop(traces, keep=1.0, folds=2)
    assert fit.contract.success.required == ("main",)
    assert fit.all_data.accepted == 2


def test_a_run_out_of_time_mid_cycle_replays_as_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose time budget ran out in the middle of a cycle (before a verifier could be
    called) is recognised as stopped mid-cycle whatever its cause reads: replayed under its
    own contract, or one with less time, it stops by ``budget_time`` at its recorded cost;
    with more time, it is censored at its recorded cost. (The deadline is passed by moving
    the engine's call clock, not by waiting: no test depends on timing.)"""
    late = [0.0]
    real = call_retry.time
    monkeypatch.setattr(
        call_retry, "time", types.SimpleNamespace(time=lambda: real.time() + late[0])
    )

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            late[0] = 1e6  # the deadline has passed by the time the verifier is called
        return lw.Proposal.edit("doc", {"x": f"v{ctx.cycle}"}, usage=lw.Usage(cost_usd=0.1))

    def vis(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.2)

    timed = lw.Contract(budget=lw.Budget(max_cycles=5, max_seconds=100.0))
    loop = lw.Loop(name="t", actor=actor, verifiers=[lw.Check(fn=vis)], contract=timed)
    path = tmp_path / "s.db"
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"x": "v0"}}}, task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_time", 1)
        assert r.spent.cost_usd == pytest.approx(0.2)
        assert not str((r.packet or {}).get("cause")).startswith("crossed")
        (trace,) = list(traces_from_store(rt.store))
    for contract in (timed, lw.Contract(budget=lw.Budget(max_cycles=5, max_seconds=50.0))):
        o = simulate(trace, contract)
        assert (o.reason, o.cycles, o.cost_usd) == ("budget_time", 1, pytest.approx(0.2))
    more = simulate(trace, lw.Contract(budget=lw.Budget(max_cycles=5, max_seconds=200.0)))
    assert (more.reason, more.cost_usd) == ("censored", pytest.approx(0.2))
    report = replay([trace], {"own": timed})
    assert report.contracts[0][0].cost_usd == pytest.approx(report.recorded.cost_usd)
    assert report.contracts[0][0].stop_reasons == report.recorded.stop_reasons
    # recognised by the cycle it started and never concluded, not by the words of its cause
    assert trace.tail["kind"] == "crossed" and trace.tail["reason"] == "budget_time"
    assert trace.tail["max_seconds"] == 100.0


def test_a_run_a_person_reopened_replays_as_the_person_had_it_go_on(tmp_path: Path) -> None:
    """A run stops (no progress), a person edits the part it was stuck on, and the resumed run
    is accepted. Under its own contract replay goes on past the stop, as the person had the
    run go on, and reproduces the recorded outcome; a contract that stops it sooner stops it
    there (the person never saw that stop). Before, replay under the run's own contract ended
    it at the stop: `accepted_lost: 1` (outside probe, helper-58)."""
    parts = ("a", "b", "c")

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        # fixes a and b, then is stuck on c (a wrong value each cycle); once c is a person's
        # (accepted), it proposes nothing
        todo = [p for p in ("a", "b") if doc.get(p) != "good"]
        if todo:
            return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=lw.Usage(0.1, 10))
        if ctx.is_accepted("doc", "c"):
            return lw.Proposal(usage=lw.Usage(0.1, 10))
        return lw.Proposal.edit("doc", {"c": f"try {ctx.cycle}"}, usage=lw.Usage(0.1, 10))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [lw.Finding(f"{p} is bad", "doc", p) for p in parts if doc.get(p) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / len(parts), findings=tuple(bad))

    contract = lw.Contract(
        success=lw.Success(min_score=1.0),
        no_progress=lw.NoProgress(cycles=2),
        budget=lw.Budget(max_cycles=10),
    )
    loop = lw.Loop(name="rescued", actor=actor, verifiers=[check], contract=contract)
    path = tmp_path / "s.db"
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": dict.fromkeys(parts, "bad")}}, task_key="r")
        assert (r.stop_reason, r.cycles) == ("no_progress", 4)
        rt.edit(r.run_id, "doc/c", "good", by="carol")
        r = rt.resume_sync(r.run_id, loop)
        assert (r.status, r.cycles) == ("accepted", 5), (r.stop_reason, r.state.findings)
    with lw.store.open_store(str(path)) as st:
        [trace] = traces_from_store(st)
    assert [c.reopened for c in trace.cycles] == [False, False, False, True, False]
    same = simulate(trace, contract)
    assert (same.reason, same.accepted, same.cycles) == ("success", True, 5)
    assert same.cost_usd == pytest.approx(r.spent.cost_usd)
    report = replay([trace], {"same": contract})
    assert report.contracts[0][0].accepted_lost == 0
    # a contract that stops it before the person's edit: the edit never happens
    sooner = simulate(trace, lw.Contract(budget=lw.Budget(max_cycles=3)))
    assert (sooner.reason, sooner.cycles) == ("budget_cycles", 3)
    # the cycle that judges the edit is no attempt: a cycle cap it passes does not stop it,
    # as the engine (edit47); a cost budget used up does
    capped = simulate(trace, replace_budget(contract, max_cycles=4))
    assert (capped.reason, capped.cycles, capped.accepted) == ("success", 5, True)
    spent = simulate(trace, replace_budget(contract, max_cost_usd=0.4))
    assert (spent.reason, spent.cycles) == ("budget_cost", 4)
    # the mark goes through the trace file
    out = tmp_path / "t.jsonl"
    write_traces([trace], out)
    [back] = read_traces(out)
    assert back == trace


def replace_budget(contract: lw.Contract, **budget: Any) -> lw.Contract:
    from dataclasses import replace

    return replace(contract, budget=replace(contract.budget, **budget))


@pytest.mark.parametrize("cap", ["cycles", "cost"])
def test_a_reopened_run_the_engine_stopped_again_at_once_replays_to_that_stop(
    tmp_path: Path, cap: str
) -> None:
    """Stopped by its budget, edited, resumed: a cost budget used up stops it again before
    any new cycle; a cycle cap does not stop the check-only cycle that judges the edit
    (edit47). Replay goes on past the reopened end and makes the checks before the next
    cycle, as the engine did (it said ``censored``: review of the reopening, helper-65)."""
    parts = ("a", "b", "c", "d")

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        todo = [p for p in parts if doc.get(p) != "good"] or ["a"]
        return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=lw.Usage(0.1, 100))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [lw.Finding(f"{p} bad", "doc", p) for p in parts if doc.get(p) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / len(parts), findings=tuple(bad))

    budget = lw.Budget(max_cycles=2) if cap == "cycles" else lw.Budget(max_cost_usd=0.2)
    contract = lw.Contract(success=lw.Success(min_score=1.0), budget=budget)
    loop = lw.Loop(name="cap", actor=actor, verifiers=[check], contract=contract)
    path = tmp_path / "s.db"
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": dict.fromkeys(parts, "bad")}}, task_key="c")
        assert (r.stop_reason, r.cycles) == (f"budget_{cap}", 2)
        rt.edit(r.run_id, "doc/c", "good", by="bob")
        r = rt.resume_sync(r.run_id, loop)
        # cycles: the edit judged (d still bad), no actor call past the cap
        want = 3 if cap == "cycles" else 2
        assert (r.stop_reason, r.cycles) == (f"budget_{cap}", want)
    with lw.store.open_store(str(path)) as st:
        [trace] = traces_from_store(st)
    assert trace.cycles[1].reopened and [c.check_only for c in trace.cycles[2:]] == (
        [True] if cap == "cycles" else []
    )
    o = simulate(trace, contract)
    assert (o.reason, o.cycles, o.cost_usd) == (f"budget_{cap}", want, pytest.approx(0.2))


# --- a cycle that ended the run mid-way, reopened by a person -------------------------------
def _midway(fail: tuple[int, ...], contract: lw.Contract, *, risky: bool = False) -> lw.Loop:
    """Fixes one of parts a, b, c a cycle; the actor's calls in ``fail`` fail billed $0.05;
    ``risky``: touching b needs a person's approval."""
    n = itertools.count(1)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if next(n) in fail:
            e = lw.TransientError("busy")
            e.usage = lw.Usage(cost_usd=0.05, tokens=50)  # type: ignore[attr-defined]
            raise e
        doc = ctx.artifacts["doc"]
        todo = [p for p in "abc" if doc.get(p) != "good"] or ["a"]
        return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=lw.Usage(0.1, 100))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        doc = state.artifacts["doc"].values()
        bad = [x for x in "abc" if doc.get(x) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 3, usage=lw.Usage(0.01, 10))

    risk = (lw.RiskRule(name="b", touches=("doc/b",)),) if risky else ()
    return lw.Loop(
        name="midway",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=replace(contract, risk=risk),
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
    )


def _reopened_midway(path: Path, cap: float | None) -> list[RunTrace]:
    """Runs that ended inside cycle 2 (an approval denied; the actor giving up), then a person
    fixed b by hand and resumed them."""
    contract = lw.Contract(
        success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=6, max_cost_usd=cap)
    )
    task = {"artifacts": {"doc": dict.fromkeys("abc", "bad")}}
    with lw.Runtime(f"sqlite:///{path}?durability=process") as rt:
        loop = _midway((), contract, risky=True)
        r = rt.run_sync(loop, task, task_key="denied")
        assert r.status == "awaiting_approval"
        rt.deny(r.run_id, by="alice", note="no")
        assert rt.resume_sync(r.run_id, loop).status == "escalated"
        rt.edit(r.run_id, "doc/b", "good", by="bob")
        rt.resume_sync(r.run_id, loop)
        loop = _midway((2, 3), contract)
        r = rt.run_sync(loop, task, task_key="gave_up")
        assert r.status == "escalated"
        rt.edit(r.run_id, "doc/b", "good", by="bob")
        rt.resume_sync(r.run_id, loop)
        return sorted(traces_from_store(rt.store), key=lambda t: t.task_key)


def test_a_cycle_ended_midway_and_reopened_replays_at_its_recorded_cost(tmp_path: Path) -> None:
    """What the cycle that ended the run spent (before the person reopened it) is in the
    trace, before the cycle the resumed run made in its place: replay under the recorded
    contract spends what the run spent (it was $0.22 of $0.33: review)."""
    denied, gave_up = _reopened_midway(tmp_path / "s.db", None)
    for t, aborted in ((denied, 0.11), (gave_up, 0.10)):
        assert t.recorded["status"] == "accepted" and t.tail["kind"] == "none"
        # cycle 2 judged the person's edit (no actor call), cycle 3 was the actor's
        assert [c.check_only for c in t.cycles] == [False, True, False]
        head = t.cycles[1].calls[0]
        assert (head.who, head.cost_usd) == ("aborted", pytest.approx(aborted))
        assert [c.who for c in t.cycles[1].calls[1:]] == ["verifier:check"]
        again = RunTrace.from_dict(json.loads(json.dumps(t.to_dict())))
        assert again == t
        for trace in (t, again):
            out = simulate(trace, contract_from_snapshot(_stored_contract(tmp_path, t)))
            assert (out.reason, out.cycles, out.accepted) == ("success", 3, True)
            assert out.cost_usd == pytest.approx(t.recorded["cost_usd"])
            assert out.tokens == t.recorded["tokens"]
    # a contract that stops sooner stops there: the aborted spend counted, no cycle more
    tight = lw.Contract(
        success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=6, max_cost_usd=0.25)
    )
    out = simulate(gave_up, tight)
    # (the cycle judging the edit is not stopped by a projection, only by a budget used up:
    # edit47; it spends the check's $0.01, and the actor's next cycle is projected to cross)
    assert (out.reason, out.cycles, out.cost_usd) == ("budget_cost", 2, pytest.approx(0.22))


def test_a_reopened_run_stopped_before_its_next_cycle_replays_so(tmp_path: Path) -> None:
    """Reopened after a mid-way end, the resumed run stopped before another cycle (its budget
    used up: the cycle that judges the edit is stopped by nothing less, edit47): the trace's
    ``reopened`` tail, replayed to that stop at that cost (it read as crossed mid-cycle, and
    replayed as censored)."""
    denied, _ = _reopened_midway(tmp_path / "s.db", 0.22)
    assert denied.recorded["stop_reason"] == "budget_cost"
    assert denied.tail["kind"] == "reopened"
    out = simulate(denied, contract_from_snapshot(_stored_contract(tmp_path, denied)))
    assert (out.reason, out.cycles) == ("budget_cost", 1)
    assert out.cost_usd == pytest.approx(denied.recorded["cost_usd"])


def _stored_contract(tmp_path: Path, t: RunTrace) -> dict[str, Any]:
    with lw.Runtime(f"sqlite:///{tmp_path / 's.db'}?durability=process") as rt:
        return dict(rt.store.get_run(t.run_id).contract)
