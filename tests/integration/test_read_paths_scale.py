"""What the read paths of a long run read: a window, not the whole run (counted, not timed;
bench/read_paths.py measures time and memory at 2,000 and 20,000 cycles)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.long_loops import rejecting_loop

import loopwright as lw
from loopwright._modelcalls import MODEL_CALL
from loopwright.store import NewEvent, Store

pytest.importorskip("fastapi")

from support.dashboard import dashboard

TOKEN = "t" * 32
LOCAL = "http://127.0.0.1"
CYCLES = 120


def long_loop(cycles: int) -> lw.Loop:
    return rejecting_loop(cycles, lambda n: {f"p{n % 3}": f"draft {n}"})


TASK = {"goal": "long", "artifacts": {"doc": {"p0": "", "p1": "", "p2": ""}}}


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, int]:
    """(store, run id, id of a model call recorded before the run's first cycle)."""
    db = str(tmp_path_factory.mktemp("long") / "long.db")
    loop = long_loop(CYCLES)
    with lw.Runtime(db) as rt:
        rec, _new = rt.create(loop, TASK, task_key="long")
        rt.store.append_events(
            rec.run_id, [NewEvent(0, MODEL_CALL, {"scope": "actor", "model": "m", "prompt": []})]
        )
        call = rt.store.events(rec.run_id)[-1].id
        result = rt.run_sync(loop, TASK, task_key="long")
    assert result.cycles == CYCLES
    return db, result.run_id, call


class Counting:
    """Counts the events a store returns, however asked (a list or a page at a time)."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events = 0
        for name in ("events", "events_tail"):
            real = getattr(store, name)

            def counted(*a: Any, _real: Any = real, **k: Any) -> Any:
                out = _real(*a, **k)
                self.events += len(out)
                return out

            monkeypatch.setattr(store, name, counted)
        real_iter = store.iter_events

        def iter_counted(*a: Any, **k: Any) -> Iterator[Any]:
            for e in real_iter(*a, **k):
                self.events += 1
                yield e

        monkeypatch.setattr(store, "iter_events", iter_counted)


@pytest.mark.parametrize("path", ["/api/runs/{rid}/calls/{call}", "/runs/{rid}/calls/{call}"])
def test_a_model_call_of_a_long_runs_first_cycle_reads_one_event(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """It read every event after the call (the whole log, for a call of an early cycle)."""
    db, rid, call = long_run
    client = dashboard(db, token=TOKEN)
    count = Counting(client.app.state.store, monkeypatch)  # type: ignore[attr-defined]
    got = client.get(path.format(rid=rid, call=call))
    assert got.status_code == 200
    assert count.events <= 1  # was every event after it: > 4 a cycle
    # an id that is not a model call of the run: 404, as before
    assert client.get(path.format(rid=rid, call=call + 1)).status_code == 404


class CountingRows:
    """Counts the checkpoint and version rows a store reads."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        self.checkpoints = 0
        self.versions = 0
        real_ck, real_v = store._checkpoint_rows, store._version_rows  # type: ignore[attr-defined]

        def ck_rows(*a: Any, **k: Any) -> Any:
            out = real_ck(*a, **k)
            self.checkpoints += len(out)
            return out

        def v_rows(*a: Any, **k: Any) -> Any:
            out = real_v(*a, **k)
            self.versions += len(out)
            return out

        monkeypatch.setattr(store, "_checkpoint_rows", ck_rows)
        monkeypatch.setattr(store, "_version_rows", v_rows)


def test_a_fork_at_an_early_cycle_reads_that_cycle_not_the_run(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It read every checkpoint of the run and every version of every part (14 s and 280 MB
    for a fork at cycle 5 of 20,000 cycles)."""
    db, rid, _call = long_run
    with lw.Runtime(db) as rt:
        full = rt.store.checkpoints(rid)
        count = CountingRows(rt.store, monkeypatch)
        new = rt.fork(rid, 2, by="ann")
        read = count.checkpoints
        state = rt.store.latest_checkpoint(new.run_id).task_state()
    # the snapshot before cycle 2 and the rows up to it (each read at most twice), not 120+
    assert read <= 10, read
    then = next(c for c in full if c.cycle == 2 and c.record and "proposal" in c.record)
    assert state.values() == then.task_state().values()
    assert new.forked_at == 2


def test_a_rollback_to_an_early_cycle_reads_that_cycle_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "r.db")
    loop = long_loop(CYCLES)
    with lw.Runtime(db) as rt:
        rid = rt.run_sync(loop, TASK, task_key="r").run_id
        then = (
            next(
                c
                for c in rt.store.checkpoints(rid)
                if c.cycle == 3 and c.record and "proposal" in c.record
            )
            .task_state()
            .values()
        )
        count = CountingRows(rt.store, monkeypatch)
        rt.rollback(rid, 3, by="ann")
        target_rows = count.checkpoints
        assert rt.store.latest_checkpoint(rid).task_state().values() == then
    # the target's rows, and the latest state's (from its snapshot: up to 50 rows)
    assert target_rows <= 10 + 2 * 50, target_rows
    assert target_rows < CYCLES


def test_a_fork_at_a_cycle_the_run_has_not_says_which_it_has(
    long_run: tuple[str, str, int],
) -> None:
    db, rid, _call = long_run
    with lw.Runtime(db) as rt, pytest.raises(lw.ConfigError, match=rf"cycles 0\.\.{CYCLES}"):
        rt.fork(rid, CYCLES + 5, by="ann")


def test_a_long_runs_calls_are_listed_from_the_log_a_page_at_a_time(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/api/runs/{id}/calls`` held every event of the run at once (105 MB at 20,000
    cycles) to list its model calls."""
    db, rid, call = long_run
    client = dashboard(db, token=TOKEN)
    store = client.app.state.store  # type: ignore[attr-defined]

    def whole_log(*a: Any, **k: Any) -> Any:
        raise AssertionError("read the whole log at once")

    monkeypatch.setattr(store, "events", whole_log)
    got = client.get(f"/api/runs/{rid}/calls")
    assert got.status_code == 200
    assert [c["id"] for c in got.json()] == [call]
    assert client.get(f"/api/runs/{rid}/calls?cycle=3").json() == []


def test_trace_jsonl_of_a_long_run_reads_the_log_a_page_at_a_time(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``loopwright trace`` held every event of the run at once (155 MB at 20,000 cycles); the
    lines are the same as ``trace_records``'s."""
    from loopwright.cli import main
    from loopwright.store.sqlite import SQLiteStore
    from loopwright.trace import trace_records

    db, rid, _call = long_run
    with lw.Runtime(db) as rt:
        want = trace_records(rt.store, rid)

    def whole_log(*a: Any, **k: Any) -> Any:
        raise AssertionError("read the whole log at once")

    monkeypatch.setattr(SQLiteStore, "events", whole_log)
    out = tmp_path / "t.jsonl"
    assert main(["trace", rid, "--store", db, "--out", str(out)]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert got == json.loads(json.dumps(want, default=str))
    assert got[0]["data"]["events"] == len(got) - 1


def test_an_eval_case_of_a_long_run_holds_one_state_at_a_time(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export eval-cases`` (and ``preference-pairs``) kept every checkpoint's state, each
    cycle's before and after (428 MB for a run of 20,000 cycles)."""
    from loopwright.trace import eval_case, preference_pairs

    db, rid, _call = long_run
    with lw.Runtime(db) as rt:
        got: list[Any] = []
        real = rt.store.checkpoints

        def kept(run_id: str) -> Any:
            got.append(real(run_id))
            return got[-1]

        monkeypatch.setattr(rt.store, "checkpoints", kept)
        case = eval_case(rt.store, rid)
        preference_pairs(rt.store, run_ids=[rid])
    assert len(case["cycles"]) == CYCLES
    for cks in got:
        held = sum(1 for c in cks if c._state is not None)  # resolved and kept
        assert held <= 2, held  # the initial and the final state; was every one


@pytest.mark.parametrize("action", ["rollback", "rerun"])
def test_the_confirmation_page_of_a_long_run_asks_for_a_number_not_a_list(
    long_run: tuple[str, str, int], monkeypatch: pytest.MonkeyPatch, action: str
) -> None:
    """Roll back / Rerun listed every concluded cycle as an option (20,001 at 20,000 cycles,
    every checkpoint read to list them); a long run gets a cycle number box."""
    from loopwright.web import _actions

    db, rid, _call = long_run
    monkeypatch.setattr(_actions, "CYCLES_LISTED", CYCLES // 2, raising=False)
    client = dashboard(db, token=TOKEN)
    store = client.app.state.store  # type: ignore[attr-defined]

    def every(*a: Any, **k: Any) -> Any:
        raise AssertionError("read every checkpoint")

    monkeypatch.setattr(store, "checkpoints", every)
    page = client.get(
        f"/runs/{rid}/confirm?action={action}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert page.status_code == 200
    assert "<option" not in page.text
    name = "to_cycle" if action == "rollback" else "at_cycle"
    assert f'name="{name}" type="number" min="0" max="{CYCLES}"' in page.text
