"""User code that changes in place what it was given, keeps what it returned, returns values
JSON cannot hold, or raises in odd ways, end to end on a SQLite file.

What a run judged must be what it stored: an actor or verifier that mutates a list it was
shown must change neither the run's state nor what the next cycle sees (the store would not
hold the change, so a resumed run would differ from an uninterrupted one), and a value the
store would write as its ``str`` is refused, named, instead of judged as one thing and kept as
another. Each failure of user code is the user's: the run escalates with a message, never
``failed`` with a traceback out of ``run_sync``.
"""

from __future__ import annotations

import datetime
import decimal
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

TASK: dict[str, Any] = {
    "meta": {"source": "po"},
    "artifacts": {"inv": {"lines": [], "qty": 0}},
}


def _loop(
    actor: Callable[[lw.Context], Any],
    verifier: Callable[..., Any],
    *,
    held_out: bool = False,
    cycles: int = 4,
    risk: tuple[lw.RiskRule, ...] = (),
) -> lw.Loop:
    checks = [lw.Check(fn=verifier, name="check")]
    if held_out:
        checks.append(lw.Check(fn=lambda s, p: lw.Verdict(passed=True), name="h", held_out=True))
    return lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=checks,
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles), risk=risk),
    )


def _paying(
    eff: Any, actor: Callable[[lw.Context], Any] | None = None, *, allow: bool = True
) -> lw.Loop:
    """A loop asking for ``eff`` (``amount=1.0`` unless ``actor`` says otherwise), spend
    allowed unless ``allow`` is false (then it needs a person)."""
    return lw.Loop(
        name="hostile",
        actor=actor or (lambda ctx: lw.Proposal(effects=(eff.call(amount=1.0),))),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[eff],
        approvals=lw.ApprovalPolicy(
            (lw.PolicyRule(kind="spend", action="allow"),) if allow else ()
        ),
    )


