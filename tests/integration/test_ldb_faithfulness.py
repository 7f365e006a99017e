"""Faithfulness: replaying recorded LDB debugging runs under a contract that mirrors LDB's loop
reproduces the recorded verdicts, for every task of both shared files (328 tasks).

The mirrored loop (upstream ``programming/ldb.py``): test the seed on the visible tests; stop
at the first visible pass, else debug for at most ``max_iters = 10`` rounds; the hidden tests
judge the final program. In loopwright terms:

* cycle 1 judges the seed: the replay actor proposes no change (``evaluate_initial``);
* cycle ``k + 1`` proposes ``implementations[k]``;
* success = every visible test passes; ``max_cycles = 11`` (1 seed + 10 repairs); no
  no-progress rule (LDB has none: it keeps debugging through identical or worse attempts).

Where the semantics differ, and why it does not change the verdicts compared here:

* loopwright runs the held-out tests on *every* cycle; LDB ran them once, on the final
  program. The test compares the held-out verdict of the last cycle, which is the same program.
* LDB executes the tests in threads of its own process with module globals shared across
  calls; the sandbox executes them in a fresh child per verifier call, with one namespace shared
  by the tests of that call and ``from typing import *`` executed first, as LDB's executor did.
* LDB's thread-based timeout could not kill a runaway attempt; the sandbox can. Per-test limits
  are LDB's: 1 s per visible test, 10 s for the hidden tests.
* A recorded run that ended without a visible pass before ``max_iters`` would, when replayed,
  run out of recordings and end ``escalated`` ("no more recorded attempts"); none of these
  files has one (their ``debug_iter`` is always 10 when ``is_passing`` is false).

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
from loopwright.importers import read_ldb
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
                fn=CommandVerifier(tests_key="held_out.tests", test_timeout_s=10.0, timeout_s=30.0),
                name="hidden",
                held_out=True,
            ),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=11)),
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
    if result.status != expected_status:
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
