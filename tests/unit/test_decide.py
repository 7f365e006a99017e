"""Pure decision rules: budget projection, scores, success, acceptance, risk."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loopwright as lw
from loopwright import _decide as rules
from loopwright._packet import stop_cause
from loopwright._risk_steps import risk_steps


def _contract(**budget: Any) -> lw.Contract:
    return lw.Contract(budget=lw.Budget(**budget))


def _spent(cycle: int, usage: lw.Usage) -> lw.TaskState:
    s = lw.TaskState(cycle=cycle)
    s.spent = usage
    return s


def test_no_budget_reason_before_the_first_cycle() -> None:
    assert rules.budget_stop(_contract(max_cost_usd=1.0), _spent(0, lw.Usage())) is None


def test_cycle_budget() -> None:
    c = _contract(max_cycles=3)
    assert rules.budget_stop(c, _spent(2, lw.Usage())) is None
    assert rules.budget_stop(c, _spent(3, lw.Usage())) == "budget_cycles"


def test_a_cycle_projected_to_cross_is_not_started() -> None:
    c = _contract(max_cost_usd=1.0, max_tokens=100, max_seconds=10.0)
    # two cycles at 0.4 each: a third would reach 1.2 > 1.0
    assert rules.budget_stop(c, _spent(2, lw.Usage(0.8))) == "budget_cost"
    assert rules.budget_stop(c, _spent(2, lw.Usage(0.0, 70))) == "budget_tokens"
    assert rules.budget_stop(c, _spent(2, lw.Usage(0.0, 0, 7.0))) == "budget_time"
    assert rules.budget_stop(c, _spent(2, lw.Usage(0.5, 60, 6.0))) is None  # lands exactly


def test_float_sums_do_not_cross_a_budget_they_only_reach() -> None:
    # 0.1 + 0.1 + 0.1 == 0.30000000000000004: three $0.10 cycles fit a $0.30 budget.
    c = _contract(max_cost_usd=0.3)
    spent = lw.Usage(0.1) + lw.Usage(0.1)
    assert rules.budget_stop(c, _spent(2, spent)) is None
    spent = spent + lw.Usage(0.1)
    assert rules.budget_stop(c, _spent(3, spent)) == "budget_cost"
    # reached, not crossed: used up all the same (no further paid call starts in a cycle)
    assert not rules.crosses(spent.cost_usd, 0.3)
    assert rules.budget_exhausted(c, spent) == "budget_cost"
    assert rules.budget_exhausted(c, lw.Usage(0.29)) is None


def test_a_token_budget_is_counted_exactly() -> None:
    """Tokens are whole numbers, with no rounding to allow for. The float slack of costs (1e-9
    of the limit: 10 tokens of a 10-billion-token budget) let a cycle projected to cross the
    budget by 10 tokens start, and read 5 tokens short of it as used up."""
    c = _contract(max_tokens=10**10)
    assert rules.budget_stop(c, _spent(1, lw.Usage(0.0, 5 * 10**9 + 5))) == "budget_tokens"
    assert rules.budget_stop(c, _spent(1, lw.Usage(0.0, 5 * 10**9))) is None  # lands exactly
    # 5 tokens short, at a mean of 2.5 a cycle: the next cycle fits
    assert rules.budget_stop(c, _spent(4 * 10**9, lw.Usage(0.0, 10**10 - 5))) is None
    assert rules.budget_stop(c, _spent(4 * 10**9, lw.Usage(0.0, 10**10))) == "budget_tokens"
    assert rules.budget_exhausted(c, lw.Usage(0.0, 10**10 + 1)) == "budget_tokens"
    # how the stop cause reads the budget: short of it, not used up
    text = stop_cause("budget_tokens", c, cycle=1, spent={"tokens": 10**10 - 5, "cost_usd": 0.0})
    assert "the next cycle would cross it" in text, text


def test_a_cycle_worth_exactly_its_cost_is_not_stopped_by_rounding() -> None:
    """P x value == expected cost goes on (the rule is strictly below). Three $0.10 cycles
    average $0.10000000000000002, which read as "below" stopped a run that the contract said
    to continue, at P = 0.25 and a value of $0.40."""
    c = lw.Contract(
        marginal_return=lw.MarginalReturn(value_per_success_usd=0.4), budget=lw.Budget(max_cycles=9)
    )
    spent = lw.Usage(0.1) + lw.Usage(0.1) + lw.Usage(0.1)
    assert rules.marginal_stop(c, _spent(3, spent)) is None
    assert rules.marginal_stop(c, _spent(3, spent + lw.Usage(0.01))) == "marginal_return"


def test_marginal_return_expects_the_cost_of_a_paid_cycle() -> None:
    """The expected cost of the next cycle is the mean of the cycles that cost anything, as a
    budget projects it: free cycles (a check-only cycle of free checks after a person's edit, a
    recorded seed judged at no cost) say nothing of what the actor's next cycle costs. Before,
    they were counted: two $0.15 cycles and two free ones read as $0.075 a cycle, under the
    $0.10 that P = 0.25 x $0.40 is worth, and the run went on."""
    c = lw.Contract(
        marginal_return=lw.MarginalReturn(value_per_success_usd=0.4), budget=lw.Budget(max_cycles=9)
    )
    s = _spent(4, lw.Usage(0.3))
    s.paid_cycles = [2, 2, 4]  # cost in 2 of the 4 cycles (tokens in 2, time in all)
    assert rules.marginal_stop(c, s) == "marginal_return"
    s.spent = lw.Usage(0.2)  # $0.10 a paid cycle: worth exactly its cost, goes on
    assert rules.marginal_stop(c, s) is None
    # a state stored before paid cycles were counted: every cycle, as before
    s.paid_cycles, s.spent = None, lw.Usage(0.3)
    assert rules.marginal_stop(c, s) is None
    # no cycle cost anything yet: nothing expected
    s.paid_cycles, s.spent = [0, 0, 4], lw.Usage()
    assert rules.marginal_stop(c, s) is None


@given(
    st.integers(0, 30),
    st.lists(st.integers(0, 3), min_size=3, max_size=3),
    st.floats(0, 2),
    st.integers(0, 300),
    st.floats(0, 20),
    st.one_of(st.none(), st.floats(0.01, 2)),
    st.one_of(st.none(), st.integers(1, 300)),
    st.one_of(st.none(), st.floats(0.1, 20)),
)
def test_a_budget_left_is_stopped_only_by_its_projection(
    n: int,
    free: list[int],
    cost: float,
    tokens: int,
    seconds: float,
    max_cost: float | None,
    max_tokens: int | None,
    max_seconds: float | None,
) -> None:
    """``budget_stop`` names a budget reached or crossed first (``budget_exhausted``); past it,
    every budget set is left, so only the next cycle's projection can forbid it: the old
    ``not crosses(limit, spent)`` half of the loop's test was never true there (stop47)."""
    c = _contract(
        max_cycles=99, max_cost_usd=max_cost, max_tokens=max_tokens, max_seconds=max_seconds
    )
    s = _spent(n, lw.Usage(cost, tokens, seconds))
    s.paid_cycles = [max(0, n - f) for f in free]
    got = rules.budget_stop(c, s)
    used = rules.budget_exhausted(c, s.spent)
    if used is not None:
        assert got == used
        return
    b = c.budget
    for limit, spent in ((b.max_cost_usd, cost), (b.max_tokens, tokens), (b.max_seconds, seconds)):
        if limit is not None:
            assert rules.crosses(limit, spent, whole=limit is b.max_tokens)  # left
    want = None
    for i, (limit, spent, reason) in enumerate(
        (
            (b.max_cost_usd, cost, "budget_cost"),
            (b.max_tokens, float(tokens), "budget_tokens"),
            (b.max_seconds, seconds, "budget_time"),
        )
    ):
        k = s.paid_cycles[i] or n
        if limit is not None and rules.crosses(
            spent + (spent / k if k else 0.0), limit, whole=reason == "budget_tokens"
        ):
            want = reason
            break
    assert got == want


