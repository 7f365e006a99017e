"""The dashboard's audit page with a long note (docs/permissions.md, docs/ui.md). A decision's
note may be as long as the request body allows (1 MiB by default), and the audit page printed
every record's detail whole: a 900 KB note made a 900 KB page, and a hundred such decisions
(one page of the log) a page of about 100 MB for everyone who opens the audit log. The page now
cuts each value of the detail, as the run page cuts a note; the export keeps it whole."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import ModuleType

from fastapi.testclient import TestClient
from support.modules import load_sibling

import loopwright as lw
from loopwright.web import create_app


def _people() -> ModuleType:
    return load_sibling(__file__, "test_web_people.py", "_web_people_helpers_audit")


def test_the_audit_page_cuts_a_long_note_and_the_export_keeps_it(tmp_path: Path) -> None:
    people = _people()
    store, run_id = people._web().make_parked_run(tmp_path)
    people.add_people(store)
    c = TestClient(create_app(store, token=people.SERVER_TOKEN), base_url=people.LOCAL)
    aid = people.pending_id(store, run_id)
    note = "checked " + "N" * 200_000
    r = c.post(f"/api/approvals/{aid}/deny", headers=people.bearer("ana"), json={"note": note})
    assert r.status_code == 200, r.text
    people.sign_in(c, "vic")
    page = c.get("/audit")
    assert page.status_code == 200
    assert "checked NNN" in page.text and len(page.text) < 50_000
    export = c.get("/api/audit?format=jsonl", headers=people.bearer("vic")).text
    [denied] = [json.loads(x) for x in export.splitlines() if json.loads(x)["action"] == "deny"]
    assert denied["actor"] == "ana" and denied["detail"]["note"] == note


def test_an_actor_stored_with_a_bidi_override_is_isolated_on_the_page(tmp_path: Path) -> None:
    """Rows stored before names were checked (or typed as ``--by`` by an older release) may
    hold a right-to-left override: each value sits in its own ``<bdi>``, so it cannot reorder
    the row's other cells (probe46c), and the override is written out (``\\u202e``, stop 48),
    so the name reads in its stored order."""
    people = _people()
    store, _run_id = people._web().make_parked_run(tmp_path)
    people.add_people(store)
    with lw.Runtime(store) as rt:
        rt.store.audit_put(
            actor="ro\u202eot",
            action="approve",
            target="run x",
            outcome="refused",
            origin="cli",
            detail={"why": "x"},
            now=time.time(),
        )
    c = TestClient(create_app(store, token=people.SERVER_TOKEN), base_url=people.LOCAL)
    people.sign_in(c, "vic")
    page = c.get("/audit").text
    assert "<td><bdi>ro\\u202eot</bdi></td>" in page
    assert "<code><bdi>run x</bdi></code>" in page
