"""What a page shows is what is stored, in its order (outside probe, stop 48): a value with a
right-to-left override (U+202E) or another bidirectional control was written raw, so the
browser showed it reordered. On an approval card a payee ``ACME\u202e1-VNI`` read as
"ACMEINV-1" and an amount ``\u202e0001`` as "1000": the person approves what they did not read.
Pages now write those characters out (``\\u202e``), as the CLI does for a terminal; a form's
own value (a part in its edit box, a search typed) is sent back exactly as stored or typed.

``make_reordering_run`` is also what the browser test of long values serves
(``tests/e2e/test_browser_long_values.py``).
"""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw

TOKEN = "reorder-token-0123456789"
LOCAL = "http://127.0.0.1"
RLO = "\u202e"
PAYEE = f"ACME{RLO}1-VNI"  # the browser drew it "ACMEINV-1"
WRITTEN = "ACME\\u202e1-VNI"
MEMO = f"from {PAYEE}"  # a part stored with it: its edit box holds it raw
LONG = "9" * 6000  # an account number with no space to break at


@lw.effect("spend", name="pay", key=lambda a: "pay-1")
def pay(payee: str, amount: float, account: str) -> dict[str, Any]:
    return {"paid": payee}


def paying_loop(name: str, actor: Any, check: Any, effect: Any) -> lw.Loop:
    """A loop whose ``effect`` (kind ``spend``) needs a person's approval, tried once."""
    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=[check],
        effects=[effect],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="require"),)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        retry=lw.RetryPolicy(attempts=1),
    )


def make_reordering_run(tmp: Path) -> tuple[str, str]:
    """A run parked on a payment whose payee, note, finding and parts carry U+202E, with a
    6,000-digit account; (store, run id)."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"payee": PAYEE}).edits,
            note=f"pay {PAYEE}",
            effects=(pay.call(payee=PAYEE, amount=12.5, account=LONG),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        found = lw.Finding(f"payee {PAYEE} unknown", "doc", "payee", "payee", severity="warning")
        return lw.Verdict(passed=True, score=1.0, findings=(found,))

    loop = paying_loop("reorder", actor, check, pay)
    store = str(tmp / "reorder.db")
    task = {"artifacts": {"doc": {"payee": "", "memo": MEMO}}}
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, task, task_key="reorder-1")
    assert res.status == "awaiting_approval", res.status
    return store, res.run_id


def _signed_in(store: str) -> TestClient:
    c = dashboard(store, token=TOKEN, identity="ana")
    r = c.post("/login", data={"token": TOKEN, "next": "/approvals"}, follow_redirects=False)
    assert r.status_code == 303
    return c


def test_reveal_writes_out_reordering_characters_only() -> None:
    from loopwright.web._values import reveal

    assert reveal(PAYEE) == WRITTEN
    marks = "a\u200eb\u200fc\u061cd\u2066e\u2069f\u2028g"
    assert reveal(marks) == "a\\u200eb\\u200fc\\u061cd\\u2066e\\u2069f\\u2028g"
    kept = "naïve שלום مرحبا 日本語 🎉 line\nnext\ttab"
    assert reveal(kept) == kept  # right-to-left text itself is shown as it is
    assert reveal(3) == 3 and reveal(None) is None


def test_the_card_and_the_run_page_show_the_payee_as_stored(tmp_path: Path) -> None:
    store, run_id = make_reordering_run(tmp_path)
    c = _signed_in(store)
    for path in ("/approvals", f"/runs/{run_id}"):
        page = c.get(path).text
        shown = re.sub(r"<textarea[^>]*>.*?</textarea>", "", page, flags=re.S)
        assert RLO not in shown, path  # before: the argument, note, finding and part raw
        cells = re.findall(r"<td><code>(.*?)</code></td>", shown, flags=re.S)
        assert html.escape(WRITTEN) in cells or WRITTEN in cells, (path, cells[:6])
    card = c.get("/approvals").text
    assert f"pay {WRITTEN}" in html.unescape(card)  # the actor's note
    assert f"payee {WRITTEN} unknown" in html.unescape(card)  # what caused it


def test_the_edit_box_and_a_search_send_back_what_was_stored(tmp_path: Path) -> None:
    store, run_id = make_reordering_run(tmp_path)
    c = _signed_in(store)
    page = c.get(f"/runs/{run_id}").text
    boxes = re.findall(r'<textarea name="value"[^>]*>\n?(.*?)</textarea>', page, flags=re.S)
    assert any(html.unescape(b).strip() == MEMO for b in boxes), boxes
    typed = f"x{RLO}y"
    for path in (f"/?q={typed}", f"/approvals?q={typed}"):
        echoed = re.search(r'name="q" value="([^"]*)"', c.get(path).text)
        assert echoed is not None and html.unescape(echoed.group(1)) == typed, path


def test_a_project_filter_sends_the_project_as_stored(tmp_path: Path, older_release: None) -> None:
    """A project's name is shown written out, and its filter option sends the name itself:
    choosing it lists the project's runs (a name such as this one is refused since names48;
    an earlier release stored it)."""
    project = f"ap{RLO}ra"
    loop = lw.Loop(
        name="projected",
        project=project,
        actor=lambda ctx: lw.Proposal.edit("doc", {"t": 1}),
        verifiers=[lambda state, proposal: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    store = str(tmp_path / "projects.db")
    with lw.Runtime(store) as rt:
        run_id = rt.run_sync(loop, {"artifacts": {"doc": {"t": 0}}}, task_key="p-1").run_id
    c = _signed_in(store)
    for path in ("/", "/metrics"):
        page = c.get(path).text
        values = re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', page)
        assert (project, "ap\\u202era") in [(html.unescape(v), t) for v, t in values], path
    assert f'data-run-id="{run_id}"' in c.get("/", params={"project": project}).text
