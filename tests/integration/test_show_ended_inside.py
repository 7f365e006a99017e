"""The cycle a run ended inside is shown: ``loopwright show`` (text and ``--json``), the run
page and its API list it with what it cost and why the run ended there.

From an outside probe: an escalated run's timeline listed cycles 1-2 at $0.015 each while its
spend said $0.080; the $0.05 cycle in which the actor asked for a person had no record, so no
timeline listed it. And its ``proposal`` event said ``kind: "noop"`` without the reason."""

from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest
from support.dashboard import dashboard
from support.printed import shown_text

import loopwright as lw
from loopwright._money_text import usd
from loopwright._redact_shapes import REDACTED
from loopwright.cli import _app

SHAPED = "sk-planted-escalate-0123456789abcdef"  # a key's shape: masked wherever it is
TASK = {"goal": "g", "artifacts": {"doc": {"n": 0}}}


def _vis(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    if state.artifacts["doc"].values()["n"] == 99:
        raise ValueError("boom")
    return lw.Verdict(
        passed=False,
        score=0.0,
        findings=(lw.Finding("low", "doc", "n", "v"),),
        usage=lw.Usage(0.002, 7),
    )


def _loop(how: str) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 3 and how == "asked":
            return lw.Proposal(escalate=f"need a person ({SHAPED})", usage=lw.Usage(0.05, 50))
        n = 99 if ctx.cycle == 3 and how == "gave up" else ctx.cycle
        return lw.Proposal.edit("doc", {"n": n}, usage=lw.Usage(0.01, 20))

    cycles = 2 if how == "between" else 6
    return lw.Loop(
        name="ends",
        actor=actor,
        verifiers=[lw.Check(fn=_vis, name="vis")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def _json(url: str, run_id: str) -> dict[str, Any]:
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        _app.show(run_id, store=url, as_json=True)
    finally:
        sys.stdout = old
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("how", "cost", "cause"),
    [
        ("asked", 0.05, f"the actor asked for a person: need a person ({REDACTED})"),
        ("gave up", 0.01, "verifier vis raised an exception (ValueError: boom)"),
    ],
)
def test_the_cycle_a_run_ended_inside_is_shown_with_its_cost(
    url: str, how: str, cost: float, cause: str
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(how), TASK, task_key=how)
    assert (r.status, r.cycles) == ("escalated", 2)
    assert r.spent.cost_usd == pytest.approx(2 * 0.012 + cost)

    doc = _json(url, r.run_id)
    last = doc["cycles"][-1]
    assert [c["cycle"] for c in doc["cycles"]] == [1, 2, 3]
    assert last["ended_inside"] is True
    assert not any("ended_inside" in c for c in doc["cycles"][:-1])  # the recorded cycles
    assert last["decision"] == "escalated"
    assert last["cause"] == cause  # the reason whole, its key masked (not dropped)
    assert SHAPED not in json.dumps(doc)  # masked, as everything stored is
    assert last["usage"]["cost_usd"] == pytest.approx(cost)
    # every dollar of the run's spend is in a listed cycle
    listed = sum(c["usage"]["cost_usd"] for c in doc["cycles"])
    assert listed == pytest.approx(doc["run"]["cost_usd"])

    text, _ = shown_text(url, r.run_id)
    assert f"cycle 3  escalated  score -  {usd(cost)}" in text
    # the row says why (the cause is also in the header and packet: read the row alone)
    row = text.split("cycle 3  escalated", 1)[1].split("Artifacts", 1)[0]
    assert f"ended inside this cycle: {cause}" in " ".join(row.split())

    pytest.importorskip("fastapi")

    client = dashboard(url, token="t" * 32)
    page = client.get(f"/runs/{r.run_id}").text
    assert "ended inside this cycle" in page and usd(cost) in page
    rows = client.get(f"/api/runs/{r.run_id}").json()["timeline"]
    assert [(t["cycle"], t.get("ended_inside", False)) for t in rows] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    assert rows[-1]["cost_usd"] == pytest.approx(cost)
    assert rows[-1]["note"] == cause


def test_a_run_ended_between_cycles_lists_no_more_cycles(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("between"), TASK, task_key="between")
    assert (r.status, r.cycles) == ("stopped", 2)
    doc = _json(url, r.run_id)
    assert [c["cycle"] for c in doc["cycles"]] == [1, 2]
    assert not any(c.get("ended_inside") for c in doc["cycles"])


def test_an_escalating_proposal_logs_its_reason_masked(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("asked"), TASK, task_key="asked")
        [said] = [
            e.data for e in rt.store.events(r.run_id) if e.kind == "proposal" and e.cycle == 3
        ]
        plain = [e.data for e in rt.store.events(r.run_id) if e.kind == "proposal" and e.cycle < 3]
    assert said["escalate"] == f"need a person ({REDACTED})"  # kept, its key masked
    assert all("escalate" not in d for d in plain)  # only a proposal that escalates says it


def _parking_loop(raises: list[bool], rule: str = "require") -> lw.Loop:
    """Pays an invoice, which needs a person's approval: the cycle parks. Check ``two``
    raises once ``raises`` holds True (``one``, run before it, costs $0.01)."""

    @lw.effect("spend", name="pay", key=lambda a: f"pay:{a['invoice']}")
    def pay(invoice: str) -> dict[str, Any]:
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice="I1"),),
            usage=lw.Usage(0.05, 50),
        )

    def one(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(0.01, 7))

    def two(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        if raises:
            raise ValueError("boom")
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="parks",
        actor=actor,
        verifiers=[lw.Check(fn=one, name="one"), lw.Check(fn=two, name="two")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        retry=lw.RetryPolicy(attempts=1),
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="spend", action=rule)]),
    )


