"""The dashboard in a real browser: Playwright drives Debian's Chromium against `loopwright ui`.

Skipped when Chromium (/usr/bin/chromium) or Playwright is missing, except under ``CI=true``,
where ``.ci/run`` installs Chromium and a missing one fails. Screenshots go to the test's
temporary folder (the ones in docs/img/ are taken from the demo's runs, see docs/ui.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urljoin

import pytest

CHROMIUM = "/usr/bin/chromium"
TOKEN = "browser-token-0123456789"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}; browser tests must run on CI", pytrace=False)
    pytest.skip(reason)


def _web_loop() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "integration" / "test_web.py"
    spec = importlib.util.spec_from_file_location("_web_loop_helpers", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _need_browser() -> None:
    if not Path(CHROMIUM).exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        _unavailable("playwright is not installed: pip install -e '.[dev]'")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    _need_browser()
    store, run_id = _web_loop().make_parked_run(tmp_path)
    with _serve(store, tmp_path) as base:
        yield base, run_id


@contextlib.contextmanager
def _serve(store: str, tmp_path: Path) -> Iterator[str]:
    """`loopwright ui` over ``store`` on a free loopback port; yields its base URL.

    The server binds port 0 and says which port it got: a port found free here and bound by
    the server later could be taken in between (the other xdist process's servers, another
    test run on the machine), and the test would fail, or talk to that other server."""
    env = {**os.environ, "LOOPWRIGHT_UI_TOKEN": TOKEN, "LOOPWRIGHT_UI_IDENTITY": "ana"}
    # `loopwright ui`; importing _ui_cmd first registers the command whether or not the CLI's
    # _app wires it yet.
    launch = "from loopwright.cli import _ui_cmd, main; raise SystemExit(main())"
    # The server's output goes to a file, not a pipe nobody reads while the test runs (a full
    # pipe would stall the server); a failing test prints it.
    log_path = tmp_path / "ui.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", launch, "ui", "--port", "0", "--store", store],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = ""
    try:
        for _ in range(1200):  # up to two minutes for the server to start on a loaded machine
            # its first line names the port it listens on (bound before the line is written)
            said = re.search(r"loopwright ui: (http://127\.0\.0\.1:\d+)/", log_path.read_text())
            if said is not None:
                base = said.group(1)
                try:
                    urllib.request.urlopen(base + "/login", timeout=1).close()
                    break
                # OSError: refused or reset (URLError, ConnectionError), and a reply slower
                # than the 1 s timeout on a loaded machine, raised as a bare TimeoutError
                except OSError:
                    pass
            if proc.poll() is not None:
                pytest.fail(f"loopwright ui exited: {log_path.read_text()}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        print(f"--- loopwright ui output ---\n{log_path.read_text()}")


@pytest.fixture
def page() -> Iterator[Any]:
    """A Chromium page. Request it after the server fixture: Playwright's event loop must not
    be running while that fixture drives a run synchronously."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        pg = browser.new_page(viewport={"width": 1360, "height": 900})
        errors: list[str] = []
        pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        yield pg
        browser.close()
        assert not [e for e in errors if "Content Security Policy" in e], errors


def test_approve_in_the_inbox_and_watch_the_run_finish(
    server: tuple[str, str], page: Any, tmp_path: Path
) -> None:
    IMG = tmp_path
    base, run_id = server
    IMG.mkdir(parents=True, exist_ok=True)
    page.goto(base + "/")
    page.screenshot(path=str(IMG / "runs.png"), full_page=True)
    page.goto(base + "/approvals")
    assert page.get_by_text("Sign in").first.is_visible()
    page.goto(base + "/login?next=/approvals")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(base + "/approvals")
    card = page.locator("section.card.pending").first
    card.locator("input[name=note]").fill("checked the <b>PO</b>")
    page.screenshot(path=str(IMG / "inbox.png"), full_page=True)
    card.locator("button.approve").click()
    page.wait_for_url(f"{base}/runs/{run_id}*")
    page.locator("#run-status .st-accepted").wait_for(timeout=120_000)
    assert "checked the <b>PO</b>" in page.content().replace("&lt;", "<").replace("&gt;", ">")
    assert page.locator("b", has_text="PO").count() == 0  # the note rendered as text


def test_run_detail_shows_the_chart(server: tuple[str, str], page: Any, tmp_path: Path) -> None:
    IMG = tmp_path
    base, run_id = server
    page.goto(f"{base}/runs/{run_id}")
    chart = page.locator("svg.chart")
    assert chart.is_visible()
    assert chart.locator("polyline.score").count() == 1
    assert page.get_by_text("HELD-OUT").first.is_visible()
    IMG.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(IMG / "run-detail.png"), full_page=True)


def test_request_without_token_is_refused(server: tuple[str, str], page: Any) -> None:
    base, _ = server
    page.goto(base + "/approvals")
    aid = page.locator("section.card.pending").first.get_attribute("data-approval-id")
    r = page.request.post(f"{base}/api/approvals/{aid}/approve")
    assert r.status == 401
    r = page.request.post(f"{base}/approvals/{aid}/decide", form={"action": "approve"})
    assert r.status in (401, 403)


# --- issue 19: stop causes, pages that scale, effects on the run page, cancel -----------------
GENERATED = 300