def _escalated(tmp_path: Path, loop: lw.Loop) -> tuple[lw.RunResult, str]:
    """``loop`` run on ``TASK``: escalated, with the cause its packet gives."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    return r, str(r.packet["cause"])


def _plain(ctx: lw.Context) -> dict[str, Any]:
    return json.loads(json.dumps({"artifacts": ctx.artifacts, "task": ctx.task}))


def test_an_actor_changing_its_context_in_place_changes_nothing_stored_or_shown(
    tmp_path: Path,
) -> None:
    seen: list[dict[str, Any]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(_plain(ctx))
        if ctx.cycle == 1:
            return lw.Proposal.edit("inv", {"lines": [1, 2], "qty": 1})
        # hostile: change in place what it was shown, then propose something else
        ctx.artifacts["inv"]["lines"].append(99)
        ctx.task["meta"]["source"] = "changed"
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    judged: list[Any] = []

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        lines = state.artifacts["inv"].values()["lines"]
        judged.append(list(lines))
        # passes only on the lines the actor wrote in place, never proposed
        return lw.Verdict(passed=lines == [1, 2, 99], score=0.5)

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier), TASK, task_key="k")
    # nothing the actor changed in place was judged, shown again or stored
    assert judged == [[1, 2]] * 4
    assert [s["artifacts"]["inv"]["lines"] for s in seen] == [[], [1, 2], [1, 2], [1, 2]]
    assert {s["task"]["meta"]["source"] for s in seen} == {"po"}
    assert (r.status, r.stop_reason) == ("stopped", "budget_cycles")
    assert r.state.values()["inv"]["lines"] == [1, 2]
    assert TASK["meta"]["source"] == "po"


def test_an_actor_keeping_what_it_returned_cannot_change_it_afterwards(tmp_path: Path) -> None:
    kept: list[list[int]] = []
    seen: list[list[int]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(list(ctx.artifacts["inv"]["lines"]))
        if ctx.cycle == 1:
            kept.append([1])
            return lw.Proposal.edit("inv", {"lines": kept[0]})
        kept[0].append(ctx.cycle)  # as a thread it left running would, after the return
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5)

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier, cycles=3), TASK, task_key="k")
    assert seen == [[], [1], [1]]
    assert r.state.values()["inv"]["lines"] == [1]


@pytest.mark.parametrize("held_out", [False, True])
def test_a_verifier_changing_what_it_judges_changes_nothing_committed(
    tmp_path: Path, held_out: bool
) -> None:
    seen: list[list[int]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(list(ctx.artifacts["inv"]["lines"]))
        return lw.Proposal.edit("inv", {"lines": [ctx.cycle]})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        state.artifacts["inv"].values()["lines"].append("verifier")
        proposal.edits[0].value.append("verifier")
        return lw.Verdict(passed=False, score=0.5)

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier, held_out=held_out, cycles=3), TASK, task_key="k")
    assert seen == [[], [1], [2]]
    assert r.state.values()["inv"]["lines"] == [3]


@pytest.mark.parametrize("held_out", [False, True])
def test_a_verifier_changing_what_it_judges_changes_nothing_the_next_verifier_judges(
    tmp_path: Path, held_out: bool
) -> None:
    # Checks of the same kind shared one copy: the second judged the first one's changes, a
    # value never stored.
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"lines": [ctx.cycle]})

    def meddler(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        state.artifacts["inv"].values()["lines"].append("values")
        part = state.part("inv/lines")
        assert part is not None
        part.value.append("part")
        proposal.edits[0].value.append("proposal")
        return lw.Verdict(passed=False, score=0.5)

    seen: list[Any] = []

    def looker(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        part = state.part("inv/lines")
        assert part is not None
        seen.append((state.values()["inv"]["lines"], part.value, proposal.edits[0].value))
        return lw.Verdict(passed=False, score=0.5)

    loop = lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=[
            lw.Check(fn=meddler, name="meddler", held_out=held_out),
            lw.Check(fn=looker, name="looker", held_out=held_out),
            *([lw.Check(fn=lambda s, p: lw.Verdict(passed=False), name="v")] if held_out else []),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert seen == [([1], [1], [1]), ([2], [2], [2])]
    assert r.state.values()["inv"]["lines"] == [2]


def test_a_retried_attempt_is_not_shown_what_the_failed_one_changed(tmp_path: Path) -> None:
    # The attempts of a call shared its arguments: an actor that appended to its context and
    # then failed transiently appended twice; a verifier judged its failed attempt's changes.
    def actor(ctx: lw.Context) -> lw.Proposal:
        lines = ctx.artifacts["inv"]["lines"]
        lines.append(ctx.cycle)
        if len(tried) < 1:
            tried.append("actor")
            raise ConnectionError("flaky model")
        return lw.Proposal.edit("inv", {"lines": lines})

    tried: list[str] = []
    judged: list[Any] = []

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        judged.append((list(state.values()["inv"]["lines"]), list(proposal.edits[0].value)))
        state.artifacts["inv"].values()["lines"].append("half")
        part = state.part("inv/lines")
        assert part is not None
        part.value.append("half")
        proposal.edits[0].value.append("half")
        if len(tried) < 2:
            tried.append("verifier")
            raise ConnectionError("flaky check")
        return lw.Verdict(passed=False, score=0.5)

    loop = lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        retry=lw.RetryPolicy(attempts=2, backoff_s=0.0, jitter=False),
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert tried == ["actor", "verifier"]
    assert judged == [([1], [1]), ([1], [1])]
    assert r.state.values()["inv"]["lines"] == [1]


def test_a_verifier_cannot_add_to_the_plan_of_the_proposal_it_judges(tmp_path: Path) -> None:
    # A proposal of scalar edits is its own copy (Proposal.owned); its empty plan was a dict a
    # verifier could fill: the record then held a plan change never applied, and the parked
    # cycle, once approved, applied it unjudged.
    task = {**TASK, "plan": [{"id": "s1", "title": "first"}]}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    refused: list[str] = []

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        try:
            proposal.plan["s1"] = "done"  # type: ignore[index]
        except TypeError as exc:
            refused.append(type(exc).__name__)
        return lw.Verdict(passed=False, score=0.5)

    rule = lw.RiskRule(name="qty", touches=("inv/qty",))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier, cycles=1, risk=(rule,)), task, task_key="k")
        assert r.status == "awaiting_approval"
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, _loop(actor, verifier, cycles=1, risk=(rule,)))
        record = rt.store.latest_checkpoint(r.run_id).record or {}
    assert refused == ["TypeError"]
    assert [s.status for s in r.state.plan] == ["pending"]
    assert record["proposal"]["plan"] == {}
    # the actor's own empty plan is copied, not kept: filling it later changes nothing
    mine: dict[str, str] = {}
    p = lw.Proposal(edits=(lw.Edit("inv", "qty", 1),), plan=mine)
    owned = p.owned()
    mine["s1"] = "done"
    assert dict(owned.plan) == {}


def test_a_risk_check_changing_the_candidate_changes_nothing_committed(tmp_path: Path) -> None:
    def grabby(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        state.artifacts["inv"].values()["lines"].append("rule")
        return None

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"lines": [ctx.cycle]})

    rule = lw.RiskRule(name="grabby", check=grabby)
    loop = _loop(actor, lambda s, p: lw.Verdict(passed=False, score=0.5), cycles=2, risk=(rule,))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert r.stop_reason == "budget_cycles"
    assert r.state.values()["inv"]["lines"] == [2]


def test_a_risk_check_changing_what_it_is_shown_hides_nothing_from_the_next_rule(
    tmp_path: Path,
) -> None:
    # The rules' checks shared one copy of the candidate, the proposal and the verdicts: a
    # first check that emptied them had the next rule judge values never proposed, and a
    # change that rule parks was applied without a person.
    seen: list[Any] = []

    def tidy(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        proposal.edits[0].value.clear()
        state.artifacts["inv"].values()["lines"].clear()
        verdicts["check"].findings[0].evidence["tidied"] = True
        return None

    def gate(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        shown = (
            proposal.edits[0].value,
            state.values()["inv"]["lines"],
            verdicts["check"].findings[0].evidence,
        )
        seen.append(shown)
        return "a person looks at every line" if shown[0] else None

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"lines": [ctx.cycle]})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1, findings=(lw.Finding("no", "inv", "lines"),))

    rules = (lw.RiskRule(name="tidy", check=tidy), lw.RiskRule(name="gate", check=gate))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier, cycles=2, risk=rules), TASK, task_key="k")
    assert seen == [([1], [1], {})]
    assert r.status == "awaiting_approval"
    assert r.state.values()["inv"]["lines"] == []


def test_a_risk_check_changing_the_verdicts_it_is_shown_decides_nothing(tmp_path: Path) -> None:
    # A rule's check was handed the engine's own verdicts: replacing a failed one accepted the
    # run, and the record said the check had passed.
    def sneaky(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        verdicts["check"] = lw.Verdict(passed=True, score=1.0)
        verdicts["check"].evidence["added"] = True
        return None

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1, findings=(lw.Finding("no", "inv", "qty"),))

    rule = lw.RiskRule(name="sneaky", check=sneaky)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier, cycles=2, risk=(rule,)), TASK, task_key="k")
        records = [ck.record for ck in rt.store.checkpoints(r.run_id) if ck.record]
    assert (r.status, r.stop_reason) == ("stopped", "budget_cycles")
    assert [rec["visible"]["check"]["passed"] for rec in records] == [False, False]


class _RaisingEq:
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __hash__ = object.__hash__


def _contains_itself() -> list[Any]:
    x: list[Any] = []
    x.append(x)
    return x


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ({1, 2}, "set"),  # was stored as the text "{1, 2}" and accepted
        (b"\x00", "bytes"),
        ({(1, 2): "a"}, "keys must be str"),  # was stored as {"(1, 2)": "a"}
        (_RaisingEq(), "_RaisingEq"),  # was a RuntimeError out of run_sync
        (_contains_itself(), "contains itself"),  # was a ValueError out of run_sync
    ],
)
@pytest.mark.parametrize("held_out", [False, True])
def test_a_value_json_cannot_hold_escalates_naming_the_part(
    tmp_path: Path, value: Any, why: str, held_out: bool
) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"qty": 1, "lines": value})

    loop = _loop(actor, lambda s, p: lw.Verdict(passed=True), held_out=held_out)
    r, cause = _escalated(tmp_path, loop)
    assert "the value of inv/lines cannot be stored as JSON" in cause
    assert why in cause
    assert r.state.values()["inv"] == {"lines": [], "qty": 0}


@pytest.mark.parametrize(
    ("value", "why"), [({1, 2}, "set"), (b"\x00", "bytes"), (_contains_itself(), "contains itself")]
)
def test_a_task_part_json_cannot_hold_is_refused_before_the_run(
    tmp_path: Path, value: Any, why: str
) -> None:
    """Outside probe (stop 42): a task's artifacts are its parts' first values, yet a set there
    was stored as the text "{1, 2}", which the actor and every check then read (a run
    accepted on it), where the same value proposed by an actor is refused."""
    loop = _loop(lambda ctx: lw.Proposal(), lambda s, p: lw.Verdict(passed=True))
    task = {"artifacts": {"inv": {"qty": 0, "lines": value}}, "note": "kept as before"}
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(lw.ConfigError, match=r"task.artifacts: the value of inv/lines cann"):
            rt.run_sync(loop, task, task_key="k")
        with pytest.raises(lw.ConfigError, match=why):
            rt.create(loop, task, task_key="k")
        assert rt.store.list_runs() == []  # nothing was created
        # a loop with its own init reads the task its own way: its artifacts are not checked,
        # but a task that contains itself is still a ConfigError (was a RecursionError)
        own = lw.Loop(
            name="own",
            actor=loop.actor,
            verifiers=loop.verifiers,
            contract=loop.contract,
            init=lambda t: lw.TaskState.from_task({"artifacts": {"inv": {"qty": 0}}}),
        )
        if why == "contains itself":
            with pytest.raises(lw.ConfigError, match=r"task: it is nested too deeply, or cont"):
                rt.run_sync(own, task, task_key="k2")
        else:
            assert rt.run_sync(own, task, task_key="k2").status == "accepted"


async def _async_key(args: Any) -> str:
    return "never awaited"


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (lambda a: a["missing"], "raised KeyError: 'missing'"),  # was a KeyError, run failed
        (lambda a: None, "got NoneType"),  # was the key "pay:None" for every call
        (_async_key, "got coroutine"),  # was "pay:<coroutine object ... at 0x…>"
        (lambda a: "", "got str: ''"),
    ],
)
def test_an_effect_key_function_that_gives_no_key_escalates_before_any_effect(
    tmp_path: Path, key: Callable[..., Any], said: str
) -> None:
    """Outside probe (stop 42): an effect's key= function is user code, yet one that raised
    ended the run failed with its KeyError out of run_sync, and one that returned None (or
    was async) gave every call one key ("pay:None") or a new key in every process (a
    coroutine's address): store-wide at most once silently wrong."""
    paid: list[Any] = []

    def pay(amount: float, *, key: str) -> str:
        paid.append(key)
        return "ok"

    _, cause = _escalated(tmp_path, _paying(lw.effect("spend", name="pay", key=key)(pay)))
    assert "the key function of effect pay" in cause
    assert said in cause
    assert paid == []


def test_an_effect_describe_that_fails_is_said_beside_the_default(tmp_path: Path) -> None:
    """Outside probe (stop 42): describe= raising ended the run failed (its KeyError out of
    run_sync) when the effect needed approval; it is what people read of the action."""
    eff = lw.effect("spend", name="pay", describe=lambda a: a["missing"])(lambda amount: "ok")
    loop = _paying(eff, allow=False)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.status == "awaiting_approval"
        req = rt.pending_approval(r.run_id)
    assert req.what.startswith("spend: pay(amount=1.0)")
    assert "describe function raised KeyError" in req.what


def test_an_effect_argument_json_cannot_hold_is_named(tmp_path: Path) -> None:
    @lw.effect("notify")
    def notify(to: str, extra: Any) -> str:
        raise AssertionError("never run")

    def actor(ctx: lw.Context) -> lw.Proposal:
        call = lw.EffectCall("notify", {"to": "ops", "extra": [1]})
        call.args["extra"].append({2})  # changed after the call was checked
        return lw.Proposal(effects=(call,))

    loop = lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[notify],
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert r.stop_reason == "escalated"
    assert r.packet is not None
    assert "argument 'extra' of effect notify cannot be stored as JSON" in r.packet["cause"]


def test_what_was_judged_is_what_is_stored(tmp_path: Path) -> None:
    judged: list[Any] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"lines": (1, float("nan"), "\ud83d", {2: "a"})})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        judged.append(state.artifacts["inv"].values()["lines"])
        return lw.Verdict(passed=True)

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier), TASK, task_key="k")
    assert r.status == "accepted"
    assert judged == [r.state.values()["inv"]["lines"]] == [[1, None, "\ufffd", {"2": "a"}]]


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_an_exception_whose_str_raises_escalates(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        raise _Unprintable()

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, lambda s, p: lw.Verdict(passed=True)), TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert "_Unprintable: <str() of this _Unprintable raised RuntimeError>" in r.packet["cause"]


