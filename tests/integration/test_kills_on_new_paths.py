"""Crash equivalence on the paths stop 47 added (kill48): the check-only cycle that judges a
person's edit (after a cycle cap, a denial, an expiry beside it), an effect its reconcile hook
settled without a cost (``unknown_cost``), the model calls an actor records itself
(``lw.record_model_call``, ``lw.model_call``), and a resumed parked cycle that ends the run
(``ended_in``). A run crashed anywhere in them, for any snapshot interval K, resumes to what the
uninterrupted run reaches (``newpaths_kill.outcome``); the effect is paid at most once, and
exactly once where the uninterrupted run paid it.

In process, a crash is a ``BaseException`` raised at a phase boundary (``support.crash``):
nothing after it is written. ``test_sigkill_on_new_paths`` does the same with real processes
killed with SIGKILL at the same points (``newpaths/runner.py``)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import newpaths_kill as nk
import pytest
from forkserver import run_child
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from support.crash import Crash, phase_hook

import loopwright as lw

_REF: dict[tuple[str, str, int], dict[str, Any]] = {}
_TEMP: list[Path] = []  # this module's folder, under pytest's own temporary folder


@pytest.fixture(autouse=True, scope="module")
def _folders_under_pytest_temp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hypothesis examples cannot take ``tmp_path``; their folders go under one that pytest
    owns and removes with its old runs, not loose in /tmp."""
    _TEMP[:] = [tmp_path_factory.mktemp("newpaths")]


def _folder(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_TEMP[0] if _TEMP else None))


def _sqlite() -> tuple[str, Path]:
    work = _folder("lw-np-")
    return f"sqlite:///{work / 's.db'}", work


def _play(db: str, work: Path, scenario: str, crashes: list[list[nk.Point]], k: int) -> int:
    return nk.play(db, work, scenario, crashes, k=k, hook=phase_hook, died=Crash)


def reference(scenario: str, k: int, store: str = "sqlite") -> dict[str, Any]:
    if (scenario, store, k) not in _REF:
        db, work = _sqlite()
        assert _play(db, work, scenario, [], k) == 0
        _REF[scenario, store, k] = nk.outcome(db, work)
    return _REF[scenario, store, k]


def test_the_references_take_the_paths_under_attack() -> None:
    cap = reference("cap_then_edit", 3)
    assert cap["end"] == ("accepted", "success", 4, 1.0)
    assert [k for k, _ in cap["events"][4]][:2] == ["cycle_started", "judged_again"]
    assert cap["model_calls"] == 3 * 3 + 1  # the actor two a cycle, the check one (check-only too)
    pay = reference("pay", 3)
    assert pay["end"] == ("accepted", "success", 2, 1.0) and pay["paid"] == ["pay:INV-1"]
    for sc in ("deny_beside_edit", "expire_beside_edit"):
        ref = reference(sc, 3)
        assert ref["end"][:2] == ("escalated", "escalated") and ref["paid"] == []
        assert dict(ref["events"][2])["judged_again"]["check_only"] is True
    assert reference("approve_beside_edit", 3)["paid"] == ["pay:INV-1"]
    ends = reference("deny_ends", 3)
    stopped = dict(ends["events"][1])["stopped"]
    assert stopped["ended_in"]["cycle"] == 2


@pytest.mark.parametrize("k", [1, 2, 50])
@pytest.mark.parametrize("scenario", list(nk.SCENARIOS))
def test_the_snapshot_interval_does_not_change_the_outcome(scenario: str, k: int) -> None:
    assert reference(scenario, k) == reference(scenario, 3)


def test_model_calls_of_a_killed_attempt_are_not_kept_twice_and_their_bill_is() -> None:
    """An actor killed after it answered (its two own model calls reported) and redone: the
    cycle's records are the redone attempt's, once; the killed attempt's bill is kept, on an
    ``interrupted`` retry event (docs/decisions.md, "A killed attempt's model calls")."""
    db, work = _sqlite()
    assert _play(db, work, "pay", [[("after_actor", 2)]], 3) == 1
    got, ref = nk.outcome(db, work), reference("pay", 3)
    assert got["model_calls"] == ref["model_calls"] == 2 * 2 + 2
    calls = [d for k, d in got["events"][2] if k == "model_call"]
    assert [(c["model"], c["attempt"]) for c in calls] == [
        ("m-own", 1),
        ("m-timed", 1),
        ("m-judge", 1),
    ]
    [lost] = [d for k, d in got["events"][2] if k == "retry"]
    assert lost["interrupted"] is True and lost["usage"] == {"cost_usd": 0.002, "tokens": 7}
    assert nk.same(got, ref) == []


