"""The operator's console (issue 19 items 4, 6, 7) over a real SQLite store: approval cards
with age, expiry, owner, the findings that caused them, effect arguments as a table and image
parts as pictures; rollback and rerun with a changed contract (pages with a confirmation step,
and the API), recorded with who; two runs compared side by side."""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fastapi.testclient import TestClient
from support.modules import load_sibling

import loopwright as lw
from loopwright.store import Approval, open_store
from loopwright.web import create_app
from loopwright.web._cards import ago, approval_card, compact, expiry, owner_words, png_bytes


def _load_test_web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_console_base")


_web = _load_test_web()
LOCAL, TOKEN, make_parked_run = _web.LOCAL, _web.TOKEN, _web.make_parked_run
_sign_in, _wait_status = _web._sign_in, _web._wait_status

BENIGN_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="80">'
    '<rect width="120" height="80" fill="#4a90d9"/></svg>'
)
# Everything a hostile picture could try: a script element, an event handler, an external
# image, a javascript: link and an embedded page. Shown through <img>, none of it may happen.
HOSTILE_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
    'width="120" height="80" onload="alert(\'onload\')">'
    "<script>alert('script')</script>"
    '<rect width="120" height="80" fill="#d9534f"/>'
    '<image href="http://evil.example/beacon.png" width="10" height="10"/>'
    '<a xlink:href="javascript:alert(\'href\')"><text x="10" y="40">click</text></a>'
    '<foreignObject width="50" height="50"><iframe xmlns="http://www.w3.org/1999/xhtml" '
    'src="http://evil.example/frame"></iframe></foreignObject></svg>'
)


