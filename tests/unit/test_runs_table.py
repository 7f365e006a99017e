"""``loopwright runs``: a run whose process died says so (its status stays ``running``
until someone takes it over, which was all the table said)."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli._table import print_runs
from loopwright.store import RunRecord


def _record(tmp_path: Path) -> RunRecord:
    loop = lw.Loop(
        name="one",
        actor=lambda ctx: lw.Proposal.edit("doc", {"p": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        result = rt.run_sync(loop, {"goal": "g", "artifacts": {"doc": {"p": ""}}}, task_key="k")
        return rt.store.get_run(result.run_id)


@pytest.mark.parametrize(
    ("status", "expires_in", "hint"),
    [
        ("running", -600.0, True),  # its lease ran out ten minutes ago: nobody holds it
        ("running", 600.0, False),  # held: a process is driving it
        ("awaiting_approval", -600.0, False),  # parked runs hold no lease by design
    ],
)
def test_a_running_run_whose_lease_ran_out_is_called_interrupted(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    status: str,
    expires_in: float | None,
    hint: bool,
) -> None:
    rec = _record(tmp_path)
    expires = None if expires_in is None else time.time() + expires_in
    run = dataclasses.replace(
        rec,
        status=status,
        stop_reason=None,
        ended_at=None,
        lease_expires_at=expires,
        spec_ref="loop.toml",  # (one started from Python is resumed there: said so)
    )
    print_runs([run], 1, width=400)
    out = capsys.readouterr().out
    said = re.search(r"interrupted\? its lease ran out \d+m ago: loopwright resume", out)
    assert (said is not None) is hint, out


def test_a_running_run_whose_process_on_this_host_is_gone_is_called_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside probe (stop 42): after Ctrl-C of a script, `loopwright runs` said only
    "running" for the lease's remaining minute, though resume takes such a run over at once
    (a process of this host that is gone holds no lease)."""
    from loopwright._owners import owner_name

    rec = _record(tmp_path)
    mine = owner_name()
    host, _pid, nonce, space = mine.split(":", 3)
    dead = f"{host}:{_no_pid()}:{nonce}:{space}"
    for owner, hint in ((dead, True), (mine, False), ("other-host:1:x:y", False)):
        run = dataclasses.replace(
            rec,
            status="running",
            stop_reason=None,
            ended_at=None,
            lease_expires_at=time.time() + 600,
            lease_owner=owner,
            spec_ref="loop.toml",
        )
        print_runs([run], 1, width=400)
        out = capsys.readouterr().out
        said = "interrupted? its process on this host is gone: loopwright resume" in out
        assert said is hint, (owner, out)


def _no_pid() -> int:
    """A pid no process can have (above the kernel's largest): deterministic, where a pid that
    exited could be given to another process."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_running_run_no_process_holds_is_called_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside probe (stop 42): after Ctrl-C of a script, the interrupted process hands its
    lease back (so does a worker with no loop for the run), and `loopwright runs` showed the
    run as plain "running" for ever, though nothing drives it; the README promises
    "interrupted?". (A run started from Python is resumed there: the hint says so.)"""
    rec = _record(tmp_path)
    for spec_ref, how in (("loop.toml", "loopwright resume"), (None, "resume it from Python")):
        run = dataclasses.replace(
            rec,
            status="running",
            stop_reason=None,
            ended_at=None,
            lease_owner=None,
            lease_expires_at=None,
            spec_ref=spec_ref,
        )
        print_runs([run], 1, width=400)
        out = capsys.readouterr().out
        assert f"interrupted? no process is running it: {how}" in out, out