def test_a_kill_before_the_first_commit_shifts_the_leases_only() -> None:
    """A run killed before its first commit (the one writing its ``started``) wrote nothing
    but ``run_created``; its lease was taken, so every later execution's token, named by its
    start event, is one more than the uninterrupted run's. The events name their own
    execution's token (so the crash count matches an ``interrupted`` word to it) and the
    comparison takes leases as named only; nothing else differs."""
    scenario, k, crashes = FIRST_COMMIT_KILLED
    db, work = _sqlite()
    assert _play(db, work, scenario, crashes, k) == 1
    ref_db, ref_work = _sqlite()
    assert _play(ref_db, ref_work, scenario, [], k) == 0
    starts = []
    for url in (db, ref_db):
        with lw.Runtime(url) as rt:
            rec = rt.store.get_run(nk.KEY)
            # (a cycle's ``decision`` names its execution's lease too: crash54)
            named = [e for e in rt.store.events(rec.run_id) if "lease" in e.data]
            leases = [e.data["lease"] for e in named if e.kind != "decision"]
            kinds = [e.kind for e in named if e.kind != "decision"]
            assert kinds == ["started", "resumed"] and leases[-1] == rec.fencing_token
            assert all(e.data["lease"] in leases for e in named if e.kind == "decision"), (
                "a decision names a lease no execution started under"
            )
            starts.append(leases)
    assert starts[0] == [n + 1 for n in starts[1]], starts
    assert nk.same(nk.outcome(db, work), reference(scenario, k)) == []


def crash_lists(steps: int) -> st.SearchStrategy[list[list[nk.Point]]]:
    """For each engine step, up to two crashes at a phase boundary's first to third time."""
    point = st.tuples(st.sampled_from(nk.PHASES), st.integers(min_value=1, max_value=3))
    return st.lists(st.lists(point, max_size=2), min_size=steps, max_size=steps)


@st.composite
def trials(draw: st.DrawFn) -> tuple[str, int, list[list[nk.Point]]]:
    scenario = draw(st.sampled_from(list(nk.SCENARIOS)))
    k = draw(st.integers(min_value=1, max_value=4))
    return scenario, k, draw(crash_lists(nk.engine_steps(scenario)))


