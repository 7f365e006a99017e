"""A loop's visible checks and the names a cycle's success needs, derived once when the loop
is built (``_conclude`` read them every cycle), are what the loop's checks say."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import loopwright as lw


def _verdict(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True)


def _loop(*checks: lw.Check) -> lw.Loop:
    return lw.Loop(
        name="names",
        actor=lambda ctx: lw.Proposal.edit("doc", {"body": "x"}),
        verifiers=list(checks),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def _expected(loop: lw.Loop) -> tuple[tuple[lw.Check, ...], set[str], list[str]]:
    """What ``_conclude`` built every cycle before (its loop, written out again)."""
    shown = tuple(c for c in loop.checks if not c.held_out)
    required = {c.name for c in shown if c.required} or {c.name for c in shown}
    return shown, required, [c.name for c in shown if not c.required]


def test_names_follow_the_checks() -> None:
    a = lw.Check(fn=_verdict, name="a")
    b = lw.Check(fn=_verdict, name="b", required=False)
    h = lw.Check(fn=_verdict, name="h", held_out=True)
    c = lw.Check(fn=_verdict, name="c", required=False)
    for loop in (
        _loop(a, b, h),
        _loop(b, c),  # none required: every visible one is
        _loop(b, a, c, h),
    ):
        shown, required, optional = _expected(loop)
        assert loop.visible == shown
        assert set(loop.required_names) == required
        assert list(loop.optional_names) == optional
    assert _loop(b, c).required_names == {"b", "c"}
    assert _loop(a, b, h).optional_names == ("b",)


def test_a_replaced_loop_derives_them_again() -> None:
    a = lw.Check(fn=_verdict, name="a")
    b = lw.Check(fn=_verdict, name="b", required=False)
    loop = dataclasses.replace(_loop(a), verifiers=[a, b])
    assert loop.visible == (a, b)
    assert loop.required_names == {"a"}
    assert loop.optional_names == ("b",)


def test_passed_checks_stay_sorted(tmp_path: Path) -> None:
    """The state's passed checks after each cycle: sorted and unique, as before the cut that
    skips the sort where no check newly passes and the list holds one name or none."""
    seen: list[list[str]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"v{ctx.cycle}"})

    def passing_from(first: int) -> Any:
        def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
            seen.append(list(state.passed_checks))
            return lw.Verdict(passed=state.cycle >= first, score=0.5)

        return check

    loop = lw.Loop(
        name="passes",
        actor=actor,
        # (a check judges the candidate of cycle n, whose ``cycle`` is n - 1 until it is
        # concluded) "b" passes from cycle 3, "a" from cycle 4: gained out of name order
        verifiers=[
            lw.Check(fn=passing_from(2), name="b"),
            lw.Check(fn=passing_from(3), name="a"),
            lw.Check(fn=passing_from(99), name="c"),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=5)),
    )
    with lw.Runtime(str(tmp_path / "x.db")) as rt:
        res = rt.run_sync(loop, {"goal": "g", "artifacts": {"doc": {"body": ""}}})
    assert res.cycles == 5
    assert res.state.passed_checks == ["a", "b"]
    # what each cycle's first check saw: none until b passed, then b, then both, sorted
    assert seen[::3] == [[], [], [], ["b"], ["a", "b"]]


def test_success_with_the_loops_names_is_success_without() -> None:
    """``_decide.success`` given the loop's names (what the engine passes every cycle)
    answers as it does finding them from the checks."""
    from loopwright._decide import success

    a = lw.Check(fn=_verdict, name="a")
    b = lw.Check(fn=_verdict, name="b", required=False)
    h = lw.Check(fn=_verdict, name="h", held_out=True)
    c = lw.Check(fn=_verdict, name="c", required=False)
    verdict_sets = [
        {},
        {"a": lw.Verdict(passed=True)},
        {"a": lw.Verdict(passed=True), "b": lw.Verdict(passed=False)},
        {"b": lw.Verdict(passed=True), "c": lw.Verdict(passed=True)},
        {"b": lw.Verdict(passed=True), "c": lw.Verdict(passed=False)},
        {"a": lw.Verdict(passed=True, evidence={"vacuous": True})},
        {"a": lw.Verdict(passed=True, score=0.4)},
    ]
    contracts = [
        lw.Contract(budget=lw.Budget(max_cycles=3)),
        lw.Contract(budget=lw.Budget(max_cycles=3), success=lw.Success(min_score=0.3)),
        lw.Contract(budget=lw.Budget(max_cycles=3), success=lw.Success(allow_vacuous=True)),
    ]
    answers = set()
    for checks in ((a, b, h), (b, c), (a, c, b)):
        loop = _loop(*checks)
        for contract in [
            *contracts,
            lw.Contract(
                budget=lw.Budget(max_cycles=3), success=lw.Success(required=(checks[0].name,))
            ),
        ]:
            for verdicts in verdict_sets:
                for score in (None, 0.5, 1.0):
                    plain = success(contract, loop.checks, verdicts, score)
                    given = success(
                        contract, loop.checks, verdicts, score, needed=loop.required_names
                    )
                    assert given == plain, (checks, contract, verdicts, score)
                    answers.add(plain)
    assert answers == {True, False}  # (both answers were compared)