def test_a_run_stopped_by_ctrl_c_is_called_interrupted_by_runs_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside probe (stop 42), end to end: Ctrl-C (a KeyboardInterrupt in the actor) leaves
    the run `running` with its lease handed back; `runs` and `show` said only "running"."""
    from loopwright.cli import main

    def actor(ctx: lw.Context) -> lw.Proposal:
        raise KeyboardInterrupt  # the person pressed Ctrl-C while the actor ran

    loop = lw.Loop(
        name="ctrl-c",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt, pytest.raises(KeyboardInterrupt):
        rt.run_sync(loop, {"artifacts": {"doc": {"p": ""}}}, task_key="k")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "300")  # the table's whole cause, not cut to fit
    for command in ("runs", "show"):
        args = [command, "k"] if command == "show" else [command]
        assert main([*args, "--store", db]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "interrupted? no process is running it: resume it from Python" in out, out


@pytest.mark.parametrize("command", ["runs", "show"])
def test_a_lease_is_judged_on_the_stores_clock(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """A host whose clock runs an hour ahead of the store's (PostgreSQL sets leases on the
    server's clock) called a run held for ten more minutes "interrupted? its lease ran out
    50m ago" (review47); the lease is now judged on ``store.clock()``."""
    import sqlite3

    from loopwright.cli import main
    from loopwright.store.sqlite import SQLiteStore

    rec = _record(tmp_path)
    real = time.time
    with sqlite3.connect(tmp_path / "s.db") as db:
        db.execute(
            "UPDATE runs SET status = 'running', stop_reason = NULL, ended_at = NULL, "
            "lease_owner = 'other-host:1:x:y', lease_expires_at = ? WHERE run_id = ?",
            (real() + 600, rec.run_id),
        )
    monkeypatch.setattr(SQLiteStore, "clock", lambda self: real())  # the store's clock
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # this host's, an hour ahead
    args = [
        command,
        *([rec.run_id] if command == "show" else []),
        "--store",
        str(tmp_path / "s.db"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "running" in out and "interrupted?" not in out, out


def test_when_a_run_was_created_is_told_on_the_clock_that_wrote_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run's ``created_at`` is its writer's clock (PostgreSQL too: only leases and requests
    are the server's): ``runs`` says how long ago on this host's clock, the lease alone on the
    store's (review48a: a server an hour ahead made a run made just now "1h ago", one an hour
    behind "0s ago" for an hour)."""
    rec = dataclasses.replace(_record(tmp_path), created_at=time.time() - 120)
    for skew in (3600.0, -3600.0):
        print_runs([rec], 1, width=200, now=time.time() + skew)  # the store's clock, skewed
        out = " ".join(capsys.readouterr().out.split())
        assert "2m ago" in out, out  # before: "1h ago", then "0s ago"


def test_the_interrupted_hint_is_typable_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`show` (and the `runs` cell) said "interrupted? …: loopwright resume", naming neither
    the run nor the ``--store`` the person gave: copied as printed, it read the default store
    (newuser52's rule, ``store_flag``, which the other hints follow)."""
    from loopwright.cli import _options
    from loopwright.cli._table import interrupted

    rec = _record(tmp_path)
    run = dataclasses.replace(
        rec, status="running", stop_reason=None, ended_at=None, lease_owner=None,
        lease_expires_at=None, spec_ref="loop.toml",
    )  # fmt: skip
    monkeypatch.setitem(_options._GIVEN, "store", "my runs.db")
    said = interrupted(run, time.time())
    assert said == (
        f"interrupted? no process is running it: loopwright resume {rec.run_id[:12]} "
        "--store 'my runs.db'"
    )
    monkeypatch.setitem(_options._GIVEN, "store", None)  # $LOOPWRIGHT_STORE or the default
    assert interrupted(run, time.time()) == (
        f"interrupted? no process is running it: loopwright resume {rec.run_id[:12]}"
    )


@pytest.mark.parametrize(
    ("status", "open_requests", "said"),
    [
        ("pending", None, True),  # made and never started: its maker starts it
        ("awaiting_approval", 0, True),  # paused and unpaused before its start
        ("awaiting_approval", 1, False),  # a request waits: a person decides first
        ("cancelled", None, False),  # ended, nothing to start
    ],
)
def test_a_held_fork_is_called_not_started_as_the_dashboard_calls_it(
    tmp_path: Path, status: str, open_requests: int | None, said: bool
) -> None:
    """``runs``/``show`` and the dashboard read one rule for a fork waiting for its maker (the
    CLI called a held fork parked on a pending request "not started", the run page did not)."""
    from loopwright.cli._table import not_started
    from loopwright.web._views import stop_words

    rec = dataclasses.replace(
        _record(tmp_path), maker_starts=True, status=status, open_requests=open_requests
    )
    rec = dataclasses.replace(rec, stop_reason=None) if status != "cancelled" else rec
    assert (not_started(rec) is not None) == said
    assert stop_words(rec).startswith("fork, not started") == said
