"""Text the stores cannot keep, sent to the dashboard's API, is a 400 that changes nothing.

A lone surrogate (JSON's ``"\\udfff"``) was stored by an edit, after which the run's page and
``/api/runs/{id}`` answered 500 for good (nothing can encode it as UTF-8); in a decision's note
or a rerun's task key it was a 500. A NUL character in a note or task key was PostgreSQL's
``DataError`` as a 409; in a path or query (an id, a filter, a search) a 500 on PostgreSQL.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw

TOKEN = "test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
LOCAL = "http://127.0.0.1"


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"pay": 10})


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


LOOP = lw.Loop(
    name="text",
    actor=_actor,
    verifiers=[lw.Check(fn=_check)],
    contract=lw.Contract(
        budget=lw.Budget(max_cycles=3),
        risk=(lw.RiskRule(name="pay", touches=("doc/pay",)),),
    ),
)


@pytest.fixture
def parked(url: str) -> tuple[TestClient, str, str]:
    """A client over a store (SQLite, PostgreSQL) holding a run parked on one request."""
    with lw.Runtime(url) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"pay": 0, "memo": ""}}}, task_key="t")
    assert res.status == "awaiting_approval"
    client = dashboard(url, token=TOKEN)
    [a] = client.get("/api/approvals").json()
    return client, res.run_id, a["approval_id"]


def test_a_lone_surrogate_in_an_edit_is_refused_and_the_run_page_still_renders(
    parked: tuple[TestClient, str, str],
) -> None:
    client, run_id, _ = parked
    for body in ('{"value": "a\\udfffb"}', '{"value": {"\\udfff": 1}}'):
        r = client.post(f"/api/runs/{run_id}/parts/doc/memo", content=body, headers=AUTH)
        assert r.status_code == 400, r.text
        assert "lone surrogate (\\udfff)" in r.json()["detail"]
    assert client.get(f"/runs/{run_id}").status_code == 200
    assert client.get(f"/api/runs/{run_id}").json()["edits"] == []


def test_runtime_edit_refuses_a_lone_surrogate(tmp_path: Path) -> None:
    """The CLI's `edit --value '"\\ud800"'` and Python reach the same check."""
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"pay": 0, "memo": ""}}}, task_key="t")
        with pytest.raises(lw.ConfigError, match="lone surrogate"):
            rt.edit(res.run_id, "doc/memo", ["ok", "\ud800"], by="ana")


@pytest.mark.parametrize("note", ["a\ud800b", "a\x00b"], ids=["surrogate", "nul"])
def test_runtime_refuses_a_note_that_is_not_storable_text(tmp_path: Path, note: str) -> None:
    """Python reaches the same check: on SQLite such a note was kept, in the append-only audit
    log too, whose page then answered 500 for good."""
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"pay": 0, "memo": ""}}}, task_key="t")
        for decide in (rt.deny, rt.approve):
            with pytest.raises(lw.ConfigError, match="note"):
                decide(res.run_id, by="ana", note=note)
        with pytest.raises(lw.ConfigError, match="note"):
            rt.edit(res.run_id, "doc/memo", "x", by="ana", note=note)
        [a] = rt.store.approvals(run_id=res.run_id)
        assert a.status == "pending"
        assert repr(note)[1:-1] not in repr(rt.store.audit())  # refused before it is recorded
    client = dashboard(str(tmp_path / "s.db"), token=TOKEN)
    assert client.get("/audit").status_code == 200


@pytest.mark.parametrize(
    "note",
    ['"a\\ud800b"', '"a\\u0000b"'],
    ids=["surrogate", "nul"],
)
def test_a_note_that_is_not_storable_text_leaves_the_request_pending(
    parked: tuple[TestClient, str, str], note: str
) -> None:
    client, run_id, approval_id = parked
    for how in ("deny", "approve"):
        r = client.post(
            f"/api/approvals/{approval_id}/{how}", content=f'{{"note": {note}}}', headers=AUTH
        )
        assert r.status_code == 400, r.text
    r = client.post(
        f"/api/runs/{run_id}/parts/doc/memo", content=f'{{"value": "x", "note": {note}}}',
        headers=AUTH,
    )  # fmt: skip
    assert r.status_code == 400, r.text
    [a] = client.get(f"/api/approvals?run_id={run_id}&status=").json()
    assert a["status"] == "pending"
    assert client.get(f"/api/runs/{run_id}").json()["edits"] == []


