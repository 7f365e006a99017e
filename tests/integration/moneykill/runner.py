"""One process of a money-kill trial: ``runner.py DB ACTION TASK_KEY [CYCLE] [ORIGIN]``.

Actions: ``run`` (start the run for TASK_KEY, or resume it), ``cancel`` (a person, ``ops``,
cancels it; its refunds run in this process), ``rollback CYCLE`` (``ops`` rolls it back to
CYCLE; the refunds and the redo run in this process), ``approve`` (another person, ``fin``,
approves the run's pending refund requests, which run in this process: a refund others
reused is never approved by whoever asked for it), ``approve_pay`` (``fin`` approves the run's
pending payment requests, as they stand, and resumes it), ``fork CYCLE ORIGIN`` (``ops`` forks the
run of task ORIGIN at CYCLE as TASK_KEY, which runs in this process), ``finish`` (resume to
its end; a run parked for a person is cancelled by one, and its refunds run).

Environment: ``MK_DIR`` (the provider's file, ``phases.log``), ``MK_CRASH=PHASE:N`` (SIGKILL at
the N-th phase boundary PHASE, see ``crashpoints/killpoint.py``), ``MK_PARK=1`` (after paying
the run asks a person a question and parks), ``MK_HOOKS`` (``both``: the payment and the refund
have reconcile hooks; ``none``: neither), ``MK_DECLINE`` / ``MK_BUG_AFTER`` (see ``ledger.py``),
``MK_NO_REPAY=1`` (the last cycle does not ask for I6 again: a fork's payment stays the one it
inherited), ``MK_APPROVE_PAY=1`` (a payment waits for a person's approval).

The loop: cycle 1 fixes ``doc.c``; cycle 2 fixes ``doc.a`` and pays invoice I6 (5.0, business
key ``I6``); then (``MK_PARK``) a question; the last cycle fixes ``doc.b`` and asks for I6
again (the run's own payment, counted paid, or paid again), and is accepted. It prints the
run's status as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import loopwright as lw

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "crashpoints"))
sys.path.insert(0, str(HERE.parent))

from doc_loop import TASK, fields  # noqa: E402
from killpoint import kill_point, phase_hook  # noqa: E402
from ledger import Ledger  # noqa: E402

INVOICE = "I6"
PO = lw.Question("Which PO governs?", choices=("PO-1", "PO-2"))
ALLOW = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),))
ASK = lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require", name="spend"),))


def build_loop(ledger: Ledger, task_key: str) -> lw.Loop:
    hooks = os.environ.get("MK_HOOKS", "both") == "both"
    pay = lw.effect(
        "spend",
        name="pay",
        key=lambda a: a["invoice"],
        compensate=ledger.refund,
        requires_success=False,
        reconcile=ledger.charged if hooks else None,
        compensate_reconcile=ledger.refunded if hooks else None,
    )(ledger.pay)
    park = os.environ.get("MK_PARK") == "1"

    def actor(ctx: lw.Context) -> lw.Proposal:
        doc = ctx.artifacts["doc"]
        if doc["c"] != 3:
            return lw.Proposal(edits=(lw.Edit("doc", "c", 3),))
        if doc["a"] != 1:
            return lw.Proposal(
                edits=(lw.Edit("doc", "a", 1),),
                effects=(pay.call(invoice=INVOICE, amount=5.0),),
            )
        if park:
            return lw.Proposal(question=PO)
        ledger.note("final", task_key)  # the accepting cycle starts (checked: refunds before)
        if os.environ.get("MK_NO_REPAY") == "1":
            return lw.Proposal(edits=(lw.Edit("doc", "b", 2),))
        return lw.Proposal(
            edits=(lw.Edit("doc", "b", 2),), effects=(pay.call(invoice=INVOICE, amount=5.0),)
        )

    return lw.Loop(
        name="moneykill",
        actor=actor,
        verifiers=[fields],
        contract=lw.Contract(budget=lw.Budget(max_cycles=8)),
        effects=[pay],
        approvals=ASK if os.environ.get("MK_APPROVE_PAY") == "1" else ALLOW,
    )


def main(argv: list[str]) -> int:
    db, action, key, *rest = argv
    ledger = Ledger.from_env()
    loop = build_loop(ledger, key)
    on_phase = phase_hook(Path(os.environ["MK_DIR"]) / "phases.log", kill_point("MK_CRASH"))
    with lw.Runtime(db) as rt:
        rt._on_phase = on_phase
        try:
            rec = rt.store.get_run(key)
        except lw.RunNotFoundError:
            rec = None
        if rec is None and action == "fork":
            origin = rt.store.get_run(rest[1])
            fork = rt.fork(origin.run_id, int(rest[0]), loop=loop, task_key=key, by="ops")
            out = rt.resume_sync(fork.run_id, loop)
        elif rec is None:
            out = rt.run_sync(loop, TASK, task_key=key)
        elif action == "cancel":
            rt.cancel(rec.run_id, by="ops", loop=loop)
            out = rt.resume_sync(rec.run_id, loop)
        elif action == "approve":
            for req in rt.store.approvals(run_id=rec.run_id, status="pending"):
                if req.kind == "compensation":
                    rt.approve(rec.run_id, by="fin", approval_id=req.approval_id)
            out = rt.resume_sync(rec.run_id, loop)
        elif action == "approve_pay":
            for req in rt.store.approvals(run_id=rec.run_id, status="pending"):
                if req.kind == "effect":
                    rt.approve(rec.run_id, by="fin", approval_id=req.approval_id)
            out = rt.resume_sync(rec.run_id, loop)
        elif action == "rollback":
            rt.rollback(rec.run_id, int(rest[0]), by="ops", loop=loop)
            out = rt.resume_sync(rec.run_id, loop)
        else:
            out = rt.resume_sync(rec.run_id, loop)
        if action == "finish" and out.status == "awaiting_approval":
            rt.cancel(out.run_id, by="ops", loop=loop)
            out = rt.resume_sync(out.run_id, loop)
    print(json.dumps({"run_id": out.run_id, "status": out.status}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
