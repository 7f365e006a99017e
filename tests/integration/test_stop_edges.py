"""Edges of the stop contract probed from outside (stop 46): a stall under a marginal-return
rule without a hazard table, an effect that reports no cost, and a question whose answer no
cycle could use. Each re-run is checked against replay of its own recording."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright import _decide as rules
from loopwright.replay import simulate, traces_from_store

TASK = {"goal": "write the body", "artifacts": {"doc": {"body": ""}}}


# --- marginal return without a hazard table -----------------------------------------------
def _stalling(value: float) -> lw.Loop:
    """$0.10 cycles whose check scores 0.5 every time: a plateau from cycle 2."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"v{ctx.cycle}"}, usage=lw.Usage(0.10))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    return lw.Loop(
        name="stalling",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=50),
            marginal_return=lw.MarginalReturn(value_per_success_usd=value),
        ),
    )


def test_without_a_table_each_stalled_cycle_lowers_p() -> None:
    """The prior alone (0.25 whatever the stall) made the rule a fixed test of the cycle cost
    against a quarter of the value: a plateau went on until a budget."""
    mr = lw.MarginalReturn(value_per_success_usd=1.0)
    assert mr.p_success(1, 0) == pytest.approx(0.25)
    assert mr.p_success(5, 1) == pytest.approx(0.2)
    assert mr.p_success(9, 6) == pytest.approx(0.1)
    assert mr.p_success(9, -1) == pytest.approx(0.25)  # (never below the prior's own)
    # a table still answers by its cells, the stall read from its columns
    table = lw.MarginalReturn(value_per_success_usd=1.0, hazard=(((3, 4), (0, 5)),))
    assert table.p_success(1, 7) == pytest.approx(1 / 9)


@pytest.mark.parametrize(("value", "cycles"), [(1.0, 8), (4.0, 38)])
def test_a_plateau_ends_by_marginal_return_without_a_table(
    tmp_path: Path, value: float, cycles: int
) -> None:
    """$0.10 a cycle, a plateau from cycle 2: at $1 the rule stops once P < 0.1, after seven
    cycles without improvement (P = 1 / (4 + 7)); before, the run used its 50 cycles."""
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_stalling(value), TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    assert (r.stop_reason, r.cycles) == ("marginal_return", cycles)
    assert r.spent.cost_usd == pytest.approx(cycles * 0.10)
    out = simulate(trace, _stalling(value).contract)
    assert (out.reason, out.cycles) == ("marginal_return", cycles)
    # the rule before cycle 9 at $1 asked P for a stall of 7
    s = lw.TaskState(cycle=8, stall=7)
    s.spent = lw.Usage(0.8)
    assert rules.marginal_stop(_stalling(1.0).contract, s) == "marginal_return"


# --- an effect that reports no cost ----------------------------------------------------------
def _publishing(
    limit: float,
    calls: Counter[str],
    *,
    every_cycle: bool,
    free: bool = False,
    reports: float | None = None,
) -> lw.Loop:
    """$0.10 cycles asking for a publish effect that returns a plain value (no usage); a free
    check passes in cycle 3. ``every_cycle``: the effect runs in every cycle
    (``requires_success=False``), else only in the cycle that succeeds. ``free``: declared to
    bill nothing; ``reports``: the cost it reports all the same."""

    @lw.effect("publish", requires_success=not every_cycle, free=free)
    def publish(doc: str) -> Any:
        calls["publish"] += 1
        if reports is not None:
            return lw.EffectResult({"ok": 1}, lw.Usage(reports))
        return {"ok": 1}

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls["actor"] += 1
        return lw.Proposal(
            edits=[lw.Edit("doc", "body", f"v{ctx.cycle}")],
            effects=[publish.call(doc=f"v{ctx.cycle}")],
            usage=lw.Usage(0.10),
        )

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls["check"] += 1
        done = state.cycle + 1 >= 3
        return lw.Verdict(passed=done, score=1.0 if done else 0.5)

    return lw.Loop(
        name="publishing",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[publish],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="publish", action="allow")]),
        contract=lw.Contract(budget=lw.Budget(max_cycles=9, max_cost_usd=limit)),
    )


def test_an_effect_that_ran_and_reported_no_cost_is_known_free(url: str) -> None:
    """It ran in cycles 1 and 2 and billed nothing, as a check without usage does: in cycle 3,
    whose actor reached the $0.30 budget exactly, it runs and the run is accepted. Before, a
    plain return was no call in the cycle's calls, never known free: the run stopped with
    its verified work unpublished (one reporting ``Usage()`` ran)."""
    calls: Counter[str] = Counter()
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_publishing(0.30, calls, every_cycle=True), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 3)
    assert dict(calls) == {"actor": 3, "check": 3, "publish": 3}
    assert r.spent.cost_usd == pytest.approx(0.30)
    assert r.state.billed["effect:publish"] is False


