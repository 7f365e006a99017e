"""What user code builds is checked where it is built (loopwright._shapes): a wrong shape is a
ConfigError naming the field, never a value that passes a check by accident or fails cycles
later inside the engine."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import loopwright as lw
from loopwright import ConfigError


@pytest.mark.parametrize("passed", ["false", "true", "", None, 0.5, 2, [], {"passed": False}])
def test_a_verdict_passes_only_on_a_boolean(passed: Any) -> None:
    # "false" is truthy: a verdict parsed from a model's text must not be accepted by accident
    with pytest.raises(ConfigError, match=r"Verdict.passed"):
        lw.Verdict(passed=passed)


@pytest.mark.parametrize(
    ("given", "read"),
    [(True, True), (False, False), (1, True), (0, False), (np.bool_(False), False)],
)
def test_a_verdict_takes_numpy_booleans_and_0_or_1(given: Any, read: bool) -> None:
    v = lw.Verdict(passed=given)
    assert v.passed is read


def test_verdict_containers() -> None:
    f = lw.Finding("wrong", "doc", "n")
    with pytest.raises(ConfigError, match=r"Verdict.findings: takes a tuple of Finding; wrap"):
        lw.Verdict(passed=False, findings=f)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Verdict.findings: must hold Finding items, got str"):
        lw.Verdict(passed=False, findings=("n is wrong",))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Verdict.usage"):
        lw.Verdict(passed=True, usage={"cost_usd": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Verdict.evidence"):
        lw.Verdict(passed=True, evidence=["x"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Verdict.checked"):
        lw.Verdict(passed=True, checked="doc/n")  # type: ignore[arg-type]
    v = lw.Verdict(passed=False, findings=[f, f], checked=["doc/n"])  # type: ignore[arg-type]
    assert v.findings == (f, f) and v.checked == ("doc/n",)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cost_usd": -1.0}, "cost_usd"),
        ({"cost_usd": math.nan}, "cost_usd"),
        ({"cost_usd": math.inf}, "cost_usd"),
        ({"cost_usd": "0.5"}, "cost_usd"),
        ({"cost_usd": True}, "cost_usd"),
        ({"tokens": -1}, "tokens"),
        ({"tokens": 1.5}, "tokens"),
        ({"tokens": "3"}, "tokens"),
        ({"tokens": False}, "tokens"),
        ({"seconds": -0.5}, "seconds"),
        ({"seconds": math.nan}, "seconds"),
    ],
)
def test_usage_is_finite_and_not_negative(kwargs: dict[str, Any], field: str) -> None:
    # invariant 7: a negative cost would let a run spend without limit; a NaN reached the store
    with pytest.raises(ConfigError, match=f"Usage.{field}"):
        lw.Usage(**kwargs)


def test_usage_takes_numpy_numbers_as_plain_ones() -> None:
    u = lw.Usage(np.float64(0.25), np.int64(3), np.float32(1.5))
    assert (u.cost_usd, u.tokens, u.seconds) == (0.25, 3, 1.5)
    assert type(u.cost_usd) is float and type(u.tokens) is int and type(u.seconds) is float
    assert lw.Usage(1, 2, 3) + lw.Usage(0.5) == lw.Usage(1.5, 2, 3)


def test_usage_as_stored_loads_whatever_an_older_release_wrote() -> None:
    # a run stored before the check may hold a negative cost: it still loads
    assert lw.Usage.from_dict({"cost_usd": -2.0, "tokens": -1}).cost_usd == -2.0


def test_proposal_shapes() -> None:
    e = lw.Edit("doc", "n", 1)
    with pytest.raises(ConfigError, match=r"Proposal.edits: takes a tuple of Edit; wrap"):
        lw.Proposal(edits=e)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.edits: must be a tuple of Edit, got dict"):
        lw.Proposal(edits={"doc": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.edits: must hold Edit items"):
        lw.Proposal(edits=(e, ("doc", "m", 2)))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.usage"):
        lw.Proposal(edits=(e,), usage={"cost_usd": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.note"):
        lw.Proposal(note=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.escalate"):
        lw.Proposal(escalate=True)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.replace"):
        lw.Proposal(replace={"doc": 5})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"Edit.part"):
        lw.Proposal(replace={"doc": {"": 5}})
    with pytest.raises(ConfigError, match=r"Proposal.plan"):
        lw.Proposal(plan={"s1": None})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match=r"Proposal.effects"):
        lw.Proposal(effects=lw.EffectCall("pay"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Proposal.edit"):
        lw.Proposal.edit("doc", [("n", 1)])  # type: ignore[arg-type]
    assert lw.Proposal(edits=[e]).edits == (e,)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("artifact", "part", "field"),
    [
        ("", "n", "Edit.artifact"),
        ("doc", "", "Edit.part"),
        ("a/b", "n", "Edit.artifact"),
        (None, "n", "Edit.artifact"),
        ("doc", 3, "Edit.part"),
    ],
)
def test_edit_names(artifact: Any, part: Any, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        lw.Proposal.edit(artifact, {part: 1})


def test_an_edit_part_may_hold_a_slash() -> None:
    # "doc/a/b" splits back into ("doc", "a/b"): only the artifact's name may not hold one
    assert lw.Edit("doc", "a/b", 1).ref == "doc/a/b"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"message": None}, "Finding.message"),
        ({"message": "m", "artifact": 5}, "Finding.artifact"),
        ({"message": "m", "part": 5}, "Finding.part"),
        ({"message": "m", "severity": "critical"}, "Finding.severity"),
        ({"message": "m", "dimension": None}, "Finding.dimension"),
        ({"message": "m", "evidence": "x"}, "Finding.evidence"),
    ],
)
def test_finding_shapes(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        lw.Finding(**kwargs)


def test_effect_call_and_result_shapes() -> None:
    with pytest.raises(ConfigError, match=r"EffectCall.name"):
        lw.EffectCall("")
    with pytest.raises(ConfigError, match=r"EffectCall.args"):
        lw.EffectCall("pay", [1])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"EffectCall.key"):
        lw.EffectCall("pay", {}, 7)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"EffectResult.usage"):
        lw.EffectResult(1, usage={"cost_usd": 1})  # type: ignore[arg-type]


def test_contract_sections_are_typed() -> None:
    budget = lw.Budget(max_cycles=3)
    with pytest.raises(ConfigError, match=r"contract.budget: must be a Budget, got dict \(a map"):
        lw.Contract(budget={"max_cycles": 3})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"contract.success: must be a Success, got float"):
        lw.Contract(success=0.9, budget=budget)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"contract.no_progress: must be a NoProgress or None"):
        lw.Contract(no_progress=2, budget=budget)  # type: ignore[arg-type]
    rule = lw.RiskRule(name="r", touches=("doc/n",))
    with pytest.raises(ConfigError, match=r"contract.risk: takes a tuple of RiskRule; wrap"):
        lw.Contract(risk=rule, budget=budget)  # type: ignore[arg-type]
    assert lw.Contract(risk=[rule], budget=budget).risk == (rule,)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"contract.escalation.owner"):
        lw.Escalation(owner=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"approvals: takes a tuple of PolicyRule; wrap"):
        lw.ApprovalPolicy(lw.PolicyRule(kind="spend", action="allow"))  # type: ignore[arg-type]


def test_loop_and_runtime_arguments() -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal()

    for bad in (None, {"budget": {"max_cycles": 2}}):
        with pytest.raises(ConfigError, match=r"contract: must be a Contract"):
            lw.Loop(name="x", actor=actor, contract=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"store: must be a Store, a path or a store URL"):
        lw.Runtime(5)  # type: ignore[arg-type]


def test_a_loops_lists_given_one_item_are_refused_with_a_hint() -> None:
    """Outside probe (stop 42): ``Loop(verifiers=Check(...))``, one effect without its list or
    ``verifiers=None`` was a ``TypeError: 'Check' object is not iterable`` from inside the
    dataclass, where every other argument of a loop is a ConfigError naming the field."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal()

    def ok(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True)

    @lw.effect("spend")
    def pay(amount: float, *, key: str) -> dict[str, Any]:
        return {}

    contract = lw.Contract(budget=lw.Budget(max_cycles=2))

    def loop(**kw: Any) -> lw.Loop:
        return lw.Loop(
            **{"name": "x", "actor": actor, "verifiers": [ok], "contract": contract, **kw}
        )

    for one in (lw.Check(fn=ok), ok):
        with pytest.raises(ConfigError, match=r"verifiers: takes a list, got one .*wrap it"):
            loop(verifiers=one)
    for bad in (None, "ok", {"ok": ok}):
        with pytest.raises(ConfigError, match=r"verifiers: must be a list, got"):
            loop(verifiers=bad)
    with pytest.raises(ConfigError, match=r"effects: takes a list, got one Effect; wrap it"):
        loop(effects=pay)
    rule = lw.PolicyRule(kind="spend", action="allow")
    for bad in (rule, [rule]):
        with pytest.raises(ConfigError, match=r"approvals: must be an ApprovalPolicy, got .*wrap"):
            loop(approvals=bad)
    with pytest.raises(ConfigError, match=r"init: 'x' is not callable"):
        loop(init="x")
    assert loop(verifiers=(ok,), effects=(pay,)).effects == (pay,)  # tuples still do


