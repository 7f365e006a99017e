"""The README's 30-line example, runnable: python examples/quickstart.py"""

import loopwright as lw

WANT = {"qty": 3, "price": 12.5, "currency": "EUR"}  # the evidence (a PO, say)


def actor(ctx: lw.Context) -> lw.Proposal:
    # Repair only what a visible verifier located; accepted parts are read-only.
    fixes = {f.part: f.evidence["expected"] for f in ctx.findings if f.part}
    return lw.Proposal.edit("invoice", fixes, usage=lw.Usage(cost_usd=0.01, tokens=300))


def fields_agree(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    inv = state.artifacts["invoice"].values()
    bad = [
        lw.Finding(
            f"{k} is {inv.get(k)!r}, PO says {v!r}",
            "invoice",
            k,
            "amount",
            evidence={"expected": v},
        )
        for k, v in WANT.items()
        if inv.get(k) != v
    ]
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT), findings=tuple(bad))


def audit(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:  # held out
    inv = state.artifacts["invoice"].values()
    return lw.Verdict(passed=inv.get("qty", 0) * inv.get("price", 0) == 37.5)


loop = lw.Loop(
    name="fix-invoice",
    actor=actor,
    verifiers=[lw.Check(fn=fields_agree), lw.Check(fn=audit, held_out=True)],
    contract=lw.Contract(
        success=lw.Success(min_score=0.98),
        no_progress=lw.NoProgress(cycles=2),
        budget=lw.Budget(max_cycles=6, max_cost_usd=3.0, max_seconds=90),
    ),
)
with lw.Runtime("demo.db") as rt:
    task = {"artifacts": {"invoice": {"qty": 5, "price": 12.5, "currency": "USD"}}}
    result = rt.run_sync(loop, task, task_key="INV-1001")
    print(result.status, result.stop_reason, result.cycles, result.spent, result.held_out_passed)