def test_budget_exhausted() -> None:
    """Reached is exhausted, as before a cycle: a budget spent exactly lets no further paid
    call start inside a cycle (before, only a crossed one stopped it there)."""
    c = _contract(max_cost_usd=1.0, max_tokens=10)
    assert rules.budget_exhausted(c, lw.Usage(0.99, 9)) is None
    assert rules.budget_exhausted(c, lw.Usage(1.0, 9)) == "budget_cost"
    assert rules.budget_exhausted(c, lw.Usage(1.01)) == "budget_cost"
    assert rules.budget_exhausted(c, lw.Usage(0.5, 10)) == "budget_tokens"
    assert rules.budget_exhausted(c, lw.Usage(0, 11)) == "budget_tokens"


@given(st.integers(1, 50), st.integers(1, 20))
def test_projection_never_lets_a_steady_loop_cross(
    per_cycle_cents: int, cycles_that_fit: int
) -> None:
    per = per_cycle_cents / 100
    limit = per * cycles_that_fit
    c = _contract(max_cost_usd=limit)
    spent, n = lw.Usage(), 0
    while rules.budget_stop(c, _spent(n, spent)) is None:
        spent = spent + lw.Usage(per)
        n += 1
        assert n <= cycles_that_fit
    assert n == cycles_that_fit