def tiny_png(rgb: tuple[int, int, int], size: int = 4) -> bytes:
    """A real ``size``×``size`` PNG of one colour (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    row = b"\x00" + bytes(rgb) * size
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(row * size))
        + chunk(b"IEND", b"")
    )


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode()


def make_image_run(
    tmp: Path,
    after_svg: str = HOSTILE_SVG,
    store: str | None = None,
    who: dict[str, Any] | None = None,
) -> tuple[str, str]:
    """A run parked on a request to change a picture (SVG and PNG parts) and pay an invoice;
    (store path, run id); ``store``: add the run to that store. The checks find one problem
    on the picture (the rule's dimension) and two elsewhere. ``who``: the payment rule's
    people (``role``, ``approvers``)."""

    @lw.effect("spend", requires_success=False)
    def pay(invoice: str, amount: float, lines: list[dict[str, Any]]) -> dict[str, Any]:
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=(
                lw.Edit("panel", "svg", after_svg),
                lw.Edit("panel", "png", data_url(tiny_png((200, 30, 30)))),
            ),
            note="recoloured the panel",
            effects=(pay.call(invoice="INV-9", amount=250.0, lines=[{"sku": "A-1", "qty": 2}]),),
        )

    def look(state: Any, proposal: Any) -> lw.Verdict:
        return lw.Verdict(
            passed=True,
            score=0.8,
            findings=(
                lw.Finding("the coat changed colour", "panel", "svg", "likeness"),
                lw.Finding("caption has a typo", "caption", "text", "spelling"),
                lw.Finding("margin is tight", "layout", "margin", "layout"),
            ),
        )

    loop = lw.Loop(
        name="pictures",
        actor=actor,
        verifiers=[look],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            risk=(
                lw.RiskRule(name="likeness_check", findings=("likeness",), expires_after_s=1200),
            ),
        ),
        effects=[pay],
        approvals=lw.ApprovalPolicy(
            (
                lw.PolicyRule(
                    kind="spend", action="require", above=100, name="big-spend", **(who or {})
                ),
            )
        ),
    )
    store = store or str(tmp / "pictures.db")
    task = {
        "task_key": "comic-panel-7",
        "artifacts": {
            "panel": {"svg": BENIGN_SVG, "png": data_url(tiny_png((30, 30, 200)))},
            "caption": {"text": "Mara leaves"},
            "layout": {"margin": 4},
        },
    }
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, task)
    assert res.status == "awaiting_approval", res.status
    return store, res.run_id


# --- the card's parts, as functions ---------------------------------------------------------
def test_age_expiry_owner_and_compact_values() -> None:
    now = 1_000_000.0
    assert ago(now - 3 * 3600, now) == "asked 3 h ago"
    assert ago(now - 90, now) == "asked 1 min ago"
    assert expiry(None, now) == ("does not expire", False)
    assert expiry(now + 20 * 60, now) == ("expires in 20 min", False)
    assert expiry(now - 5, now) == ("expired 5 s ago", True)
    assert owner_words(None) == "any approver"
    who = {"role": "finance", "approvers": 2, "votes": [{"by": "bea", "vote": "approve"}]}
    assert owner_words(who) == "role finance · 2 approvers · approved so far by bea"
    engine = {"role": None, "roles": [], "approvers": 1, "separate": False}  # no rule names who
    assert owner_words(engine) == "any approver"
    two = {"role": "ap, finance", "roles": ["ap", "finance"], "approvers": 2, "separate": True}
    assert owner_words(two, ["bea"]) == (
        "role ap or finance · 2 approvers · not who started, edited, rolled back or cancelled the run"
        " · approved so far by bea"
    )
    assert owner_words("ana") == "ana"
    assert compact({"a": [1, "x"], "b": None}) == '{"a":[1,"x"],"b":null}'
    assert compact("text") == "text"
    assert png_bytes(data_url(tiny_png((1, 2, 3)))) == tiny_png((1, 2, 3))
    assert png_bytes("data:image/png;base64,AAAA") is None  # not a PNG inside
    assert png_bytes("<svg/>") is None


def test_card_from_a_stored_request(tmp_path: Path) -> None:
    store, run_id = make_image_run(tmp_path)
    st = open_store(store)
    a = st.approvals(run_id=run_id, status="pending")[0]
    rec = st.get_run(run_id)
    card = approval_card(a, rec, st.latest_checkpoint(run_id).task_state(), now=a.requested_at)
    assert card.asked == "asked 0 s ago" and card.expires == "expires in 20 min"
    assert card.owner == "any approver"
    assert [f["where"] for f in card.causes] == ["panel/svg"]  # the rule's dimension
    assert sorted(f["where"] for f in card.others) == ["caption/text", "layout/margin"]
    (eff,) = card.effects
    args = {r["key"]: r["value"] for r in eff["args"]}
    assert args == {"invoice": "INV-9", "amount": "250.0", "lines": '[{"sku":"A-1","qty":2}]'}
    assert [(i["ref"], i["kind"]) for i in card.images] == [
        ("panel/svg", "svg"),
        ("panel/png", "png"),
    ]
    assert all(i["before"] and i["after"] for i in card.images)
    assert card.changes == []  # both changed parts are pictures
    # the lead's people rules put who decides into the evidence: shown as such
    b = Approval(
        **{
            **a.to_dict(),
            "evidence": {
                **a.evidence,
                "who": {"role": "finance", "roles": ["finance"], "approvers": 2},
            },
        }
    )
    assert approval_card(b, rec, None, votes=["bea"]).owner == (
        "role finance · 2 approvers · approved so far by bea"
    )
    st.close()


# --- the pages and routes --------------------------------------------------------------------
@pytest.fixture
def pictures(tmp_path: Path) -> tuple[TestClient, str]:
    store, run_id = make_image_run(tmp_path)
    return TestClient(create_app(store, token=TOKEN, identity="ana"), base_url=LOCAL), run_id


def test_inbox_card_shows_pictures_table_and_folded_findings(
    pictures: tuple[TestClient, str],
) -> None:
    c, run_id = pictures
    html = c.get("/approvals").text
    card = re.search(r'<section class="card pending".*?</section>', html, re.S)
    assert card, html
    body = card.group(0)
    assert "asked 0 s ago" in body or re.search(r"asked \d+ s ago", body)
    assert re.search(r"expires in (19|20) min", body)
    assert "who decides: <strong>any approver</strong>" in body
    causes = body.split('<ul class="causes">')[1].split("</ul>")[0]
    assert "the coat changed colour" in causes and "typo" not in causes
    folded = body.split('<details class="other-findings">')[1].split("</details>")[0]
    assert "2 other finding(s)" in folded and "caption has a typo" in folded
    assert '<table class="effect-args">' in body
    assert "<td><code>[{&#34;sku&#34;:&#34;A-1&#34;,&#34;qty&#34;:2}]</code></td>" in body
    table = body.split('<table class="effect-args">')[1].split("</table>")[0]
    assert "&#39;" not in table and "'" not in table  # never a Python repr
    # the pictures are <img>s of the image route; no SVG source in the page
    srcs = re.findall(r'<img class="change-img (before|after)" alt="[^"]*" src="([^"]+)"', body)
    assert len(srcs) == 4, srcs
    assert "<script>" not in html and "evil.example" not in html and "onload" not in html
    for side, src in srcs:
        r = c.get(src.replace("&amp;", "&"))
        assert r.status_code == 200, src
        csp = r.headers["content-security-policy"]
        assert "default-src 'none'" in csp and "sandbox" in csp and "script-src" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        if "panel%2Fsvg" in src:
            assert r.headers["content-type"].startswith("image/svg+xml")
            assert (HOSTILE_SVG if side == "after" else BENIGN_SVG) == r.text
        else:
            assert r.headers["content-type"] == "image/png"
            assert r.content.startswith(b"\x89PNG")
    # the run page's request section shows the same card
    page = c.get(f"/runs/{run_id}").text
    assert "who decides" in page and page.count('class="change-img') == 4


def test_image_route_refuses_what_is_not_an_image(pictures: tuple[TestClient, str]) -> None:
    c, run_id = pictures
    aid = c.get("/api/approvals").json()[0]["approval_id"]
    base = f"/approvals/{aid}/image"
    assert c.get(base, params={"ref": "caption/text", "side": "after"}).status_code == 404
    assert c.get(base, params={"ref": "layout/margin", "side": "before"}).status_code == 404
    assert c.get(base, params={"ref": "panel/svg", "side": "sideways"}).status_code == 400
    assert c.get("/approvals/nope/image", params={"ref": "panel/svg"}).status_code == 404
    r = c.get(f"/runs/{run_id}/image", params={"ref": "panel/png"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"
    assert c.get(f"/runs/{run_id}/image", params={"ref": "caption/text"}).status_code == 404


# --- rollback and rerun ----------------------------------------------------------------------
@pytest.fixture
def parked_client(tmp_path: Path) -> tuple[TestClient, str, str]:
    store, run_id = make_parked_run(tmp_path)
    return TestClient(create_app(store, token=TOKEN, identity="ana"), base_url=LOCAL), run_id, store


def test_every_action_has_a_confirmation_page(parked_client: tuple[TestClient, str, str]) -> None:
    c, run_id, _ = parked_client
    page = c.get(f"/runs/{run_id}").text
    assert "to cancel, pause, resume, roll back or rerun this run" in page  # signed out: none
    _sign_in(c)
    page = c.get(f"/runs/{run_id}").text
    for action in ("cancel", "rollback", "rerun"):
        assert f'name="action" value="{action}"' in page
    assert 'value="resume"' not in page  # it waits for a decision: nothing to resume yet
    for action, target in (
        ("cancel", "/act"),
        ("rollback", "/rollback"),
        ("rerun", "/rerun"),
    ):
        r = c.get(f"/runs/{run_id}/confirm", params={"action": action})
        assert r.status_code == 200
        assert f'action="/runs/{run_id}{target}"' in r.text and 'name="csrf"' in r.text
    assert "approve or deny it first" in c.get(f"/runs/{run_id}/confirm?action=resume").text
    assert c.get(f"/runs/{run_id}/confirm?action=explode").status_code == 400
    assert c.get("/runs/nope/confirm?action=cancel").status_code == 404


def test_rollback_from_the_page_needs_csrf_and_is_recorded(
    parked_client: tuple[TestClient, str, str],
) -> None:
    c, run_id, store = parked_client
    r = c.post(f"/runs/{run_id}/rollback", data={"to_cycle": "0"})
    assert r.status_code == 401  # signed out
    csrf = _sign_in(c)
    r = c.post(f"/runs/{run_id}/rollback", data={"to_cycle": "0"})
    assert r.status_code == 403  # no CSRF token
    r = c.post(f"/runs/{run_id}/rollback", data={"to_cycle": "0", "csrf": "wrong"})
    assert r.status_code == 403
    assert open_store(store).get_run(run_id).status == "awaiting_approval"  # nothing happened
    r = c.post(
        f"/runs/{run_id}/rollback", data={"to_cycle": "7", "csrf": csrf}, follow_redirects=False
    )
    assert r.status_code == 400 and "no completed checkpoint for cycle 7" in r.json()["detail"]
    r = c.post(
        f"/runs/{run_id}/rollback", data={"to_cycle": "0", "csrf": csrf}, follow_redirects=False
    )
    assert r.status_code == 303
    assert "rolled back to cycle 0 by ana" in r.headers["location"].replace("%20", " ")
    st = open_store(store)
    assert st.get_run(run_id).status == "pending"
    kinds = {e.kind: e for e in st.events(run_id)}
    assert kinds["rollback_requested"].data == {"by": "ana", "to_cycle": 0}
    assert kinds["rolled_back"].data["by"] == "ana" and kinds["rolled_back"].ts > 0
    # the request the rollback made moot is closed
    assert st.approvals(run_id=run_id, status="pending") == []
    st.close()


def test_rollback_and_rerun_in_the_api(parked_client: tuple[TestClient, str, str]) -> None:
    c, run_id, store = parked_client
    assert c.post(f"/api/runs/{run_id}/rollback", json={"to_cycle": 0}).status_code == 401
    csrf = _sign_in(c)
    # a cookie without its X-CSRF-Token is refused; the bearer token needs none
    assert c.post(f"/api/runs/{run_id}/rollback", json={"to_cycle": 0}).status_code == 403
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for body, words in (
        ({}, "to_cycle"),
        ({"to_cycle": -1}, "cycle number"),
        ({"to_cycle": "1"}, "cycle number"),
        ({"to_cycle": 0, "resume": "yes"}, "true or false"),
        ({"to_cycle": 0, "when": 1}, "unknown field"),
    ):
        r = c.post(f"/api/runs/{run_id}/rollback", json=body, headers=bearer)
        assert r.status_code == 400 and words in r.json()["detail"], (body, r.text)
    r = c.post(
        f"/api/runs/{run_id}/rollback",
        content=b"not json",
        headers={**bearer, "content-type": "application/json"},
    )
    assert r.status_code == 400
    r = c.post(f"/api/runs/{run_id}/rollback", json={"to_cycle": 0}, headers={"X-CSRF-Token": csrf})
    assert r.status_code == 200, r.text
    assert r.json()["run"]["status"] == "pending"
    # rerun: the origin's contract with more cycles and a spend cap, not started
    for body, words in (
        ({"contract": {"budget": {"max_cycles": 0}}}, "at least 1"),
        ({"contract": {"nonsense": {}}}, "unknown key"),
        ({"contract": [1]}, "JSON object"),
        ({"at_cycle": 5}, "no completed checkpoint"),
    ):
        r = c.post(f"/api/runs/{run_id}/rerun", json=body, headers=bearer)
        assert r.status_code == 400 and words in r.json()["detail"], (body, r.text)
    r = c.post(
        f"/api/runs/{run_id}/rerun",
        json={"contract": {"budget": {"max_cycles": 9, "max_cost_usd": 1.5}}, "start": False},
        headers=bearer,
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    new = doc["run"]["run_id"]
    assert doc["run"]["forked_from"] == run_id and doc["run"]["forked_at"] == 0
    assert doc["changed"] == {
        "budget.max_cycles": {"from": 6, "to": 9},
        "budget.max_cost_usd": {"from": None, "to": 1.5},
    }
    st = open_store(store)
    assert st.get_run(new).contract["budget"]["max_cycles"] == 9
    asked = [e for e in st.events(run_id) if e.kind == "rerun_requested"]
    assert asked[-1].data["by"] == "ana" and asked[-1].data["new_run"] == new
    of = [e for e in st.events(new) if e.kind == "rerun_of"]
    assert of[0].data["from_run"] == run_id and of[0].data["at_cycle"] == 0
    st.close()
    # both pages link to the comparison
    assert f'href="/compare?a={run_id}&amp;b={new}"' in c.get(f"/runs/{run_id}").text
    assert f'href="/compare?a={run_id}&amp;b={new}"' in c.get(f"/runs/{new}").text


def test_rerun_from_the_page_starts_the_new_run(parked_client: tuple[TestClient, str, str]) -> None:
    c, run_id, store = parked_client
    csrf = _sign_in(c)
    assert c.post(f"/runs/{run_id}/rerun", data={"max_cycles": "4"}).status_code == 403
    r = c.post(
        f"/runs/{run_id}/rerun",
        data={"csrf": csrf, "max_cycles": "lots"},
        follow_redirects=False,
    )
    assert r.status_code == 400 and "must be a whole number" in r.json()["detail"]
    r = c.post(
        f"/runs/{run_id}/rerun",
        data={"csrf": csrf, "at_cycle": "0", "max_cycles": "4", "max_cost_usd": "", "start": "yes"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    new = r.headers["location"].split("/runs/")[1].split("?")[0]
    assert new != run_id
    # it runs in the background like the origin did: to the same payment request
    rec = _wait_status(store, new, "awaiting_approval")
    assert rec.status == "awaiting_approval" and rec.contract["budget"]["max_cycles"] == 4
    assert rec.contract["budget"].get("max_cost_usd") is None


def test_a_rerun_of_a_spend_only_run_keeps_a_cap_of_1000_a_person_set(
    parked_client: tuple[TestClient, str, str],
) -> None:
    """The API's rerun with ``max_cycles: 1000`` beside ``max_seconds`` over a run given the
    default ceiling: the person's cap was read as the ceiling the time budget replaces and
    dropped (the new run had no cycle cap). The page's form shows the ceiling as an empty box
    and sends back only what a person changed (review51a, stall51)."""
    c, run_id, store = parked_client
    with lw.Runtime(store) as rt:
        spend = rt.fork(run_id, 0, contract=lw.Contract(budget=lw.Budget(max_cost_usd=5.0)))
    assert spend.contract["budget"]["max_cycles_default"] is True
    csrf = _sign_in(c)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    r = c.post(
        f"/api/runs/{spend.run_id}/rerun",
        json={"contract": {"budget": {"max_cycles": 1000, "max_seconds": 60}}, "start": False},
        headers=bearer,
    )
    assert r.status_code == 200, r.text
    budget = open_store(store).get_run(r.json()["run"]["run_id"]).contract["budget"]
    assert (budget["max_cycles"], budget["max_seconds"]) == (1000, 60)
    assert "max_cycles_default" not in budget
    # the form shows the ceiling as an empty box: sent back as shown, the money changed, the
    # new run has the default ceiling again; a 1000 typed in is the person's own cap
    for typed, marked in (("", True), ("1000", False)):
        r = c.post(
            f"/runs/{spend.run_id}/rerun",
            data={"csrf": csrf, "max_cycles": typed, "max_cost_usd": "2.5", "max_tokens": ""},
            follow_redirects=False,
        )
        assert r.status_code == 303, r.text
        new = r.headers["location"].split("/runs/")[1].split("?")[0]
        budget = open_store(store).get_run(new).contract["budget"]
        assert (budget["max_cycles"], budget["max_cost_usd"]) == (1000, 2.5)
        assert budget.get("max_cycles_default", False) is marked


# --- comparison ------------------------------------------------------------------------------
def test_compare_page_and_api(parked_client: tuple[TestClient, str, str]) -> None:
    c, run_id, store = parked_client
    with lw.Runtime(store) as rt:
        new = rt.fork(
            run_id, 0, contract=lw.Contract(budget=lw.Budget(max_cycles=2, max_cost_usd=0.5))
        )
        rt.resume_sync(new.run_id, lw.load_spec(Path(store).parent / "web.toml"))
    r = c.get("/api/compare", params={"a": run_id, "b": new.run_id})
    assert r.status_code == 200
    doc = r.json()
    assert doc["contract"]["budget.max_cycles"] == {"a": 6, "b": 2}
    assert doc["a"]["status"] == "awaiting_approval" and doc["b"]["stop_cause"]
    assert [s["cycle"] for s in doc["scores"]][:1] == [1]
    by_part = {p["part"]: p for p in doc["parts"]}
    assert "doc/a" in by_part and all("diff" in p for p in doc["parts"])
    page = c.get("/compare", params={"run": [run_id, new.run_id]})
    assert page.status_code == 200
    html = page.text
    assert 'class="sparkline"' in html and html.count('<polyline class="run-') == 2
    assert '<tr class="differs" data-key="budget.max_cycles">' in html
    assert doc["b"]["stop_cause"].split(":")[0] in html.replace("&#39;", "'")
    assert "<script>alert(1)</script>" not in html  # the task key is escaped
    # mistakes are one line each
    assert c.get("/compare", params={"run": [run_id]}).status_code == 400
    assert c.get("/api/compare", params={"a": run_id, "b": "zzzz"}).status_code == 404
    assert "detail" in c.get("/api/compare", params={"a": run_id, "b": "zzzz"}).json()
    runs = c.get("/").text
    assert 'form="compare-form"' in runs and 'id="compare-form"' in runs


def test_compare_parts_show_a_diff(tmp_path: Path) -> None:
    """Final parts that differ get a unified diff; pictures are shown, not diffed."""
    from loopwright.web._compare_view import compare_doc, part_diff

    assert part_diff({"a": 1}, {"a": 2}).splitlines()[2:] == [
        "@@ -1,3 +1,3 @@",
        " {",
        '- "a": 1',
        '+ "a": 2',
        " }",
    ]
    store, run_id = make_image_run(tmp_path)
    st = open_store(store)
    other = lw.Runtime(st).fork(run_id, 0)
    doc = compare_doc(st, run_id, other.run_id)
    assert json.dumps(doc)  # JSON-ready
    pics = {p["part"]: p["image"] for p in doc["parts"]}
    assert (
        pics["panel/svg"] == "svg" and pics["panel/png"] == "png" and pics["caption/text"] is None
    )


def test_a_picture_kept_as_a_blob_is_shown_before_and_after(tmp_path: Path) -> None:
    """A picture part of the image adapter (a digest; the bytes in the store's blobs) in a
    request: both sides through the card's image route, with their stored type."""
    from loopwright.adapters.openai_images import image_value
    from loopwright.store._blobs import Blobs

    store = str(tmp_path / "blobs.db")
    st = open_store(store)
    old_png, new_png = tiny_png((10, 20, 30)), tiny_png((200, 100, 0))
    blobs = Blobs(st)
    before = image_value(blobs.put(old_png, "image/png"), "image/png", len(old_png), 4, 4)
    after = image_value(blobs.put(new_png, "image/png"), "image/png", len(new_png), 4, 4)
    st.close()
    loop = lw.Loop(
        name="blob-pictures",
        actor=lambda ctx: lw.Proposal.edit("panel", {"art": after}),
        verifiers=[lambda s, p: lw.Verdict(passed=True)],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=2),
            risk=(lw.RiskRule(name="art", touches=("panel/art",)),),
        ),
    )
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, {"task_key": "blob-1", "artifacts": {"panel": {"art": before}}})
    assert res.status == "awaiting_approval"
    c = TestClient(create_app(store, token=TOKEN), base_url=LOCAL)
    html = c.get("/approvals").text
    srcs = dict(
        re.findall(r'<img class="change-img (before|after)" alt="[^"]*" src="([^"]+)"', html)
    )
    assert set(srcs) == {"before", "after"}
    for side, png in (("before", old_png), ("after", new_png)):
        r = c.get(srcs[side].replace("&amp;", "&"))
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert r.content == png and "sandbox" in r.headers["content-security-policy"]
    card = html.split('class="card pending"')[1].split("</section>")[0]
    assert '<table class="changes">' not in card  # the picture is shown, not its digest