@pytest.fixture
def many(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Runs ended for four reasons, one denied (applied on its resume) and 300 generated runs
    (never started); (base URL, reason -> run id)."""
    _need_browser()
    from loopwright.store import open_store

    (tmp_path / "ended").mkdir()
    store, ids = _web_loop()._ended_runs(tmp_path / "ended")
    st = open_store(store)
    for i in range(GENERATED):
        st.create_run(
            run_id=f"{i:04d}" + "cd" * 14,
            task_key=f"bulk-{i:04d}",
            loop_name="bulk",
            project="gen",
            spec_ref=None,
            loop_version=None,
            contract={"budget": {"max_cycles": 3}},
            task={"artifacts": {}},
            initial_state={"cycle": 0, "artifacts": {}},
        )
    st.close()
    with _serve(store, tmp_path) as base:
        yield base, ids


def test_stop_causes_pages_search_and_effects(
    many: tuple[str, dict[str, str]], page: Any, tmp_path: Path
) -> None:
    base, ids = many
    # the newest runs are the generated ones: search the list for the ended runs
    page.goto(base + "/")
    page.fill("input[name=q]", "cap-1")
    page.click("form.filters button")
    page.wait_for_url("**q=cap-1*")  # read the filtered page, not the one it replaces
    row = page.locator(f'tr[data-run-id="{ids["budget_cycles"]}"]')
    assert "the cycle budget of 2 is used up" in row.locator(".cause").inner_text()
    assert page.locator("tr[data-run-id]").count() == 1
    want = {
        "success": "accepted at cycle 1",
        "no_progress": "no-progress rule",
        "escalated": "ValueError: model server",
    }
    for reason, words in want.items():
        page.goto(f"{base}/?q={ids[reason][:8]}")
        assert words in page.locator(f'tr[data-run-id="{ids[reason]}"] .cause').inner_text()
        page.click(f'tr[data-run-id="{ids[reason]}"] a')
        assert words in page.locator("#stop-cause").inner_text()
    # the accepted invoice says what it paid, with which key, in how many attempts
    page.goto(f"{base}/runs/{ids['success']}")
    effects = page.locator("#effects + table.journal")
    assert "INV-7" in effects.inner_text() and "done" in effects.inner_text()
    page.select_option("select[name=kind]", "effect_done")
    page.click("form.filters button")
    page.wait_for_url("**kind=effect_done*")
    kinds = page.locator("#event-log tr[data-kind]")
    assert kinds.count() >= 1
    assert {kinds.nth(i).get_attribute("data-kind") for i in range(kinds.count())} == {
        "effect_done"
    }
    page.screenshot(path=str(tmp_path / "run-effects.png"), full_page=True)
    # pages of 50, newest first, to the end
    page.goto(base + "/")
    seen: set[str] = set()
    while True:
        rows = page.locator("tr[data-run-id]")
        seen |= {rows.nth(i).get_attribute("data-run-id") or "" for i in range(rows.count())}
        nxt = page.locator("#next-page")
        if nxt.count() == 0:
            break
        # go to the link's address: a click returns before the next page replaces this one,
        # and reading rows then would count the old page again
        page.goto(urljoin(page.url, nxt.get_attribute("href") or ""))
    assert len(seen) == GENERATED + len(ids)


def test_cancel_from_the_run_page(server: tuple[str, str], page: Any) -> None:
    base, run_id = server
    r = page.request.post(f"{base}/runs/{run_id}/act", form={"action": "cancel"})
    assert r.status in (401, 403)  # no token, no CSRF: refused
    page.goto(f"{base}/login?next=/runs/{run_id}")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(f"{base}/runs/{run_id}")
    page.click("form.actions button[value=cancel]")  # to its confirmation step
    page.wait_for_url(f"{base}/runs/{run_id}/confirm?action=cancel")
    page.click("#confirm-form button[value=cancel]")
    page.locator("#run-status .st-cancelled").wait_for(timeout=30_000)
    assert "cancelled by ana" in page.locator("#stop-cause").inner_text()


@pytest.fixture
def stopped_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The parked run with its payment change denied and applied (stopped), served."""
    _need_browser()
    import loopwright as lw

    store, run_id = _web_loop().make_parked_run(tmp_path)
    with lw.Runtime(store) as rt:
        rt.deny(run_id, by="bea", note="not that payee")
        rt.resume_sync(run_id, lw.load_spec(tmp_path / "web.toml"))
    with _serve(store, tmp_path) as base:
        yield base, run_id


def test_edit_a_part_from_the_run_page(stopped_server: tuple[str, str], page: Any) -> None:
    """A person edits a part of a stopped run on its page, resuming it: the loop goes on from
    the person's version (accepted, not rewritten) and the page says who edited what."""
    base, run_id = stopped_server
    r = page.request.post(f"{base}/runs/{run_id}/edit", form={"ref": "doc/pay", "value": "10"})
    assert r.status in (401, 403)  # no token, no CSRF: refused
    page.goto(f"{base}/login?next=/runs/{run_id}")
    page.fill("input[name=token]", TOKEN)
    page.click("form.login button")
    page.wait_for_url(f"{base}/runs/{run_id}")
    form = page.locator('form.edit[data-ref="doc/pay"]')
    part = page.locator("details.part", has=form)
    if part.get_attribute("open") is None:  # a part of one version is shown folded
        part.locator("summary").first.click()
    form.locator("xpath=ancestor::details[1]/summary").click()  # "Edit"
    form.locator("textarea[name=value]").fill("10")
    form.locator("input[name=note]").fill("the PO says 10")
    form.locator("input[name=resume]").check()
    form.locator("button").click()
    # The page reloads itself as the resumed run changes status, until it is accepted.
    page.locator("#run-status .st-accepted").wait_for(timeout=120_000)
    row = page.locator('#edits + table tr[data-part="doc/pay"]')
    assert "ana" in row.inner_text() and "the PO says 10" in row.inner_text()
    pay = page.locator("details.part", has=page.locator('form.edit[data-ref="doc/pay"]'))
    assert "current accepted" in pay.locator("summary").first.inner_text()
