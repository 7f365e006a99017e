"""What-if replay: the recorded policy reproduces recorded totals, and replaying a contract
agrees exactly with re-running the loop under it (property-based)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright.replay import (
    Call,
    CycleTrace,
    RunTrace,
    load_contract,
    load_source,
    read_traces,
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
    assert totals.cost_usd == pytest.approx(report.recorded.cost_usd)
    # run by run, too
    for o, r in zip(outcomes, raw, strict=True):
        assert (o.accepted, o.held_out_passed, o.cycles) == (
            r["is_passing"],
            r["is_solved"],
            len(r["implementations"]),
        )


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
    with pytest.raises(lw.ConfigError, match="format"):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps({**first, "format": "loopwright.run-trace/9"}) + "\n")
        list(read_traces(bad))


# --- replay agrees with re-running the loop ---------------------------------------------------
cycle_st = st.fixed_dictionaries(
    {
        "actor": st.sampled_from([0.0, 0.05, 0.1, 0.2, 0.4]),
        "verifier": st.sampled_from([0.0, 0.0, 0.05]),
        "held": st.sampled_from([0.0, 0.05]),
        "score": st.sampled_from([0.2, 0.4, 0.5, 0.6, 0.8, 0.9, 1.0]),
        "passed": st.booleans(),
        "held_passed": st.booleans(),
    }
)

contract_st = st.fixed_dictionaries(
    {
        "min_score": st.sampled_from([0.5, 0.8, 1.0]),
        "no_progress": st.sampled_from([None, (1, 0.0), (2, 0.0), (2, 0.1), (3, 0.05)]),
        "max_cycles": st.sampled_from([None, 1, 2, 3, 5, 8]),
        "max_cost_usd": st.sampled_from([None, 0.1, 0.3, 0.6, 1.0, 2.0]),
        "max_tokens": st.sampled_from([None, 50, 200]),
        "marginal": st.sampled_from([None, 0.2, 1.0, 4.0]),
        "hazard": st.sampled_from([(), (((1, 2), (0, 3)), ((2, 4), (1, 9)))]),
    }
)


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


def _trace(cycles: list[dict[str, Any]]) -> RunTrace:
    return RunTrace(
        run_id="r",
        task_key="r",
        cycles=tuple(
            CycleTrace(
                cycle=i,
                calls=(
                    Call("actor", c["actor"], int(c["actor"] * 1000)),
                    Call("verifier:v", c["verifier"], 0),
                    Call("verifier:h", c["held"], 0),
                ),
                verdicts={"v": {"passed": c["passed"], "score": c["score"]}},
                score=c["score"],
                held_out_passed=c["held_passed"],
            )
            for i, c in enumerate(cycles, 1)
        ),
        required=("v",),
    )


def _loop(cycles: list[dict[str, Any]], contract: lw.Contract) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle > len(cycles):
            return lw.Proposal(escalate="no more recorded cycles")
        c = cycles[ctx.cycle - 1]
        # a new part every cycle: no proposal repeats, none touches an accepted part
        return lw.Proposal.edit(
            "doc",
            {f"p{ctx.cycle}": ctx.cycle},
            usage=lw.Usage(cost_usd=c["actor"], tokens=int(c["actor"] * 1000)),
        )

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
    )


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
        r = rt.run_sync(_loop(cycles, contract), {"artifacts": {"doc": {"p0": 0}}})
        if outcome.reason == "censored":
            # the contract would go past the recording: the re-run asks for a cycle more
            assert r.stop_reason == "escalated" and r.cycles == len(cycles)
            return
        assert (r.stop_reason, r.cycles, r.accepted) == (
            outcome.reason,
            outcome.cycles,
            outcome.accepted,
        ), (outcome, r.packet and r.packet.get("cause"))
        assert r.spent.cost_usd == pytest.approx(outcome.cost_usd)
        assert r.spent.tokens == outcome.tokens
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
