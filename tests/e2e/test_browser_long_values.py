"""A long value with no space to break at, in Chromium (outside probe, stop 48): a 6,000-digit
account number in a payment's arguments made the approvals page and the run page about
60,000 pixels wide — the card's heading, the actor's note, the arguments table ran off the
screen and the person had to scroll sideways to read what they approve. Now it wraps inside
the card; a table's names and headers keep their words whole. The payee's right-to-left
override is shown written out (``\\u202e``), as the browser draws it.

Runs under the same conditions as tests/e2e/test_browser.py (skipped without Chromium or
Playwright, except under ``CI=true``)."""

from __future__ import annotations

import runpy
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from . import test_browser
from .test_browser import TOKEN, _need_browser, _serve

# the run the integration test reads (tests/integration is not a package)
_REORDERING = Path(__file__).resolve().parents[1] / "integration" / "test_web_reordering.py"
reordering = SimpleNamespace(**runpy.run_path(str(_REORDERING)))

page = test_browser.page  # the Chromium page fixture, as test_browser.py's tests get it
WIDTH = 1360


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    _need_browser()
    store, run_id = reordering.make_reordering_run(tmp_path)
    with _serve(store, tmp_path) as base:
        yield base, run_id


def _sign_in(pg: Any, base: str) -> None:
    pg.goto(base + "/login?next=/approvals")
    pg.fill("input[name=token]", TOKEN)
    pg.click("form.login button")
    pg.wait_for_url(base + "/approvals")


def test_a_long_argument_wraps_inside_the_card(served: tuple[str, str], page: Any) -> None:
    base, run_id = served
    _sign_in(page, base)
    for path in ("/approvals", f"/runs/{run_id}"):
        page.goto(base + path)
        args = page.locator("table.effect-args").first
        args.wait_for()
        # the page is as wide as the window: nothing runs off it
        assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH, path
        box = args.bounding_box()
        assert box is not None and box["x"] + box["width"] <= WIDTH, (path, box)
        # the argument's name reads as one word, not a letter a line
        name = args.locator("td").first
        assert name.inner_text() == "payee"
        name_box = name.bounding_box()
        value_box = args.locator("td").nth(1).bounding_box()
        assert name_box is not None and value_box is not None
        assert name_box["height"] <= value_box["height"] * 1.5, (path, name_box, value_box)
        # the payee as stored, its override written out
        assert args.locator("td").nth(1).inner_text() == reordering.WRITTEN
    page.goto(base + "/approvals")
    approve = page.locator("section.card.pending button.approve").first
    box = approve.bounding_box()
    assert box is not None and box["x"] + box["width"] <= WIDTH


def _refused_payment_loop() -> Any:
    """A payment that parks for approval; once approved, the bank refuses it, naming the payee
    (U+202E in it): the run ends escalated with that error in its stop cause."""
    import loopwright as lw

    @lw.effect("spend", name="refused_pay", key=lambda a: "refused-1")
    def refused_pay(payee: str) -> dict[str, Any]:
        raise ValueError(f"the bank refused payee {payee}")

    def actor(ctx: lw.Context) -> lw.Proposal:
        fix = lw.Proposal.edit("doc", {"payee": "ACME"}).edits
        return lw.Proposal(edits=fix, effects=(refused_pay.call(payee=reordering.PAYEE),))

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return reordering.paying_loop("live-cause", actor, check, refused_pay)


def test_a_stop_cause_arriving_live_is_shown_as_stored(
    served: tuple[str, str], page: Any, tmp_path: Path
) -> None:
    """The run page's live update writes the new stop cause into the page itself (live.js):
    its override is written out as the server writes it."""
    import loopwright as lw

    base, _ = served
    store, loop = str(tmp_path / "reorder.db"), _refused_payment_loop()
    runs: list[Any] = []

    def elsewhere(work: Any) -> threading.Thread:
        """``work`` on another thread, as another process would (Playwright's loop runs on
        this one, and a run drives its own)."""

        def go() -> None:
            with lw.Runtime(store) as rt:
                runs.append(work(rt))

        t = threading.Thread(target=go)
        t.start()
        return t

    task = {"artifacts": {"doc": {"payee": ""}}}
    elsewhere(lambda rt: rt.run_sync(loop, task, task_key="live-1")).join()
    parked = runs.pop()
    assert parked.status == "awaiting_approval", parked.packet
    _sign_in(page, base)
    page.goto(f"{base}/runs/{parked.run_id}")
    page.locator("html[data-live=on]").wait_for(state="attached")

    def approve_and_resume(rt: Any) -> Any:
        rt.approve(parked.run_id, by="bea")
        return rt.resume_sync(parked.run_id, loop)

    worker = elsewhere(approve_and_resume)
    page.locator("#run-status .st-escalated").wait_for()
    worker.join()
    assert runs.pop().status == "escalated"
    cause = page.locator("#stop-cause").inner_text()
    assert reordering.WRITTEN in cause and reordering.RLO not in cause, cause