def test_a_risk_check_that_raises_escalates_naming_the_rule(tmp_path: Path) -> None:
    def broken(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        raise KeyError("vendor")

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    rule = lw.RiskRule(name="vendor_change", check=broken)
    loop = _loop(actor, lambda s, p: lw.Verdict(passed=True), risk=(rule,))
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert r.packet["cause"] == "the check of risk rule 'vendor_change' raised KeyError: 'vendor'"
    assert r.packet["error"]["where"] == "risk rule vendor_change"
    assert r.state.values()["inv"]["qty"] == 0


@pytest.mark.parametrize("score", [1.5, -0.1, float("nan"), "0.5", True])
def test_a_verdict_score_out_of_range_is_a_config_error(tmp_path: Path, score: Any) -> None:
    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=score)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("inv", {"qty": 1})

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(actor, verifier), TASK, task_key="k")
    assert r.stop_reason == "escalated"
    assert r.packet is not None
    assert "(ConfigError: Verdict.score: must be a number in [0, 1]" in r.packet["cause"]


class _Unshowable:
    def __repr__(self) -> str:
        raise RuntimeError("no text")

    __str__ = __repr__


def _receipt_containing_itself() -> Any:
    receipt: dict[str, Any] = {"id": "pay-1"}
    receipt["self"] = receipt
    return receipt