@pytest.mark.parametrize("key", ['"k\\ud800"', '"k\\u0000"'], ids=["surrogate", "nul"])
def test_a_rerun_task_key_that_is_not_storable_text_is_refused(
    parked: tuple[TestClient, str, str], key: str
) -> None:
    client, run_id, _ = parked
    body = f'{{"at_cycle": 0, "task_key": {key}, "start": false}}'
    r = client.post(f"/api/runs/{run_id}/rerun", content=body, headers=AUTH)
    assert r.status_code == 400, r.text
    assert len(client.get("/api/runs").json()) == 1


def test_a_nul_in_a_path_or_query_is_400(parked: tuple[TestClient, str, str]) -> None:
    client, run_id, _ = parked
    for path in (
        "/api/runs/%00",
        "/runs/ab%00",
        "/api/runs?q=%00",
        "/api/runs?status=%00",
        "/?project=a%00",
        "/approvals?q=%00",
        "/api/approvals?run_id=%00",
        "/api/audit?actor=%00",
        f"/api/compare?a={run_id}&b=%00",
    ):
        r = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 400, (path, r.status_code, r.text[:200])
        assert "NUL" in r.json()["detail"]


def test_a_malformed_part_ref_in_a_picture_link_is_400(
    parked: tuple[TestClient, str, str],
) -> None:
    """``/runs/{id}/svg`` and ``/image`` read ``ref`` from the link: one that is not
    ``artifact/part`` was the state's ConfigError, a 500."""
    client, run_id, _ = parked
    for route in ("svg", "image"):
        for ref in ("", "memo", "/memo", "doc/"):
            r = client.get(f"/runs/{run_id}/{route}", params={"ref": ref, "v": 1})
            assert r.status_code == 400, (route, ref, r.status_code)
            assert "artifact/part" in r.json()["detail"]
        assert client.get(f"/runs/{run_id}/{route}", params={"ref": "doc/nope"}).status_code == 404


def test_a_lone_surrogate_an_older_release_stored_is_shown_as_u_fffd(tmp_path: Path) -> None:
    """Such text already in a store (releases before it was refused kept it, JSON-escaped, in
    a version, an event, an audit record) made the run's page, ``/api/runs/{id}`` and
    ``/audit`` answer 500 for good. It now reads back as U+FFFD."""
    import sqlite3

    url = f"sqlite:///{tmp_path}/old.db"
    with lw.Runtime(url) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"pay": 0, "memo": ""}}}, task_key="t")
    client = dashboard(url, token=TOKEN)
    [a] = client.get("/api/approvals").json()
    r = client.post(f"/api/approvals/{a['approval_id']}/approve", json={"note": "ok"}, headers=AUTH)
    assert r.status_code == 200, r.text
    bad = '"a\\ud83db"'  # as the JSON text of an older release held it
    with contextlib.closing(sqlite3.connect(tmp_path / "old.db")) as db, db:
        db.execute(f"UPDATE versions SET value = '{bad}' WHERE ref = 'doc/memo'")
        db.execute(
            "UPDATE events SET data = substr(data, 1, length(data) - 1) || ?"
            " WHERE data LIKE '{%}' AND data != '{}'",
            (f',"x":{bad}}}',),
        )
        # the audit log is append-only: an older release's record is one more row
        db.execute(
            "INSERT INTO audit (at, actor, action, target, outcome, origin, detail)"
            " SELECT at, actor, action, target, outcome, origin,"
            " substr(detail, 1, length(detail) - 1) || ? FROM audit",
            (f',"x":{bad}}}',),
        )
    for path in (f"/runs/{res.run_id}", f"/api/runs/{res.run_id}", "/audit", "/api/audit"):
        r = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, (path, r.text[:300])
        assert "a\ufffdb" in r.text or "a\\ufffdb" in r.text, path


