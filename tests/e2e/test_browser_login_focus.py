"""The sign-in page's keyboard order in Chromium (names48): the token field has the focus when
the page opens, Tab goes from it to the Sign in button, Shift+Tab back, and typing the token
then Enter signs in. A colleague reported the first Tab landing on the button: that is the
natural order from the focused field (field, then button), checked here so it stays so.

Runs under the same conditions as tests/e2e/test_browser.py (skipped without Chromium or
Playwright, except under ``CI=true``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

from . import test_browser
from .test_browser import TOKEN, _need_browser, _serve

page = test_browser.page  # the Chromium page fixture, as test_browser.py's tests get it

_FOCUSED = (
    "(() => { const e = document.activeElement;"
    " return e ? e.tagName + (e.name ? ':' + e.name : '') + ':' + e.textContent.trim() : ''; })()"
)


@pytest.fixture
def base(tmp_path: Path) -> Iterator[str]:
    _need_browser()
    store = str(tmp_path / "empty.db")
    lw.Runtime(store).close()  # a store with no runs
    with _serve(store, tmp_path) as url:
        yield url


def _in_order(page: Any) -> None:
    """The page's focus is in the token field; Tab and Shift+Tab go to the button and back."""
    page.locator("form.login input[name=token]").wait_for()
    assert page.evaluate(_FOCUSED) == "INPUT:token:"  # autofocus
    page.keyboard.press("Tab")
    assert page.evaluate(_FOCUSED) == "BUTTON:Sign in"
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(_FOCUSED) == "INPUT:token:"


def test_the_token_field_then_the_button_by_keyboard(base: str, page: Any) -> None:
    page.goto(base + "/")
    page.get_by_role("link", name="Sign in").click()  # the header's link
    page.wait_for_url(re.compile(r"/login\?next="))
    _in_order(page)
    page.goto(base + "/login?next=/")  # opened by its address
    _in_order(page)
    page.keyboard.type(TOKEN)
    page.keyboard.press("Enter")
    page.wait_for_url(base + "/")
    page.locator("#signed-in-as").wait_for()