@pytest.mark.parametrize(
    ("receipt", "recorded"),
    [
        # both were an exception out of run_sync after the payment, the run failed/error
        (_receipt_containing_itself, {"unrecordable_result": "dict: Circular reference detected"}),
        (lambda: {"id": "pay-1", "at": _Unshowable()}, {"id": "pay-1", "at": "<_Unshowable>"}),
    ],
)
def test_an_effect_result_json_cannot_hold_is_recorded_done_once(
    tmp_path: Path, receipt: Callable[[], Any], recorded: Any
) -> None:
    paid: list[str] = []

    @lw.effect("spend", key=lambda a: a["invoice"])
    def pay(invoice: str, *, key: str) -> Any:
        paid.append(key)
        return receipt()

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("inv", "qty", 1),), effects=(pay.call(invoice="INV-7"),))

    loop = _paying(pay, actor)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        again = rt.run_sync(loop, TASK, task_key="k2")  # another run asking the same key
        [entry] = [e for e in rt.store.journal(r.run_id) if e.key.startswith("effect:")]
    assert (r.status, again.status, paid) == ("accepted", "accepted", ["pay:INV-7"])
    assert entry.status == "done"
    assert entry.data["result"] == recorded


def test_an_actor_changing_a_persons_accepted_list_in_place_changes_nothing(
    tmp_path: Path,
) -> None:
    judged: list[Any] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        if not ctx.is_accepted("inv", "lines"):
            return lw.Proposal(escalate="which lines?")  # a person answers with an edit
        ctx.accepted["inv"]["lines"].append("loop")  # in place, never proposed
        ctx.artifacts["inv"]["lines"].append("loop")
        return lw.Proposal.edit("inv", {"qty": ctx.cycle})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        judged.append(list(state.artifacts["inv"].values()["lines"]))
        return lw.Verdict(passed=False, score=0.5)

    loop = _loop(actor, verifier, cycles=3)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        assert r.stop_reason == "escalated"
        rt.edit(r.run_id, "inv/lines", ["alice's"], by="alice")  # reopens the run
        r = rt.resume_sync(r.run_id, loop)
    assert judged == [["alice's"]] * 3
    assert r.state.values()["inv"]["lines"] == ["alice's"]
    assert r.state.part("inv/lines").status == "accepted"


