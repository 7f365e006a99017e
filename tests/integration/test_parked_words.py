"""What the dashboard says of a parked run (stop 53): a run parked with nothing pending (its
request decided, its pause lifted, before a worker resumes it) is not "waiting for a person to
decide" in a list of runs, told by the run row's count of pending requests (no request read
per row); and the run page tells one who may not decide its request what they can do.
SQLite and PostgreSQL (``url``)."""

from __future__ import annotations

import re

from doc_loop import TASK
from fastapi.testclient import TestClient
from test_engine_core import make_loop
from test_pause_audit import _people, _runs, _tok
from test_pause_surface import LOCAL, SERVER, _parked_on_risk, _sign_in

import loopwright as lw
from loopwright._state import TaskState
from loopwright.web import create_app
from loopwright.web._views import next_action_here

WAITING = "waiting for a person to decide"
DECIDED = "its request was decided; it waits to be resumed"


def test_a_list_of_runs_says_a_lifted_pause_waits_to_be_resumed(url: str) -> None:
    """After an unpause (or a decision without ``--resume``), before a worker resumes the run,
    the runs list, ``/api/runs`` and the API's ``run`` said it waited for a person to decide a
    request: ``run_summary`` read no requests. The run row's count says nothing is pending."""
    rid, _ended = _runs(url)
    with lw.Runtime(url) as rt:
        rt.pause(rid, by="op")
        paused = rt.store.get_run(rid)
        rt.unpause(rid, by="op")
        lifted = rt.store.get_run(rid)
    c = TestClient(create_app(url, token=SERVER), base_url=LOCAL)
    [row] = [r for r in c.get("/api/runs").json() if r["run_id"] == rid]
    assert row["stop_words"] == DECIDED, row
    listed = c.get("/").text
    assert DECIDED in listed and WAITING not in listed
    assert c.get(f"/api/runs/{rid}").json()["run"]["stop_words"] == DECIDED
    assert (paused.status, paused.open_requests) == ("awaiting_approval", 1)
    assert (lifted.status, lifted.open_requests) == ("awaiting_approval", 0)


def test_a_list_of_runs_still_says_a_pending_request_waits(url: str) -> None:
    rid = _parked_on_risk(url)
    c = TestClient(create_app(url, token=SERVER), base_url=LOCAL)
    [row] = [r for r in c.get("/api/runs").json() if r["run_id"] == rid]
    assert row["stop_words"].startswith(WAITING), row


def _next_action(app: object, rid: str, token: str | None) -> str:
    c = TestClient(app, base_url=LOCAL)  # type: ignore[arg-type]
    if token is not None:
        _sign_in(c, token)
    m = re.search(r'<dd id="next-action">([^<]*)</dd>', c.get(f"/runs/{rid}").text)
    assert m
    return m.group(1)


def test_the_run_page_tells_who_may_not_decide_what_they_can_do(url: str) -> None:
    """The page said "Decide the request below: approve or deny it" to a viewer, who is shown
    no Approve or Deny, and to one not signed in; and to an approver whose limits keep them
    from approving it (shown Deny only). Each is told what they can do."""
    rid = _parked_on_risk(url)
    # (a store without users: anyone reads the page)
    nobody = _next_action(create_app(url, token=SERVER), rid, None)
    assert "sign in (as an approver" in nobody, nobody
    _people(url)
    app = create_app(url, token=SERVER)
    viewer = _next_action(app, rid, _tok("rd"))
    assert "approve or deny it (you must be signed in)" not in viewer, viewer
    assert "an approver approves or denies it; rd may not" in viewer, viewer
    assert _next_action(app, rid, _tok("ap")).startswith("Decide the request below: approve")
    # an approver the request's rule keeps from approving it (``WebContext.blocked``: its
    # card offers Deny only)
    with lw.Runtime(url) as rt:
        rec, approvals = rt.store.get_run(rid), rt.store.approvals(run_id=rid)
    [req] = approvals
    limited = next_action_here(
        rec, TaskState(), approvals, may_decide=True, blocked={req.approval_id}, who="sp"
    )
    assert "sp may deny it, not approve it" in limited, limited


def test_the_run_page_says_a_question_is_answered_not_approved(url: str) -> None:
    """A run parked on a question: the page said "approve or deny it", while the question's
    card offers Answer (and Decline), as `loopwright answer` does (polish53)."""

    def asking(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(question=lw.Question("which tone?"))

    with lw.Runtime(url) as rt:
        rid = rt.run_sync(make_loop(asking), TASK, task_key="asked").run_id
        assert rt.store.get_run(rid).status == "awaiting_approval"
    nobody = _next_action(create_app(url, token=SERVER), rid, None)
    assert "to answer it" in nobody and "approve or deny" not in nobody, nobody
    _people(url)
    app = create_app(url, token=SERVER)
    said = _next_action(app, rid, _tok("ap"))
    assert said.startswith("Answer the question below"), said
    assert "approve or deny" not in said, said
    viewer = _next_action(app, rid, _tok("rd"))
    assert "an approver answers it; rd may not" in viewer, viewer