def test_remaining() -> None:
    c = _contract(max_cycles=5, max_cost_usd=1.0)
    r = rules.remaining(c, _spent(2, lw.Usage(0.25)))
    assert r.cycles == 3
    assert r.cost_usd == 0.75
    assert r.tokens is None
    assert r.seconds is None


def _check(name: str, **kw: Any) -> lw.Check:
    return lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name=name, **kw)


def test_aggregate_score_ignores_held_out() -> None:
    checks = [_check("a", weight=3), _check("b"), _check("h", held_out=True)]
    verdicts = {
        "a": lw.Verdict(passed=True, score=1.0),
        "b": lw.Verdict(passed=False, score=0.0),
        "h": lw.Verdict(passed=False, score=0.0),
    }
    assert rules.aggregate_score(checks, verdicts) == 0.75
    assert rules.aggregate_score([_check("h", held_out=True)], {"h": verdicts["h"]}) is None


def test_success_needs_required_visible_checks_and_the_score() -> None:
    contract = lw.Contract(budget=lw.Budget(max_cycles=1), success=lw.Success(min_score=0.9))
    checks = [_check("a"), _check("b", required=False), _check("h", held_out=True)]
    ok = lw.Verdict(passed=True)
    bad = lw.Verdict(passed=False, score=0.95)
    assert rules.success(contract, checks, {"a": ok, "b": bad, "h": bad}, 0.97)
    assert not rules.success(contract, checks, {"a": bad, "b": ok}, 0.97)
    assert not rules.success(contract, checks, {"a": ok, "b": ok}, 0.5)
    # held-out checks alone never make success
    assert not rules.success(contract, [_check("h", held_out=True)], {"h": ok}, None)


def test_a_score_that_reaches_min_score_is_success_whatever_the_rounding() -> None:
    # The mean of 0.85 and 0.95 is 0.8999999999999999 in floats: two checks that averaged
    # exactly the threshold were refused success, and the run went on to another stop.
    contract = lw.Contract(budget=lw.Budget(max_cycles=1), success=lw.Success(min_score=0.9))
    checks = [_check("a"), _check("b")]
    verdicts = {
        "a": lw.Verdict(passed=True, score=0.85),
        "b": lw.Verdict(passed=True, score=0.95),
    }
    score = rules.aggregate_score(checks, verdicts)
    assert score is not None and score < 0.9  # the rounding this is about
    assert rules.success(contract, checks, verdicts, score)
    lower = {**verdicts, "b": lw.Verdict(passed=True, score=0.94)}  # really below: refused
    assert not rules.success(contract, checks, lower, rules.aggregate_score(checks, lower))
    weighted = [_check("a", weight=0.7), _check("b", weight=1.5)]  # both at the threshold
    at = {k: lw.Verdict(passed=True, score=0.98) for k in ("a", "b")}
    strict = lw.Contract(budget=lw.Budget(max_cycles=1), success=lw.Success(min_score=0.98))
    assert rules.success(strict, weighted, at, rules.aggregate_score(weighted, at))


def test_accept_clean_parts_when_clean() -> None:
    s = lw.TaskState.from_task({"artifacts": {"doc": {"a": 1, "b": 2, "c": 3}}})
    checks = [_check("v"), _check("partial"), _check("h", held_out=True)]
    verdicts = {
        "v": lw.Verdict(passed=False, findings=(lw.Finding("b bad", "doc", "b"),)),
        "partial": lw.Verdict(passed=True, checked=("doc/a", "doc/b")),
        # a held-out finding on doc/a must not block (or influence) acceptance
        "h": lw.Verdict(passed=False, findings=(lw.Finding("held", "doc", "a"),)),
    }
    accepted = rules.accept_clean_parts(s, checks, verdicts, all_parts=False)
    assert accepted == ["doc/a"]  # doc/c was not checked by "partial"
    status = {ref: p.status for ref, p in s.iter_parts()}
    assert status == {"doc/a": "accepted", "doc/b": "rejected", "doc/c": "candidate"}


