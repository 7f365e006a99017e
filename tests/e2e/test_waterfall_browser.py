"""The run page's waterfall in Chromium (issue 19 item 2): a run whose model call was retried and
that published something, served by `loopwright ui`; the spans drawn, a model call opened.

Screenshots go to the test's temporary folder, or to ``$LOOPWRIGHT_SCREENSHOTS`` when it names
a folder (``LOOPWRIGHT_SCREENSHOTS=docs/img`` refreshes ``docs/img/run_waterfall.png`` and
``docs/img/model_call.png``, see docs/ui.md).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .test_browser import _need_browser, _serve, page  # noqa: F401 - page is a fixture


def _model_calls() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "integration" / "test_model_calls.py"
    spec = importlib.util.spec_from_file_location("_model_call_helpers", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    _need_browser()
    pytest.importorskip("openai")
    store, run_id = _model_calls().make_model_run(tmp_path)
    with _serve(store, tmp_path) as base:
        yield base, run_id


def _shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("LOOPWRIGHT_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_the_waterfall_and_a_model_call(
    served: tuple[str, str],
    page: Any,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    base, run_id = served
    secret = _model_calls().SECRET
    page.goto(f"{base}/runs/{run_id}")
    wf = page.locator("svg.waterfall")
    assert wf.is_visible()
    kinds = [
        wf.locator("g.wf-row").nth(i).get_attribute("data-kind")
        for i in range(wf.locator("g.wf-row").count())
    ]
    assert kinds[:3] == ["run", "cycle", "actor"]
    assert kinds.count("model") == 3 and kinds.count("verifier") == 2
    effect = wf.locator('g.wf-row[data-kind="effect"]')
    assert "effect publish · done" in (effect.text_content() or "")
    models = wf.locator('g.wf-row[data-kind="model"]')
    failed, retried = models.nth(0), models.nth(1)
    assert "wf-error" in (failed.get_attribute("class") or "")
    said = retried.text_content() or ""  # SVG nodes have no innerText
    assert "attempt 2" in said and "1,100 tok" in said

    def bar_x(row: Any) -> float:
        return float(row.locator("rect.wf-bar").get_attribute("x"))

    assert bar_x(failed) < bar_x(retried) < bar_x(effect)  # in the order they happened
    assert "took" in page.locator("dl.head").inner_text()  # created, ended, duration
    assert secret not in page.content()
    shots = _shots(tmp_path)
    box = page.locator("figure.waterfall").bounding_box()
    assert box is not None
    page.screenshot(
        path=str(shots / "run_waterfall.png"),
        full_page=True,
        clip={"x": 0, "y": 0, "width": 1360, "height": box["y"] + box["height"] + 24},
    )

    wf.locator("a.wf-link").nth(1).click()  # the retried actor request
    page.wait_for_url(f"{base}/runs/{run_id}/calls/*")
    assert "Helo wrld" in page.locator("#call-prompt").inner_text()
    assert "The docs API takes the key ***." in page.locator("#call-prompt").inner_text()
    assert "fixed the title" in page.locator("#call-reply").inner_text()
    assert page.locator("#call-tokens").inner_text() == "1000 in · 100 out"
    assert page.locator("#call-cost").inner_text() == "$0.001200"
    assert secret not in page.content()
    page.screenshot(path=str(shots / "model_call.png"), full_page=False)
    page.go_back()
    page.locator("svg.waterfall a.wf-link").nth(0).click()  # the 503
    page.wait_for_url(f"{base}/runs/{run_id}/calls/*")
    assert "HTTP 503" in page.locator("#call-error").inner_text()
