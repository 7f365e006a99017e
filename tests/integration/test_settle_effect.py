"""A person settles an effect left in doubt (effects53b): before, a keyless payment that
failed after it may have charged stayed in doubt for good — its run escalated, every other
run asking for the invoice escalated too, and no call, command or page let the person who
checked with the bank say what happened. ``Runtime.settle_effect`` and ``loopwright settle``
record it: done (with its result; other runs and a rollback's redo reuse it) or not done (its
key kept for the next attempt, which runs it). Only an entry in doubt; audited; a person who
may operate. SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from doc_loop import TASK, fields
from test_keyless_effect_failures import _paying

import loopwright as lw
from loopwright.cli import main


def _doubted(rt: lw.Runtime, charges: list[str]) -> str:
    a = rt.run_sync(_paying(charges, ValueError), TASK, task_key="A")
    assert a.status == "escalated" and a.packet is not None
    assert f"loopwright settle {a.run_id[:12]} pay:I6 --done" in a.packet["cause"]
    [entry] = rt.store.journal(a.run_id, kind="effect")
    assert entry.status == "in_doubt"
    return a.run_id


def test_settled_done_the_next_run_reuses_the_result(url: str) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        got = rt.settle_effect(
            run_id, "pay:I6", done=True, by="ops", note="bank shows ch-9", result={"id": "ch-9"}
        )
        assert (got.status, got.data["result"]) == ("done", {"id": "ch-9"})
        assert got.data["settled"] == {"by": "ops", "done": True, "note": "bank shows ch-9"}
        claim = rt.store.effect_claim("spend", "pay:I6")
        assert claim is not None and claim.status == "done"
        [ev] = [e for e in rt.store.events(run_id) if e.kind == "effect_settled"]
        assert ev.data["by"] == "ops" and ev.data["done"] is True
        # another run asking for the invoice reuses the settled payment: nothing charged
        b = rt.run_sync(_paying(charges, None), TASK, task_key="B")
        assert b.status == "accepted", b.packet
        [reused] = rt.store.journal(b.run_id, kind="effect")
        assert reused.data["result"] == {"id": "ch-9"}
        # the run itself, rolled back before the payment, goes on as if it had returned
        rt.rollback(run_id, 0, by="ops", loop=_paying(charges, None))
        assert rt.resume_sync(run_id, _paying(charges, None)).status == "accepted"
        # settled once: a second settling is refused, naming what is in doubt (none)
        with pytest.raises(lw.ConfigError, match="is done, not in doubt; in doubt: none"):
            rt.settle_effect(run_id, "pay:I6", done=False, by="ops")
    assert charges == ["I6"]


def test_settled_not_done_a_rollback_redoes_it(url: str) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        got = rt.settle_effect(run_id, "pay", done=False, by="ops")  # by its name: one
        assert got.status == "failed" and "settled not done by ops" in got.data["cause"]
        rt.rollback(run_id, 0, by="ops", loop=_paying(charges, None))
        again = rt.resume_sync(run_id, _paying(charges, None))
        assert again.status == "accepted", again.packet
    assert charges == ["I6", "I6"]


def test_only_an_effect_in_doubt_is_settled(url: str) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        with pytest.raises(lw.ConfigError, match=r"names no effect of the run; in doubt: pay"):
            rt.settle_effect(run_id, "nope", done=True, by="ops")
        with pytest.raises(lw.ConfigError, match="who checked"):
            rt.settle_effect(run_id, "pay:I6", done=True, by=" ")
        # another run asking for the action is in doubt about this run's: not its to settle
        b = rt.run_sync(_paying(charges, None), TASK, task_key="B")
        assert b.status == "escalated" and b.packet is not None
        assert "loopwright settle" not in b.packet["cause"]
        with pytest.raises(lw.ConfigError, match=f"about run {run_id}'s action"):
            rt.settle_effect(b.run_id, "pay:I6", done=True, by="ops")


def test_loopwright_settle(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
    args = ["settle", run_id, "pay:I6", "--done", "--result", '{"id": "ch-9"}']
    assert main([*args, "--by", "ops", "--store", url]) == 0
    assert "settled pay (pay:I6) as done" in capsys.readouterr().out
    assert main(["settle", run_id, "pay:I6", "--not-done", "--by", "ops", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "not in doubt" in err and "Traceback" not in err
    assert main(["settle", run_id, "pay:I6", "--by", "ops", "--store", url]) == 2
    with lw.Runtime(url) as rt:
        assert any(a.action == "settle_effect" for a in rt.store.audit())


def test_settling_needs_the_operator_role(url: str) -> None:
    import time

    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        now = time.time()
        rt.store.add_user("root", roles=["admin"], limits={}, by="test", now=now)
        rt.store.add_user("otto", roles=["approver"], limits={}, by="root", now=now)
        rt.store.add_user("rita", roles=["operator"], limits={}, by="root", now=now)
        with pytest.raises(lw.NotPermittedError):
            rt.settle_effect(run_id, "pay:I6", done=False, by="otto")
        assert rt.settle_effect(run_id, "pay:I6", done=False, by="rita").status == "failed"
        outcomes = {(a.actor, a.outcome) for a in rt.store.audit() if a.action == "settle_effect"}
        assert outcomes == {("otto", "refused"), ("rita", "allowed")}


def _run_scoped(charges: list[str], fail: bool) -> lw.Loop:
    """Pays in its one cycle under the default key (run, cycle, name, arguments): no key."""

    @lw.effect("spend", name="pay")
    def pay(invoice: str) -> dict[str, str]:
        charges.append(invoice)
        if fail:
            raise ValueError("the ledger write after the charge failed")
        return {"charged": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = tuple(lw.Edit("doc", k, v) for k, v in (("a", 1), ("b", 2), ("c", 3)))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice="I7"),))

    allow = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))
    return lw.Loop(name="scoped", actor=actor, verifiers=[fields],
                   contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
                   effects=[pay], approvals=allow)  # fmt: skip


def test_the_rollback_after_settling_done_says_the_redo_reuses_it(url: str) -> None:
    # Day two: settled done as the escalation says, rolled back to before its cycle (which
    # never ended), the rollback said "a redone cycle that asks for it runs it again"; the
    # redone cycle has the same number and key, and reused the settled result.
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        a = rt.run_sync(_run_scoped(charges, True), TASK)
        assert a.status == "escalated" and a.cycles == 0, (a.status, a.cycles)
        [entry] = rt.store.journal(a.run_id, kind="effect")
        rt.settle_effect(a.run_id, entry.key, done=True, by="ops", result={"charged": "I7"})
        rt.rollback(a.run_id, 0, by="ops", loop=_run_scoped(charges, False))
        [ev] = [e for e in rt.store.events(a.run_id) if e.kind == "rolled_back"]
        [item] = ev.data["irreversible"]
        assert "runs it again" not in item and "reuses" in item, item
        assert rt.resume_sync(a.run_id, _run_scoped(charges, False)).status == "accepted"
    assert charges == ["I7"]


def test_a_settled_result_is_strict_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """review53c: the result a person gives is stored as given or refused, as an edit's value
    is (``check_value``): a NaN was written as null and a set as its text, silently, and a
    result nested deeper than the stores write failed `loopwright settle` with an internal
    error (exit 1) instead of one line and exit 2. Nothing is settled by a refused one."""
    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        for bad in ({"x": float("nan")}, {"s": {1, 2}}, {1: "a"}):
            with pytest.raises(lw.ConfigError, match="result"):
                rt.settle_effect(run_id, "pay:I6", done=True, by="ops", result=bad)
    deep = "[" * 400 + "]" * 400
    args = ["settle", run_id, "pay:I6", "--done", "--result", deep, "--by", "ops"]
    assert main([*args, "--store", url]) == 2
    err = capsys.readouterr().err
    assert "--result" in err and "internal error" not in err, err
    with lw.Runtime(url) as rt:
        [entry] = rt.store.journal(run_id, kind="effect")
        assert entry.status == "in_doubt"


def test_settled_awaited_as_the_sync_form_settles(url: str) -> None:
    """``settle_effect_async`` (async55) writes what ``settle_effect`` writes (the tests above):
    the entry settled, the ``effect_settled`` event and the audit record; a rollback then redoes
    it; a second settling is refused with the same words."""
    import asyncio

    charges: list[str] = []
    with lw.Runtime(url) as rt:
        run_id = _doubted(rt, charges)
        got = asyncio.run(rt.settle_effect_async(run_id, "pay", done=False, by="ops", note="no"))
        assert got.status == "failed" and "settled not done by ops" in got.data["cause"]
        assert got.data["settled"] == {"by": "ops", "done": False, "note": "no"}
        [ev] = [e for e in rt.store.events(run_id) if e.kind == "effect_settled"]
        assert ev.data["by"] == "ops" and ev.data["done"] is False
        [rec] = rt.store.audit(target=f"run {run_id}", action="settle_effect")
        assert (rec.actor, rec.outcome) == ("ops", "allowed")
        with pytest.raises(lw.ConfigError, match="is failed, not in doubt; in doubt: none"):
            asyncio.run(rt.settle_effect_async(run_id, "pay:I6", done=False, by="ops"))
        asyncio.run(rt.rollback_async(run_id, 0, by="ops", loop=_paying(charges, None)))
        assert rt.resume_sync(run_id, _paying(charges, None)).status == "accepted"
    assert charges == ["I6", "I6"]
