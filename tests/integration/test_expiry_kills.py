"""SIGKILL on the stop-49 paths (kill49), real processes killed at deterministic points
(``expirykill/expiry_runner.py``: the engine's phase boundaries and the store calls it wraps; no
timing), SQLite and PostgreSQL: a worker recording a request expired, claiming the run and
escalating it (killed after the record, after the claim, inside the escalation's commit); a
person's decision and a worker's expiry record, one killed between them; a reuse-only effect
killed at each of its phases while its origin's refund runs; edit, rollback and cancel killed
with the lease taken. What each must keep: ``expirykill/expiry_trial.py``.

A trial is several processes (seconds each on a loaded machine): the suite plays a few;
``LW_EXPIRY_KILLS=N`` plays N spread over every trial, ``all`` every one
(``bench/expiry_kills.py`` plays them all, repeatedly, and counts)."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.crash import Crash

import loopwright as lw
from loopwright._worker import Worker
from loopwright.store import open_store

sys.path.insert(0, str(Path(__file__).resolve().parent / "expirykill"))

from expiry_runner import TASK, Paid, make_loop, overdue, wire
from expiry_trial import Trial, all_trials, check_decided, run_trial

# The suite's share: the escalation killed inside its commit (its packet written, not
# committed), then another worker's pass.
DEFAULT = [("expiry", ("commit_tx:1",))]


def chosen() -> list[tuple[str, tuple[str, ...]]]:
    ask = os.environ.get("LW_EXPIRY_KILLS", "")
    every = all_trials()
    if ask == "all":
        return every
    if ask.isdigit() and int(ask) > 0:
        step = max(1, len(every) // int(ask))
        return every[::step][: int(ask)]
    return DEFAULT


def test_every_trial_reaches_its_kill_points_in_the_trial_list() -> None:
    # each point a trial names is one its runner reports (a misspelt point kills nothing:
    # the trial then says "not killed where asked")
    from crashpoints.killpoint import PHASES

    named = {k.rpartition(":")[0] for _sc, ks in all_trials() for k in ks if k != "stop"}
    wrapped = {"read_expired", "expired", "claimed", "commit_tx", "lease", "decided"}
    journal = {p for p in named if p.startswith("journal_")}
    assert named <= {*PHASES, *wrapped, *journal}, named - {*PHASES, *wrapped, *journal}


@pytest.mark.parametrize(("scenario", "kills"), chosen())
def test_killed_on_the_expiry_reuse_and_lease_paths(
    url: str, tmp_path: Path, scenario: str, kills: tuple[str, ...]
) -> None:
    t = run_trial(tmp_path, url, scenario, kills)
    assert t.broken == [], t.steps
    assert t.killed >= len([k for k in kills if k]), t.steps  # each kill asked for happened


# --- in process, Hypothesis: many kill points, cheaply ------------------------------------------
# A crash is ``support.crash.Crash`` raised at the same points (nothing after it is written; one
# raised inside a commit's transaction rolls it back, as a death there does). The crashed
# worker's leases are then past their TTL (moved there, as ``Trial.lapse`` does), as a dead
# process's are once its TTL ran out: a process of its own is what SIGKILL tests, above.
POINTS = (
    "read_expired",
    "expired",
    "claimed",
    "before_checkpoint",
    "commit_tx",
    "after_checkpoint",
    "before_effect_result",
)


def _crash_at(point: tuple[str, int] | None) -> Callable[[str], None]:
    seen: Counter[str] = Counter()

    def hit(at: str) -> None:
        seen[at] += 1
        if point == (at, seen[at]):
            raise Crash(at)

    return hit


def _lapse(db: str) -> None:
    with open_store(db) as store:
        m = store._MARK  # type: ignore[attr-defined]
        with store._tx() as conn:  # type: ignore[attr-defined]
            conn.execute(
                f"UPDATE runs SET lease_expires_at = {m} WHERE lease_owner IS NOT NULL",
                (store.clock() - 1,),
            )


def play_in_process(
    db: str, work: Path, scenario: str, crashes: list[tuple[str, int]]
) -> tuple[Trial, dict[str, Any]]:
    """A parked on its payment's request; a person approves it first (``person_first``) or
    not; its time runs out; a worker's pass crashed at each of ``crashes`` in turn, then one
    to the end."""
    t = Trial(work, db)
    loop = make_loop(Paid(work))
    with lw.Runtime(db) as rt:
        rid = rt.run_sync(loop, TASK, task_key="A").run_id
        if scenario == "person_first":
            rt.approve(rid, by="fin")
        overdue(rt.store, rid)
    fired: list[str] = []
    for point in [*crashes, None]:
        with lw.Runtime(db) as rt:
            unwire = wire(rt, _crash_at(point))
            try:
                asyncio.run(Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True))
            except Crash as crash:
                t.killed += 1
                fired.append(str(crash))
            finally:
                unwire()
        _lapse(db)
    # (a payment crashed before its result, no hook to ask: in doubt, the run escalates)
    doubt = "before_effect_result" in fired
    if scenario == "person_first":
        return t, {"A": ("escalated" if doubt else "accepted", "approved", "fin", ["I6"])}
    return t, {"A": ("escalated", "expired", "loopwright", [])}


@st.composite
def in_process_trials(draw: st.DrawFn) -> tuple[str, list[tuple[str, int]]]:
    scenario = draw(st.sampled_from(["expiry", "person_first"]))
    point = st.tuples(st.sampled_from(POINTS), st.integers(min_value=1, max_value=2))
    return scenario, draw(st.lists(point, max_size=3))


def _in_process(db: str, work: Path, trial: tuple[str, list[tuple[str, int]]]) -> None:
    t, want = play_in_process(db, work, *trial)
    with lw.Runtime(db) as rt:
        check_decided(t, rt, "A", want["A"])
    assert t.broken == [], trial


@settings(
    max_examples=int(os.environ.get("LW_EXPIRY_EXAMPLES", "6")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(trial=in_process_trials())
def test_a_worker_crashed_on_the_expiry_path_escalates_once(
    trial: tuple[str, list[tuple[str, int]]],
) -> None:
    with tempfile.TemporaryDirectory(prefix="lw-xk-") as folder:
        work = Path(folder)
        _in_process(f"sqlite:///{work / 's.db'}", work, trial)


@pytest.mark.postgres
@settings(
    max_examples=int(os.environ.get("LW_EXPIRY_EXAMPLES_PG", "3")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(trial=in_process_trials())
def test_the_same_on_postgresql(trial: tuple[str, list[tuple[str, int]]]) -> None:
    from conftest import pg_base_url, pg_create_schema, pg_drop_schema

    base = pg_base_url()
    schema = f"lw_xk_{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory(prefix="lw-xk-") as folder:
        try:
            _in_process(pg_create_schema(base, schema), Path(folder), trial)
        finally:
            pg_drop_schema(base, schema)
