"""SIGKILL at deterministic points of a run whose cycles write large edit values, resumed by a
fresh process, compared with an uninterrupted run (issue 14: "kills runs at random and compares
the resumed state with an uninterrupted run"), on SQLite and PostgreSQL.

The existing crash tests (``test_crash_points.py``, ``test_crash_resume.py``) edit small values,
which a cycle's record holds. Here every cycle writes a few KB of text and a nested dict
(``bigkills/workload.py``): the record names the version rows written in its commit and the
store fills the values back on read (``_record_codec``, ``SQLStore._fill_versions``), and a
rollback writes them back into the records of the cycles it abandons
(``SQLStore._inline_versions_in``). The task holds a 40 KB document (in ``run_tasks``, not in
checkpoint heads).

Each case kills a subprocess (``bigkills/runner.py``) at phase boundaries of several cycles
(``Runtime._on_phase``) or inside a checkpoint commit (after its statements, before its
transaction commits; a rollback's commit too), once per process, then a fresh process resumes
the run to its end. Every kill is checked to have happened (return code -9, and the phase log
names the point). Against the uninterrupted run: the run's end, the final state, every
version's value, every record as ``iter_records`` and ``checkpoints`` read it (a proposal's
edit values are what the actor proposed at that cycle, rolled-back cycles included),
``show --json`` and ``export eval-cases`` (less ids and times), the effects (none twice) and
the task. ``LOOPWRIGHT_CRASH_SWEEP=1`` adds a kill at every phase boundary and commit.

Two runs no uninterrupted run ends like are checked against what each cycle proposed: one
killed mid-cycle and rolled back (the dead process's lease taken over), and one rolled back
three times in a row, each time with kills after.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from bigkills import workload as bw
from crashpoints.killpoint import PHASES
from forkserver import run_child
from support.crash import billed_told, less_owed, told

import loopwright as lw
from loopwright.cli import main as cli_main

RUNNER = Path(__file__).resolve().parent / "bigkills" / "runner.py"
KEY = "big-kills-1"
ROLLBACK_TO = 2
# Differ between two runs of the same loop: ids, wall times, leases, and how an effect's
# outcome was obtained (run, or reconciled after a kill; its result stays).
VOLATILE = frozenset(
    {
        *("run_id", "case_id", "ts", "created_at", "updated_at", "ended_at", "seconds", "show"),
        *("lease_owner", "lease_expires_at", "fencing_token", "last_seq", "finished_at"),
        *("recovered", "reconciled", "hook_not_done", "attempts", "requested_at", "decided_at"),
    }
)

# ("phase", (PHASE, N)) | ("commit", N): a kill; ("rollback", None); ("rollback", "killed"): a
# rollback killed inside its commit
Step = tuple[str, Any]


# --- running -------------------------------------------------------------------------------
def _run(url: str, work: Path, *, action: str = "run", kill: Step | None = None) -> Any:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "BK_DIR": str(work), "BK_ACTION": action}
    for var in ("BK_CRASH", "BK_COMMIT_KILL", "LOOPWRIGHT_STORE"):
        env.pop(var, None)
    if kill is not None and kill[0] == "phase":
        env["BK_CRASH"] = f"{kill[1][0]}:{kill[1][1]}"
    elif kill is not None:
        env["BK_COMMIT_KILL"] = str(kill[1])
    # only a hung runner takes 300 s; forked (tests/forkserver.py): the same runner, its own pid
    return run_child([sys.executable, str(RUNNER), url, KEY], env, 300)


def _ok(proc: Any) -> dict[str, Any]:
    assert proc.returncode == 0, f"runner failed ({proc.returncode}):\n{proc.stderr}"
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _killed(work: Path, proc: Any, kill: Step) -> None:
    assert proc.returncode == -signal.SIGKILL, (
        f"kill point {kill} was not reached: the runner exited {proc.returncode}\n{proc.stderr}"
    )
    lines = [line.split() for line in (work / "phases.log").read_text().splitlines()]
    pid, phase = lines[-1]
    if kill[0] == "phase":
        assert (phase, lines.count([pid, phase])) == tuple(kill[1]), (lines[-1], kill)
    else:
        assert phase == "inside_commit", lines[-1]


def _play(url: str, work: Path, steps: list[Step]) -> None:
    """Each step in a process of its own: a kill (the process must die there), or a rollback
    to ``ROLLBACK_TO`` of the run as it stands (after it, the run is resumed), or one killed
    inside its commit. The run is resumed to its end after the last step, and before a
    rollback."""
    work.mkdir(parents=True, exist_ok=True)
    for kind, arg in steps:
        if kind == "rollback":
            _ok(_run(url, work))  # the run ends first
            rollback = f"rollback:{ROLLBACK_TO}"
            if arg == "killed":
                named = _naming_versions(url)
                assert named, "no record names a version: the layout under test is not used"
                _killed(work, _run(url, work, action=rollback, kill=("commit", 1)), ("commit", 1))
                # the rollback's commit wrote nothing: the run still ended, and the records it
                # was writing values back into still name their versions
                with lw.Runtime(url) as rt:
                    assert rt.store.get_run(KEY).status == "accepted"
                assert _naming_versions(url) == named
            else:
                _ok(_run(url, work, action=rollback))
            continue
        kill: Step = (kind, arg)
        proc = _run(url, work, kill=kill)
        _killed(work, proc, kill)
    _ok(_run(url, work))


def _naming_versions(url: str) -> list[int]:
    """The cycles whose record, as the database holds it, names the versions of both large
    edits (text and dict) instead of holding their values; any other record holds every
    value (none names one and holds the other, none names the small counter's)."""
    with lw.Runtime(url) as rt:
        store: Any = rt.store
        run_id = store.get_run(KEY).run_id
        with store._conn() as conn:
            rows = conn.execute(
                f"SELECT cycle, record FROM checkpoints WHERE run_id={store._MARK} "
                "AND record IS NOT NULL ORDER BY seq",
                (run_id,),
            ).fetchall()
    out = []
    for cycle, raw in rows:
        rec = json.loads(raw) if isinstance(raw, str) else raw
        edits = (rec.get("proposal") or {}).get("edits") or []
        named = sorted(e["part"] for e in edits if "version" in e)
        assert named in ([], ["body", "notes"]), (cycle, named)
        if named:
            assert all(set(e) == {"artifact", "part", "version"} for e in edits if "version" in e)
            out.append(int(cycle))
    return out


# --- reading back ----------------------------------------------------------------------------
def _no_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _no_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_no_volatile(v) for v in value]
    return value


