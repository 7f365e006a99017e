"""For any run, the spend of ``show``'s rows, of ``show --json``'s records and of the run
page's rows (its page and ``/api/runs/{id}``) sums to the run's spend, and every cycle a person
decided is listed once with its outcome.

A cycle counted as concluded by its number: a run parked at cycle 1, denied, resumed
(escalated), edited by a person (which reopens it) and resumed judges the edit in a check-only
cycle also numbered 1. The denied cycle then showed its marker only and its spend was lost
(rows $0.01, run $0.07); and between the edit and the resume its row read "not applied yet",
"ended" being read from the run's status, not from the decision stored for its request."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.dashboard import dashboard
from support.printed import shown_text
from test_show_ended_inside import _json
from test_show_parked_cost import TASK, _loop

import loopwright as lw
from loopwright.store import Approval, open_store

_COST = re.compile(r"\$(\d+\.\d+)\s*$")


def _timeline(text: str) -> list[str]:
    """``show``'s timeline lines (a cycle's head line ends with its cost, if it lists one)."""
    return text.split("\nTimeline\n", 1)[1].split("\nArtifacts", 1)[0].splitlines()


def _check(url: str, run_id: str) -> None:
    """The invariant, on every view of the run."""
    with lw.Runtime(url) as rt:
        rec = rt.store.get_run(run_id)
        approvals = rt.store.approvals(run_id=run_id)
    spent = rec.cost_usd
    assert spent > 0

    lines = _timeline(shown_text(url, run_id)[0])
    heads = [ln for ln in lines if ln.startswith("cycle ")]
    listed = sum(float(m.group(1)) for ln in heads if (m := _COST.search(ln)))
    assert listed == pytest.approx(spent), "\n".join(lines)

    doc = _json(url, run_id)
    assert sum((c.get("usage") or {}).get("cost_usd", 0) for c in doc["cycles"]) == pytest.approx(
        spent
    )

    pytest.importorskip("fastapi")

    from loopwright.web._run_page import run_payload

    api = dashboard(url, token="t" * 32)
    streamed = api.get(f"/api/runs/{run_id}").json()["timeline"]
    st = open_store(url)
    try:
        paged = run_payload(st, run_id)["timeline"]
    finally:
        st.close()
    for rows in (streamed, paged):
        assert sum(t.get("cost_usd") or 0 for t in rows) == pytest.approx(spent), rows

    page = " ".join(api.get(f"/runs/{run_id}").text.split())
    for a in approvals:
        _listed_once(a, heads, doc["cycles"], streamed, paged)
        outcome = "expired" if a.status == "expired" else f"{a.status} by ann"
        assert page.count(f"parked for approval: {outcome}") == 1, page


def _listed_once(
    a: Approval,
    heads: list[str],
    records: list[dict[str, Any]],
    *rows: list[dict[str, Any]],
) -> None:
    """A decided request's cycle is listed once, with its outcome: denied or expired, one
    row saying so and never applied (with what it spent); approved, its marker and no row
    saying it was parked and not applied."""
    parked = [r for r in records if r.get("approval_id") == a.approval_id]
    assert len(parked) == 1 and parked[0]["decision"] == "parked", records
    said = [h for h in heads if h.startswith(f"cycle {a.cycle} ") and "parked for" in h]
    carried = a.approval_id in CARRIED
    if a.status in ("denied", "expired") and not carried:
        outcome = "denied by ann" if a.status == "denied" else "expired"
        assert len(said) == 1 and f"{outcome}, never applied" in said[0], heads
        assert (parked[0].get("usage") or {}).get("cost_usd", 0) > 0
        for shown in rows:
            mine = [t for t in shown if t["cycle"] == a.cycle and t.get("unapplied")]
            assert len(mine) == 1 and f"{outcome}, never applied" in mine[0]["decision"]
            assert mine[0]["cost_usd"] > 0
    else:  # approved; or denied while an edit stood beside it: the check-only cycle that
        # judged the edit went on from the parked state, and its row holds what it spent
        outcome = f"{a.status} by ann"
        assert said == [f"cycle {a.cycle}  parked for approval: {outcome}"], heads
        for shown in rows:
            mine = [t for t in shown if t["cycle"] == a.cycle and t.get("parked")]
            assert [t.get("outcome") for t in mine] == [outcome], mine
            assert not [
                t for t in shown if t["cycle"] == a.cycle and "parked for" in str(t.get("decision"))
            ]


CARRIED: set[str] = set()  # requests denied while an edit stood beside their cycle


def _approve(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    rt.approve(r.run_id, by="ann")
    return rt.resume_sync(r.run_id, _loop())


def _deny(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    rt.deny(r.run_id, by="ann")
    out = rt.resume_sync(r.run_id, _loop())
    assert out.status == "escalated"
    return out


def _deny_edit_resume(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    r = _deny(rt, r)
    rt.edit(r.run_id, "inv/x", 2, by="ana")  # reopens the run
    return rt.resume_sync(r.run_id, _loop())  # judges the edit: a check-only cycle 1


def _edit_beside_then_deny(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    rt.edit(r.run_id, "inv/x", 2, by="ana")  # while cycle 1 waits
    req = rt.pending_approval(r.run_id)
    assert req is not None
    CARRIED.add(req.approval_id)
    rt.deny(r.run_id, by="ann")
    return rt.resume_sync(r.run_id, _loop())  # judges the edit, then escalates on the denial


def _expire(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    req = rt.pending_approval(r.run_id)
    assert req is not None and req.expires_at is not None
    # its time is over (the clock moved, not waited for)
    real = time.time
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "time", lambda: real() + 2 * 3600)
        out = rt.resume_sync(r.run_id, _loop(expires=True))
    assert rt.store.approval(req.approval_id).status == "expired"  # type: ignore[union-attr]
    return out


def _approve_then_effect_fails(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    rt.approve(r.run_id, by="ann")
    return rt.resume_sync(r.run_id, _loop(fails=True))


def _effects_fail_edit_resume(rt: lw.Runtime, r: lw.RunResult) -> lw.RunResult:
    r = _approve_then_effect_fails(rt, r)
    assert r.status == "escalated"
    rt.edit(r.run_id, "inv/x", 2, by="ana")
    return rt.resume_sync(r.run_id, _loop())  # a check-only cycle 1 again


SCENARIOS: dict[str, tuple[Callable[[lw.Runtime, lw.RunResult], lw.RunResult], str]] = {
    "park, approve": (_approve, "accepted"),
    "park, deny": (_deny, "escalated"),
    "park, deny, edit, resume": (_deny_edit_resume, "accepted"),
    "park, edit beside it, deny": (_edit_beside_then_deny, "accepted"),
    "park, expire": (_expire, "escalated"),
    "park, approve, effects fail": (_approve_then_effect_fails, "escalated"),
    "park, approve, effects fail, edit, resume": (_effects_fail_edit_resume, "accepted"),
}


@pytest.mark.parametrize("how", list(SCENARIOS))
def test_rows_add_up_to_the_runs_spend(tmp_path: Any, how: str) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    step, status = SCENARIOS[how]
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(expires=how == "park, expire"), TASK, task_key=how)
        assert r.status == "awaiting_approval"
        r = step(rt, r)
    assert r.status == status, r.stop_reason
    _check(url, r.run_id)


def test_effects_failing_without_a_request_add_up(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop("allow", fails=True), TASK, task_key="fails")
    assert r.status == "escalated"
    _check(url, r.run_id)


def test_a_denied_cycle_reads_never_applied_once_the_run_is_reopened(tmp_path: Any) -> None:
    """Between the edit (the run reopened) and the resume, the denied cycle is not "not
    applied yet": its request was denied, and approving it is no longer possible."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    with lw.Runtime(url) as rt:
        r = _deny(rt, rt.run_sync(_loop(), TASK, task_key="reopened"))
        rt.edit(r.run_id, "inv/x", 2, by="ana")
        assert rt.store.get_run(r.run_id).status not in ("escalated", "awaiting_approval")
    heads = [ln for ln in _timeline(shown_text(url, r.run_id)[0]) if ln.startswith("cycle 1")]
    assert any("denied by ann, never applied" in h for h in heads), heads
    assert not any("not applied yet" in h for h in heads), heads


@pytest.mark.postgres
def test_rows_add_up_on_postgresql(pg_url: str) -> None:
    with lw.Runtime(pg_url) as rt:
        r = _deny_edit_resume(rt, rt.run_sync(_loop(), TASK, task_key="pg"))
    assert r.status == "accepted"
    _check(pg_url, r.run_id)
