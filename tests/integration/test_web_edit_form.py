"""The run page's edit box clears a text part (outside probe, stop 48): the form's empty value
was taken for a missing one ("value: Field required", 422), so a person could not empty a wrong
title from the dashboard, though ``POST /api/runs/{id}/parts/...`` with ``{"value": ""}`` could.
A form that sends no value at all is a 400 that says so, after the CSRF check.
"""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient
from support.dashboard import dashboard

import loopwright as lw
from loopwright.store import open_store

TOKEN = "edit-form-token-0123456789"
LOCAL = "http://127.0.0.1"
HTML = {"accept": "text/html"}


def _titled(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"title": "Wrong title"})


def _passes(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def _ended_run(tmp_path: Path) -> tuple[str, str]:
    """An accepted run whose text part ``doc/title`` reads "Wrong title"; (store, run id)."""
    store = str(tmp_path / "edit.db")
    loop = lw.Loop(
        name="titled",
        actor=_titled,
        verifiers=[_passes],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(store) as rt:
        res = rt.run_sync(loop, {"artifacts": {"doc": {"title": ""}}}, task_key="title-1")
    assert res.status == "accepted"
    return store, res.run_id


def _signed_in(store: str, run_id: str) -> tuple[TestClient, str]:
    c = dashboard(store, token=TOKEN, identity="ana")
    r = c.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get(f"/runs/{run_id}").text)
    assert csrf is not None
    return c, csrf.group(1)


def test_the_edit_box_clears_a_text_part(tmp_path: Path) -> None:
    store, run_id = _ended_run(tmp_path)
    c, csrf = _signed_in(store, run_id)
    form = {"csrf": csrf, "ref": "doc/title", "value": "", "note": "no title yet"}
    r = c.post(f"/runs/{run_id}/edit", data=form, headers=HTML, follow_redirects=False)
    assert r.status_code == 303, r.text  # before: 422 "value: Field required"
    with open_store(store) as st:
        state = st.latest_checkpoint(run_id).task_state()
        edits = [e.data for e in st.events(run_id) if e.kind == "edited"]
    assert state.artifacts["doc"].values()["title"] == ""
    assert [(e["part"], e["by"], e["note"]) for e in edits] == [
        ("doc/title", "ana", "no title yet")
    ]


def test_a_form_without_a_value_is_refused_in_words(tmp_path: Path) -> None:
    store, run_id = _ended_run(tmp_path)
    c, csrf = _signed_in(store, run_id)
    r = c.post(f"/runs/{run_id}/edit", data={"csrf": csrf, "ref": "doc/title"}, headers=HTML)
    assert r.status_code == 400 and "the form sent no value for the part" in r.text
    # the CSRF token is checked first, as for every form
    r = c.post(f"/runs/{run_id}/edit", data={"ref": "doc/title"}, headers=HTML)
    assert r.status_code == 403
    with open_store(store) as st:
        assert not [e for e in st.events(run_id) if e.kind == "edited"]