def test_warnings_do_not_reject() -> None:
    s = lw.TaskState.from_task({"artifacts": {"doc": {"a": 1}}})
    v = {
        "v": lw.Verdict(passed=True, findings=(lw.Finding("meh", "doc", "a", severity="warning"),))
    }
    assert rules.accept_clean_parts(s, [_check("v")], v, all_parts=False) == ["doc/a"]


def _hit(
    risk: tuple[lw.RiskRule, ...],
    state: lw.TaskState,
    prop: lw.Proposal,
    verdicts: dict[str, lw.Verdict],
    checks: list[lw.Check],
) -> tuple[lw.RiskRule, str] | None:
    """The rule the patterns hit (the last step, with its reason), as the engine reads it."""
    steps = list(risk_steps(risk, state, prop, verdicts, checks))
    if steps and steps[-1][1] is not None:
        return steps[-1][0], str(steps[-1][1])
    return None


def test_risk_steps_touches_findings_and_check() -> None:
    s = lw.TaskState.from_task({"artifacts": {"inv": {"payment": 1, "qty": 1}}})
    cand = lw.TaskState.from_dict(s.to_dict())
    cand.set_part("inv", "payment", 2, 1)
    prop = lw.Proposal.edit("inv", {"payment": 2})
    touch = lw.RiskRule(name="pay", touches=("*/payment",))
    hit = _hit((touch,), cand, prop, {}, [])
    assert hit is not None
    assert hit[0].name == "pay"
    assert "inv/payment" in hit[1]
    # a proposal re-stating an unchanged value does not trigger it
    same = lw.Proposal.edit("inv", {"qty": 1})
    assert _hit((touch,), s, same, {}, []) is None

    conflict = lw.RiskRule(name="c", findings=("conflicting_evidence",))
    checks = [_check("v"), _check("h", held_out=True)]
    f = lw.Finding("po says 3, receipt says 4", "inv", "qty", "conflicting_evidence")
    assert _hit((conflict,), s, same, {"v": lw.Verdict(passed=False, findings=(f,))}, checks)
    # a held-out finding never parks a run (it would reveal the held-out check)
    assert (
        _hit((conflict,), s, same, {"h": lw.Verdict(passed=False, findings=(f,))}, checks) is None
    )

    custom = lw.RiskRule(name="x", check=lambda st_, p, v: "because")
    # a rule's own check is asked (the engine calls it: Gates._risk)
    assert list(risk_steps((custom,), s, same, {}, [])) == [(custom, None)]


def test_a_task_carries_its_own_cycle_budget() -> None:
    """``max_cycles_key``: the task's own cap, never above ``max_cycles``; tasks without one
    (or a contract without the key) use ``max_cycles``; a bad value names the key."""
    c = _contract(max_cycles=11, max_cycles_key="recorded.max_cycles")
    nine = lw.TaskState(cycle=10, task={"recorded": {"max_cycles": 10}})
    assert rules.cycle_cap(c, nine) == 10 and rules.budget_stop(c, nine) == "budget_cycles"
    assert rules.remaining(c, lw.TaskState(cycle=4, task=nine.task)).cycles == 6
    assert rules.cycle_cap(c, lw.TaskState(task={"recorded": {"max_cycles": 30}})) == 11
    assert rules.cycle_cap(c, lw.TaskState(task={"recorded": {"max_cycles": None}})) == 11
    assert rules.cycle_cap(c, lw.TaskState(task={})) == 11
    assert rules.cycle_cap(_contract(max_cycles=11), nine) == 11
    with pytest.raises(lw.ConfigError, match=r"recorded\.max_cycles"):
        rules.cycle_cap(c, lw.TaskState(task={"recorded": {"max_cycles": "ten"}}))
    assert lw.Contract.from_dict(c.to_dict()) == c
    assert "max_cycles_key" not in _contract(max_cycles=3).to_dict()["budget"]