def _cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    assert code == 0, err.getvalue()
    return out.getvalue()


@dataclass
class Snapshot:
    run: Any
    task: Any
    state: dict[str, Any]
    versions: dict[str, list[tuple[int, Any, int, str]]]
    records: list[tuple[int, dict[str, Any] | None]]  # iter_records: (cycle, record)
    checkpoint_records: list[tuple[int, dict[str, Any] | None]]
    journal: dict[str, Any]
    show: dict[str, Any]
    eval_cases: list[dict[str, Any]]
    effects_log: list[str]
    proposed: dict[int, list[str]]  # cycle -> every proposal the actor made (JSON)
    phases: Counter[str]  # how many times each phase was reached, by every process


def _snapshot(url: str, work: Path) -> Snapshot:
    with lw.Runtime(url) as rt:
        store = rt.store
        run = store.get_run(KEY)
        state = rt.result(run.run_id).state
        versions = {
            f"{a}/{p}": [
                (v.n, v.value, v.cycle, str(v.status))
                for v in store.iter_versions(run.run_id, f"{a}/{p}")
            ]
            for a, parts in state.values().items()
            for p in parts
        }
        records = [(c, r) for _s, c, r in store.iter_records(run.run_id)]
        checkpoint_records = [(ck.cycle, ck.record) for ck in store.checkpoints(run.run_id)]
        journal = {e.key: e for e in store.journal(run.run_id)}
    proposed: dict[int, list[str]] = {}
    for line in (work / "proposed.jsonl").read_text().splitlines():
        cycle, _, edits = line.partition(" ")
        proposed.setdefault(int(cycle), []).append(edits)
    log = work / "effects.log"
    return Snapshot(
        run=run,
        task=run.task,
        state=state.to_dict(),
        versions=versions,
        records=records,
        checkpoint_records=checkpoint_records,
        journal=journal,
        show=json.loads(_cli("show", run.run_id, "--json", "--store", url)),
        eval_cases=[
            json.loads(line)
            for line in _cli("export", "eval-cases", "--store", url).splitlines()
            if line.strip()
        ],
        effects_log=log.read_text().splitlines() if log.exists() else [],
        proposed=proposed,
        phases=Counter(
            line.split()[1]
            for line in (work / "phases.log").read_text().splitlines()
            if line.split()[1] in PHASES
        ),
    )


def _edits(record: dict[str, Any]) -> dict[str, Any]:
    edits = record["proposal"]["edits"]
    assert all(set(e) == {"artifact", "part", "value"} for e in edits), edits  # values filled
    assert {e["artifact"] for e in edits} == {"doc"}
    return {e["part"]: e["value"] for e in edits}


