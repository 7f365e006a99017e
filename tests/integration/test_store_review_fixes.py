"""Store findings of a review: searches that fold every script's case on SQLite as on
PostgreSQL, and what a store implementing only ``commit`` gets from the Store base class."""

from __future__ import annotations

import pytest

from loopwright.store import NewApproval, Store, open_store


def _run(store: Store, key: str, project: str = "p") -> str:
    rec, _ = store.create_run(
        run_id=f"run-{key}", task_key=key, loop_name="l", project=project, spec_ref=None,
        loop_version=None, contract={}, task={}, initial_state={"cycle": 0},
    )  # fmt: skip
    return rec.run_id


def _park(store: Store, run_id: str, what: str, why: str) -> None:
    token = store.acquire_lease(run_id, "me", 60)
    store.commit(
        run_id, token, seq=1, cycle=1, state={"cycle": 1}, record=None, events=[],
        run={"status": "awaiting_approval"},
        approvals=[NewApproval(
            approval_id=f"ap-{run_id}", cycle=1, kind="effect", rule=None, what=what, why=why,
            evidence={}, diff=None, action_hash="h", expires_at=None,
        )],
    )  # fmt: skip


@pytest.mark.parametrize(
    "term", ["Überweisung", "überweisung", "ÜBERWEISUNG", "MÜLLER", "müller", "ΣΩΚΡΆΤΗΣ"]
)
def test_an_approval_search_folds_the_case_of_every_script(url: str, term: str) -> None:
    # SQLite's LOWER and LIKE fold only ASCII: 'Überweisung' was not found on SQLite, while
    # PostgreSQL and the Store defaults (Python) find it.
    with open_store(url) as s:
        rid = _run(s, "k")
        _park(s, rid, "Überweisung an Müller", "Σωκράτης über Limit")
        _park(s, _run(s, "other"), "pay", "over limit")
        want = [a.approval_id for a in Store.page_approvals(s, search=term, limit=10)]
        assert want == [f"ap-{rid}"]
        assert [a.approval_id for a in s.page_approvals(search=term, limit=10)] == want
        assert s.count_approvals(search=term) == 1 == Store.count_approvals(s, search=term)
        assert s.count_approvals(search="uberweisung") == 0  # no accent folding, either store


def test_a_run_search_folds_the_case_of_every_script(url: str) -> None:
    with open_store(url) as s:
        rid = _run(s, "Straße-Überweisung", project="Zürich")
        _run(s, "plain", project="basel")
        for term in ("ÜBERWEISUNG", "zÜrich", "ZÜRICH", "straße"):
            assert [r.run_id for r in s.list_runs(search=term)] == [rid], term
            assert s.count_runs(search=term) == 1, term
