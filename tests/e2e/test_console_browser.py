"""The operator's console in Chromium (issue 19 items 4, 6, 7): an approval card with its
pictures, a hostile SVG that does nothing, rollback / rerun / resume from the run page through
their confirmation step, a CSRF-less post refused, and two runs compared.

One server and one browser for the whole module (the store holds a spec-backed parked run and
a run parked on a picture change); each test opens its own page.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .test_browser import CHROMIUM, TOKEN, _need_browser, _serve, _web_loop


def _console_helpers() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "integration" / "test_web_console.py"
    spec = importlib.util.spec_from_file_location("_console_helpers", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """(base URL, the parked run, the picture run), served by one `loopwright ui`."""
    _need_browser()
    tmp = tmp_path_factory.mktemp("console")
    store, parked = _web_loop().make_parked_run(tmp)
    _, pictures = _console_helpers().make_image_run(tmp, store=store)
    with _serve(store, tmp) as base:
        yield {"base": base, "parked": parked, "pictures": pictures, "store": store}


@pytest.fixture(scope="module")
def browser(console: dict[str, str]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        yield b
        b.close()


class Watch:
    """What a page did that it must not: dialogs (alert/confirm/prompt), requests leaving the
    dashboard (one the page's policy refused before it left is counted apart), console errors."""

    def __init__(self, page: Any, base: str) -> None:
        self.dialogs: list[str] = []
        self.outside: list[str] = []
        self.refused: list[str] = []
        self.errors: list[str] = []

        def failed(r: Any) -> None:
            if r.failure == "csp":
                self.refused.append(r.url)

        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        page.on(
            "request",
            lambda r: (
                None if r.url.startswith((base, "data:", "about:")) else self.outside.append(r.url)
            ),
        )
        page.on("requestfailed", failed)
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def escaped(self) -> list[str]:
        """Requests to elsewhere that the policy did not stop."""
        return [u for u in self.outside if u not in self.refused]


@pytest.fixture
def page(browser: Any, console: dict[str, str]) -> Iterator[tuple[Any, Watch]]:
    ctx = browser.new_context(viewport={"width": 1360, "height": 900})
    pg = ctx.new_page()
    watch = Watch(pg, console["base"])
    yield pg, watch
    ctx.close()


def _sign_in(pg: Any, base: str, target: str) -> None:
    pg.goto(f"{base}/login?next={target}")
    pg.fill("input[name=token]", TOKEN)
    pg.click("form.login button")
    pg.wait_for_url(f"{base}{target}")


def _wait_status(pg: Any, base: str, run_id: str, want: str) -> None:
    """Poll the API until the run has status ``want`` (a generous safety deadline), then
    reload the page: the test does not depend on how the page learns of the change."""
    deadline = time.monotonic() + 120
    status = ""
    while time.monotonic() < deadline:
        status = pg.request.get(f"{base}/api/runs/{run_id}").json()["run"]["status"]
        if status == want:
            break
        time.sleep(0.1)
    assert status == want, (run_id, status)
    pg.reload()
    pg.locator(f"#run-status .st-{want}").wait_for()


def test_the_handler_would_catch_a_script(browser: Any) -> None:
    """The control: the same watch catches a script that does run (so its silence below
    means something)."""
    ctx = browser.new_context()
    pg = ctx.new_page()
    watch = Watch(pg, "http://127.0.0.1")
    with pg.expect_event("dialog", timeout=60_000):
        pg.set_content("<svg onload=\"alert('ran')\"></svg>")
    assert watch.dialogs == ["ran"]
    ctx.close()


def test_picture_card_shows_images_and_a_hostile_svg_does_nothing(
    console: dict[str, str], page: tuple[Any, Watch], tmp_path: Path
) -> None:
    pg, watch = page
    base = console["base"]
    pg.goto(base + "/approvals")
    card = pg.locator(f'section.card.pending:has(a[href="/runs/{console["pictures"]}"])')
    assert "who decides: any approver" in card.locator(".card-meta").inner_text()
    assert "expires in" in card.locator(".card-meta").inner_text()
    assert "the coat changed colour" in card.locator("ul.causes").inner_text()
    folded = card.locator("details.other-findings")
    assert not folded.locator("li").first.is_visible()  # folded until opened
    folded.locator("summary").click()
    assert folded.locator("li").count() == 2
    args = card.locator("table.effect-args").inner_text()
    assert "INV-9" in args and '[{"sku":"A-1","qty":2}]' in args
    imgs = card.locator("img.change-img")
    assert imgs.count() == 4  # SVG and PNG, before and after
    for i in range(4):
        img = imgs.nth(i)
        img.scroll_into_view_if_needed()
        # drawn as pictures: decoded with a size (a broken or refused image has none)
        pg.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle())
    pg.screenshot(path=str(tmp_path / "inbox-picture.png"), full_page=True)
    # the hostile picture opened on its own, as a document: still nothing runs or loads
    src = card.locator("img.change-img.after").first.get_attribute("src")
    assert src and "panel%2Fsvg" in src and "side=after" in src
    resp = pg.goto(base + src)
    assert resp is not None and resp.status == 200
    assert "<script>" in resp.text()  # the hostile markup is really there
    # an alert in a script or onload blocks the load that goto waits for, so it would have been
    # seen by now; the pause only gives a late one a chance to show (it cannot make this pass)
    pg.wait_for_timeout(500)
    assert watch.dialogs == [], watch.dialogs
    assert watch.escaped() == [], watch.escaped()
    # because of how it is served: as an image, under a policy where nothing runs or loads
    assert resp.headers["content-type"].startswith("image/svg+xml")
    assert resp.headers["x-content-type-options"] == "nosniff"
    csp = resp.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "sandbox" in csp and "script-src" not in csp


