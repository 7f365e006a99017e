"""Store findings of a review: searches that fold every script's case on SQLite as on
PostgreSQL, and what a store implementing only ``commit`` gets from the Store base class."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dashboard import dashboard

from loopwright import StoreError
from loopwright.store import NewApproval, Store, open_store
from loopwright.store._base import CommitRequest
from loopwright.store.sqlite import SQLiteStore


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


def _rejecting(store: Store) -> tuple[str, int]:
    rid = _run(store, "k")
    token = store.acquire_lease(rid, "me", 60)
    for cycle in (1, 2):
        store.commit(
            rid, token, seq=cycle, cycle=cycle, state={"cycle": cycle}, record=None,
            events=[], run={"cycle": cycle}, rejected=[(f"d-cycle{cycle}", cycle)],
        )  # fmt: skip
    return rid, token


def _rollback(rid: str, token: int) -> CommitRequest:
    return CommitRequest(
        rid, token, 3, 2, {"cycle": 2}, {"decision": "rollback", "to_cycle": 1}, [], {},
        rejected=[("d-own", 2)], forget_rejected_after=1,
    )  # fmt: skip


class CommitOnly(SQLiteStore):
    """A store implementing only ``commit``, with ``forget_rejected``: the base class's
    ``commit_request``."""

    commit_request = Store.commit_request


def test_a_store_implementing_only_commit_forgets_what_a_rollback_abandons(
    tmp_path: Path,
) -> None:
    # The base class's commit_request dropped forget_rejected_after: a rollback's commit on
    # such a store forgot nothing, and the redone cycles counted as duplicates.
    for store in (open_store(f"sqlite:///{tmp_path / 'a.db'}"), CommitOnly(tmp_path / "b.db")):
        rid, token = _rejecting(store)
        store.commit_request(_rollback(rid, token))
        assert sorted(store.rejected_digests(rid)) == ["d-cycle1", "d-own"], type(store)
        store.close()


def test_a_store_that_cannot_forget_refuses_a_rollback_before_writing(tmp_path: Path) -> None:
    class CommitOnlyNoForget(CommitOnly):
        forget_rejected = Store.forget_rejected  # type: ignore[assignment]

    store = CommitOnlyNoForget(tmp_path / "c.db")
    rid, token = _rejecting(store)
    with pytest.raises(StoreError, match="forget_rejected"):
        store.commit_request(_rollback(rid, token))
    assert store.get_run(rid).last_seq == 2  # nothing written
    store.close()


class OlderSignatures(SQLiteStore):
    """A third-party store written against the methods before since/until and run_id/search."""

    def list_runs(self, *, status=None, project=None, loop_name=None, limit=None,  # type: ignore[no-untyped-def,override]
                  stop_reason=None, search=None, after=None):  # fmt: skip
        return super().list_runs(status=status, project=project, loop_name=loop_name,
                                 limit=limit, stop_reason=stop_reason, search=search, after=after)  # fmt: skip

    def count_approvals(self, *, status=None):  # type: ignore[no-untyped-def,override]
        return super().count_approvals(status=status)


def test_a_store_with_the_older_signatures_still_serves_metrics_and_the_inbox(
    tmp_path: Path,
) -> None:

    from loopwright import _metrics
    from loopwright.web import _app

    store = OlderSignatures(tmp_path / "o.db")
    old = _run(store, "old")
    with store._tx() as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE runs SET created_at=100 WHERE run_id=?", (old,))
    rid = _run(store, "new")
    _park(store, rid, "Überweisung", "over limit")
    _park(store, old, "pay", "over limit")
    assert _metrics.compute_metrics(store).runs == 2
    assert _metrics.compute_metrics(store, since="2000-01-01").runs == 1
    assert _metrics.compute_metrics(store, until="2000-01-01").runs == 1
    real = _app.open_store
    try:
        _app.open_store = lambda url: store  # type: ignore[assignment]
        client = dashboard("x", token="t" * 24)
        r = client.get("/api/approvals", params={"q": "überweisung"})
    finally:
        _app.open_store = real  # type: ignore[assignment]
    assert r.status_code == 200, r.text
    assert [a["approval_id"] for a in r.json()] == [f"ap-{rid}"]
    assert r.headers["X-Total-Count"] == "1"
