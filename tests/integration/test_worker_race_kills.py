"""A person's operation while a worker (another process) holds the run mid-cycle, then the
worker continued or SIGKILLed (kill48): ``edit``, ``cancel`` and ``resume`` re-read the run's
status under its lease (attack47); with the lease held by a live worker they must refuse or
defer, never write over the worker's cycle, and once the worker is gone the run must end as
the operation asked, with no cycle paid after a cancel.

The worker (``newpaths/worker.py``) stops itself with SIGSTOP at a phase boundary, holding the
lease: the operation runs at that exact point (no timing). SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import newpaths_kill as nk
import pytest

import loopwright as lw

WORKER = Path(__file__).resolve().parent / "newpaths" / "worker.py"


def _paused_worker(url: str, work: Path, at: str) -> subprocess.Popen[str]:
    """A worker driving the run, stopped (SIGSTOP) at phase ``at``: it holds the lease."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "NP_PAUSE": at}
    env.pop("LOOPWRIGHT_STORE", None)
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), url, str(work)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), f"the worker ended before {at}: {proc.communicate()}"
    return proc


def _killed(proc: subprocess.Popen[str]) -> None:
    proc.kill()  # SIGKILL a stopped process: it dies at once
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL


def _continued(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=300)  # only a hung worker takes this long
    assert proc.returncode == 0, err[-3000:]


def _actor_calls(work: Path) -> list[int]:
    log = work / nk.ACTOR_LOG
    return [int(line.split()[1]) for line in log.read_text().splitlines()] if log.exists() else []


def _create(url: str, work: Path) -> str:
    with lw.Runtime(url) as rt:
        rec, _ = rt.create(nk.loop_for("cap_then_edit", work), nk.TASK, task_key=nk.KEY)
        return rec.run_id


@pytest.mark.parametrize("then", ["killed", "continued"])
def test_a_cancel_while_a_worker_holds_the_run_ends_it_with_no_cycle_after(
    url: str, tmp_path: Path, then: str
) -> None:
    run_id = _create(url, tmp_path)
    worker = _paused_worker(url, tmp_path, "after_actor:2")
    with lw.Runtime(url) as rt:
        rec = rt.cancel(run_id, by="ops")
        assert rec.status == "running"  # deferred: the worker stops at its next boundary
    if then == "killed":
        _killed(worker)
        with lw.Runtime(url) as rt:
            r = rt.resume_sync(run_id, nk.loop_for("cap_then_edit", tmp_path))
    else:
        _continued(worker)
        with lw.Runtime(url) as rt:
            r = rt.result(run_id)
    assert r.status == "cancelled"
    assert _actor_calls(tmp_path) == [1, 2]  # the actor is not called after the cancel
    assert r.cycles <= 2


@pytest.mark.parametrize("op", ["edit", "resume"])
def test_an_edit_or_resume_while_a_worker_holds_the_run_is_refused_then_works(
    url: str, tmp_path: Path, op: str
) -> None:
    run_id = _create(url, tmp_path)
    loop = nk.loop_for("cap_then_edit", tmp_path)
    worker = _paused_worker(url, tmp_path, "after_actor:1")  # cycle 1, its actor answered
    with lw.Runtime(url) as rt:
        with pytest.raises(lw.ConflictError):
            if op == "edit":
                rt.edit(run_id, "doc/b", nk.FIXED, by="ann")
            else:
                rt.resume_sync(run_id, loop)
        assert rt.store.get_run(run_id).status == "running"
    _killed(worker)
    with lw.Runtime(url) as rt:
        if op == "edit":  # the dead worker's cycle 1 was never committed: edited beside it
            rt.edit(run_id, "doc/b", nk.FIXED, by="ann")
        r = rt.resume_sync(run_id, loop)
        if op == "edit":
            # cycle 1 judges the edit (check-only, charged the dead worker's actor call),
            # cycle 2 the actor fixes doc/a and pays, once
            assert (r.status, r.stop_reason, r.cycles) == ("accepted", "success", 2), r
            assert (tmp_path / nk.PAID_FILE).read_text().splitlines() == ["pay:INV-1"]
            started = [e.data for e in rt.store.events(run_id) if e.kind == "cycle_started"]
            assert started == [{"check_only": True}, {}]
        else:
            assert (r.status, r.stop_reason, r.cycles) == ("stopped", "budget_cycles", 3), r
    # every actor call that billed is charged, the dead worker's included (from cycle 3 on
    # doc/a is accepted and the actor proposes nothing, billing nothing)
    billed = [n for n in _actor_calls(tmp_path) if n <= 2]
    assert len(billed) == 3 if op == "resume" else len(billed) == 2
    assert r.spent.cost_usd == pytest.approx(0.002 * len(billed))


@pytest.mark.parametrize("then", ["killed", "continued"])
def test_a_cancel_while_a_worker_judges_a_persons_edit(url: str, tmp_path: Path, then: str) -> None:
    """The run stopped on its cycle cap, a person fixed doc/b (reopened: a worker claims it),
    and a cancel comes while the worker's check-only cycle is under way."""
    loop = nk.loop_for("cap_then_edit", tmp_path)
    with lw.Runtime(url) as rt:
        r = rt.run_sync(loop, nk.TASK, task_key=nk.KEY)
        assert (r.status, r.stop_reason) == ("stopped", "budget_cycles")
        rt.edit(r.run_id, "doc/b", nk.FIXED, by="ann")
    worker = _paused_worker(url, tmp_path, "before_check:1")
    with lw.Runtime(url) as rt:
        assert rt.cancel(r.run_id, by="ops").status == "running"  # deferred to the worker
    if then == "killed":
        _killed(worker)
        with lw.Runtime(url) as rt:
            end = rt.resume_sync(r.run_id, loop)
        assert (end.status, end.cycles) == ("cancelled", 3)  # not judged after the cancel
    else:
        _continued(worker)  # the cycle under way concludes: the edit meets the contract
        with lw.Runtime(url) as rt:
            end = rt.result(r.run_id)
        assert (end.status, end.stop_reason, end.cycles) == ("accepted", "success", 4)
    assert _actor_calls(tmp_path) == [1, 2, 3]  # no actor call after the cap, killed or not
