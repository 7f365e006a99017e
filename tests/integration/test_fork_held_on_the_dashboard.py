"""A fork nobody has started (``maker_starts``, fork54) on the dashboard: a rerun asked to start
is started by someone even where the server has not the run's loop, and the words of a fork
paused and unpaused before its start say how to start it (review54a)."""

from __future__ import annotations

from pathlib import Path

from support.dashboard import AUTH, dashboard, listed_runs, rerun
from test_fork_maker_starts import _paid_file_run, _paid_run, _poll_once

import loopwright as lw


def test_a_rerun_asked_to_start_where_the_server_has_not_its_loop_is_the_pools(
    tmp_path: Path,
) -> None:
    # A run started from Python: the server cannot resume its rerun (no spec file). Before,
    # the rerun asked to start ("start": true) was left to its maker like any fork: nobody
    # started it, and the page said a thread of the server would.
    url, r, loop, _bank = _paid_file_run(tmp_path)
    new = rerun(dashboard(url), r.run_id, at_cycle=1, start=True)["run"]["run_id"]
    with lw.Runtime(url) as rt:
        [ended] = _poll_once(rt, loop)  # a worker serving the store, with the loop, starts it
        assert ended.run_id == new and ended.status == "accepted", ended.packet


def test_a_fork_paused_and_unpaused_before_its_start_says_how_to_start_it(
    tmp_path: Path,
) -> None:
    # Parked with its pause lifted, it waits for its maker's start, not for a worker: the
    # page said "its request was decided; it waits to be resumed".
    url = f"sqlite:///{tmp_path / 's.db'}"
    with lw.Runtime(url) as rt:
        r, loop, _bank = _paid_run(rt)
        fork = rt.fork(r.run_id, 1, by="ann")
        rt.pause(fork.run_id, by="ann")
        rt.unpause(fork.run_id, by="ann")
        got = rt.store.get_run(fork.run_id)
        assert (got.status, got.maker_starts, got.open_requests) == ("awaiting_approval", True, 0)
        assert _poll_once(rt, loop) == []
    c = dashboard(url)
    said = f"fork, not started: start it with Runtime.resume({fork.run_id[:12]!r}, loop)"
    assert (
        c.get(f"/api/runs/{fork.run_id}", headers=AUTH).json()["run"]["stop_words"].startswith(said)
    )
    assert said.replace("'", "&#39;") in c.get(f"/runs/{fork.run_id}", headers=AUTH).text
    [row] = [x for x in listed_runs(c) if x["run_id"] == fork.run_id]
    assert row["stop_words"].startswith(said), row


def test_a_rerun_not_started_says_maker_starts_in_its_response_and_the_list(
    tmp_path: Path,
) -> None:
    # ui.md: the rerun returns the new ``run`` with ``maker_starts`` true; the response (and
    # ``/api/runs``, a list of the same summaries) had no such key, only ``/api/runs/{id}``.
    url, r, _loop, _bank = _paid_file_run(tmp_path)
    c = dashboard(url)
    new = rerun(c, r.run_id, at_cycle=1, start=False)["run"]
    assert new["maker_starts"] is True
    listed = {x["run_id"]: x["maker_starts"] for x in listed_runs(c)}
    assert listed == {r.run_id: False, new["run_id"]: True}