def test_a_vacuous_pass_is_not_success_unless_allowed() -> None:
    check = lw.Check(fn=lambda s, p: None, name="tests")
    vacuous = {"tests": lw.Verdict(passed=True, evidence={"vacuous": True})}
    assert not rules.success(_contract(max_cycles=3), [check], vacuous, 1.0)
    allow = lw.Contract(success=lw.Success(allow_vacuous=True), budget=lw.Budget(max_cycles=3))
    assert rules.success(allow, [check], vacuous, 1.0)
    real = {"tests": lw.Verdict(passed=True, evidence={"passed": 1, "total": 1})}
    assert rules.success(_contract(max_cycles=3), [check], real, 1.0)


def _accept_every_part(
    state: lw.TaskState,
    checks: list[lw.Check],
    verdicts: dict[str, lw.Verdict],
    *,
    all_parts: bool,
    when_clean: bool,
) -> list[str]:
    """The rule as first written, looking at every part: the specification the faster
    ``accept_clean_parts`` (which looks only at the parts that can change) must match."""
    visible = [(c.name, verdicts[c.name]) for c in checks if not c.held_out and c.name in verdicts]
    accepted: list[str] = []
    for ref, part in list(state.iter_parts()):
        if part.current.status == "accepted":
            continue
        artifact, name = ref.split("/")
        flagged = any(
            f.severity == "error" and f.touches(artifact, name)
            for _, v in visible
            for f in v.findings
        )
        if all_parts and not flagged:
            state.set_status(ref, "accepted")
            accepted.append(ref)
        elif flagged:
            state.set_status(ref, "rejected")
        elif (
            visible
            and when_clean
            and all(
                (v.checked is None or ref in v.checked) and (v.passed or v.findings)
                for _, v in visible
            )
        ):
            state.set_status(ref, "accepted")
            accepted.append(ref)
    return sorted(accepted)


_REFS = [f"{a}/{p}" for a in ("x", "y") for p in ("p0", "p1", "p2", "p3")]
_finding = st.builds(
    lambda where, sev: lw.Finding("f", *where, severity=sev),
    st.sampled_from([tuple(r.split("/")) for r in _REFS])
    | st.sampled_from([(None, None), ("x", None), ("y", None)]),
    st.sampled_from(["error", "warning"]),
)
_verdict = st.builds(
    lambda passed, findings, checked: lw.Verdict(
        passed=passed, findings=tuple(findings), checked=checked
    ),
    st.booleans(),
    st.lists(_finding, max_size=3),
    st.none() | st.lists(st.sampled_from(_REFS), max_size=4).map(tuple),
)


@settings(max_examples=400)
@given(
    statuses=st.lists(
        st.sampled_from(["candidate", "accepted", "rejected"]), min_size=8, max_size=8
    ),
    verdicts=st.lists(_verdict, min_size=1, max_size=3),
    held=st.booleans(),
    all_parts=st.booleans(),
    when_clean=st.booleans(),
    rounds=st.integers(min_value=1, max_value=3),
)
def test_accept_clean_parts_matches_the_rule_over_every_part(
    statuses: list[str],
    verdicts: list[lw.Verdict],
    held: bool,
    all_parts: bool,
    when_clean: bool,
    rounds: int,
) -> None:
    s = lw.TaskState.from_task(
        {"artifacts": {"x": {f"p{i}": i for i in range(4)}, "y": {f"p{i}": i for i in range(4)}}}
    )
    for ref, status in zip(_REFS, statuses, strict=True):
        s.set_status(ref, status)  # type: ignore[arg-type]
    checks = [_check(f"v{i}") for i in range(len(verdicts))]
    if held:
        checks[-1] = _check(checks[-1].name, held_out=True)
    by_name = {c.name: v for c, v in zip(checks, verdicts, strict=True)}
    fast, slow = s.fork(), s.fork()
    for _ in range(rounds):  # again on the result: the open parts' index is kept up to date
        got = rules.accept_clean_parts(
            fast, checks, by_name, all_parts=all_parts, when_clean=when_clean
        )
        want = _accept_every_part(slow, checks, by_name, all_parts=all_parts, when_clean=when_clean)
        assert got == want
        assert {r: p.status for r, p in fast.iter_parts()} == {
            r: p.status for r, p in slow.iter_parts()
        }
        assert fast.open_refs() == {r for r, p in fast.iter_parts() if p.status != "accepted"}


