"""Earned authority on the invoice workload, told start to finish (docs/permissions.md).

    python examples/invoice_exceptions/earned_authority.py [--store DIR]

Offline and deterministic (the runs go one at a time). It uses ``earned.toml``: every payment
needs a person, payments above 9,000 need two finance approvers, and after 5 payments approved
by people with nothing revoked since, payments up to 5,000 are approved by the loop's record.

1. People: an admin, three finance approvers (ana may approve up to 10,000), the clerk who
   starts the runs (an operator), and a viewer.
2. Batch 1 (invoices 1-12): every payment waits until 5 have been approved; ana approves the
   small ones, and the large ones get two approvers (the clerk who started the run could not
   be one of them). Once 5 are approved, small payments go through on earned authority,
   recorded as decisions by ``policy:earned`` with the approvals that earned it.
3. Batch 2 (invoices 13-26): small payments go through on earned authority; large ones
   still wait (one of 22,618.80 is above ana's limit: she is refused, and that is audited).
   The first accepted run that fails its held-out audit revokes the authority at once, so
   the payments after it wait for a person again.
4. A person rolls an earned payment back: its refund (a compensation) is one more thing that
   keeps the authority revoked until 5 new clean approvals.

At the end it prints where the authority stands and the audit log's last lines; the store is
left in DIR for ``loopwright ui --store DIR/store.db`` or ``loopwright audit``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import loopwright as lw
from loopwright._earned import authority_status

HERE = Path(__file__).resolve().parent


def tasks() -> list[dict[str, object]]:
    lines = (HERE / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def standing(rt: lw.Runtime, loop: lw.Loop) -> str:
    [s] = authority_status(rt.store, loop.name, loop.version, loop.approvals.earned)
    state = "EARNED" if s.earned else "not earned"
    why = f"; last revoked by: {s.revoked_by}" if s.revoked_by else ""
    return f"authority for spend <= {s.grant.up_to:,.0f}: {state} ({len(s.clean)} of {s.needed} clean approvals{why})"


def decide(rt: lw.Runtime, loop: lw.Loop, run_id: str) -> str:
    """What a person does with a parked run: approve (two people above 9,000)."""
    req = rt.pending_approval(run_id)
    if (req.evidence.get("who") or {}).get("approvers", 1) > 1:
        try:
            rt.approve(run_id, by="ana", note="four eyes: first")
            first, said = "ana", ""
        except lw.NotPermittedError as exc:  # above her limit: refused, and audited
            rt.approve(run_id, by="cy", note="four eyes: first")
            first, said = "cy", f"ana refused ({exc}); "
        rt.approve(run_id, by="ben", note="four eyes: second")
        who = f"{said}{first} + ben"
    else:
        rt.approve(run_id, by="ana", note="checked against the PO")
        who = "ana"
    res = rt.resume_sync(run_id, loop)
    return f"approved by {who} -> {res.status}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--store", help="folder for the store and the payment ledger (default: a new temp dir)"
    )
    args = ap.parse_args()
    where = Path(args.store or tempfile.mkdtemp(prefix="loopwright-earned-"))
    where.mkdir(parents=True, exist_ok=True)
    os.environ["INVOICE_LEDGER"] = str(where / "payments.jsonl")
    loop = lw.load_spec(HERE / "earned.toml")
    items = tasks()
    with lw.Runtime(str(where / "store.db")) as rt:
        now = time.time()
        if not rt.store.has_users():
            rt.store.add_user("root", roles=["admin"], limits={}, by="example", now=now)
            rt.store.add_user("ana", roles=["approver", "finance"], limits={"spend": 10000.0},
                              by="root", now=now)  # fmt: skip
            rt.store.add_user("ben", roles=["approver", "finance"], limits={}, by="root", now=now)
            rt.store.add_user("cy", roles=["approver", "finance"], limits={}, by="root", now=now)
            rt.store.add_user("clerk", roles=["operator"], limits={}, by="root", now=now)
            rt.store.add_user("vic", roles=["viewer"], limits={}, by="root", now=now)
        print(f"store: {where / 'store.db'}\n{standing(rt, loop)}\n")
        earned_run = None
        for label, batch in (("batch 1", items[:12]), ("batch 2", items[12:])):
            print(f"== {label}: {len(batch)} invoices")
            for t in batch:
                res = rt.run_sync(loop, t, task_key=f"earned/{t['id']}", by="clerk")
                auto = [
                    a
                    for a in rt.store.approvals(run_id=res.run_id)
                    if a.decided_by == "policy:earned"
                ]
                line = f"  {t['id']}: {res.status}"
                if auto:
                    line += f" (paid on earned authority: {auto[0].what})"
                    earned_run = earned_run or res.run_id
                if res.status == "awaiting_approval":
                    req = rt.pending_approval(res.run_id)
                    line += f" - waits: {req.what}"
                    if req.kind == "effect":
                        line += f"\n      {decide(rt, loop, res.run_id)}"
                if rt.store.get_run(res.run_id).held_out_passed is False:
                    line += "  [held-out audit FAILED]"
                print(line)
            print(f"  {standing(rt, loop)}\n")
        if earned_run is not None:
            print(
                f"== clerk rolls back {earned_run[:12]}: its payment is refunded (a compensation)"
            )
            rt.rollback(earned_run, 0, by="clerk", loop=loop)
            rt.approve(earned_run, by="ana", note="refund it")
            rt.resume_sync(earned_run, loop)
            print(f"  {standing(rt, loop)}\n")
        print("== audit log (last 8 of", len(rt.store.audit()), "records)")
        for a in rt.store.audit()[-8:]:
            print(f"  #{a.audit_id} {a.actor} {a.action} {a.target}: {a.outcome}")
    print(f"\nlook closer: loopwright authority --store {where / 'store.db'}")
    print(f"             loopwright audit --store {where / 'store.db'}")


if __name__ == "__main__":
    main()