def test_actions_from_the_run_page_and_the_comparison(
    console: dict[str, str], page: tuple[Any, Watch], tmp_path: Path
) -> None:
    pg, watch = page
    base, run_id = console["base"], console["parked"]
    # A cross-site form (no session, no CSRF token) and a signed-in one without the token
    r = pg.request.post(f"{base}/runs/{run_id}/rollback", form={"to_cycle": "0"})
    assert r.status == 401
    _sign_in(pg, base, f"/runs/{run_id}")
    r = pg.request.post(f"{base}/runs/{run_id}/rollback", form={"to_cycle": "0"})
    assert r.status == 403 and "CSRF" in r.json()["detail"]
    r = pg.request.post(f"{base}/api/runs/{run_id}/rollback", data={"to_cycle": 0})
    assert r.status == 403  # a cookie-authenticated API call without X-CSRF-Token
    assert "awaiting approval" in pg.locator("#run-status").inner_text()  # unchanged

    # Roll back: the button leads to a confirmation, which does it
    pg.click("#run-actions button[value=rollback]")
    pg.wait_for_url(f"{base}/runs/{run_id}/confirm?action=rollback")
    pg.select_option("#confirm-form select[name=to_cycle]", "0")
    pg.click("#confirm-form button")
    pg.wait_for_url(f"{base}/runs/{run_id}?msg=*")
    assert "rolled back to cycle 0 by ana" in pg.locator("p.flash").inner_text()
    assert "pending" in pg.locator("#run-status").inner_text()
    pg.goto(f"{base}/runs/{run_id}?kind=rollback_requested")
    assert "ana" in pg.locator('#event-log tr[data-kind="rollback_requested"]').inner_text()

    # Rerun with a changed contract: a new run, started, linked to its origin
    pg.goto(f"{base}/runs/{run_id}")
    pg.click("#run-actions button[value=rerun]")
    pg.wait_for_url(f"{base}/runs/{run_id}/confirm?action=rerun")
    pg.fill("#confirm-form input[name=max_cycles]", "4")
    assert pg.locator("#confirm-form input[name=start]").is_checked()
    pg.click("#confirm-form button")
    pg.wait_for_url(lambda u: "/runs/" in u and run_id not in u)
    new = pg.url.split("/runs/")[1].split("?")[0]
    assert run_id in pg.locator("#forked-from").inner_text() or run_id[:12] in pg.content()
    # it runs in the background and parks on the same payment request
    _wait_status(pg, base, new, "awaiting_approval")
    pg.screenshot(path=str(tmp_path / "rerun.png"), full_page=True)

    # Resume the rolled-back origin through its confirmation: it goes on to the same request
    pg.goto(f"{base}/runs/{run_id}")
    pg.click("#run-actions button[value=resume]")
    pg.wait_for_url(f"{base}/runs/{run_id}/confirm?action=resume")
    pg.click("#confirm-form button")
    pg.wait_for_url(f"{base}/runs/{run_id}?msg=*")
    assert "resume requested by ana" in pg.locator("p.flash").inner_text()
    _wait_status(pg, base, run_id, "awaiting_approval")

    # Compare: from the origin's link to its rerun
    pg.click("a.compare-rerun")
    pg.wait_for_url(f"{base}/compare?a={run_id}&b={new}")
    row = pg.locator('#contract tr[data-key="budget.max_cycles"]')
    assert "differs" in (row.get_attribute("class") or "")
    assert "6" in row.inner_text() and "4" in row.inner_text()
    assert pg.locator("svg.sparkline polyline").count() == 2
    assert pg.locator('.part-compare[data-part="doc/a"]').count() == 1
    pg.screenshot(path=str(tmp_path / "compare.png"), full_page=True)

    # and from the runs list: tick two, compare
    pg.goto(base + "/")
    pg.check(f'input[name=run][value="{run_id}"]')
    pg.check(f'input[name=run][value="{console["pictures"]}"]')
    pg.click("#compare-form button")
    pg.wait_for_url(f"{base}/compare?*")
    assert pg.locator("#compare-head").count() == 1
    assert pg.locator('.part-compare[data-part="panel/svg"]').count() == 1
    assert not [e for e in watch.errors if "Content Security Policy" in e], watch.errors