def test_an_edit_nested_deeper_than_the_store_writes_is_400(
    parked: tuple[TestClient, str, str],
) -> None:
    """A value 600 lists deep passed every check and failed the commit with a RecursionError:
    a 500 from the form and the API (``internal error`` from ``loopwright edit``). It is
    refused as a mistake; one as deep as the limit is stored and the run page renders."""
    from loopwright._json import MAX_DEPTH

    client, run_id, _ = parked
    deep = "[" * 600 + "1" + "]" * 600
    r = client.post(
        f"/api/runs/{run_id}/parts/doc/memo", content=f'{{"value": {deep}}}', headers=AUTH
    )
    assert r.status_code == 400, r.text
    assert f"nested at most {MAX_DEPTH} deep" in r.json()["detail"]
    assert client.get(f"/api/runs/{run_id}").json()["edits"] == []
    ok = "[" * MAX_DEPTH + "1" + "]" * MAX_DEPTH
    r = client.post(
        f"/api/runs/{run_id}/parts/doc/memo", content=f'{{"value": {ok}}}', headers=AUTH
    )
    assert r.status_code == 200, r.text
    assert client.get(f"/runs/{run_id}").status_code == 200


def test_runtime_edit_refuses_a_value_that_contains_itself(tmp_path: Path) -> None:
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"pay": 0, "memo": ""}}}, task_key="t")
        loop: list[object] = []
        loop.append(loop)
        with pytest.raises(lw.ConfigError, match="value must be JSON"):  # not a loop forever
            rt.edit(res.run_id, "doc/memo", loop, by="ana")


@pytest.mark.parametrize(
    ("how", "body", "said"),
    [
        ("deny", '{"note": "a\\u0000b"}', "NUL"),
        ("approve", '{"note": "a\\u0000b"}', "NUL"),
        ("approve", '{"note": "a\\ud800b"}', "lone surrogate (\\ud800)"),
        ("answer", '{"answer": "a\\u0000b"}', "NUL"),
        ("answer", '{"answer": {"x": "\\ud800"}}', "lone surrogate (\\ud800)"),
    ],
    ids=["deny-nul", "approve-nul", "approve-surrogate", "answer-nul", "answer-surrogate"],
)
def test_a_decision_refused_for_text_the_store_cannot_keep_is_audited(
    parked: tuple[TestClient, str, str], how: str, body: str, said: str
) -> None:
    """A note holding an escape character was refused by the engine and audited; one holding
    a NUL or a lone surrogate was refused by the web layer first and recorded nowhere."""
    client, run_id, approval_id = parked
    r = client.post(f"/api/approvals/{approval_id}/{how}", content=body, headers=AUTH)
    assert r.status_code == 400, r.text
    [rec] = client.get("/api/audit", headers=AUTH).json()
    assert (rec["actor"], rec["action"], rec["target"]) == ("operator", how, f"run {run_id}")
    assert rec["outcome"] == "refused" and said in rec["detail"]["reason"]
    assert set(rec["detail"]) == {"reason"}  # the reason, not the text
    [a] = client.get(f"/api/approvals?run_id={run_id}&status=").json()
    assert a["status"] == "pending"


def test_a_form_decision_with_a_nul_is_audited(parked: tuple[TestClient, str, str]) -> None:
    client, run_id, approval_id = parked
    client.post("/login", data={"token": TOKEN})
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/approvals").text)
    assert csrf
    r = client.post(
        f"/approvals/{approval_id}/decide",
        data={"csrf": csrf.group(1), "action": "deny", "note": "a\x00b"},
    )
    assert r.status_code == 400, r.text
    rows = client.get("/api/audit").json()
    assert [(a["action"], a["outcome"], a["target"]) for a in rows] == [
        ("deny", "refused", f"run {run_id}")
    ]
    assert "NUL" in rows[0]["detail"]["reason"]
