"""Two people signed in at once, in Chromium (docs/permissions.md): each sees their own name
on their decisions; a viewer gets no Approve button, and a request forged from the viewer's
session is refused (and audited)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright._authority import hash_token

from .test_browser import CHROMIUM, _need_browser, _serve, _web_loop

TOKENS = {"ana": "tok-ana-0123456789", "ben": "tok-ben-0123456789", "vic": "tok-vic-0123456789"}
ROLES = {"ana": ["approver"], "ben": ["approver"], "vic": ["viewer"]}


def _setup(tmp_path: Path) -> tuple[str, list[str]]:
    store, first = _web_loop().make_parked_run(tmp_path)
    loop = lw.load_spec(tmp_path / "web.toml")
    task = {"id": "t2", "artifacts": {"doc": {"a": 0, "b": 0, "title": "", "pay": 0}}}
    with lw.Runtime(store) as rt:
        second = rt.run_sync(loop, task, task_key="second").run_id
        assert rt.store.get_run(second).status == "awaiting_approval"
        for name, roles in ROLES.items():
            rt.store.add_user(name, roles=roles, limits={}, by="test", now=time.time())
            rt.store.set_token(name, hash_token(TOKENS[name]), now=time.time())
    return store, [first, second]


def _sign_in(browser: Any, base: str, name: str) -> Any:
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = ctx.new_page()
    pg.goto(base + "/login?next=/approvals")
    pg.fill("input[name=token]", TOKENS[name])
    pg.click("form.login button")
    pg.wait_for_url(base + "/approvals")
    assert pg.locator("#signed-in-as").inner_text() == name
    return pg


def test_two_people_decide_as_themselves_and_a_viewer_cannot(tmp_path: Path) -> None:
    _need_browser()
    store, runs = _setup(tmp_path)
    from playwright.sync_api import sync_playwright

    with _serve(store, tmp_path) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        ana, ben = _sign_in(browser, base, "ana"), _sign_in(browser, base, "ben")
        vic = _sign_in(browser, base, "vic")
        # the viewer sees the requests but no Approve button
        assert vic.locator("section.card.pending").count() == 2
        assert vic.locator("button.approve").count() == 0
        assert vic.get_by_text("vic may view this request but not decide it").first.is_visible()
        # a forged decision from the viewer's session: with and without the page's CSRF token
        csrf = vic.locator("form.inline input[name=csrf]").first.get_attribute("value")
        with lw.Runtime(store) as rt:
            aid = rt.pending_approval(runs[0]).approval_id
        forged = vic.request.post(
            f"{base}/approvals/{aid}/decide", form={"action": "approve", "csrf": csrf or ""}
        )
        assert forged.status == 403
        assert (
            vic.request.post(f"{base}/approvals/{aid}/decide", form={"action": "approve"}).status
            == 403
        )

        # ana and ben, signed in at the same time, each approve one run
        for pg, run_id, note in ((ana, runs[0], "ana checked"), (ben, runs[1], "ben checked")):
            pg.goto(f"{base}/runs/{run_id}")
            card = pg.locator("section.card.pending").first
            card.locator("input[name=note]").fill(note)
            card.locator("button.approve").click()
            pg.wait_for_url(f"{base}/runs/{run_id}*")
        for pg, run_id, name in ((ana, runs[0], "ana"), (ben, runs[1], "ben")):
            pg.goto(f"{base}/runs/{run_id}")
            assert f"by {name}" in pg.content()
            assert pg.locator("#signed-in-as").inner_text() == name
        vic.goto(base + "/audit")
        text = vic.locator("#audit").inner_text()
        assert "refused" in text and "vic" in text and "ana" in text and "ben" in text
        vic.screenshot(path=str(tmp_path / "audit.png"), full_page=True)
        browser.close()
    with lw.Runtime(store) as rt:
        decided = {a.run_id: a.decided_by for a in rt.store.approvals() if a.status == "approved"}
        assert decided[runs[0]] == "ana" and decided[runs[1]] == "ben"
        refused = [a for a in rt.store.audit(actor="vic") if a.outcome == "refused"]
        assert len(refused) == 2


def test_another_site_cannot_sign_the_browser_in(tmp_path: Path) -> None:
    """Login CSRF, in Chromium: a page on another origin whose form posts a user's token to
    /login, and whose <img> asks /login?token=, leaves the browser signed out; the audit log
    gets one refused record (the cross-site post), none for the link."""
    import http.server
    import threading

    _need_browser()
    store, _ = _setup(tmp_path)
    from playwright.sync_api import sync_playwright

    with _serve(store, tmp_path) as base, sync_playwright() as pw:
        evil = (
            f'<form id="f" method="post" action="{base}/login">'
            f'<input name="token" value="{TOKENS["vic"]}"><input name="next" value="/api/me">'
            "</form>"  # posted once the link's answer came (not an image: onerror)
            f'<img src="{base}/login?token={TOKENS["vic"]}" onerror="f.submit()" onload="f.submit()">'
        ).encode()

        class Page(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(evil)

            def log_message(self, *_: Any) -> None:
                pass

        other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox"]
            )
            pg = browser.new_context().new_page()
            pg.goto(f"http://127.0.0.1:{other.server_address[1]}/")
            pg.wait_for_url(f"{base}/login")  # the form posted: answered 403
            assert "another site" in pg.content()
            assert pg.context.cookies() == []
            pg.goto(f"{base}/api/me")
            assert '"token required"' in pg.content() or "401" in pg.content()
        finally:
            other.shutdown()
            other.server_close()
    with lw.Runtime(store) as rt:
        rows = [a for a in rt.store.audit() if a.action == "sign in"]
    assert [(a.actor, a.outcome) for a in rows] == [("(unknown token)", "refused")]
    assert "another site" in str(rows[0].detail["reason"])