@pytest.mark.parametrize("same_cycle", [True, False])
def test_a_key_this_run_did_asked_again_with_other_arguments_escalates(
    tmp_path: Path, same_cycle: bool
) -> None:
    # It was answered "done" with the first call's result: the actor asked to pay 2.0, the run
    # said it was paid, and had paid 1.0 (another run asking the same escalated already).
    paid: list[float] = []

    @lw.effect("spend", key=lambda a: a["invoice"], requires_success=False)
    def pay(invoice: str, amount: float, *, key: str) -> dict[str, float]:
        paid.append(amount)
        return {"paid": amount}

    def actor(ctx: lw.Context) -> lw.Proposal:
        if same_cycle:
            calls = (pay.call(invoice="INV-7", amount=1.0), pay.call(invoice="INV-7", amount=2.0))
        else:
            calls = (pay.call(invoice="INV-7", amount=float(ctx.cycle)),)
        return lw.Proposal(edits=(lw.Edit("inv", "qty", ctx.cycle),), effects=calls)

    loop = lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=False, score=0.5))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
        [entry] = [e for e in rt.store.journal(r.run_id) if e.key.startswith("effect:")]
    assert paid == [1.0]
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert "was done by this run in cycle 1 with other arguments" in r.packet["cause"]
    assert (entry.status, entry.data["result"]) == ("done", {"paid": 1.0})