def test_with_people_only_an_operator_rolls_back_or_reruns(tmp_path: Path) -> None:
    """In a store with users, rollback and rerun are recorded under the signed-in person and
    need the operator role; a refusal is 403 and, like the success, in the audit log."""
    import time

    from loopwright._authority import hash_token

    store, run_id = make_parked_run(tmp_path)
    tokens = {"vic": "tok-vic-0123456789", "oscar": "tok-oscar-0123456789"}
    with lw.Runtime(store) as rt:
        for name, role in (("vic", "viewer"), ("oscar", "operator")):
            rt.store.add_user(name, roles=[role], limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(tokens[name]), now=time.time())
    c = TestClient(create_app(store, token="server-token-0123456789"), base_url=LOCAL)

    def post(name: str, action: str, body: dict[str, Any]) -> Any:
        auth = {"Authorization": f"Bearer {tokens[name]}"}
        return c.post(f"/api/runs/{run_id}/{action}", json=body, headers=auth)

    assert post("vic", "rollback", {"to_cycle": 0}).status_code == 403
    assert post("vic", "rerun", {"start": False}).status_code == 403
    r = post("oscar", "rollback", {"to_cycle": 0})
    assert r.status_code == 200 and "by oscar" in r.json()["message"]
    r = post("oscar", "rerun", {"contract": {"budget": {"max_cycles": 3}}, "start": False})
    assert r.status_code == 200
    st = open_store(store)
    mine = ("rollback_requested", "rerun_requested")
    asked = [e.data["by"] for e in st.events(run_id) if e.kind in mine]
    assert asked == ["oscar", "oscar"]
    seen = {(a.actor, a.action, a.outcome) for a in st.audit()}
    assert {("vic", "rollback", "refused"), ("vic", "fork", "refused")} <= seen
    assert {("oscar", "rollback", "allowed"), ("oscar", "fork", "allowed")} <= seen
    st.close()


