"""`resume --all` drives a fork queued for the pool (`fork --queue`, fork54) as any run: it
left every `pending` fork as its maker's to start, the queued one too, which on a store no
worker serves nobody then started (and `runs` said nothing of it) (review54a). A fork left to
its maker is still left, and named."""

from __future__ import annotations

from pathlib import Path

from loopwright.store import open_store

from .test_bad_inputs import lw
from .test_cli_fork_waits_for_maker import _origin


def test_resume_all_drives_a_queued_fork_and_leaves_its_makers(project: Path) -> None:
    store = project / "s.db"
    _origin(project, store)
    for key, more in (("q", ["--queue"]), ("m", [])):
        r = lw("fork", "o", "--at-cycle", "1", "--key", key, *more, cwd=project, store=store)
        assert r.returncode == 0, r.stderr
    r = lw("resume", "--all", cwd=project, store=store)
    assert r.returncode == 0, r.stdout + r.stderr
    with open_store(str(store)) as st:
        queued, held = st.get_run("q"), st.get_run("m")
    assert queued.status == "accepted", r.stdout
    assert (held.status, held.maker_starts) == ("pending", True)
    assert held.run_id[:12] in r.stdout + r.stderr  # named: its maker's to start
