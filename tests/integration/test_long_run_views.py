"""A long run (3,000 cycles) stored as deltas and version rows still shows every cycle and
every version in ``loopwright show``, ``loopwright trace`` and the dashboard's API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

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
