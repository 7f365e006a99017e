"""Faithfulness: replaying recorded LDB debugging runs under a contract that mirrors LDB's loop
reproduces the recorded verdicts, for every task of both shared files (328 tasks).

The mirrored loop (upstream ``programming/ldb.py``): test the seed on the visible tests; stop
at the first visible pass, else debug for at most ``max_iters = 10`` rounds; the hidden tests
judge the final program. In loopwright terms:

* cycle 1 judges the seed: the replay actor proposes no change (``evaluate_initial``);
* cycle ``k + 1`` proposes ``implementations[k]``;
* success = every visible test passes (a vacuous pass included: LDB accepted a task with no
  visible tests); the cycle budget is each task's own, ``recorded.max_cycles`` = 1 seed + the
  recording's rounds (``max_cycles_key``), so a 9-round recording stops where it stopped; no
  no-progress rule (LDB has none: it keeps debugging through identical or worse attempts).

Where the semantics differ, and why it does not change the verdicts compared here:

* loopwright runs the held-out tests on *every* cycle; LDB ran them once, on the final
  program. The test compares the held-out verdict of the last cycle, which is the same program.
* LDB executes the tests in threads of its own process with module globals shared across
  calls; the sandbox executes them in a fresh child per verifier call, with one namespace shared
  by the tests of that call and ``from typing import *`` executed first, as LDB's executor did.
* LDB's thread-based timeout could not kill a runaway attempt; the sandbox can. Per-test limits
  are LDB's numbers, 1 s per visible test and 10 s for the hidden tests, but of CPU time
  (LDB's were wall-clock), so a verdict does not flip when the machine is loaded.
* A recorded run that never passed stops ``budget_cycles`` after its own rounds (the shared
  files used 10; other LDB runs used 9: ``test_nine_round_recording_ends_as_recorded``), and
  keeps the held-out verdict of its last candidate.

Besides the final verdicts, the test checks each attempt's visible verdict against the recorded
``test_feedback`` (empty = pass) and that the run ended on the same attempt as the recording.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.actors import ReplayActor
from loopwright.importers import convert_record, read_ldb
from loopwright.verifiers import CommandVerifier

DATA = Path(__file__).resolve().parents[1] / "data" / "ldb" / "humaneval"
FILES = [
    DATA / "gpt-3.5-turbo-0613" / "results.jsonl",
    DATA / "reflexion" / "gpt-4o-2024-05-13.jsonl",
]


def mirrored_loop() -> lw.Loop:
    return lw.Loop(
        name="ldb-mirror",
        actor=ReplayActor(attempts_key="recorded.attempts"),
        verifiers=[
            lw.Check(
                fn=CommandVerifier(tests_key="visible_tests", test_timeout_s=1.0), name="visible"
            ),
            lw.Check(
                fn=CommandVerifier(tests_key="held_out.tests", test_timeout_s=10.0),
                name="hidden",
                held_out=True,
            ),
        ],
        contract=lw.Contract(
            success=lw.Success(allow_vacuous=True),
            budget=lw.Budget(max_cycles=11, max_cycles_key="recorded.max_cycles"),
        ),
    )


def compare(rt: lw.Runtime, task: dict[str, Any], result: lw.RunResult) -> str | None:
    verdicts = [e.data for e in rt.store.events(result.run_id) if e.kind == "verdict"]
    visible = [bool(v["passed"]) for v in verdicts if not v["held_out"]]
    hidden = [bool(v["passed"]) for v in verdicts if v["held_out"]]
    rec = task["recorded"]
    recorded_visible = [not rec["seed_feedback"]] + [not a["feedback"] for a in rec["attempts"]]
    solved = task["held_out"]["recorded"]["is_solved"]
    problems = []
    if not visible or visible[-1] != rec["is_passing"]:
        problems.append(f"final visible {visible[-1:]} != is_passing {rec['is_passing']}")
    if not hidden or hidden[-1] != solved:
        problems.append(f"final held-out {hidden[-1:]} != is_solved {solved}")
    if visible != recorded_visible:
        problems.append(f"per-attempt visible {visible} != recorded {recorded_visible}")
    if result.cycles != len(recorded_visible):
        problems.append(f"ended after {result.cycles} cycles, recorded {len(recorded_visible)}")
    expected_status = "accepted" if rec["is_passing"] else "stopped"
    expected_reason = "success" if rec["is_passing"] else "budget_cycles"
    if result.status != expected_status or result.stop_reason != expected_reason:
        problems.append(f"status {result.status} ({result.stop_reason}) != {expected_status}")
    return f"{task['task_key']}: " + "; ".join(problems) if problems else None


@pytest.mark.parametrize("path", FILES, ids=[p.parent.name for p in FILES])
def test_replay_reproduces_recorded_verdicts(path: Path, tmp_path: Path) -> None:
    tasks = list(read_ldb(path))
    assert len(tasks) == 164
    loop = mirrored_loop()
    with lw.Runtime(str(tmp_path / "faith.db")) as rt:
        results = asyncio.run(rt.run_many(loop, tasks, concurrency=8))
        mismatches = [m for t, r in zip(tasks, results, strict=True) if (m := compare(rt, t, r))]
    assert not mismatches, f"{len(mismatches)}/{len(tasks)} differ:\n" + "\n".join(mismatches)
    # the recorded totals, reproduced
    accepted = sum(r.status == "accepted" for r in results)
    assert accepted == sum(t["recorded"]["is_passing"] for t in tasks)
    assert sum(bool(r.held_out_passed) for r in results) == sum(
        t["held_out"]["recorded"]["is_solved"] for t in tasks
    )


def test_example_spec_runs_imported_tasks(tmp_path: Path) -> None:
    """``examples/code_repair/loop.toml`` loads and runs imported tasks, held-out beside visible."""
    spec = Path(__file__).resolve().parents[2] / "examples" / "code_repair" / "loop.toml"
    loop = lw.load_spec(spec)
    assert [(c.name, c.held_out) for c in loop.verifiers] == [
        ("visible_tests", False),
        ("hidden_tests", True),
    ]
    tasks = list(read_ldb(FILES[0]))
    picked = [t for t in tasks if t["recorded"]["debug_iter"] == 10][:2] + tasks[:4]
    with lw.Runtime(str(tmp_path / "ex.db")) as rt:
        results = asyncio.run(rt.run_many(loop, picked, concurrency=6))
    for t, r in zip(picked, results, strict=True):
        assert r.held_out_passed is not None
        if r.status == "accepted":
            assert t["recorded"]["is_passing"]
        else:  # the example's no-progress rule stops stalled runs early
            assert r.stop_reason in ("no_progress", "budget_cycles")
            assert r.cycles <= len(t["recorded"]["attempts"]) + 1


def _record(rounds: int, *, passing: bool) -> dict[str, Any]:
    """A recording of ``rounds`` debugging rounds whose visible test is wrong (the program is
    right): it never passes the visible test, and the hidden tests pass it."""
    impls = ["def f(x):\n    return x\n"] * (rounds + 1)
    feedback = [["assert f(1) == 2 # Real Execution Output: 1"]] * (rounds + 1)
    if passing:
        feedback[-1] = []
    return {
        "task_id": f"Synthetic/{rounds}-{passing}",
        "prompt": "def f(x):\n",
        "entry_point": "f",
        "generated_test": ["assert f(1) == 2"] if not passing else ["assert f(1) == 1"],
        "test": "def check(candidate):\n    assert candidate(1) == 1\n",
        "implementations": impls,
        "test_feedback": feedback,
        "is_passing": passing,
        "is_solved": True,
        "debug_iter": rounds,
        "token_nums": 90 if rounds else 0,  # LDB counts tokens only of debugging rounds
    }


def test_nine_round_recording_ends_as_recorded(tmp_path: Path) -> None:
    """A run that never passed in 9 recorded rounds stops by budget after 10 cycles, as LDB
    did, not ``escalated`` for want of a recording; it keeps its held-out verdict."""
    task = convert_record(_record(9, passing=False))
    assert task["recorded"]["max_cycles"] == 10
    with lw.Runtime(str(tmp_path / "nine.db")) as rt:
        result = asyncio.run(rt.run(mirrored_loop(), task))
        record = rt.store.get_run(result.run_id)
    assert (result.status, result.stop_reason, result.cycles) == ("stopped", "budget_cycles", 10)
    assert result.held_out_passed is True and record.held_out_passed is True


def test_escalated_run_keeps_its_held_out_verdict(tmp_path: Path) -> None:
    """Out of recordings (a contract allowing more cycles than were recorded), the run ends
    ``escalated`` and still reports how its last judged candidate did on the held-out tests."""
    task = convert_record(_record(2, passing=False))
    loop = mirrored_loop()
    loop = lw.Loop(
        name=loop.name,
        actor=loop.actor,
        verifiers=loop.verifiers,
        contract=lw.Contract(budget=lw.Budget(max_cycles=20)),
    )
    with lw.Runtime(str(tmp_path / "esc.db")) as rt:
        result = asyncio.run(rt.run(loop, task))
        record = rt.store.get_run(result.run_id)
    assert (result.status, result.cycles) == ("escalated", 3)
    assert result.held_out_passed is True and record.held_out_passed is True


def test_vacuous_visible_check_is_not_success_unless_allowed(tmp_path: Path) -> None:
    """A task with no visible tests: LDB accepted its seed on the vacuous pass (the mirrored
    loop allows it, to stay faithful); by default a contract refuses success on it, and the
    run's packet says why."""
    raw = _record(0, passing=True)
    raw["generated_test"] = []
    task = convert_record(raw)
    assert task["vacuous"] is True
    mirrored = mirrored_loop()
    strict = lw.Loop(
        name="strict",
        actor=mirrored.actor,
        verifiers=mirrored.verifiers,
        contract=lw.Contract(budget=lw.Budget(max_cycles=11, max_cycles_key="recorded.max_cycles")),
    )
    with lw.Runtime(str(tmp_path / "vac.db")) as rt:
        allowed = asyncio.run(rt.run(mirrored, task))
        refused = asyncio.run(rt.run(strict, dict(task, task_key="strict")))
        packet = rt.store.get_run(refused.run_id).packet or {}
    assert (allowed.status, allowed.cycles) == ("accepted", 1)
    assert refused.status != "accepted" and refused.held_out_passed is True
    assert any("nothing to check" in f["message"] for f in packet["unresolved_findings"])
