"""An edit or a rollback refused under its lease says why, even when handing the lease back
fails too (SQLite and PostgreSQL).

Both released their lease in a plain ``finally``: when the release failed (the store dropped
the connection), its ``StoreUnavailableError`` replaced the real error, so a person who asked
for a part's current value, or a cycle that does not exist, was told "connection dropped" and
not what to fix. ``cancel`` suppressed the release's error already (review48); all three now
hand the lease back the same way (``RuntimeHost._holding``). The fault is placed at a fixed
point: every release of a lease.
"""

from __future__ import annotations

from typing import Any

import pytest
from doc_loop import TASK
from test_lease_handed_back import _loop

import loopwright as lw


def _release_fails(monkeypatch: pytest.MonkeyPatch, store: Any) -> list[str]:
    tried: list[str] = []

    def fails(run_id: str, token: int) -> None:
        tried.append(run_id)
        raise lw.StoreUnavailableError("connection dropped (injected)")

    monkeypatch.setattr(store, "release_lease", fails)
    return tried


@pytest.mark.parametrize(
    ("operation", "why"),
    [
        # before: StoreUnavailableError("connection dropped"), the ConfigError lost
        (lambda rt, run_id: rt.edit(run_id, "doc/b", 1, by="ed"), "current value already"),
        (lambda rt, run_id: rt.rollback(run_id, 99, by="ops"), "no completed checkpoint"),
    ],
    ids=["edit", "rollback"],
)
def test_a_refused_operation_says_why_when_its_release_fails(
    url: str, monkeypatch: pytest.MonkeyPatch, operation: Any, why: str
) -> None:
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK)
        tried = _release_fails(monkeypatch, rt.store)
        with pytest.raises(lw.ConfigError, match=why):
            operation(rt, r.run_id)
        assert tried == [r.run_id]  # the release was tried


def test_a_successful_edit_still_says_its_release_failed(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing else went wrong: the release's own error is the one said (the lease stays held
    # to its TTL, and the caller must know), as before.
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_loop(), TASK)
        _release_fails(monkeypatch, rt.store)
        with pytest.raises(lw.StoreUnavailableError, match="injected"):
            rt.edit(r.run_id, "doc/b", 7, by="ed")
        monkeypatch.undo()
        assert rt.store.latest_checkpoint(r.run_id).task_state().values()["doc"]["b"] == 7