SLOW = settings(
    max_examples=int(os.environ.get("LW_KILL_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


# Killed at the run's first commit (its ``started`` not yet written): the next execution's
# ``started`` names lease 2 (``test_a_kill_before_the_first_commit_shifts_the_leases_only``).
FIRST_COMMIT_KILLED = ("cap_then_edit", 1, [[("before_checkpoint", 1)], []])


@SLOW
@given(trial=trials())
@example(trial=FIRST_COMMIT_KILLED)
def test_a_run_crashed_on_the_new_paths_resumes_to_the_uninterrupted_state(
    trial: tuple[str, int, list[list[nk.Point]]],
) -> None:
    scenario, k, crashes = trial
    db, work = _sqlite()
    _play(db, work, scenario, crashes, k)
    assert nk.same(nk.outcome(db, work), reference(scenario, k)) == []


@pytest.mark.postgres
@settings(
    max_examples=int(os.environ.get("LW_KILL_EXAMPLES_PG", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(trial=trials())
@example(trial=FIRST_COMMIT_KILLED)
def test_the_same_on_postgresql(trial: tuple[str, int, list[list[nk.Point]]]) -> None:
    from conftest import pg_base_url, pg_create_schema, pg_drop_schema

    base = pg_base_url()
    scenario, k, crashes = trial
    schema = f"lw_np_{uuid.uuid4().hex[:12]}"
    db = pg_create_schema(base, schema)
    work = _folder("lw-np-")
    try:
        _play(db, work, scenario, crashes, k)
        assert nk.same(nk.outcome(db, work), reference(scenario, k)) == []
    finally:
        pg_drop_schema(base, schema)


# --- real processes, SIGKILL ------------------------------------------------------------------
RUNNER = Path(__file__).resolve().parent / "newpaths" / "runner.py"

# (scenario, the kills of each engine step): before and after the check-only cycle's verdicts
# are stored (its commit), a kill after a reconcile and before its checkpoint (then resumed
# twice), a kill in the cycle that records model calls, and in a parked cycle that ends the run.
SIGKILLS: list[tuple[str, list[list[str]]]] = [
    ("cap_then_edit", [[], ["before_check:1"]]),
    ("cap_then_edit", [[], ["before_checkpoint:1"]]),
    ("cap_then_edit", [[], ["after_checkpoint:1"]]),
    ("cap_then_edit", [["after_actor:2", "before_checkpoint:1"], []]),
    ("deny_beside_edit", [["before_checkpoint:2"], []]),
    ("deny_beside_edit", [[], ["before_checkpoint:1", "after_checkpoint:1"]]),
    ("expire_beside_edit", [[], ["before_checkpoint:1"]]),
    ("approve_beside_edit", [[], ["after_effect_intent:1", "before_checkpoint:1"]]),
    ("cap_then_useless_edit", [[], ["before_checkpoint:1", "after_checkpoint:1"]]),
    ("accepted_then_edit", [[], ["before_check:1", "after_checkpoint:1"]]),
    ("deny_ends", [[], ["before_checkpoint:1"]]),
    ("deny_ends", [[], ["after_checkpoint:1"]]),
    ("pay", [["before_effect_result:1", "before_checkpoint:1"]]),
    ("pay", [["before_effect_result:1", "after_checkpoint:1"]]),
]


def _step(db: str, work: Path, scenario: str, step: str, kill: str | None) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("LOOPWRIGHT_STORE", None)
    env.pop("NP_KILL", None)
    if kill is not None:
        env["NP_KILL"] = kill
    # only a hung runner takes 300 s; forked (tests/forkserver.py): the same runner, its own pid
    proc = run_child([sys.executable, str(RUNNER), db, str(work), scenario, step], env, 300)
    assert proc.returncode in (0, -signal.SIGKILL), proc.stderr[-3000:]
    return proc.returncode


# On SQLite, the store and work folder after a scenario's steps before its first kill, played
# once for the cases that share them (cap_then_edit's three kills in its resume share ``run``,
# ``edit_b``): each such case starts from a copy (every process had exited, so the database
# file is complete) instead of replaying the same uninterrupted processes.
_PREFIXES: dict[tuple[str, int], Path] = {}


def _unkilled_prefix(db: str, work: Path, scenario: str, kills: list[list[str]]) -> int:
    """How many of the scenario's first steps ``work`` already holds, copied from the same
    steps played once without a kill; 0 on PostgreSQL (each case plays every step)."""
    steps, i = nk.SCENARIOS[scenario][1], 0
    first = len(steps)
    for n, step in enumerate(steps):
        if step in nk.ENGINE_STEPS:
            if kills[i]:
                first = n
                break
            i += 1
    if first == 0 or db != f"sqlite:///{work / 's.db'}":
        return 0
    if (scenario, first) not in _PREFIXES:
        played = _folder("lw-np-prefix-")
        for step in steps[:first]:
            assert _step(f"sqlite:///{played / 's.db'}", played, scenario, step, None) == 0
        _PREFIXES[scenario, first] = played
    shutil.copytree(_PREFIXES[scenario, first], work, dirs_exist_ok=True)
    return first


def sigkill_play(db: str, work: Path, scenario: str, kills: list[list[str]]) -> int:
    """The scenario, one process a step, engine step ``i`` killed at each of ``kills[i]`` in
    turn: each kill asked for must happen. Returns how many processes were killed."""
    steps = nk.SCENARIOS[scenario][1]
    done = _unkilled_prefix(db, work, scenario, kills)
    i, killed = sum(step in nk.ENGINE_STEPS for step in steps[:done]), 0
    for step in steps[done:]:
        if step not in nk.ENGINE_STEPS:
            assert _step(db, work, scenario, step, None) == 0
            continue
        for kill in kills[i]:
            assert _step(db, work, scenario, step, kill) == -signal.SIGKILL, (step, kill)
            killed += 1
        assert _step(db, work, scenario, step, None) == 0
        i += 1
    return killed


@pytest.mark.parametrize(("scenario", "kills"), SIGKILLS)
def test_sigkill_on_new_paths(
    url: str, tmp_path: Path, scenario: str, kills: list[list[str]]
) -> None:
    assert sigkill_play(url, tmp_path, scenario, kills) == sum(map(len, kills))
    assert nk.same(nk.outcome(url, tmp_path), reference(scenario, 50)) == []
