"""A request's card says a part was edited after the request was made: its diff and evidence
show the state before the edit, and approving judges the cycle again on the edited state.
Before, `loopwright approvals`, `loopwright show`, the dashboard's inbox and run page and
``/api/approvals`` showed the card as written, nothing said of the edit. The edits of a whole
listing are read in one query, not one a card. SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from support.dashboard import dashboard
from test_approval_card_reuse_listed import _cli, _words
from test_show_parked_cost import TASK, _loop

import loopwright as lw
from loopwright._reuse_now import as_now

SAID = (
    "edited since the request: inv/x by ana; the diff shows the state before the edit, "
    "and approving judges the edited state"
)


def test_a_card_says_a_part_was_edited_since_the_request(url: str) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK, task_key="edited")
        other = rt.run_sync(_loop(), TASK, task_key="not edited").run_id
        [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
        assert "edited since" not in as_now(rt.store, [req])[0].what  # nothing edited yet
        rt.edit(r.run_id, "inv/x", 2, by="ana")
    listed = _words(_cli(url, "approvals"))
    assert listed.count(SAID) == 1, listed  # its card only, not the other run's
    assert SAID in _words(_cli(url, "show", r.run_id))
    assert SAID not in _words(_cli(url, "show", other))
    c = dashboard(url, token="test-token-0123456789")
    for page in ("/approvals", f"/runs/{r.run_id}"):
        assert SAID in _words(c.get(page).text), page
    api = {x["approval_id"]: x["what"] for x in c.get("/api/approvals").json()}
    assert SAID in api[req.approval_id]
    assert [w for w in api.values() if SAID in w] == [api[req.approval_id]]
    with lw.Runtime(url) as rt:
        assert SAID not in rt.store.approval(req.approval_id).what  # type: ignore[union-attr]
        rt.approve(r.run_id, by="ann")
        [decided] = as_now(rt.store, [rt.store.approval(req.approval_id)])  # type: ignore[list-item]
        assert SAID not in decided.what  # said of a request still waiting only
        assert rt.resume_sync(r.run_id, _loop()).status == "accepted"


def test_the_edits_of_a_listing_are_read_at_once(url: str) -> None:
    with lw.Runtime(url) as rt:
        runs = [rt.run_sync(_loop(), TASK, task_key=f"t{i}").run_id for i in range(3)]
        for rid in runs[:2]:
            rt.edit(rid, "inv/x", 2, by="ana")
        reqs = [a for rid in runs for a in rt.store.approvals(run_id=rid)]
        reads: list[Any] = []
        store = rt.store
        one, many = store.events_of_kinds, store.events_of_runs
        store.events_of_kinds = lambda *a, **k: reads.append("one") or one(*a, **k)  # type: ignore[method-assign]
        store.events_of_runs = lambda *a, **k: reads.append("many") or many(*a, **k)  # type: ignore[method-assign]
        try:
            shown = as_now(store, reqs * 10)
        finally:
            del store.events_of_kinds, store.events_of_runs
    assert reads == ["many"], reads
    assert [SAID in a.what for a in shown[:3]] == [True, True, False]


def test_the_stores_read_the_edits_of_several_runs_as_the_default_does(url: str) -> None:
    from loopwright.store._protocol_commit import CommitStore

    with lw.Runtime(url) as rt:
        runs = [rt.run_sync(_loop(), TASK, task_key=f"t{i}").run_id for i in range(2)]
        rt.edit(runs[0], "inv/x", 2, by="ana")
        rt.edit(runs[0], "inv/x", 3, by="bo")
        st = rt.store
        for since in (None, "approval_requested", "no such kind"):
            for kinds in (("edited",), ("edited", "approval_requested")):
                got = st.events_of_runs([*runs, "nope"], kinds, since=since)
                assert got == CommitStore.events_of_runs(st, [*runs, "nope"], kinds, since=since)
        edits = st.events_of_runs(runs, ("edited",), since="approval_requested")
        assert list(edits) == [runs[0]]
        assert [e.data["by"] for e in edits[runs[0]]] == ["ana", "bo"]