@pytest.mark.parametrize(
    ("how", "cause", "after"),
    [
        ("denied", "approval denied by ann", 0.0),
        ("edited, denied, check raised", "verifier two raised an exception (ValueError", 0.01),
        ("approved, policy changed", "is denied by the approval policy", 0.0),
    ],
)
def test_a_resumed_parked_cycle_the_run_ended_inside_is_shown(
    url: str, how: str, cause: str, after: float
) -> None:
    """A parked cycle resumed that ends the run with no record of its own (a denial, the check
    of a person's edit giving up, a policy changed since) is the cycle the run ended inside:
    listed with why and what it spent since it was resumed, as an unparked one is; the parked
    row (the run page's) holds what it spent before. Before, its ``stopped`` event had no
    ``ended_in``: ``show`` listed ``parked for approval`` and no row said why the run ended
    there, nor listed the $0.01 the check of the person's edit cost (review47c)."""
    raises: list[bool] = []
    task = {"artifacts": {"inv": {"status": "open", "x": 1}}}
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_parking_loop(raises), task, task_key=how)
        assert (r.status, r.cycles) == ("awaiting_approval", 0)
        if how == "approved, policy changed":
            rt.approve(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, _parking_loop(raises, rule="deny"))
        else:
            if how.startswith("edited"):
                rt.edit(r.run_id, "inv/x", 2, by="ana")
                raises.append(True)
            rt.deny(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, _parking_loop(raises))
    assert (r.status, r.cycles) == ("escalated", 0)
    assert r.spent.cost_usd == pytest.approx(0.06 + after)

    doc = _json(url, r.run_id)
    last = doc["cycles"][-1]
    assert (last["cycle"], last.get("ended_inside")) == (1, True), doc["cycles"]
    assert last["decision"] == "escalated"
    assert cause in last["cause"]
    assert last["usage"]["cost_usd"] == pytest.approx(after)
    text, _ = shown_text(url, r.run_id)
    assert f"cycle 1  escalated  score -  {usd(after)}" in text
    row = " ".join(text.split("cycle 1  escalated", 1)[1].split("Artifacts", 1)[0].split())
    assert "ended inside this cycle: " in row and cause in row

    pytest.importorskip("fastapi")

    client = dashboard(url, token="t" * 32)
    rows = client.get(f"/api/runs/{r.run_id}").json()["timeline"]
    parked, end = rows[-2], rows[-1]
    assert (parked["cycle"], parked["unapplied"]) == (1, True)
    assert parked["cost_usd"] == pytest.approx(0.06)  # what it spent before it parked
    assert (end["cycle"], end["ended_inside"]) == (1, True)
    assert cause in end["note"] and end["cost_usd"] == pytest.approx(after)
    # every dollar of the run's spend is in a listed row, none twice
    assert sum(t.get("cost_usd") or 0 for t in rows) == pytest.approx(r.spent.cost_usd)
