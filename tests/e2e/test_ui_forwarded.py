"""`loopwright ui` takes the client's address from the connection, never from a header.

Uvicorn trusts ``X-Forwarded-For`` from 127.0.0.1 by default, and every client of a loopback
dashboard is 127.0.0.1: a header chose the address the audit log records for a sign-in or a
decision, and a new address per refused sign-in wrote an audit record each, the log the
once-per-source window keeps from being filled.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from support.modules import load_sibling

import loopwright as lw
from loopwright._authority import hash_token

ROOT = "tok-root-0123456789"


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_a_forwarded_for_header_names_no_source(tmp_path: Path) -> None:
    store = str(tmp_path / "ui.db")
    with lw.Runtime(store) as rt:
        rt.store.add_user("root", roles=["admin"], limits={}, by="test", now=time.time())
        rt.store.set_token("root", hash_token(ROOT), now=time.time())
    serve = load_sibling(__file__, "test_browser.py", "_forwarded_serve")._serve
    with serve(store, tmp_path) as base:
        for i in range(3):
            form = {"Content-Type": "application/x-www-form-urlencoded"}
            status = _post(
                base + "/login",
                b"token=wrong-token-0123",
                {**form, "X-Forwarded-For": f"10.9.8.{i}"},
            )
            assert status == 403
        req = urllib.request.Request(
            base + "/api/audit", headers={"Authorization": f"Bearer {ROOT}"}
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            rows = json.load(r)
    refused = [r for r in rows if r["action"] == "sign in" and r["outcome"] == "refused"]
    # one record for the one source (the others counted), under the connection's address
    assert [r["origin"] for r in refused] == ["http 127.0.0.1"]