def test_an_effect_never_made_is_not_started_on_a_reached_budget(tmp_path: Path) -> None:
    """Run only on success, the effect is first asked for when the budget is reached: its cost
    is unknown (it may report one), so it does not start, as a first held-out check does not
    (money before convenience; docs/decisions.md). Replay of a recording made under $0.40
    stops there too: the effect is in its cycle's calls now, and replay ran it before."""
    calls: Counter[str] = Counter()
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(_publishing(0.30, calls, every_cycle=False), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 2)
    assert calls["publish"] == 0
    assert r.packet is not None and "before the effects ['publish'] ran" in r.packet["cause"]
    with lw.Runtime(str(tmp_path / "b.db")) as rt:
        rec = rt.run_sync(_publishing(0.40, Counter(), every_cycle=False), TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    assert (rec.stop_reason, rec.cycles) == ("success", 3)
    assert [c.who for c in trace.cycles[-1].calls] == ["actor", "verifier:check", "effect:publish"]
    out = simulate(trace, _publishing(0.30, Counter(), every_cycle=False).contract)
    assert (out.reason, out.cycles, out.accepted) == ("budget_cost", 2, False)


def test_an_effect_declared_free_runs_on_a_reached_budget(tmp_path: Path) -> None:
    """``free=True``: the success cycle's publish runs on the $0.30 budget its actor reached,
    and the run is accepted (one of unknown cost stops it, above). It is no priced call of
    the cycle: replay of a recording made under $0.40 ends where the engine does."""
    calls: Counter[str] = Counter()
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(_publishing(0.30, calls, every_cycle=False, free=True), TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 3)
    assert dict(calls) == {"actor": 3, "check": 3, "publish": 1}
    assert r.spent.cost_usd == pytest.approx(0.30)
    assert "effect:publish" not in r.state.billed
    with lw.Runtime(str(tmp_path / "b.db")) as rt:
        rt.run_sync(_publishing(0.40, Counter(), every_cycle=False, free=True), TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    assert [c.who for c in trace.cycles[-1].calls] == ["actor", "verifier:check"]
    out = simulate(trace, _publishing(0.30, Counter(), every_cycle=False, free=True).contract)
    assert (out.reason, out.cycles, out.accepted) == ("success", 3, True)
    with pytest.raises(lw.ConfigError, match="free: must be True or False"):
        lw.effect("publish", free="yes")(lambda: None)  # type: ignore[arg-type]


def test_an_effect_declared_free_that_bills_is_charged_and_free_no_more(url: str) -> None:
    """Declared free, it reports $0.05 in cycle 1: charged (budget honesty), in the cycle's
    calls, and from then on a call that billed (``TaskState.billed``)."""
    calls: Counter[str] = Counter()
    loop = _publishing(0.45, calls, every_cycle=True, free=True, reports=0.05)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    # $0.15 a cycle: cycle 3's actor lands on $0.40, its publish runs (not yet reached) and
    # lands on $0.45; the check passed, so the run is accepted there
    assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 3)
    assert r.spent.cost_usd == pytest.approx(0.45)
    assert r.state.billed["effect:publish"] is True
    assert rules.declared_free({}, [("effect:publish", 0.05, 0)], "effect:publish") is False
    assert rules.declared_free({"effect:publish": True}, [], "effect:publish") is False
    assert rules.declared_free({}, [("effect:other", 0.05, 0)], "effect:publish") is True


# --- a question no cycle could read the answer of -----------------------------------------
def _asking(limit: float, calls: Counter[str], *, check_cost: float, max_cycles: int) -> lw.Loop:
    """$0.10 actor calls and a check that never passes; in cycle 3 the actor asks a question."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        calls["actor"] += 1
        if ctx.cycle == 3:
            # (as dear as a whole cycle before it: $0.10 + what the check bills)
            ask = lw.Usage(0.10 + check_cost)
            return lw.Proposal(question=lw.Question("which vendor?"), usage=ask)
        return lw.Proposal.edit("doc", {"body": f"v{ctx.cycle}"}, usage=lw.Usage(0.10))

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        calls["check"] += 1
        return lw.Verdict(passed=False, score=0.5, usage=lw.Usage(check_cost))

    return lw.Loop(
        name="asking",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=max_cycles, max_cost_usd=limit)),
    )


@pytest.mark.parametrize(
    ("limit", "check_cost", "max_cycles", "reason"),
    [
        (0.30, 0.0, 9, "budget_cost"),  # the question's actor call reaches $0.30 exactly
        (0.45, 0.05, 9, "budget_cost"),  # the same, the check billing (it stopped mid-cycle)
        (0.35, 0.0, 9, "budget_cost"),  # the next cycle would cross $0.35
        (5.00, 0.0, 3, "budget_cycles"),  # the question comes in the last cycle
    ],
)
def test_a_question_no_cycle_could_use_is_not_put_to_a_person(
    tmp_path: Path, limit: float, check_cost: float, max_cycles: int, reason: str
) -> None:
    """Asked at a budget reached, or in a cycle after which none may start, the question
    parked the run (when the first check was known free), a person answered it and the run
    stopped at once without reading the answer; or (a billing check) the run stopped
    mid-cycle, a cycle short of what replay counts. Now the cycle concludes unanswered, the
    run stops by the contract's reason with the question in its packet, and replay of a
    recording in which the question was answered ends at the same cycle."""
    # cycle 1: $0.10 + check; cycle 2: the same; cycle 3: the question ($0.10)
    loop = _asking(limit, Counter(), check_cost=check_cost, max_cycles=max_cycles)
    if check_cost:
        # the checks bill: $0.15 cycles, and the question's $0.15 lands on $0.45
        assert rules.budget_stop(loop.contract, _at(2, 0.30)) is None
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", reason, 3)
    packet = r.packet
    assert packet is not None
    assert packet["evidence"]["question"]["text"] == "which vendor?"
    assert "which vendor?" in packet["cause"] and "not put to a person" in packet["cause"]

    # a recording under a free contract, where the question was answered, replayed
    free = _asking(9.0, Counter(), check_cost=check_cost, max_cycles=4)
    with lw.Runtime(str(tmp_path / "b.db")) as rt:
        first = rt.run_sync(free, TASK, task_key="T")
        assert first.status == "awaiting_approval"
        rt.answer(first.run_id, "ACME", by="ann")
        rt.resume_sync(first.run_id, free)
        (trace,) = list(traces_from_store(rt.store))
    assert trace.cycles[2].asked
    out = simulate(trace, loop.contract)
    assert (out.reason, out.cycles) == (reason, 3)
    assert out.cost_usd == pytest.approx(r.spent.cost_usd)


def test_a_question_the_next_cycle_can_read_is_asked(tmp_path: Path) -> None:
    calls: Counter[str] = Counter()
    loop = _asking(1.0, calls, check_cost=0.0, max_cycles=4)
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
        assert (r.status, r.cycles) == ("awaiting_approval", 2)
        rt.answer(r.run_id, "ACME", by="ann")
        r = rt.resume_sync(r.run_id, loop)
    assert (r.stop_reason, r.cycles) == ("budget_cycles", 4)
    assert calls == Counter({"actor": 4, "check": 3})


def _at(cycle: int, cost: float) -> lw.TaskState:
    s = lw.TaskState(cycle=cycle)
    s.spent = lw.Usage(cost)
    return s


# --- a fork its new contract stops before its first cycle -------------------------------------
def test_a_fork_stopped_before_its_first_cycle_replays_so(tmp_path: Path) -> None:
    """Forked at cycle 3 of a run that spent $0.30 there, under a $0.30 cost budget (or a
    cap of 3 cycles), the fork starts no cycle. Replay of its trace, which has no cycles,
    skipped the check before the first one and said censored."""
    origin = _stalling(1.0)
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(
            lw.Loop(
                name="stalling",
                actor=origin.actor,
                verifiers=origin.verifiers,
                contract=lw.Contract(budget=lw.Budget(max_cycles=4)),
            ),
            TASK,
            task_key="O",
        )
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 4)
        ends = {}
        for name, budget in (
            ("budget_cost", lw.Budget(max_cycles=9, max_cost_usd=0.30)),
            ("budget_cycles", lw.Budget(max_cycles=3)),
        ):
            contract = lw.Contract(budget=budget)
            fork = rt.fork(r.run_id, 3, contract=contract)
            f = rt.resume_sync(fork.run_id, origin)
            assert (f.stop_reason, f.cycles) == (name, 3)  # its own: none
            (trace,) = [t for t in traces_from_store(rt.store) if t.run_id == fork.run_id]
            assert trace.cycles == ()
            ends[name] = simulate(trace, contract)
    for name, out in ends.items():
        assert (out.reason, out.cycles, out.cost_usd) == (name, 0, 0.0)


# --- effects declared free on a crossed budget (review46) ----------------------------------
def _two_free(
    limit: float,
    calls: Counter[str],
    *,
    check_cost: float,
    reports: float | None,
    second_free: bool = True,
) -> lw.Loop:
    """A $0.10 actor, a check that passes billing ``check_cost``, then two effects declared
    free (the second only if ``second_free``) that each report ``reports`` all the same
    (None: a plain value, no usage)."""

    def make(name: str, free: bool) -> lw.Effect:
        @lw.effect(name, name=name, free=free)
        def run(doc: str) -> Any:
            calls[name] += 1
            return {"ok": 1} if reports is None else lw.EffectResult({"ok": 1}, lw.Usage(reports))

        return run

    first, second = make("publish", True), make("announce", second_free)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=[lw.Edit("doc", "body", "v")],
            effects=[first.call(doc="v"), second.call(doc="v")],
            usage=lw.Usage(0.10),
        )

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(check_cost))

    return lw.Loop(
        name="two_free",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        effects=[first, second],
        approvals=lw.ApprovalPolicy(
            rules=[lw.PolicyRule(kind=k, action="allow") for k in ("publish", "announce")]
        ),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3, max_cost_usd=limit)),
    )


@pytest.mark.parametrize(
    ("check_cost", "ran", "spent"),
    [
        # the actor and check reach $0.30: the first runs (a reached budget), reports $0.50 and
        # crosses it; the second declared free does not start (both ran: $1.30 spent)
        (0.20, {"publish": 1}, 0.80),
        # the check overshoots in flight ($0.40): neither starts (both ran: $1.40)
        (0.30, {}, 0.40),
    ],
)
def test_an_effect_declared_free_does_not_start_on_a_crossed_budget(
    tmp_path: Path, check_cost: float, ran: dict[str, int], spent: float
) -> None:
    """A budget crossed is overshot by the one call in flight (invariant 7), as a call known
    free does not start on it (``call_stop``). Before, a declaration stood whatever the
    spend: each effect declared free, billing all the same, ran and added its own cost."""
    calls: Counter[str] = Counter()
    loop = _two_free(0.30, calls, check_cost=check_cost, reports=0.50)
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
    assert dict(calls) == ran
    assert r.spent.cost_usd == pytest.approx(spent)
    out = simulate(trace, loop.contract)
    assert (out.reason, out.cost_usd) == ("budget_cost", pytest.approx(spent))


def test_a_budget_reached_before_a_free_effect_is_not_said_reached_during_it(
    tmp_path: Path,
) -> None:
    """The actor and check reach $0.30; publish (declared free, billing nothing) runs, and
    announce (never made: its cost unknown) does not start. The cause said "reached during
    effect publish", blaming an effect that billed nothing (newuser47); the budget was reached
    before it, and it is announce that was not started."""
    calls: Counter[str] = Counter()
    loop = _two_free(0.30, calls, check_cost=0.20, reports=None, second_free=False)
    with lw.Runtime(str(tmp_path / "a.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.status, r.stop_reason) == ("stopped", "budget_cost")
    assert dict(calls) == {"publish": 1}
    assert r.packet is not None
    assert r.packet["cause"] == "reached before effect announce; ['announce'] not run"
    # one that billed and reached it: said during it, as before
    calls.clear()
    loop = _two_free(0.35, calls, check_cost=0.20, reports=0.10, second_free=False)
    with lw.Runtime(str(tmp_path / "b.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert r.packet is not None and dict(calls) == {"publish": 1}
    assert r.packet["cause"] == "crossed during effect publish; ['announce'] not run"


# --- an effect settled by its reconcile hook without a cost (effect47) ---------------------
def _settled(limit: float, calls: Counter[str], world: set[str], *, lose_reply: bool) -> lw.Loop:
    """``_publishing`` (every cycle) whose publish has a reconcile hook that finds a key done
    at the provider (``world``), without a cost. ``lose_reply``: the first call acts, then
    raises (its reply lost), and the hook settles it."""

    def look(key: str) -> Any:
        calls["reconcile"] += 1
        return {"ok": 1} if key in world else None

    @lw.effect("publish", requires_success=False, reconcile=look)
    def publish(doc: str, *, key: str) -> Any:
        calls["publish"] += 1
        world.add(key)
        if lose_reply and calls["publish"] == 1:
            raise lw.TransientError("connection reset after the publish")
        return {"ok": 1}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=[lw.Edit("doc", "body", f"v{ctx.cycle}")],
            effects=[publish.call(doc=f"v{ctx.cycle}")],
            usage=lw.Usage(0.10),
        )

    return replace(_publishing(limit, Counter(), every_cycle=True), actor=actor, effects=[publish])


def _dying(url: str, phase: str) -> lw.Runtime:
    """A runtime whose process "dies" the first time a cycle reaches ``phase``."""
    rt = lw.Runtime(url)
    rt._on_phase = phase_hook((phase, 1))
    return rt


def _run_settled(url: str, limit: float, how: str) -> tuple[lw.RunResult, Counter[str]]:
    """A run of ``_settled`` whose cycle-1 publish is settled by its hook without a cost:
    ``raised`` (its reply lost: it raised after acting), ``resumed`` (the process died before
    its result, the resume reconciles it) or ``recovered`` (the resume that reconciled it died
    before the cycle's checkpoint too; the next reads the reconciled entry back)."""
    calls: Counter[str] = Counter()
    world: set[str] = set()
    loop = _settled(limit, calls, world, lose_reply=how == "raised")
    if how == "raised":
        with lw.Runtime(url) as rt:
            return rt.run_sync(loop, TASK, task_key="T"), calls
    crashed = _dying(url, "before_effect_result")
    with pytest.raises(Crash):
        crashed.run_sync(loop, TASK, task_key="T")
    crashed.close()
    with lw.Runtime(url) as rt:
        run_id = rt.store.get_run("T").run_id
    if how == "recovered":
        crashed = _dying(url, "before_checkpoint")
        with pytest.raises(Crash):
            crashed.resume_sync(run_id, loop)
        crashed.close()
    with lw.Runtime(url) as rt:
        return rt.resume_sync(run_id, loop), calls


@pytest.mark.parametrize("how", ["raised", "resumed", "recovered"])
def test_an_effect_settled_by_its_reconcile_hook_without_a_cost_is_not_known_free(
    url: str, how: str
) -> None:
    """Cycle 1's publish was settled by its reconcile hook, which said it happened and not what
    it cost: unknown, not free. In cycle 2, whose actor reaches the $0.20 budget, it is not
    started, as one never made is not. Before, it was made known free as one that ran and
    returned a plain value is, and ran on the reached budget at a cost nobody knew."""
    r, calls = _run_settled(url, 0.20, how)
    assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cost", 1)
    assert calls["publish"] == 1 and calls["reconcile"] == 1
    assert r.packet is not None and "before the effects ['publish'] ran" in r.packet["cause"]
    assert "effect:publish" not in r.state.billed
    with lw.Runtime(url) as rt:
        [rec] = [c.record for c in rt.store.checkpoints(r.run_id) if c.record and c.cycle == 1]
    assert rec["effects"][0]["reconciled"] is True
    assert {"who": "effect:publish", "cost_usd": 0.0, "tokens": 0, "unknown_cost": True} in rec[
        "calls"
    ]


def test_a_reconcile_hook_that_reports_the_cost_makes_it_known(tmp_path: Path) -> None:
    """A hook that knows what the action cost says so (``EffectResult(value, usage=…)``): $0
    reported is free as a plain return of the call is, and the effect runs on the reached
    budget in cycle 2."""
    calls: Counter[str] = Counter()
    world: set[str] = set()
    loop = _settled(0.20, calls, world, lose_reply=True)
    hook = loop.effects[0].reconcile_fn
    assert hook is not None
    loop.effects[0].reconcile_fn = lambda key: lw.EffectResult(hook(key), lw.Usage())
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="T")
    assert (r.stop_reason, r.cycles, calls["publish"]) == ("budget_cost", 2, 2)  # (cycle 3: none)
    assert r.state.billed["effect:publish"] is False


def test_replay_does_not_count_a_reconciled_effect_free(tmp_path: Path) -> None:
    """A recording made under $0.40 (its cycle-1 publish settled by the hook, no cost) replayed
    under $0.20 stops before cycle 2's publish, where the engine stops (above): the trace
    carries the call's unknown cost, through its file form too."""
    calls: Counter[str] = Counter()
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(_settled(0.40, calls, set(), lose_reply=True), TASK, task_key="T")
        (trace,) = list(traces_from_store(rt.store))
    assert (r.stop_reason, r.cycles, calls["publish"]) == ("success", 3, 3)
    assert [(c.who, c.unknown_cost) for c in trace.cycles[0].calls] == [
        ("actor", False),
        ("verifier:check", False),
        ("effect:publish", True),
    ]
    again = type(trace).from_dict(trace.to_dict())
    assert again == trace
    contract = _settled(0.20, Counter(), set(), lose_reply=True).contract
    for t in (trace, again):
        out = simulate(t, contract)
        assert (out.reason, out.cycles, out.accepted) == ("budget_cost", 1, False)
        assert out.note == "used up before effect:publish"