def test_a_part_json_cannot_hold_that_init_set_is_refused_before_the_run(tmp_path: Path) -> None:
    """Review (stop 42): the task-artifacts check ran on the task only for loops without
    ``init``: a loop whose ``init`` set a part to a set still had it stored as the text
    "{1, 2}", read by the actor and judged. The initial state's parts are checked, whoever
    made them."""

    def init(task: Any) -> lw.TaskState:
        state = lw.TaskState.from_task({"artifacts": {"inv": {"qty": 0}}})
        state.set_part("inv", "lines", {1, 2}, 0)
        return state

    loop = lw.Loop(
        name="own",
        actor=lambda ctx: lw.Proposal(),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        init=init,
    )
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(lw.ConfigError, match=r"^init: the value of inv/lines cannot be st"):
            rt.run_sync(loop, {}, task_key="k")
        assert rt.store.list_runs() == []


@pytest.mark.parametrize(
    ("key", "want"),
    [
        (lambda a: uuid.UUID(int=7), "pay:00000000-0000-0000-0000-000000000007"),
        (lambda a: decimal.Decimal("12.50"), "pay:12.50"),
        (lambda a: datetime.date(2026, 12, 4), "pay:2026-12-04"),
        (lambda a: ("INV", 7), "pay:('INV', 7)"),
    ],
)
def test_an_effect_key_whose_text_is_its_own_still_names_the_action(
    tmp_path: Path, key: Callable[..., Any], want: str
) -> None:
    """The check above (stop 42) first refused every key but text and whole numbers: a key=
    function returning an order's UUID (or a Decimal, a date, a tuple), which named its action
    by its text before, escalated every run that paid."""
    paid: list[Any] = []

    def pay(amount: float, *, key: str) -> str:
        paid.append(key)
        return "ok"

    loop = _paying(lw.effect("spend", name="pay", key=key)(pay))
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert r.status == "accepted", r.packet
    assert paid == [want]


@pytest.mark.parametrize(
    ("key", "said"),
    [
        (lambda a: object(), "got object"),
        (lambda a: lambda: 1, "got function"),
        (lambda a: True, "got bool"),
        (lambda a: float("nan"), "got float"),
        (lambda a: (), "got tuple"),
    ],
)
def test_an_effect_key_that_names_no_action_escalates(
    tmp_path: Path, key: Callable[..., Any], said: str
) -> None:
    """An address (an object's default text, a function's), a bool, NaN or an empty tuple
    names no one action: refused as None is."""
    paid: list[Any] = []

    def pay(amount: float, *, key: str) -> str:
        paid.append(key)
        return "ok"

    _, cause = _escalated(tmp_path, _paying(lw.effect("spend", name="pay", key=key)(pay)))
    assert said in cause and paid == []