def test_a_runtime_used_after_close_says_so(tmp_path: Any) -> None:
    """Outside probe (stop 42): ``rt.run_sync(...)`` after the Runtime's ``with`` block (or
    ``close()``) raised ``sqlite3.ProgrammingError: Cannot operate on a closed database``, and
    ``Runtime(on_progress="x")`` was taken, then failed silently after every commit."""
    loop = lw.Loop(
        name="x",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lambda state, proposal: lw.Verdict(passed=True)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        done = rt.run_sync(loop, {}, task_key="t")
    for call in (
        lambda: rt.run_sync(loop, {}, task_key="t2"),
        lambda: rt.result(done.run_id),
        lambda: rt.cancel(done.run_id),
    ):
        with pytest.raises(lw.StoreError, match=r"the store .*s\.db is closed: .*with"):
            call()
    rt.close()  # twice is fine
    with pytest.raises(ConfigError, match=r"on_progress: 'x' is not callable"):
        lw.Runtime(tmp_path / "s.db", on_progress="x")  # type: ignore[arg-type]


def test_what_an_older_release_stored_loads_as_it_was() -> None:
    # From review (helper-40): the checks ran in from_dict too, so a stored finding of
    # severity "info" or an effect call whose key was a number stopped a run from loading
    f = lw.Finding.from_dict({"message": "style", "severity": "info"})
    assert f.severity == "info"  # type: ignore[comparison-overlap]
    c = lw.EffectCall.from_dict({"name": "pay", "args": {"amount": 5}, "key": 42})
    assert c.key == 42  # type: ignore[comparison-overlap]
    p = lw.Proposal.from_dict(
        {"edits": [{"artifact": "doc", "part": "", "value": 1}], "effects": [c.to_dict()]}
    )
    assert p.edits[0].part == "" and p.effects == (c,)


def test_names_may_be_string_subclasses() -> None:
    # From review (helper-40): a StrEnum part name was refused as "must not contain '/'"
    import enum

    class Part(enum.StrEnum):
        QTY = "qty"

    assert lw.Proposal.edit("invoice", {Part.QTY: 3}).edits[0].ref == "invoice/qty"
    assert lw.Edit(np.str_("doc"), "n", 1).ref == "doc/n"


@pytest.mark.parametrize("tokens", [2**53 + 1, 2**63, 10**400])
def test_usage_tokens_are_bounded_so_no_count_can_fail_a_commit(tokens: int) -> None:
    # 2**63 tokens reached SQLite's INTEGER at the cycle's commit: OverflowError, run left running
    with pytest.raises(ConfigError, match=r"Usage\.tokens.*at most 2\*\*53"):
        lw.Usage(0.0, tokens)
    assert lw.Usage(0.0, 2**53).tokens == 2**53


@pytest.mark.parametrize(
    "amount", [2**53 + 2, 2.0**60, 1.5e308, 10**400], ids=["2**53+2", "2**60", "1.5e308", "10**400"]
)
@pytest.mark.parametrize("name", ["cost_usd", "seconds"])
def test_usage_amounts_are_bounded_so_no_sum_leaves_the_floats(amount: float, name: str) -> None:
    # stop 52: Usage(cost_usd=10**400) passed (an int compares below inf), and the cycle's sum
    # raised OverflowError; two costs of 1.5e308 summed to inf, stored as null
    with pytest.raises(
        ConfigError, match=rf"Usage\.{name}: must be (at most 2\*\*53|a finite number)"
    ):
        lw.Usage(**{name: amount})
    assert getattr(lw.Usage(**{name: 2**53}), name) == 2**53
