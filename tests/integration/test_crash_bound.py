"""A run whose executor dies at the same cycle on every attempt ends ``escalated`` at its crash
bound (``budget.max_crashes``), on SQLite and PostgreSQL (stop 52).

A crash is no failed attempt: nothing is journaled when the process dies, so an actor that
killed its process every time (a segfault in a C extension, an out-of-memory kill,
``os._exit``) was called again on every resume for ever, and a worker claimed the run again and
again. Each case runs ``crashbound/crash_runner.py`` in subprocesses whose actor ends its process
with ``os._exit(137)`` at a fixed cycle (a deterministic point, on every attempt), resumed by
a fresh process each time.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from forkserver import run_child

import loopwright as lw
from loopwright._errors import ConfigError
from loopwright._worker import Worker

RUNNER = Path(__file__).resolve().parent / "crashbound" / "crash_runner.py"
DIED = 137  # the runner's os._exit


def _run(url: str, key: str, work: Path, **env: str) -> tuple[int, dict[str, Any] | None]:
    work.mkdir(parents=True, exist_ok=True)
    full = {k: v for k, v in os.environ.items() if not k.startswith("CB_")}
    full.update({"PYTHONUNBUFFERED": "1", **env})
    full.pop("LOOPWRIGHT_STORE", None)
    # only a hung runner takes 300 s; forked (tests/forkserver.py): the same runner, its own pid
    proc = run_child([sys.executable, str(RUNNER), url, key, str(work)], full, 300)
    if proc.returncode == DIED:
        return DIED, None
    assert proc.returncode == 0, f"runner failed ({proc.returncode}):\n{proc.stderr}"
    return 0, dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _calls(work: Path) -> list[int]:
    return [int(c) for c in (work / "calls.log").read_text().split()]


def _effects(work: Path) -> list[str]:
    return (work / "effects.log").read_text().split()


def _until_done(url: str, key: str, work: Path, **env: str) -> tuple[int, dict[str, Any]]:
    """Resume the run in fresh processes until one returns: (processes that died, result)."""
    for died in range(20):
        _, result = _run(url, key, work, **env)
        if result is not None:
            return died, result
    raise AssertionError("the run was still being driven after 20 crashes")


def test_a_crash_loop_escalates_at_the_bound(url: str, tmp_path: Path) -> None:
    work = tmp_path / "w"
    died, result = _until_done(url, "crashy", work, CB_EXIT_AT="2:1000")
    # the default bound (5): crashes 1-5 are driven again, the resume after the 6th ends it
    assert died == lw.DEFAULT_MAX_CRASHES + 1 == 6
    assert result["status"] == "escalated", result
    assert _calls(work) == [1, 2, 2, 2, 2, 2, 2]  # the actor was not called by the last process
    assert _effects(work) == ["notify:w:1"]  # cycle 1's effect ran once, across every process
    packet = result["packet"]
    assert "crashed 6 times at cycle 2" in packet["stop_cause"]
    assert packet["evidence"] == {"crashes": 6, "cycle": 2, "max_crashes": 5}
    assert packet["best_candidate"]["cycle"] == 1
    assert packet["best_candidate"]["artifacts"] == {"doc": {"n": 1}}
    assert result["cycles"] == 1
    # an escalated run is ended: resuming it (a worker, `loopwright resume`) calls nothing
    rc, again = _run(url, "crashy", work, CB_EXIT_AT="2:1000")
    assert rc == 0 and again is not None and again["status"] == "escalated"
    assert _calls(work) == [1, 2, 2, 2, 2, 2, 2]


def test_crashes_within_the_bound_end_as_an_uninterrupted_run(url: str, tmp_path: Path) -> None:
    rc, clean = _run(url, "clean", tmp_path / "clean")
    assert rc == 0 and clean is not None
    # five crashes at cycle 2 (the default bound), then five at cycle 3: ten in all, never
    # more than the bound at one cycle (the count starts again once a cycle concludes)
    work = tmp_path / "w"
    died, result = _until_done(url, "crashy", work, CB_EXIT_AT="2:5,3:5")
    assert died == 10
    assert _calls(work) == [1, *[2] * 6, *[3] * 6]
    assert _effects(work) == ["notify:w:1"]
    assert _effects(tmp_path / "clean") == ["notify:clean:1"]
    same = ("status", "stop_reason", "cycles", "best_score", "packet")
    assert {k: result[k] for k in same} == {k: clean[k] for k in same}
    assert result["status"] == "accepted"
    # the calls the killed processes made reported nothing before they died: the spend is
    # the uninterrupted run's
    assert result["spent"]["tokens"] == clean["spent"]["tokens"]
    with lw.Runtime(url) as rt:
        assert rt.result("crashy").state.values() == rt.result("clean").state.values()


def test_max_crashes_zero_escalates_at_the_first_crash(url: str, tmp_path: Path) -> None:
    work = tmp_path / "w"
    died, result = _until_done(url, "crashy", work, CB_EXIT_AT="2:1000", CB_MAX_CRASHES="0")
    assert died == 1
    assert result["status"] == "escalated"
    assert "crashed 1 time at cycle 2" in result["packet"]["stop_cause"]
    assert _calls(work) == [1, 2]


def test_a_worker_ends_a_crash_loop_and_claims_it_no_more(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "w"
    for _ in range(lw.DEFAULT_MAX_CRASHES + 1):
        rc, _ = _run(url, "crashy", work, CB_EXIT_AT="2:1000")
        assert rc == DIED
    # the runner's loop, built here without the crash (had the worker driven the cycle, the
    # actor would have run and the run been accepted)
    monkeypatch.delenv("CB_EXIT_AT", raising=False)
    monkeypatch.syspath_prepend(str(RUNNER.parent))
    from crash_runner import _loop  # type: ignore[import-not-found]

    loop = _loop(work)
    with lw.Runtime(url) as rt:
        # the dead process's lease lapsed, as it would after its TTL (no waiting here)
        store: Any = rt.store
        with store._tx() as conn:
            conn.execute(
                f"UPDATE runs SET lease_expires_at = {store._MARK} WHERE lease_owner IS NOT NULL",
                (store.clock() - 1,),
            )
        stats = asyncio.run(Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True))
        assert (stats.claimed, dict(stats.ended)) == (1, {"escalated": 1}), stats
        again = asyncio.run(Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True))
        assert again.claimed == 0, again
        assert rt.store.get_run("crashy").status == "escalated"
    assert _calls(work) == [1, *[2] * 6]


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_max_crashes_must_be_a_whole_number(bad: Any) -> None:
    with pytest.raises(ConfigError) as err:
        lw.Budget(max_cycles=3, max_crashes=bad)
    assert err.value.field == "contract.budget.max_crashes"


def test_max_crashes_in_the_snapshot_only_when_set() -> None:
    plain = lw.Contract(budget=lw.Budget(max_cycles=3)).to_dict()
    assert "max_crashes" not in plain["budget"]  # snapshots of older runs stay as they were
    zero = lw.Contract(budget=lw.Budget(max_cycles=3, max_crashes=0))
    assert zero.to_dict()["budget"]["max_crashes"] == 0
    assert lw.Contract.from_dict(zero.to_dict()).budget.max_crashes == 0
