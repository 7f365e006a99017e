"""A billed call's bill is one fenced statement (``journal_put`` with no claim, no expected status
and no events): it is refused under a stale token or for a run that is not there as the full
path refuses, it overwrites an entry as ``update_journal`` does, and a process killed by SIGKILL
between the bill's write and its cycle's commit leaves it to be charged once on resume, on
both stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_store_journal import _leased

import loopwright as lw
from loopwright.store import JournalEntry, Store, open_store

TASK = {"goal": "g", "artifacts": {"doc": {"a": "bad", "b": "bad", "c": "bad"}}}

# The run, in a process of its own: the actor bills 0.1 / 100 a call, the check 0.01 / 10. With
# KILL_AT=N, the process kills itself (SIGKILL: nothing after it runs) the N-th time the
# engine is about to commit a cycle, once every call of that cycle was billed and journaled.
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import loopwright as lw

    def actor(ctx):
        doc = ctx.artifacts["doc"]
        todo = [p for p in "abc" if doc.get(p) != "good"] or ["a"]
        return lw.Proposal.edit("doc", {todo[0]: "good"}, usage=lw.Usage(0.1, 100))

    def check(state, p):
        bad = [x for x in "abc" if state.artifacts["doc"].values().get(x) != "good"]
        return lw.Verdict(passed=not bad, score=1 - len(bad) / 3, usage=lw.Usage(0.01, 10))

    loop = lw.Loop(
        name="billed",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract(
            success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=6, max_cost_usd=10)
        ),
    )
    url, kill_at, run_id = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    seen = [0]

    def on_phase(phase):
        if phase == "before_checkpoint":
            seen[0] += 1
            if seen[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    with lw.Runtime(url) as rt:
        rt._on_phase = on_phase
        task = {"goal": "g", "artifacts": {"doc": {"a": "bad", "b": "bad", "c": "bad"}}}
        r = rt.resume_sync(run_id, loop) if run_id else rt.run_sync(loop, task, task_key="k")
        print(r.run_id, r.status, r.cycles, r.spent.cost_usd, r.spent.tokens)
    """
)


def _child(
    tmp_path: Path, url: str, kill_at: int, run_id: str = ""
) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "billed_child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, str(script), url, str(kill_at), run_id],
        env=env,
        check=False,  # its return code is the test's to read
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard only
    )


def test_a_bill_written_before_a_sigkill_is_charged_once(url: str, tmp_path: Path) -> None:
    """Killed (SIGKILL) between cycle 1's bills and its commit (the second commit: the first
    is the run's start), then resumed: the killed cycle's two bills are charged once each, on
    top of what the uninterrupted run spends, and no billing row is left."""
    ref = _child(tmp_path, f"sqlite:///{tmp_path / 'ref.db'}", 0)
    assert ref.returncode == 0, ref.stderr
    _rid, status, cycles, ref_cost, ref_tokens = ref.stdout.split()
    assert (status, cycles) == ("accepted", "3")

    killed = _child(tmp_path, url, 2)
    assert killed.returncode == -signal.SIGKILL, killed.stderr  # it did die there
    with open_store(url) as store:
        (run,) = store.list_runs()
        # the bills outlived the process: the actor's and the check's, of cycle 1
        keys = sorted(e.key for e in store.journal(run.run_id, kind="retry"))
        assert keys == ["retry:actor:1", "retry:verifier:check:1"]
        assert run.cycle == 0  # the cycle's commit never happened
    resumed = _child(tmp_path, url, 0, run.run_id)
    assert resumed.returncode == 0, resumed.stderr
    _rid, status, cycles, cost, tokens = resumed.stdout.split()
    assert (status, cycles) == ("accepted", "3")
    assert float(cost) == pytest.approx(float(ref_cost) + 0.11)  # owed once, not twice
    assert int(tokens) == int(ref_tokens) + 110
    with open_store(url) as store:
        assert store.journal(run.run_id, kind="retry") == []


def _store_with_run(url: str) -> tuple[Store, str, int]:
    store = open_store(url)
    run_id, token = _leased(store)  # type: ignore[arg-type]
    return store, run_id, token


def _bill(store: Store, run_id: str, token: int, **data: object) -> JournalEntry:
    return store.journal_put(
        run_id,
        token,
        key="retry:actor:1",
        kind="retry",
        cycle=1,
        status="settled",
        data=dict(data),
        attempts=0,
        lazy=True,
    )


def test_the_one_statement_bill_is_fenced_and_overwrites(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, run_id, token = _store_with_run(url)
    wrote: list[object] = []
    one = type(store)._put_fenced  # type: ignore[attr-defined]

    def counted(self: Store, sql: str, args: object, lazy: bool) -> object:
        wrote.append(row := one(self, sql, args, lazy))
        return row

    monkeypatch.setattr(type(store), "_put_fenced", counted)
    try:
        first = _bill(store, run_id, token, ok=[0.1, 100])
        assert (first.status, first.data, first.attempts) == ("settled", {"ok": [0.1, 100]}, 0)
        # written again (a cycle judged again): overwritten, its creation time kept
        again = _bill(store, run_id, token, ok=[0.2, 200])
        assert again.data == {"ok": [0.2, 200]} and again.created_at == first.created_at
        (only,) = store.journal(run_id, kind="retry")
        assert only.data == {"ok": [0.2, 200]}
        # a stale token: refused, nothing written
        with pytest.raises(lw.StaleLeaseError):
            _bill(store, run_id, token + 1, ok=[9.0, 9])
        with pytest.raises(lw.RunNotFoundError):
            _bill(store, "no-such-run", token, ok=[9.0, 9])
        (only,) = store.journal(run_id, kind="retry")
        assert only.data == {"ok": [0.2, 200]}
        # each went by the one statement: two written, two refused (no row)
        assert [row is not None for row in wrote] == [True, True, False, False]
    finally:
        store.close()


def test_a_bill_on_a_closed_store_is_refused_saying_so(url: str) -> None:
    # (the one-statement path skipped the closed store's check: SQLite's driver error came out)
    store, run_id, token = _store_with_run(url)
    store.close()
    with pytest.raises(lw.StoreError, match="is closed"):
        _bill(store, run_id, token, ok=[0.1, 100])