def test_the_card_says_who_decides_from_the_rule_and_the_votes(tmp_path: Path) -> None:
    """The payment rule names a role and two approvers: the card says so, and after one
    person's approval, who approved so far."""
    import time

    from loopwright._authority import hash_token

    store, run_id = make_image_run(tmp_path, who={"role": "finance", "approvers": 2})
    token = "tok-fay-0123456789"
    with lw.Runtime(store) as rt:
        rt.store.add_user("fay", roles=["approver", "finance"], limits={}, by="t", now=time.time())
        rt.store.set_token("fay", hash_token(token), now=time.time())
    c = TestClient(create_app(store, token="server-token-0123456789"), base_url=LOCAL)
    auth = {"Authorization": f"Bearer {token}"}
    meta = re.compile(r'<span class="owner">who decides: <strong>([^<]*)</strong>')
    assert meta.findall(c.get("/approvals", headers=auth).text) == [
        "role finance · 2 approvers · not who started, edited, rolled back or cancelled the run"
    ]
    aid = c.get("/api/approvals", headers=auth).json()[0]["approval_id"]
    assert c.post(f"/api/approvals/{aid}/approve", json={}, headers=auth).status_code == 200
    assert meta.findall(c.get(f"/runs/{run_id}", headers=auth).text) == [
        "role finance · 2 approvers · not who started, edited, rolled back or cancelled the run · approved so far by fay"
    ]