def _concluded(records: list[tuple[int, dict[str, Any] | None]]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for cycle, rec in records:
        if rec is not None and "proposal" in rec:
            assert rec["cycle"] == cycle and cycle not in out, (cycle, rec.get("cycle"))
            out[cycle] = rec
    return out


def _as_proposed(snap: Snapshot, *, redone_alike: bool = True) -> dict[int, dict[str, Any]]:
    """Each concluded cycle's record, checked to hold exactly what the actor last proposed in
    it (with ``redone_alike``, every proposal of a cycle redone after a kill is the same: no
    rollback came between)."""
    by_cycle = _concluded(snap.records)
    assert _concluded(snap.checkpoint_records) == by_cycle
    for cycle, rec in by_cycle.items():
        made = snap.proposed[cycle]
        if redone_alike:
            assert len(set(made)) == 1, f"cycle {cycle} proposed different edits when redone"
        assert json.dumps(_edits(rec), sort_keys=True) == made[-1], f"cycle {cycle}'s record"
    assert sorted(by_cycle) == sorted(snap.proposed)
    return by_cycle


def _records_less_owed(
    got: dict[int, dict[str, Any]], ref: dict[int, dict[str, Any]]
) -> dict[int, Any]:
    """The records as the uninterrupted run wrote them: a cycle redone after a kill is also
    charged the calls of its killed attempt (invariant 7)."""
    assert sorted(got) == sorted(ref)
    return {c: _no_volatile(less_owed(got[c], ref[c])[0]) for c in got}


def _show_core(show: dict[str, Any], ref: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """``show --json`` less what a kill legitimately adds (its own events: a lease taken over,
    a cycle redone; extra attempts in the journal; calls billed twice, invariant 7)."""
    cycles = []
    for rec in show["cycles"]:
        if "proposal" in rec:
            rec = less_owed(rec, ref[rec["cycle"]])[0]
        cycles.append(rec)
    journal = sorted(
        (e["key"], e["status"], e.get("data", {}).get("result"))
        for e in show["journal"]
        if e["kind"] == "effect"
    )
    core = {"run": show["run"], "state": show["state"], "cycles": cycles, "journal": journal}
    return dict(_no_volatile(core))


def _check(got: Snapshot, ref: Snapshot) -> None:
    run, rr = got.run, ref.run
    assert (run.status, run.stop_reason, run.cycle) == (rr.status, rr.stop_reason, rr.cycle)
    assert run.status == "accepted"
    # the task, read back from run_tasks
    assert got.task == ref.task
    assert got.task["artifacts"] == bw.TASK["artifacts"]
    # final state and every version's value (abandoned ones overwritten, as in the reference)
    # (an effect the kill left to its reconcile hook is not known free: ``billed_told``)
    billed = billed_told(got.state["billed"], ref.state["billed"])
    assert _no_volatile({**got.state, "billed": billed}) == _no_volatile(ref.state)
    assert got.versions == ref.versions
    # the task's large document: one version, the task's value, never written again
    assert got.versions["ref/text"] == [(1, bw.REFERENCE_DOC, 0, "accepted")]
    # every record, as both readers read it: what the actor proposed at that cycle
    records = _as_proposed(got)
    ref_records = _as_proposed(ref)
    assert _records_less_owed(records, ref_records) == {
        c: _no_volatile(r) for c, r in ref_records.items()
    }
    # show --json and the eval-case export, less ids, times and what a kill adds
    shown = got.show["state"]
    shown = {**shown, "billed": billed_told(shown["billed"], ref.show["state"]["billed"])}
    assert _show_core({**got.show, "state": shown}, ref_records) == _show_core(
        ref.show, ref_records
    )
    assert _no_volatile(told(got.eval_cases)) == _no_volatile(ref.eval_cases)
    exported = json.dumps(got.eval_cases)
    last = max(records)
    assert json.dumps(_edits(records[last])["body"])[1:-1] in exported
    # effects: none ran twice; the same ran as in the reference, each journaled done
    assert not [k for k, n in Counter(got.effects_log).items() if n > 1], got.effects_log
    assert sorted(got.effects_log) == sorted(ref.effects_log)
    done = sorted(k.removeprefix("effect:") for k, e in got.journal.items() if e.status == "done")
    assert done == sorted(got.effects_log)


# --- the cases --------------------------------------------------------------------------------
def _url(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Snapshot]]:
    """The uninterrupted runs, on SQLite (the same loop on PostgreSQL must read the same)."""
    out: dict[str, Snapshot] = {}
    named: dict[str, list[int]] = {}
    for name, steps in (("plain", []), ("rollback", [("rollback", None)])):
        work = tmp_path_factory.mktemp(f"ref-{name}")
        url = f"sqlite:///{work / 'store.db'}"
        _play(url, work, steps)
        out[name] = _snapshot(url, work)
        named[name] = _naming_versions(url)
    # The layout under test: each cycle's record names its versions instead of holding the
    # values; the rollback wrote the values back into the abandoned cycles' (3-5) records.
    assert named == {"plain": [1, 2, 3, 4, 5], "rollback": [1, 2, 6, 7, 8]}
    plain, back = out["plain"], out["rollback"]
    assert plain.phases == Counter(REACHED), plain.phases  # the shape the cases are written for
    assert len(plain.checkpoint_records) == COMMITS + 1  # seq 0 is written with the run
    assert (plain.run.cycle, back.run.cycle) == (bw.DONE, 2 * bw.DONE - ROLLBACK_TO)
    assert plain.effects_log == ["publish:c3"]
    assert back.effects_log == ["publish:c3", "publish:c6"]
    assert len(plain.task["artifacts"]["ref"]["text"]) > 40_000
    yield out


# How many times the uninterrupted run reaches each phase (checked by ``references``): five
# cycles; one effect (cycle 3); seven commits (a status-only one, one a cycle, and the
# write-ahead of cycle 3's effect).
REACHED = {p: 1 if "effect" in p else 7 if "checkpoint" in p else bw.DONE for p in PHASES}
COMMITS = 7


def _phase_cases() -> list[list[Step]]:
    """Kill points of several cycles: around the actor of cycles 1 and 5 (5 is accepted),
    around cycle 3's effect, around the commits of cycles 1, 3 and 5, and inside the commits
    of cycle 3's effect, cycle 3 and cycle 5; with ``LOOPWRIGHT_CRASH_SWEEP=1``, every phase
    boundary and every commit."""
    sweep = os.environ.get("LOOPWRIGHT_CRASH_SWEEP") == "1"
    cases: list[list[Step]] = []
    for phase in PHASES:
        if sweep or "effect" in phase:
            points: Any = range(1, REACHED[phase] + 1)
        else:
            points = (2, 5, 7) if "checkpoint" in phase else (1, bw.DONE)
        cases.extend([("phase", (phase, n))] for n in points)
    commits = range(1, COMMITS + 1) if sweep else (4, 5, 7)
    cases.extend([("commit", n)] for n in commits)
    # kills in a row, each in a fresh process that resumed the previous one's run
    cases.append(
        [("phase", ("after_actor", 2)), ("phase", ("before_effect_result", 1)), ("commit", 2)]
    )
    return cases


def _rollback_cases() -> list[list[Step]]:
    """A rollback to cycle 2 of an ended run (itself killed inside its commit in one case),
    then kills in the cycles after it (6 asks for an effect; 8 is accepted)."""
    return [
        [("rollback", "killed"), ("rollback", None), ("phase", ("before_checkpoint", 1))],
        [
            ("rollback", None),
            ("phase", ("before_checkpoint", 1)),
            ("phase", ("after_checkpoint", 2)),
        ],
        [("phase", ("after_actor", 2)), ("rollback", None), ("phase", ("after_effect_intent", 1))],
        [("rollback", None), ("commit", 2), ("phase", ("before_effect_result", 1))],
        [("rollback", None), ("phase", ("after_checkpoint", 3)), ("commit", 1)],
    ]


def _ids(cases: list[list[Step]]) -> list[str]:
    return [
        ",".join(k if a is None else f"{k}:{a}" if k != "phase" else f"{a[0]}:{a[1]}" for k, a in c)
        for c in cases
    ]


CASES = [("plain", c) for c in _phase_cases()] + [("rollback", c) for c in _rollback_cases()]
# the layout each reference ends with: which cycles' records name versions
NAMING = {"plain": list(range(1, bw.DONE + 1)), "rollback": [1, 2, 6, 7, 8]}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("reference", "steps"),
    CASES,
    ids=[f"{r}-{i}" for (r, _), i in zip(CASES, _ids([c for _, c in CASES]), strict=True)],
)
def test_kills_and_resume_end_as_the_uninterrupted_run(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    backend: str,
    reference: str,
    steps: list[Step],
    references: dict[str, Snapshot],
) -> None:
    url = _url(request, tmp_path, backend)
    _play(url, tmp_path, steps)
    got = _snapshot(url, tmp_path)
    _check(got, references[reference])
    # a cycle redone after a kill stores its values once too: its record names the versions
    assert _naming_versions(url) == NAMING[reference]
    if reference == "rollback":
        # cycles 3-5 were abandoned: their records still read the drafts 3-5 they proposed,
        # not the drafts cycles 6-8 wrote since under the same version numbers
        records = _concluded(got.records)
        for cycle in range(ROLLBACK_TO + 1, bw.DONE + 1):
            assert _edits(records[cycle])["body"] == bw.body(cycle, cycle)
            later = cycle + bw.DONE - ROLLBACK_TO
            assert _edits(records[later])["body"] == bw.body(later, cycle)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_rollback_of_a_killed_run_keeps_what_each_cycle_proposed(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    """Killed in cycle 5 (after its actor), the run is rolled back to cycle 2 (the dead
    process's lease taken over) and resumed, itself killed inside a commit: cycles 3-4 are
    abandoned, and cycle 5 is done again from cycle 2's parts (draft 3, not the killed
    attempt's draft 5). No uninterrupted run ends the same way, so each record is checked
    against the last proposal of its cycle."""
    url = _url(request, tmp_path, backend)
    first: Step = ("phase", ("after_actor", 5))
    _killed(tmp_path, _run(url, tmp_path, kill=first), first)
    _ok(_run(url, tmp_path, action=f"rollback:{ROLLBACK_TO}"))
    _killed(tmp_path, _run(url, tmp_path, kill=("commit", 2)), ("commit", 2))
    _ok(_run(url, tmp_path))
    got = _snapshot(url, tmp_path)
    assert (got.run.status, got.run.cycle) == ("accepted", 7)
    records = _as_proposed(got, redone_alike=False)
    assert set(got.proposed[5]) == {
        json.dumps({"body": bw.body(5, n), "notes": bw.notes(5, n), "n": n}, sort_keys=True)
        for n in (5, 3)
    }
    lineage = {1: 1, 2: 2, 5: 3, 6: 4, 7: 5}  # cycle -> draft, after the rollback
    for cycle, n in {**lineage, 3: 3, 4: 4}.items():
        assert _edits(records[cycle]) == {
            "body": bw.body(cycle, n),
            "notes": bw.notes(cycle, n),
            "n": n,
        }
    # the body's versions: the task's, then the lineage's drafts (cycle 3-4's written over)
    assert [v[1] for v in got.versions["doc/body"]] == [
        "",
        *(bw.body(c, n) for c, n in lineage.items()),
    ]
    assert _naming_versions(url) == [1, 2, 5, 6, 7]
    assert sorted(got.effects_log) == ["publish:c3", "publish:c6"]
    assert got.task["artifacts"] == bw.TASK["artifacts"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_rollbacks_in_a_row_with_kills_keep_every_record(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    """Three rollbacks of one run, each followed by kills: to cycle 2 (abandoning 3-5), to
    cycle 7 (abandoning 8, whose versions had been written over 3-5's), and to cycle 0
    (abandoning everything, the task's values restored). Every record still reads what its
    cycle proposed; only the last lineage's records name versions."""
    url = _url(request, tmp_path, backend)

    def kill(step: Step) -> None:
        _killed(tmp_path, _run(url, tmp_path, kill=step), step)

    _ok(_run(url, tmp_path))
    _ok(_run(url, tmp_path, action="rollback:2"))
    kill(("phase", ("after_checkpoint", 2)))
    _ok(_run(url, tmp_path))
    _ok(_run(url, tmp_path, action="rollback:7"))
    kill(("commit", 1))
    _ok(_run(url, tmp_path))
    _ok(_run(url, tmp_path, action="rollback:0"))
    kill(("phase", ("before_checkpoint", 3)))
    assert _ok(_run(url, tmp_path)) == {"status": "accepted", "cycles": 14}
    got = _snapshot(url, tmp_path)
    records = _as_proposed(got)
    drafts = [1, 2, 3, 4, 5, 3, 4, 5, 5, 1, 2, 3, 4, 5]  # cycle i+1's counter value
    assert sorted(records) == list(range(1, 15))
    for cycle, n in enumerate(drafts, 1):
        want = {"body": bw.body(cycle, n), "notes": bw.notes(cycle, n), "n": n}
        assert _edits(records[cycle]) == want, cycle
    assert [v[1] for v in got.versions["doc/body"]] == [
        "",
        *(bw.body(c, c - 9) for c in range(10, 15)),
    ]
    assert _naming_versions(url) == [10, 11, 12, 13, 14]
    assert got.effects_log == ["publish:c3", "publish:c6", "publish:c9", "publish:c12"]
    assert got.task["artifacts"] == bw.TASK["artifacts"]