def test_a_verdict_that_names_no_checked_parts_is_judged_over_the_open_parts_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The trivial cycle's verdict: one finding, nothing named as checked. Every open part is a
    # target, the flagged one among them: it was looked up on its own first, then dropped.
    s = lw.TaskState.from_task({"artifacts": {"d": {"a": 1, "b": 2, "c": 3}}})
    s.set_status("d/c", "accepted")
    asked: list[str] = []
    real = lw.TaskState.is_open

    def is_open(self: lw.TaskState, ref: str) -> bool:
        asked.append(ref)
        return real(self, ref)

    monkeypatch.setattr(lw.TaskState, "is_open", is_open)
    verdict = lw.Verdict(passed=False, findings=(lw.Finding("wrong", "d", "a"),))
    got = rules.accept_clean_parts(s, [_check("v")], {"v": verdict}, all_parts=False)
    assert asked == []
    assert got == ["d/b"]  # nothing found wrong with it, by a check of every part
    assert {r: p.status for r, p in s.iter_parts()} == {
        "d/a": "rejected",
        "d/b": "accepted",
        "d/c": "accepted",
    }


def test_risk_steps_ask_a_rules_check_only_until_a_rule_is_hit() -> None:
    """What the engine walks to call each rule's check off the event loop: in order, a
    check's rule yielded without a reason, nothing after the first rule hit."""
    s = lw.TaskState.from_task({"artifacts": {"inv": {"payment": 1}}})
    cand = lw.TaskState.from_dict(s.to_dict())
    cand.set_part("inv", "payment", 2, 1)
    prop = lw.Proposal.edit("inv", {"payment": 2})
    asked = lw.RiskRule(name="asked", check=lambda st_, p, v: None)
    touch = lw.RiskRule(name="pay", touches=("*/payment",))
    never = lw.RiskRule(name="never", check=lambda st_, p, v: "unreached")
    steps = list(risk_steps((asked, touch, never), cand, prop, {}, []))
    assert [(r.name, why is None) for r, why in steps] == [("asked", True), ("pay", False)]
    assert list(risk_steps((), cand, prop, {}, [])) == []


def test_a_budget_crossed_is_named_before_one_only_reached() -> None:
    # Hypothesis (test_replay's oracle) found the engine ending on budget_cost (its check after
    # a priced actor call) where replay ended on budget_tokens (its check before the verifier):
    # an actor call of $0.10 and 100 tokens under a $0.10 / 50-token contract
    budget_exhausted, call_stop, Usage = rules.budget_exhausted, rules.call_stop, lw.Usage
    contract = lw.Contract.from_dict({"budget": {"max_cost_usd": 0.1, "max_tokens": 50}})
    spent = Usage(cost_usd=0.1, tokens=100)
    assert budget_exhausted(contract, spent) == "budget_tokens"
    assert call_stop(contract, spent, {}, [("actor", 0.1, 100)], "verifier:v") == "budget_tokens"
    # one only reached is still used up
    assert budget_exhausted(contract, Usage(cost_usd=0.1, tokens=10)) == "budget_cost"
    assert budget_exhausted(contract, Usage(cost_usd=0.05, tokens=50)) == "budget_tokens"
    assert budget_exhausted(contract, Usage(cost_usd=0.05, tokens=10)) is None


def test_before_a_cycle_a_budget_used_up_is_named_before_one_only_projected() -> None:
    """A run stopped mid-cycle on tokens crossed (400 of 50), its cost at $0.40 of $0.60, was
    reopened by a person's edit: the check before the next cycle named budget_cost (projected:
    $0.40 more would cross), replay of its trace budget_tokens (crossed). Crossed first."""
    contract = lw.Contract(budget=lw.Budget(max_cost_usd=0.6, max_tokens=50))
    state = lw.TaskState(cycle=1)
    state.spent = lw.Usage(cost_usd=0.4, tokens=400)
    assert rules.budget_stop(contract, state) == "budget_tokens"
    # only projected: the cost budget, as before
    state.spent = lw.Usage(cost_usd=0.4, tokens=10)
    assert rules.budget_stop(contract, state) == "budget_cost"
    # tokens reached (not crossed) beside a projected cost: the one reached
    contract = lw.Contract(budget=lw.Budget(max_cost_usd=0.6, max_tokens=10))
    assert rules.budget_stop(contract, state) == "budget_tokens"
