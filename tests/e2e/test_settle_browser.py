"""An operator settles an effect left in doubt from the run page, in Chromium (settle54): the
effects table shows the payment IN DOUBT with a control to say what the bank shows; settled
done with its result, the page says so in ``loopwright settle``'s words and the form is gone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import loopwright as lw

from .test_browser import CHROMIUM, TOKEN, _need_browser, _serve

TASK: dict[str, Any] = {"artifacts": {"doc": {"a": 0}}}


def _paying_fails() -> lw.Loop:
    """Pays invoice I6 (business key ``I6``), and raises after the charge: in doubt."""

    @lw.effect("spend", name="pay", key=lambda a: a["invoice"])
    def pay(invoice: str) -> dict[str, Any]:  # takes no key: a failure after it may have acted
        raise ValueError("the ledger write after the charge failed")

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"a": 1}).edits, effects=(pay.call(invoice="I6"),)
        )

    def fixed(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=state.artifacts["doc"].values().get("a") == 1, score=1.0)

    return lw.Loop(
        name="paying",
        actor=actor,
        verifiers=[fixed],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[pay],
        approvals=lw.ApprovalPolicy(rules=(lw.PolicyRule(kind="spend", action="allow"),)),
    )


def test_an_operator_settles_an_effect_in_doubt_on_the_run_page(tmp_path: Path) -> None:
    _need_browser()
    store = str(tmp_path / "s.db")
    with lw.Runtime(store) as rt:
        run = rt.run_sync(_paying_fails(), TASK, task_key="A")
    assert run.status == "escalated", run.packet
    from playwright.sync_api import sync_playwright

    with _serve(store, tmp_path) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        pg = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        pg.goto(f"{base}/login?next=/runs/{run.run_id}")
        pg.fill("input[name=token]", TOKEN)
        pg.click("form.login button")
        pg.wait_for_url(f"{base}/runs/{run.run_id}")
        assert pg.get_by_text("IN DOUBT").first.is_visible()
        settle = pg.locator("details.settle[data-key='pay:I6']")
        settle.locator("summary").click()
        settle.locator("textarea[name=result]").fill('{"id": "ch-9"}')
        settle.locator("input[name=note]").fill("bank shows ch-9")
        settle.get_by_role("button", name="It happened (done)").click()
        pg.wait_for_url(f"{base}/runs/{run.run_id}?msg=*")
        shown = pg.content()
        assert f"settled pay (pay:I6) as done for run {run.run_id[:12]} by ana" in shown
        assert pg.locator("details.settle").count() == 0
        assert pg.get_by_text("IN DOUBT").count() == 0
        browser.close()
    with lw.Runtime(store) as rt:
        [entry] = rt.store.journal(run.run_id, kind="effect")
        [rec] = [a for a in rt.store.audit() if a.action == "settle_effect"]
    assert (entry.status, entry.data["result"]) == ("done", {"id": "ch-9"})
    assert entry.data["settled"] == {"by": "ana", "done": True, "note": "bank shows ch-9"}
    assert (rec.actor, rec.outcome) == ("ana", "allowed")
