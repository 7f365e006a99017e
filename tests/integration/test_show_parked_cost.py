"""``loopwright show`` lists what a cycle that never concluded spent: a cycle parked for
approval (still waiting, or denied since) and one whose effects did not complete. Their spend
lives in the checkpoint's write-ahead state, which the run page read and ``show`` did not: its
row said ``parked for approval`` with cost ``-``, so the $0.06 the actor and a check spent
before the cycle parked was in the run's spend and in no row of ``show`` (nor of ``show
--json``). A cycle parked, approved and concluded keeps its plain marker: its concluding row
holds all it spent, and no dollar is listed twice."""

from __future__ import annotations

from typing import Any

import pytest
from support.dashboard import dashboard
from support.printed import shown_text
from test_show_ended_inside import _json

import loopwright as lw

TASK = {"artifacts": {"inv": {"status": "open", "x": 1}}}


def _loop(rule: str = "require", fails: bool = False, expires: bool = False) -> lw.Loop:
    @lw.effect("spend", name="pay", key=lambda a: f"pay:{a['invoice']}")
    def pay(invoice: str) -> dict[str, Any]:
        if fails:
            raise RuntimeError("the provider refused the payment")
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice="I1"),),
            usage=lw.Usage(0.05, 50),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0, usage=lw.Usage(0.01, 7))

    return lw.Loop(
        name="parks",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        effects=[pay],
        retry=lw.RetryPolicy(attempts=1),
        approvals=lw.ApprovalPolicy(
            rules=[
                lw.PolicyRule(
                    kind="spend", action=rule, expires_after_s=3600.0 if expires else None
                )
            ]
        ),
    )


def _rows(text: str) -> str:
    """The timeline as one line of words (a row's cells may wrap)."""
    return " ".join(text.split("Timeline", 1)[1].split("Artifacts", 1)[0].split())


@pytest.mark.parametrize(
    ("how", "status", "said"),
    [
        (
            "waiting",
            "awaiting_approval",
            "cycle 1 parked for approval: not applied yet score - $0.06",
        ),
        (
            "denied",
            "escalated",
            "cycle 1 parked for approval: denied by ann, never applied score - $0.06",
        ),
        # (its concluding row holds what it spent)
        (
            "approved",
            "accepted",
            "cycle 1 parked for approval: approved by ann cycle 1 accepted score 1.00 $0.06",
        ),
        (
            "effect failed",
            "escalated",
            "cycle 1 not applied: its effects did not complete score - $0.06",
        ),
    ],
)
def test_show_lists_what_a_cycle_spent_before_it_parked(
    url: str, how: str, status: str, said: str
) -> None:
    with lw.Runtime(url) as rt:
        if how == "effect failed":
            r = rt.run_sync(_loop("allow", fails=True), TASK, task_key=how)
        else:
            r = rt.run_sync(_loop(), TASK, task_key=how)
            assert r.status == "awaiting_approval"
        if how == "denied":
            rt.deny(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, _loop())
        elif how == "approved":
            rt.approve(r.run_id, by="ann")
            r = rt.resume_sync(r.run_id, _loop())
    assert r.status == status
    assert r.spent.cost_usd == pytest.approx(0.06)

    text, _ = shown_text(url, r.run_id)
    assert said in _rows(text), text

    doc = _json(url, r.run_id)
    # every dollar of the run's spend is in a listed cycle, none twice
    listed = sum((c.get("usage") or {}).get("cost_usd", 0) for c in doc["cycles"])
    assert listed == pytest.approx(doc["run"]["cost_usd"])
    mid = [c for c in doc["cycles"] if c.get("decision") in ("parked", "effects")]
    assert mid and all(c["decision"] in ("parked", "effects") for c in mid)  # as stored

    pytest.importorskip("fastapi")

    client = dashboard(url, token="t" * 32)
    rows = client.get(f"/api/runs/{r.run_id}").json()["timeline"]
    # the run page lists the same spend (it did before; show now agrees with it)
    assert sum(t.get("cost_usd") or 0 for t in rows) == pytest.approx(r.spent.cost_usd)


