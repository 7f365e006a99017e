"""A page whose live stream is refused (every stream the server keeps is open: 503 with
``Retry-After``) asks again, after what ``Retry-After`` says, and gets its live updates.

An ``EventSource`` that gets anything but 200 closes for good: the page stayed without live
updates until it was reloaded. The server runs in this process (``create_app(max_streams=1)``,
one stream held by the test), and the page's timers run on Playwright's clock, moved by the
test: nothing waits for wall-clock time to pass.
"""

from __future__ import annotations

import http.client
import threading
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.web import create_app

from .test_browser import CHROMIUM, TOKEN, _need_browser, _web_loop
from .test_browser_live import LIVE

WAIT_MS = 60_000  # a hang guard only: each wait returns as soon as the page shows it


def test_a_refused_stream_is_asked_again_after_retry_after(tmp_path: Path) -> None:
    _need_browser()
    store, run_id = _web_loop().make_parked_run(tmp_path)
    app = create_app(store, token=TOKEN, max_streams=1)
    messages = app.state.messages
    from playwright.sync_api import sync_playwright

    with LIVE.served(app) as port, sync_playwright() as pw:
        base = f"http://127.0.0.1:{port}"
        held = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        held.request("GET", "/api/events")
        assert held.getresponse().status == 200  # the one stream this server keeps
        assert messages.streams == 1

        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            pg = browser.new_page()
            asked: list[str] = []
            pg.on("request", lambda r: asked.append(r.method) if "/api/events" in r.url else None)
            pg.clock.install()  # the page's timers move only when the test moves them
            pg.goto(base + "/")
            pg.locator("html[data-live=retry]").wait_for(timeout=WAIT_MS)
            wait_ms = int(pg.locator("html").get_attribute("data-live-retry-ms") or "0")
            # Retry-After: 10, a random part added (at most a quarter) against a crowd
            assert 10_000 <= wait_ms <= 12_500, wait_ms
            assert asked == ["GET", "HEAD"], asked  # the refused stream, then why

            pg.clock.run_for(9_000)  # not before Retry-After
            assert asked == ["GET", "HEAD"], asked
            assert pg.locator("html").get_attribute("data-live") == "retry"

            held.close()  # room again
            LIVE.until(lambda: messages.streams == 0, "the held stream to end")
            pg.clock.run_for(wait_ms - 9_000)
            pg.locator("html[data-live=on]").wait_for(timeout=WAIT_MS)
            assert asked == ["GET", "HEAD", "GET"], asked

            # and it is live: a run cancelled elsewhere changes its row, no reload
            done: list[Any] = []
            t = threading.Thread(
                target=lambda: done.append(lw.Runtime(store).cancel(run_id, by="bea"))
            )
            t.start()
            t.join()
            assert done
            row = pg.locator(f'tr[data-run-id="{run_id}"] .st-cancelled')
            row.wait_for(timeout=WAIT_MS)
        finally:
            browser.close()
