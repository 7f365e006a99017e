"""``GET /api/runs/{id}/parts/{artifact}/{part}/versions`` for a part whose name holds a slash
(an artifact's name may not, a part's may): the run page links there with the name as
written, and the API pages its versions."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")

from support.dashboard import dashboard

import loopwright as lw
from loopwright.web import _run_page

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"


def _loop() -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"sub/x": f"v{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding("open", "doc", "sub/x"),))

    return lw.Loop(
        name="slash",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=6)),
    )


def test_a_part_named_with_a_slash_is_paged_from_the_run_pages_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "s.db")
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), {"goal": "g", "artifacts": {"doc": {"sub/x": ""}}})
        part = rt.store.latest_checkpoint(r.run_id).task_state().part("doc/sub/x")
        assert part is not None
        every = [v.to_dict() for v in part.versions]
    assert len(every) == 7
    monkeypatch.setattr(_run_page, "VERSIONS_SHOWN", 2)
    client = dashboard(url, token=TOKEN)
    page = client.get(f"/runs/{r.run_id}")
    assert page.status_code == 200
    links = re.findall(r'href="(/api/runs/[^"]*/versions)"', page.text)
    assert links == [f"/api/runs/{r.run_id}/parts/doc/sub/x/versions"]
    got: list[dict[str, Any]] = []
    link = links[0] + "?limit=3"
    while True:
        resp = client.get(link)
        assert resp.status_code == 200, resp.text
        assert resp.headers["X-Total-Count"] == "7"
        got += resp.json()
        if "X-Next-Cursor" not in resp.headers:
            break
        link = resp.headers["Link"].split(">", 1)[0].lstrip("<")
    assert got == every
    # the slash written as %2F names the same part; an empty part name is a mistake (4xx)
    assert client.get(f"/api/runs/{r.run_id}/parts/doc/sub%2Fx/versions").json() == every[:50]
    assert client.get(f"/api/runs/{r.run_id}/parts/doc//versions").status_code == 400
    assert client.get(f"/api/runs/{r.run_id}/parts/doc/sub/y/versions").status_code == 404
