"""The dashboard's Unpause of a fork nobody has started (``maker_starts``, fork54) lifts the
pause and starts nothing: the fork stays its maker's to start, after any edit, as the CLI's
`unpause` (which resumes only with --resume). Before, the server resumed the fork at once
where it had the run's spec, before its maker's edit (review54a)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from loopwright.store import open_store
from loopwright.web import create_app

from .test_bad_inputs import lw
from .test_cli_fork_waits_for_maker import _origin, _worker_once

TOKEN = "server-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_the_dashboards_unpause_leaves_a_fork_nobody_started_to_its_maker(
    project: Path,
) -> None:
    store = project / "s.db"
    _origin(project, store)
    r = lw("fork", "o", "--at-cycle", "1", "--key", "f", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    app = create_app(f"sqlite:///{store}", token=TOKEN)
    c = TestClient(app, base_url="http://127.0.0.1")
    with open_store(str(store)) as st:
        made = st.get_run("f")
    assert c.post(f"/api/runs/{made.run_id}/pause", headers=AUTH).status_code == 200
    got = c.post(f"/api/runs/{made.run_id}/unpause", headers=AUTH)
    assert got.status_code == 200, got.text
    # no thread of the server resumes it (one registered is in app.state.resuming until
    # its resume has ended, which cleared the mark)
    assert made.run_id not in app.state.resuming
    with open_store(str(store)) as st:
        left = st.get_run("f")
        kinds = [e.kind for e in st.events(left.run_id)]
    assert (left.status, left.maker_starts, left.cycle) == ("awaiting_approval", True, 1)
    assert "resumed" not in kinds and "started" not in kinds, kinds
    assert "a fork not started" in str(got.json()), got.json()
    _worker_once(project, store)  # nor does a worker
    with open_store(str(store)) as st:
        assert st.get_run("f").fencing_token == left.fencing_token
    # its maker starts it: accepted
    r = lw("resume", "f", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    with open_store(str(store)) as st:
        assert st.get_run("f").status == "accepted"
