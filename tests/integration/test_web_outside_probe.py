"""What an outside tester found attacking the dashboard from its docs alone (web53, stop 53).

- The line a run's page shows after a form's post (``?msg=…&sig=…``) was signed for the
  message alone: the signed address of one run's "cancellation requested by ana", its run id
  changed, made another run's page say it in the dashboard's own voice, which is what the
  signature is there to prevent (docs/ui.md, Security). It is signed for the run's page now.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from fastapi.testclient import TestClient
from support.modules import load_sibling

import loopwright as lw
from loopwright.web import create_app

LOCAL = "http://127.0.0.1"
TOKEN = "probe-token-0123456789"


def _web() -> ModuleType:
    return load_sibling(__file__, "test_web.py", "_web_helpers_outside_probe")


def _other_run(store: str) -> str:
    loop = lw.Loop(
        name="other",
        actor=lambda ctx: lw.Proposal.edit("doc", {"v": 1}),
        verifiers=[lambda s, p: lw.Verdict(passed=True, score=1.0)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(store) as rt:
        return rt.create(loop, {"artifacts": {"doc": {"v": 0}}}, task_key="other")[0].run_id


def test_a_signed_message_of_one_run_is_not_shown_on_another_runs_page(tmp_path: Path) -> None:
    store, run_id = _web().make_parked_run(tmp_path)
    other = _other_run(store)
    c = TestClient(create_app(store, token=TOKEN, identity="ana"), base_url=LOCAL)
    c.post("/login", data={"token": TOKEN}, follow_redirects=False)
    page = c.get(f"/runs/{run_id}").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf is not None
    done = c.post(
        f"/runs/{run_id}/act",
        data={"csrf": csrf.group(1), "action": "cancel"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    where = urlsplit(done.headers["location"])
    shown = c.get(f"{where.path}?{where.query}").text
    line = re.search(r'<p class="flash">([^<]+)</p>', shown)
    assert line is not None and "cancel" in line.group(1)  # its own run's page shows it
    moved = c.get(f"/runs/{other}?{where.query}").text
    assert '<p class="flash">' not in moved, "another run's page said what was done to this one"