def test_an_edit_beside_a_parked_cycle_is_listed_in_that_cycle(url: str) -> None:
    """An edit made while cycle 1 was parked was listed as cycle 0, after cycle 1's row: its
    checkpoint carries the last concluded cycle's number."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="edited")
        rt.edit(r.run_id, "inv/x", 2, by="ana")
    text, _ = shown_text(url, r.run_id)
    rows = _rows(text)
    assert "cycle 1 edited by ana while it was parked proposal edit: inv/x v2" in rows, text
    assert "cycle 0" not in rows
    with lw.Runtime(url) as rt:
        rt.approve(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, _loop())
    assert r.status == "accepted"
    rows = _rows(shown_text(url, r.run_id)[0])
    assert rows.index("edited by ana while it was parked") < rows.index("cycle 1 accepted")


def test_a_forks_show_says_where_its_first_cycles_are_listed(url: str) -> None:
    """A fork at cycle 1 counts that cycle (``cycles 1``, its spend) and its timeline lists
    none: the origin's. The header said only where it came from."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("allow"), TASK, task_key="paid")
        assert (r.status, r.cycles) == ("accepted", 1)
        f = rt.fork(r.run_id, at_cycle=1)
        g = rt.fork(r.run_id, at_cycle=0)
    text = " ".join(shown_text(url, f.run_id)[0].split())
    assert f"forked from run {r.run_id} at cycle 1 (cycle 1 is listed there)" in text, text
    text = " ".join(shown_text(url, g.run_id)[0].split())
    assert f"forked from run {r.run_id} at cycle 0 │" in text, text


def _edited_after_the_end(url: str) -> lw.RunResult:
    """Cycle 1 parks, its request is denied, the run escalates; then ana edits inv/x."""
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="edited after")
        rt.deny(r.run_id, by="ann")
        r = rt.resume_sync(r.run_id, _loop())
        assert r.status == "escalated"
        rt.edit(r.run_id, "inv/x", 2, by="ana")
    return r


def test_an_edit_after_a_parked_cycle_ended_the_run_is_listed_after_that_cycle(
    url: str,
) -> None:
    """Cycle 1 parked, its request denied, the run escalated; a person's edit then was listed
    as cycle 0, after cycle 1's row: its checkpoint carries the last concluded cycle's number."""
    r = _edited_after_the_end(url)
    rows = _rows(shown_text(url, r.run_id)[0])
    said = "cycle 1 edited by ana after the run ended proposal edit: inv/x v2"
    assert said in rows, rows
    assert "cycle 0" not in rows
    assert rows.index("never applied") < rows.index(said)
    edits = [c for c in _json(url, r.run_id)["cycles"] if c.get("decision") == "edit"]
    assert [(e["cycle"], e["after_run_ended"], e["by"]) for e in edits] == [(1, True, "ana")]


def test_the_run_page_lists_an_edit_after_a_parked_cycle_ended_the_run_as_show_does(
    url: str,
) -> None:
    """The run page's Edits table and ``/api/runs/{id}``'s ``edits`` said "cycle 0" for an
    edit made after cycle 1 parked and its denial ended the run, where ``show`` lists it in
    cycle 1, "after the run ended" (tidy49)."""

    r = _edited_after_the_end(url)
    shown = [
        (c["cycle"], bool(c.get("after_run_ended")), c["by"])
        for c in _json(url, r.run_id)["cycles"]
        if c.get("decision") == "edit"
    ]
    assert shown == [(1, True, "ana")], shown
    token = "t" * 32
    client = dashboard(url, token=token)
    api = client.get(f"/api/runs/{r.run_id}", headers={"Authorization": f"Bearer {token}"})
    assert api.status_code == 200
    edits = [(e["cycle"], e["after_run_ended"], e["by"]) for e in api.json()["edits"]]
    assert edits == shown
    page = client.get(f"/runs/{r.run_id}")
    assert page.status_code == 200
    table = page.text.split('class="edits-log"', 1)[1].split("</table>", 1)[0]
    cells = [" ".join(row.split("</td>")[1].split()) for row in table.split("<tr data-part")[1:]]
    assert cells == ['<td class="num">1 <span class="muted">(after the run ended)</span>'], cells
