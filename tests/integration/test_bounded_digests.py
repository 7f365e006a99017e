"""Invariant 8 in memory: a live run does not keep every rejected proposal's digest.

The digests are what the duplicate rule asks about (a proposal identical to one rejected before
is refused without being judged again), for the whole run. The newest ``REJECTED_WINDOW`` stay
in memory; once the store holds the older ones they leave it, and the rule asks the store (one
indexed read) about any digest not held. The decisions are the same as when every digest was
held: in the process that rejected them, and in one that resumes the run.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.crash import Crash, phase_hook

import loopwright as lw
from loopwright import _digests, _exec
from loopwright._state import Digests
from loopwright.store.sqlite import SQLiteStore

TASK = {"goal": "never right", "artifacts": {"doc": {"a": "x"}}}
# cycle -> the cycle whose proposal it repeats: 1 is rejected long before (in the first
# process, in the resumed case), 20 after the resume; 40 repeats the duplicate 30.
REPEATS = {30: 1, 31: 20, 40: 30}
CYCLES = 42


def actor(ctx: lw.Context) -> lw.Proposal:
    n = REPEATS.get(ctx.cycle, ctx.cycle)
    n = REPEATS.get(n, n)
    return lw.Proposal.edit("doc", {"a": f"v{n}"})


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=False, score=0.1, findings=(lw.Finding("no", "doc", "a", "content"),))


def make_loop(cycles: int = CYCLES) -> lw.Loop:
    return lw.Loop(
        name="rejecting",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
    )


def live_digests(monkeypatch: pytest.MonkeyPatch) -> list[Digests]:
    """The rejected digests of every execution opened from here on (the live, shared list)."""
    seen: list[Any] = []
    adopt = _exec.Execution.adopt

    def spy(self: _exec.Execution, store: Any, stored: Any) -> None:
        adopt(self, store, stored)
        seen.append(self)

    monkeypatch.setattr(_exec.Execution, "adopt", spy)
    return seen


def decisions(db: Path) -> dict[int, tuple[str, bool, str]]:
    with lw.Runtime(db) as rt:
        rec = rt.store.get_run("k")
        return {
            ck.cycle: (ck.record["digest"], ck.record["duplicate"], ck.record["decision"])
            for ck in rt.store.checkpoints(rec.run_id)
            if ck.record and "proposal" in ck.record
        }


def test_memory_holds_a_window_of_the_digests_not_every_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rejected proposal's digest (≈ 120 bytes with its list and set slots) was kept for the
    # life of the process: 2,000 rejected cycles held 2,000 of them. Now as many at 2,000 as
    # at 600: at most twice the window, and a filter of fixed size; the others in the store,
    # which is asked about a new proposal only where the filter cannot rule it out.
    seen = live_digests(monkeypatch)
    held = {}
    for n in (200, 600, 2000):
        with lw.Runtime(f"sqlite:///{tmp_path}/r{n}.db?durability=process") as rt:
            asked = [0]
            ask = rt.store.is_rejected

            def counting(
                run_id: str, digest: str, asked: list[int] = asked, ask: Any = ask
            ) -> bool:
                asked[0] += 1
                return bool(ask(run_id, digest))

            rt.store.is_rejected = counting  # type: ignore[method-assign]
            r = rt.run_sync(make_loop(n), TASK, task_key="k")
            assert r.cycles == n
            d = seen[-1].state.rejected
            assert isinstance(d, Digests)
            assert len(rt.store.rejected_digests(r.run_id)) == n - len(REPEATS)
            f = getattr(d, "_filter", None)
            size = sys.getsizeof(d) + sys.getsizeof(d._set) + (0 if f is None else len(f))
            held[n] = (len(d), size, asked[0])
    assert held[200][0] == 200 - len(REPEATS)  # under twice the window: all still held
    assert held[2000][1] <= held[600][1] * 1.1, held  # the bytes held do not grow
    window = _digests.REJECTED_WINDOW
    assert window <= held[2000][0] < 2 * window
    assert d.gone + len(d) == 2000 - len(REPEATS)
    # Asked only where the filter's bits say "maybe" (≈ 0.1 % of about 3,500 checks once
    # 1,750 digests left memory: a couple; a store read a check would be 3,500).
    assert held[200][2] == 0 and held[2000][2] <= 20, held


@pytest.fixture
def small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_digests, "REJECTED_WINDOW", 4)


def test_a_proposal_rejected_beyond_the_window_is_still_a_duplicate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_window: None
) -> None:
    seen = live_digests(monkeypatch)
    small = tmp_path / "small.db"
    with lw.Runtime(small) as rt:
        assert rt.run_sync(make_loop(), TASK, task_key="k").cycles == CYCLES
    d = seen[-1].state.rejected
    assert isinstance(d, Digests) and len(d) < 8 and d.gone + len(d) == CYCLES - len(REPEATS)
    got = decisions(small)
    assert got[30][0] == got[1][0] and got[31][0] == got[20][0] and got[40][0] == got[1][0]
    assert [n for n, (_, dup, _) in got.items() if dup] == sorted(REPEATS)
    # the same decisions as with every digest held
    monkeypatch.setattr(_digests, "REJECTED_WINDOW", 10**9)
    whole = tmp_path / "whole.db"
    with lw.Runtime(whole) as rt:
        assert rt.run_sync(make_loop(), TASK, task_key="k").cycles == CYCLES
    assert len(seen[-1].state.rejected) == CYCLES - len(REPEATS)
    assert decisions(whole) == got


def test_a_resumed_run_refuses_what_an_earlier_process_rejected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_window: None
) -> None:
    # Killed after cycle 25's checkpoint; the rest runs in a fresh process (window 4 there
    # too): cycle 30 repeats what the first process rejected at cycle 1, cycle 31 what the
    # second rejected at 20 and let go of, cycle 40 the duplicate 30.
    db = tmp_path / "resumed.db"
    with lw.Runtime(db) as rt:
        rt._on_phase = phase_hook(("after_checkpoint", 25))
        with pytest.raises(Crash):
            rt.run_sync(make_loop(), TASK, task_key="k")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path[:0] = {[str(Path(__file__).parent), str(Path(__file__).parents[1])]!r}
        from loopwright import _digests
        _digests.REJECTED_WINDOW = 4
        import loopwright as lw
        from test_bounded_digests import TASK, make_loop
        with lw.Runtime({str(db)!r}) as rt:
            assert rt.run_sync(make_loop(), TASK, task_key="k").cycles == {CYCLES}
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    got = decisions(db)
    assert [n for n, (_, dup, _) in got.items() if dup] == sorted(REPEATS)
    assert got[30][0] == got[1][0] and got[31][0] == got[20][0]
    monkeypatch.setattr(_digests, "REJECTED_WINDOW", 10**9)
    whole = tmp_path / "whole.db"
    with lw.Runtime(whole) as rt:
        assert rt.run_sync(make_loop(), TASK, task_key="k").cycles == CYCLES
    assert decisions(whole) == got


def test_asking_the_store_costs_the_same_with_100_or_10000_digests(tmp_path: Path) -> None:
    # The rule asks about a digest memory does not hold with one statement, an index probe:
    # its SQLite VM steps do not follow how many digests the run has.
    steps = {}
    for n in (100, 10_000):
        db = tmp_path / f"s{n}.db"
        with lw.Runtime(db) as rt:
            run_id = rt.run_sync(make_loop(1), TASK, task_key="k").run_id
        con = sqlite3.connect(db)
        con.executemany(
            "INSERT INTO rejected(run_id, digest, cycle) VALUES(?,?,?)",
            [(run_id, f"d{i:08x}", i) for i in range(n)],
        )
        con.commit()
        con.close()
        with SQLiteStore(db) as store:
            count = [0]

            def step(count: list[int] = count) -> int:
                count[0] += 1
                return 0

            store._db.set_progress_handler(step, 1)
            try:
                found = [store.is_rejected(run_id, f"d{i:08x}") for i in (5, n // 2, n - 1)]
                missed = store.is_rejected(run_id, "never")
            finally:
                store._db.set_progress_handler(None, 1)
            assert found == [True, True, True] and not missed
            steps[n] = count[0]
    assert steps[10_000] == steps[100], steps