def test_a_card_offers_approve_only_to_who_may_and_a_refusal_is_a_page(tmp_path: Path) -> None:
    """fay may approve spend up to 100; the request pays 250: her card offers Deny only and
    says why; a browser's forged approval gets a page saying why (403), an API call JSON."""
    import time

    from loopwright._authority import hash_token

    store, run_id = make_image_run(tmp_path)
    tokens = {"fay": "tok-fay-0123456789", "gus": "tok-gus-0123456789"}
    with lw.Runtime(store) as rt:
        rt.store.add_user("fay", roles=["approver"], limits={"spend": 100.0}, by="t", now=0.0)
        rt.store.add_user("gus", roles=["approver"], limits={}, by="t", now=0.0)
        for name, tok in tokens.items():
            rt.store.set_token(name, hash_token(tok), now=time.time())
    c = TestClient(create_app(store, token="server-token-0123456789"), base_url=LOCAL)
    why = "fay may approve spend up to 100; this request is for 250"
    r = c.post("/login", data={"token": tokens["fay"], "next": "/approvals"})
    inbox = c.get("/approvals").text
    assert why in inbox and 'value="approve"' not in inbox and 'value="deny"' in inbox
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox)
    assert csrf
    aid = c.get("/api/approvals").json()[0]["approval_id"]
    form = {"action": "approve", "csrf": csrf.group(1)}
    r = c.post(f"/approvals/{aid}/decide", data=form, headers={"Accept": "text/html"})
    assert r.status_code == 403 and "text/html" in r.headers["content-type"]
    assert "Not permitted" in r.text and why in r.text
    r = c.post(f"/approvals/{aid}/decide", data=form)  # a script: the API's JSON
    assert r.status_code == 403 and r.json()["detail"] == why
    # gus has no limit: his card offers Approve
    gus = TestClient(c.app, base_url=LOCAL)
    gus.post("/login", data={"token": tokens["gus"], "next": "/approvals"})
    page = gus.get(f"/runs/{run_id}").text
    assert 'value="approve"' in page and why not in page
    with lw.Runtime(store) as rt:
        refused = [a for a in rt.store.audit(actor="fay") if a.action == "approve"]
    assert [a.outcome for a in refused] == ["refused", "refused"]  # showing the card is not one
