"""Live updates in a real browser, and the webhook of the real `loopwright ui`: Chromium on the
runs list, the inbox and a run's page sees runs created and changed by another thread through
/api/events, without reloading; a loopback listener receives the signed webhook and its link
opens the request.

Reuses test_browser.py's server launcher and page fixture, and test_live.py's listener.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import loopwright as lw
from loopwright.web._notify import verify

HERE = Path(__file__).resolve().parent


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BROWSER = _load(HERE / "test_browser.py", "_live_browser_helpers")
LIVE = _load(HERE.parent / "integration" / "test_live.py", "_live_helpers")
page = BROWSER.page  # the Chromium page fixture, as test_browser.py's tests get it
SECRET = "browser-webhook-secret"
WAIT_MS = 120_000  # a safety net only: each wait returns as soon as the page shows the update


def in_thread(work: Callable[[], Any]) -> Any:
    """``work()`` on another thread (Playwright's loop holds this one), its result."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(work()))
    t.start()
    t.join()
    assert out, "the work in the thread failed (see the log)"
    return out[0]


@pytest.fixture
def live_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, str, str, Any]]:
    """A parked run, a listener, `loopwright ui --notify` (through the environment) over the
    store; (base URL, store, run id, listener)."""
    BROWSER._need_browser()
    store, run_id = BROWSER._web_loop().make_parked_run(tmp_path)
    listener = LIVE.Listener([])
    monkeypatch.setenv("LOOPWRIGHT_NOTIFY", listener.url)
    monkeypatch.setenv("LOOPWRIGHT_NOTIFY_SECRET", SECRET)
    try:
        with BROWSER._serve(store, tmp_path) as base:
            yield base, store, run_id, listener
    finally:
        listener.close()


def test_live_updates_without_reload_and_the_webhook(
    live_server: tuple[str, str, str, Any], page: Any, tmp_path: Path
) -> None:
    base, store, run_id, listener = live_server
    # The request pending when the server started is posted, signed, linking to its card.
    LIVE.until(lambda: listener.got, "the webhook")
    _, headers, body = listener.got[0]
    assert verify(
        SECRET, body, headers["X-Loopwright-Timestamp"], headers["X-Loopwright-Signature"]
    )
    msg = json.loads(body)
    assert msg["run_id"] == run_id and msg["url"].startswith(base + "/approvals?q=")
    page.goto(msg["url"])
    card = page.locator(f'section.card[data-approval-id="{msg["approval_id"]}"]')
    assert card.count() == 1

    # The runs list: a run created elsewhere appears, a cancelled one changes, no reload.
    page.goto(base + "/")
    page.locator("html[data-live=on]").wait_for(timeout=WAIT_MS)
    page.evaluate("window.__kept = 'same page'")
    other = in_thread(lambda: LIVE.park(tmp_path, store, "live-other"))
    page.locator(f'tr[data-run-id="{other}"] .st-awaiting_approval').wait_for(timeout=WAIT_MS)
    banner = page.locator("#live-banner .live-approval").first
    banner.wait_for(timeout=WAIT_MS)
    assert "New approval request" in banner.inner_text()
    assert banner.locator("a").get_attribute("href", timeout=WAIT_MS).startswith("/approvals?q=")
    assert page.locator("#pending-count").inner_text() == "2"
    in_thread(lambda: lw.Runtime(store).cancel(run_id, by="bea"))
    page.locator(f'tr[data-run-id="{run_id}"] .st-cancelled').wait_for(timeout=WAIT_MS)
    assert "cancelled by bea" in page.locator(f'tr[data-run-id="{run_id}"]').inner_text()
    assert page.evaluate("window.__kept") == "same page"
    page.screenshot(path=str(tmp_path / "runs-live.png"), full_page=True)

    # The inbox: a request decided elsewhere is marked on its card, its buttons disabled.
    page.goto(base + "/approvals")
    page.locator("html[data-live=on]").wait_for(timeout=WAIT_MS)
    page.evaluate("window.__kept = 'inbox'")
    other_req = page.locator("section.card.pending").first.get_attribute("data-approval-id")
    in_thread(lambda: lw.Runtime(store).deny(other, by="bea", note="not now"))
    decided = page.locator(f'section.card.decided[data-approval-id="{other_req}"]')
    decided.wait_for(timeout=WAIT_MS)
    assert "denied by bea" in decided.inner_text()
    assert decided.locator("button:not([disabled])").count() == 0
    assert page.evaluate("window.__kept") == "inbox"

    # A run's page: its status changes in place and a banner offers the details.
    page.goto(f"{base}/runs/{other}")
    page.locator("html[data-live=on]").wait_for(timeout=WAIT_MS)
    page.evaluate("window.__kept = 'run page'")
    in_thread(lambda: lw.Runtime(store).cancel(other, by="bea"))
    page.locator("#run-status .st-cancelled").wait_for(timeout=WAIT_MS)
    assert "cancelled" in page.locator("#live-banner .live-run").first.inner_text()
    # the header drawn for the old status says it is out of date, not "where it stands: ..."
    assert "cancelled by bea" in page.locator("#stop-cause").inner_text()
    assert "changed after this page was drawn" in page.locator("#next-action").inner_text()
    assert page.locator("#run-actions button:not([disabled])").count() == 0
    assert page.evaluate("window.__kept") == "run page"
