"""A lease renewal that lands after the lease was handed back sets nothing (crash53), on SQLite
and PostgreSQL.

A renewal runs in a thread of its own (``Runtime._heartbeat``): cancelled while it waits on the
store, it still lands, maybe after the execution handed its lease back. It was fenced by the
token alone, which a release leaves as it is, so it set ``lease_expires_at`` on a run nobody
held: an interrupted run (Ctrl-C) then read as held in ``loopwright runs`` (no "interrupted?"
hint until that expiry passed, then "its lease ran out", of a lease no one had). A renewal
now needs the lease still held (an owner) under its token: ``StaleLeaseError`` otherwise.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli._table import interrupted

TASK: dict[str, Any] = {"artifacts": {"doc": {"n": 0}}}


def test_a_renewal_after_the_release_is_stale(url: str) -> None:
    with lw.Runtime(url) as rt:
        run, _ = rt.create(_loop(lambda: None), TASK, task_key="k")
        token = rt.store.acquire_lease(run.run_id, "me", 60.0)
        rt.store.release_lease(run.run_id, token)
        with pytest.raises(lw.StaleLeaseError):
            rt.store.renew_lease(run.run_id, token, 60.0)
        after = rt.store.get_run(run.run_id)
        assert (after.lease_owner, after.lease_expires_at) == (None, None)
        # a lease held is renewed as before
        token = rt.store.acquire_lease(run.run_id, "me", 60.0)
        rt.store.renew_lease(run.run_id, token, 120.0)
        assert rt.store.get_run(run.run_id).lease_expires_at is not None


def _loop(before: Any) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        before()
        return lw.Proposal(edits=(lw.Edit("doc", "n", ctx.cycle),))

    return lw.Loop(
        name="late-renewal",
        actor=actor,
        verifiers=[lambda s, p: lw.Verdict(passed=False, score=0.5)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )


def test_a_renewal_landing_after_a_ctrl_c_leaves_the_run_unheld(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The heartbeat's first renewal is held in its thread until the lease is handed back; the
    # actor, in a thread too, waits for that renewal to start, then is interrupted (Ctrl-C).
    entered, released, landed = threading.Event(), threading.Event(), threading.Event()
    outcome: list[BaseException | None] = []

    def interrupted_call() -> None:
        entered.wait()
        raise KeyboardInterrupt

    with lw.Runtime(url, lease_ttl_s=0.03, calls_in_threads=True) as rt:
        renew, release = rt.store.renew_lease, rt.store.release_lease

        def held_renewal(run_id: str, token: int, ttl_s: float) -> None:
            if entered.is_set():
                return renew(run_id, token, ttl_s)
            entered.set()
            released.wait()
            try:
                renew(run_id, token, ttl_s)
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)
                raise
            finally:
                landed.set()

        def handed_back(run_id: str, token: int) -> None:
            release(run_id, token)
            released.set()

        monkeypatch.setattr(rt.store, "renew_lease", held_renewal)
        monkeypatch.setattr(rt.store, "release_lease", handed_back)
        with pytest.raises(KeyboardInterrupt):
            rt.run_sync(_loop(interrupted_call), TASK, task_key="k")
        landed.wait()
        (got,) = outcome
        assert isinstance(got, lw.StaleLeaseError), got  # before: None, the expiry written
        run = rt.store.get_run("k")
        assert (run.status, run.lease_owner, run.lease_expires_at) == ("running", None, None)
        hint = interrupted(run, rt.store.clock())
        assert hint is not None and hint.startswith("interrupted? no process is running it")
