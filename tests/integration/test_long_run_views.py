"""A long run (3,000 cycles) stored as deltas and version rows still shows every cycle and
every version in ``loopwright show``, ``loopwright trace`` and the dashboard's API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli import main

CYCLES = 3000


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "body"),))

    return lw.Loop(
        name="long",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=CYCLES)),
    )


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    db = tmp_path_factory.mktemp("long") / "long.db"
    url = f"sqlite:///{db}?durability=process"  # what is tested is the layout, not fsync
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), {"artifacts": {"doc": {"body": ""}}}, task_key="long")
        assert (r.cycles, r.stop_reason) == (CYCLES, "budget_cycles")
        # the live state kept a window, not the whole run
        assert len(r.state.history) == 20
    yield url, r.run_id


def test_show_json_has_every_cycle_and_every_version(
    long_run: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = long_run
    assert main(["show", run_id, "--store", url, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    cycles = [c for c in doc["cycles"] if "proposal" in c]
    assert [c["cycle"] for c in cycles] == list(range(1, CYCLES + 1))
    [art] = doc["state"]["artifacts"]
    [part] = art["parts"]
    assert [v["value"] for v in part["versions"]] == [
        "",
        *(f"draft {i}" for i in range(1, CYCLES + 1)),
    ]


def test_show_table_counts_every_version(
    long_run: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = long_run
    assert main(["show", run_id, "--store", url]) == 0
    out = capsys.readouterr().out
    assert str(CYCLES + 1) in out  # the part's number of versions


def test_trace_has_a_span_per_cycle(long_run: tuple[str, str], tmp_path: Path) -> None:
    url, run_id = long_run
    out = tmp_path / "t.json"
    assert main(["trace", run_id, "--store", url, "--format", "otlp-json", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    spans = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    cycle_spans = [s for s in spans if s["name"].startswith("cycle")]
    assert len(cycle_spans) == CYCLES


def test_dashboard_api_lists_every_version(long_run: tuple[str, str]) -> None:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    url, run_id = long_run
    c = TestClient(create_app(url, token="t" * 24, identity="ana"), base_url="http://localhost")
    detail = c.get(f"/api/runs/{run_id}").json()
    [part] = detail["artifacts"]
    assert len(part["versions"]) == CYCLES + 1
    assert len(detail["timeline"]) >= CYCLES


def test_dashboard_run_page_stays_bounded(long_run: tuple[str, str]) -> None:
    """The page lists the newest cycles and versions (the API every one) and draws the chart
    with a point a pixel: it was 3 MB at 3,000 cycles, a timeline row and a version a cycle."""
    pytest.importorskip("fastapi")
    import re

    from fastapi.testclient import TestClient

    from loopwright.web import create_app
    from loopwright.web._app import CYCLES_SHOWN, VERSIONS_SHOWN
    from loopwright.web._views import CHART_DOTS

    url, run_id = long_run
    c = TestClient(create_app(url, token="t" * 24, identity="ana"), base_url="http://localhost")
    r = c.get(f"/runs/{run_id}")
    assert r.status_code == 200
    page = r.text
    # a long run's page reads its newest checkpoints only: it says so (behaviour change)
    assert f"The last {CYCLES_SHOWN} cycles of {CYCLES}" in page
    assert "A long run: its last" in page
    assert f"The newest {VERSIONS_SHOWN} of {CYCLES + 1} versions" in page
    assert f"{CYCLES + 1} version(s)" in page
    timeline = page.split('<table class="timeline">', 1)[1].split("</table>", 1)[0]
    assert timeline.count("<tr") == CYCLES_SHOWN + 1  # and the header
    assert f"<td>{CYCLES}<br>" in timeline and f"<td>{CYCLES - CYCLES_SHOWN}<br>" not in timeline
    assert page.count('<pre class="diff">') <= VERSIONS_SHOWN
    chart = page.split('<svg class="chart"', 1)[1].split("</svg>", 1)[0]
    assert chart.count('class="score-dot"') <= CHART_DOTS
    for line in re.findall(r'<polyline class="\w+" points="([^"]*)"', chart):
        assert len(line.split()) <= 640  # at most a point a pixel of the chart's width
    assert len(page) < 600_000


def test_a_part_picture_reads_the_latest_state_only(long_run: tuple[str, str]) -> None:
    """Each SVG thumbnail of a run page is a request to /runs/{id}/svg: it read the whole run
    as the page does (every checkpoint, the timeline, every version's diff), 1 s a thumbnail
    at 3,000 cycles."""
    pytest.importorskip("fastapi")

    from fastapi.testclient import TestClient

    from loopwright.web import create_app

    url, run_id = long_run
    app = create_app(url, token="t" * 24, identity="ana")

    def every_checkpoint(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a picture read every checkpoint of the run")

    app.state.store.checkpoints = every_checkpoint
    c = TestClient(app, base_url="http://localhost")
    r = c.get(f"/runs/{run_id}/svg", params={"ref": "doc/body", "v": CYCLES})
    assert r.status_code == 404 and "no SVG version" in r.json()["detail"]  # text, not SVG
    assert c.get(f"/runs/{run_id}/svg", params={"ref": "doc/body", "cycle": 7}).status_code == 404


def test_dashboard_comparison_stays_bounded(long_run: tuple[str, str]) -> None:
    """Two long runs compared drew a dot per cycle of each and listed every cycle's scores:
    1.1 MB for runs of 3,000 and 4,000 cycles."""
    pytest.importorskip("fastapi")
    import re

    from fastapi.testclient import TestClient

    from loopwright.web import create_app
    from loopwright.web._compare_view import SCORES_SHOWN

    url, run_id = long_run
    c = TestClient(create_app(url, token="t" * 24, identity="ana"), base_url="http://localhost")
    page = c.get("/compare", params={"a": run_id, "b": run_id}).text
    assert f"{CYCLES} cycle(s) as numbers (the last {SCORES_SHOWN};" in page
    chart = page.split('<svg class="sparkline"', 1)[1].split("</svg>", 1)[0]
    assert "<circle" not in chart
    for line in re.findall(r'<polyline class="run-\w" data-run="\w" points="([^"]*)"', chart):
        assert len(line.split()) <= 640
    assert len(page) < 200_000
    assert len(c.get("/api/compare", params={"a": run_id, "b": run_id}).json()["scores"]) == CYCLES


def test_show_lists_the_last_cycles_and_says_what_it_left_out(
    long_run: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3,000-cycle timeline was 3,000 rows on a terminal with nothing to say how to see
    less: ``show`` lists the last ``CYCLES_SHOWN`` after a line saying from which cycle (the
    earlier ones are not read, so not counted); the rows it renders do not grow with the run."""
    import re

    from loopwright.cli import _read_cmd, _render
    from loopwright.cli._read_cmd import CYCLES_SHOWN

    rendered: list[int] = []
    chunk = _render._timeline_chunk

    def counted(rows: list[Any], width: int, first: bool) -> Any:
        rendered.append(len(rows))
        return chunk(rows, width, first)

    monkeypatch.setattr(_render, "_timeline_chunk", counted)
    monkeypatch.setattr(_read_cmd, "to_terminal", lambda: True)  # a person's terminal
    url, run_id = long_run
    assert main(["show", run_id, "--store", url]) == 0
    out = capsys.readouterr().out
    first = CYCLES - CYCLES_SHOWN + 1
    assert (
        f"The timeline below lists the last {CYCLES_SHOWN} cycles, from cycle {first} (the "
        "earlier ones are not shown: --last N for more, --all for every one, --json for the "
        "whole record)"
    ) in " ".join(out.split())
    assert sum(rendered) == CYCLES_SHOWN
    shown = [int(c) for c in re.findall(r"^cycle (\d+) ", out, re.M)]
    assert shown == list(range(first, CYCLES + 1))
    assert str(CYCLES + 1) in out  # the artifacts table: the part's every version counted

    rendered.clear()
    assert main(["show", run_id, "--store", url, "--last", "7"]) == 0
    out = capsys.readouterr().out
    assert [int(c) for c in re.findall(r"^cycle (\d+) ", out, re.M)] == list(
        range(CYCLES - 6, CYCLES + 1)
    )
    assert sum(rendered) == 7


@pytest.mark.parametrize("how", [["--all"], []], ids=["all", "into-a-pipe"])
def test_show_all_lists_every_cycle(
    long_run: tuple[str, str], capsys: pytest.CaptureFixture[str], how: list[str]
) -> None:
    """``--all``, and ``show`` into a pipe or a file (what a script reads: capsys is not a
    terminal), list every cycle of a 3,000-cycle run."""
    import re
    import sys

    assert not sys.stdout.isatty()
    url, run_id = long_run
    assert main(["show", run_id, "--store", url, *how]) == 0
    out = capsys.readouterr().out
    assert [int(c) for c in re.findall(r"^cycle (\d+) ", out, re.M)] == list(range(1, CYCLES + 1))
    assert "earlier ones are not shown" not in out


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--last", "0"], "--last: must be at least 1 (--all for every cycle)"),
        (["--last", "3", "--all"], "--all: give --last or --all, not both"),
        (["--last", "3", "--json"], "--last: --json holds every cycle: --last is for the text"),
    ],
)
def test_show_refuses_a_timeline_window_it_cannot_give(
    long_run: tuple[str, str], capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    url, run_id = long_run
    assert main(["show", run_id, "--store", url, *args]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
