"""A rollback past a person's version of a part says that it replaces it (effects53): alice
wrote ``doc/c`` (accepted, by definition), bob rolled the run back to a cycle before her
edit, and her version was put back to the loop's older one with nothing saying so — not the
``rolled_back`` event, nor the Python API, nor ``loopwright rollback``. SQLite and
PostgreSQL."""

from __future__ import annotations

import logging

import pytest
from doc_loop import TASK, fields

import loopwright as lw
from loopwright.cli import main


def _loop() -> lw.Loop:
    """Fixes doc.a in cycle 1 and doc.b in cycle 2, then asks a question (the run parks)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        if doc["a"] != 1:
            return lw.Proposal(edits=(lw.Edit("doc", "a", 1),))
        if doc["b"] != 2:
            return lw.Proposal(edits=(lw.Edit("doc", "b", 2),))
        return lw.Proposal(question=lw.Question("Which PO?", choices=("PO-1", "PO-2")))

    return lw.Loop(
        name="dropped",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )


def _edited(rt: lw.Runtime) -> str:
    r = rt.run_sync(_loop(), TASK, task_key="T")
    assert r.status == "awaiting_approval" and r.cycles == 2
    rt.edit(r.run_id, "doc/c", 3, by="alice")
    return r.run_id


def _dropped(rt: lw.Runtime, run_id: str) -> list[object]:
    [ev] = [e for e in rt.store.events(run_id) if e.kind == "rolled_back"]
    return list(ev.data.get("edits_dropped") or [])


def test_a_rollback_past_a_persons_edit_says_it_replaces_it(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with lw.Runtime(url) as rt:
        run_id = _edited(rt)
        with caplog.at_level(logging.WARNING, logger="loopwright.runs"):
            rt.rollback(run_id, 1, by="bob", loop=_loop())
        assert _dropped(rt, run_id) == [{"part": "doc/c", "by": "alice", "version": 2}]
        assert "replaces alice's version of doc/c (v2)" in caplog.text
        state = rt.result(run_id).state
        assert state.artifacts["doc"].values()["c"] == 0  # rolled back, as asked
        [note] = [n for n in state.notes if n.get("kind") == "rollback"]
        assert note["edits_dropped"] == [{"part": "doc/c", "by": "alice", "version": 2}]


def test_a_rollback_to_a_cycle_after_the_edit_replaces_nothing(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="T")
        rt.edit(r.run_id, "doc/c", 5, by="alice")  # not what the check wants
        rt.answer(r.run_id, "PO-1", by="carol")
        out = rt.resume_sync(r.run_id, _loop())  # her edit judged in a cycle of its own: fails
        assert out.status == "escalated" and out.cycles > r.cycles, out.packet
        rt.rollback(r.run_id, out.cycles, by="bob", loop=_loop())
        assert _dropped(rt, r.run_id) == []  # her version is that cycle's too
        assert rt.result(r.run_id).state.artifacts["doc"].values()["c"] == 5


def test_loopwright_rollback_prints_the_persons_version_it_replaces(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        run_id = _edited(rt)
    code = main(["rollback", run_id, "--to-cycle", "1", "--by", "bob", "--store", url])
    out = capsys.readouterr().out
    assert code == 0
    assert "replaces alice's version of doc/c (v2)" in " ".join(out.split())


def test_a_rollback_past_an_irreversible_run_scoped_effect_says_a_redo_runs_it_again(
    url: str,
) -> None:
    # A payment without a compensation and with the default key (run, cycle, name,
    # arguments): the rollback listed it irreversible, and the redone cycle paid again under
    # its own cycle's key with nothing having said so. Now the listing says it.
    paid: list[str] = []

    @lw.effect("spend", name="pay")
    def pay(invoice: str, *, key: str) -> str:
        paid.append(key)
        return key

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.artifacts["doc"]["c"] != 3:
            return lw.Proposal(edits=(lw.Edit("doc", "c", 3),))
        fix = (lw.Edit("doc", "a", 1), lw.Edit("doc", "b", 2))
        return lw.Proposal(edits=fix, effects=(pay.call(invoice="I6"),))

    loop = lw.Loop(
        name="again",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
        effects=[pay],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, TASK)
        assert r.status == "accepted" and len(paid) == 1
        rt.rollback(r.run_id, 1, by="ops", loop=loop)
        [ev] = [e for e in rt.store.events(r.run_id) if e.kind == "rolled_back"]
        [item] = ev.data["irreversible"]
        assert item.startswith(f"pay ({paid[0]}): it stands")
        assert "runs it again" in item
