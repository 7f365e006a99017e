"""The Ray executor against a local Ray started here (once for the module).

* a batch of runs on Ray ends exactly as the same batch run in-process;
* a Ray worker SIGKILLed mid-batch (in an actor, and after an effect acted but before its
  result was journaled): every run still ends, no effect runs twice, and no run is ever driven
  by two executors at once;
* the same batch run again re-executes nothing.

The loop lives in ``raywork/work.py``; its ``send`` effect appends one line per real execution.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.executors import RayBatchError, run_on_ray
from loopwright.executors.ray import _check_local_ray, absolute_store_url

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'loopwright[ray]'")

WORK = Path(__file__).resolve().parent / "raywork" / "work.py"
MAX_CYCLES = 4
ENDED = {"accepted", "stopped", "escalated", "cancelled", "failed"}


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A local Ray for this module: 2 CPUs (4 runs at once at 0.5 CPU each), no dashboard."""
    try:
        _check_local_ray()
    except lw.ConfigError as exc:
        pytest.skip(f"a local Ray cannot start here: {exc}")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
            object_store_memory=128 * 1024 * 1024,
        )
    except Exception as exc:
        pytest.skip(f"a local Ray cannot start here: {type(exc).__name__}: {exc}")
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A SQLite file, or a PostgreSQL schema of the test's own when ``LOOPWRIGHT_TEST_PG`` is
    set and psycopg imports (skipped otherwise: the Ray executor does not need PostgreSQL)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.db")
    if not os.environ.get("LOOPWRIGHT_TEST_PG"):
        pytest.skip("LOOPWRIGHT_TEST_PG is not set")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed")
    url: str = request.getfixturevalue("pg_url")
    return url


def write_spec(where: Path) -> tuple[Path, Path]:
    """A spec in ``where`` whose effect logs to ``where/sent.log``: (spec, log)."""
    where.mkdir(parents=True, exist_ok=True)
    log = where / "sent.log"
    spec = where / "loop.toml"
    spec.write_text(
        f"""
name = "raycount"
project = "ray-executor"

[actor]
ref = "{WORK}:count_up"
timeout_s = 20

[[verifiers]]
name = "reached"
ref = "{WORK}:reached"

[[effects]]
ref = "{WORK}:counting_send"
options = {{ log = "{log}" }}

[[approvals]]
kind = "send"
action = "allow"

[contract.success]
min_score = 1.0

[contract.budget]
max_cycles = {MAX_CYCLES}
""",
        encoding="utf-8",
    )
    return spec, log


def make_tasks(n: int) -> list[dict[str, Any]]:
    """Targets 1..6 (5 and 6 are out of reach in MAX_CYCLES); task 7's actor raises."""
    tasks: list[dict[str, Any]] = []
    for i in range(n):
        task: dict[str, Any] = {"id": f"t{i}", "target": 1 + i % 6}
        task["artifacts"] = {"doc": {"count": 0}}
        if i == 7:
            task["boom"] = True
        tasks.append(task)
    return tasks


def expected(task: dict[str, Any]) -> tuple[str, str, int]:
    """(status, stop reason, sends) of a task's run; one send per cycle whose proposal was
    applied, so the sends are also the final count."""
    if task.get("boom"):
        return "escalated", "escalated", 1
    if task["target"] > MAX_CYCLES:
        return "stopped", "budget_cycles", MAX_CYCLES
    return "accepted", "success", task["target"]


def outcome(r: lw.RunResult) -> tuple[Any, ...]:
    return (
        r.task_key,
        r.status,
        r.stop_reason,
        r.cycles,
        r.best_score,
        round(r.spent.cost_usd, 6),
        r.spent.tokens,
        r.state.values(),
    )


def sent(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


def test_store_url_is_made_absolute_for_workers(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("a/b.db") == str(tmp_path / "a" / "b.db")
    assert absolute_store_url("sqlite:///rel.db?durability=process") == (
        f"sqlite:///{tmp_path / 'rel.db'}?durability=process"
    )
    assert absolute_store_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    pg = "postgresql://u@127.0.0.1:5432/test?schema=s"
    assert absolute_store_url(pg) == pg
    with pytest.raises(lw.ConfigError):
        absolute_store_url(":memory:")


def test_batch_on_ray_ends_as_in_process(local_ray: None, tmp_path: Path) -> None:
    tasks = make_tasks(20)
    keys = [f"batch:{t['id']}" for t in tasks]
    spec, log = write_spec(tmp_path / "ray")
    seen: list[lw.RunResult] = []
    t0 = time.monotonic()
    on_ray = run_on_ray(spec, tasks, keys, str(tmp_path / "ray.db"), on_result=seen.append)
    took = time.monotonic() - t0

    local_spec, local_log = write_spec(tmp_path / "local")
    with lw.Runtime(tmp_path / "local.db") as rt:
        in_process = asyncio.run(
            rt.run_many(lw.load_spec(local_spec), tasks, key_of=lambda t, i: keys[i])
        )

    assert [r.task_key for r in on_ray] == keys  # input order
    assert sorted(r.run_id for r in seen) == sorted(r.run_id for r in on_ray)  # each once
    assert [outcome(r) for r in on_ray] == [outcome(r) for r in in_process]
    for task, r in zip(tasks, on_ray, strict=True):
        assert (r.status, r.stop_reason) == expected(task)[:2], r.task_key
    statuses = Counter(r.status for r in on_ray)
    assert set(statuses) == {"accepted", "stopped", "escalated"}
    assert Counter(sent(log)).most_common(1)[0][1] == 1  # no effect executed twice
    assert sorted(sent(log)) == sorted(sent(local_log))
    assert len(sent(log)) == sum(expected(t)[2] for t in tasks)
    print(f"\n20 runs on Ray in {took:.1f}s: {dict(statuses)}")


def test_a_ray_worker_killed_mid_batch(local_ray: None, tmp_path: Path, store_url: str) -> None:
    tasks = make_tasks(16)
    calls = tmp_path / "calls.log"
    killed = {"t2": "actor", "t3": "effect", "t9": "actor"}  # targets 3, 4, 4
    for task in tasks:
        task["calls"] = str(calls)
        if task["id"] in killed:
            task.update(
                die=killed[task["id"]], die_at=2, marker=str(tmp_path / f"died-{task['id']}")
            )
    keys = [f"fault:{t['id']}" for t in tasks]
    spec, log = write_spec(tmp_path / "spec")

    results = run_on_ray(spec, tasks, keys, store_url, lease_ttl_s=10.0)

    by_key = {r.task_key: r for r in results}
    for tid in killed:  # each kill really happened, in a Ray worker (not in this process)
        pid = int((tmp_path / f"died-{tid}").read_text())
        assert pid != os.getpid()
    for task, r in zip(tasks, results, strict=True):
        assert r.status in ENDED, r.task_key
        assert (r.status, r.stop_reason) == expected(task)[:2], r.task_key
        assert r.state.values()["doc"]["count"] == expected(task)[2], r.task_key
    keys_sent = sent(log)
    assert Counter(keys_sent).most_common(1)[0][1] == 1  # no effect executed twice
    assert len(keys_sent) == sum(expected(t)[2] for t in tasks)

    # One executor at a time: per run, the actor's calls come from one process after another,
    # never interleaved; each executor took the lease with a new fencing token (one "started"
    # or "resumed" event each), and the killed runs were taken over exactly once.
    pids: dict[str, list[int]] = {}
    for line in calls.read_text(encoding="utf-8").splitlines():
        run_id, _, pid = line.split()
        pids.setdefault(run_id, []).append(int(pid))
    with lw.Runtime(store_url) as rt:
        for task in tasks:
            r = by_key[f"fault:{task['id']}"]
            rec = rt.store.get_run(r.run_id)
            blocks = [pid for pid, _ in itertools.groupby(pids[r.run_id])]
            assert len(blocks) == len(set(blocks)), f"{r.task_key}: interleaved {blocks}"
            owners = [
                e.data["owner"]
                for e in rt.store.events(r.run_id)
                if e.kind in ("started", "resumed")
            ]
            assert rec.fencing_token == len(owners), r.task_key
            assert rec.lease_owner is None  # released at the end
            if task["id"] in killed:
                dead = int((tmp_path / f"died-{task['id']}").read_text())
                assert rec.fencing_token == 2, r.task_key
                first, second = (int(o.split(":")[1]) for o in owners)
                assert first == dead != second  # taken over from the killed worker
                assert blocks == [dead, second]
            else:
                assert rec.fencing_token == 1, r.task_key
                assert len(blocks) == 1
        # The effect killed after acting was in doubt and settled by its reconcile hook.
        doubtful = by_key["fault:t3"].run_id
        kinds = [e.kind for e in rt.store.events(doubtful)]
        assert "effect_reconciled" in kinds
        assert "t3/c2" in " ".join(keys_sent)


def test_the_same_keys_twice_reexecute_nothing(local_ray: None, tmp_path: Path) -> None:
    tasks = make_tasks(8)
    keys = [f"twice:{t['id']}" for t in tasks]
    spec, log = write_spec(tmp_path / "spec")
    store = str(tmp_path / "store.db")
    first = run_on_ray(spec, tasks, keys, store)
    before = sent(log)
    with lw.Runtime(store) as rt:
        rows = {r.run_id: rt.store.get_run(r.run_id) for r in first}
        events = {r.run_id: len(rt.store.events(r.run_id)) for r in first}

    again = run_on_ray(spec, tasks, keys, store)

    assert [r.run_id for r in again] == [r.run_id for r in first]  # the same runs
    assert [outcome(r) for r in again] == [outcome(r) for r in first]
    assert sent(log) == before  # no effect ran again
    with lw.Runtime(store) as rt:
        for r in again:
            rec = rt.store.get_run(r.run_id)
            assert rec.fencing_token == rows[r.run_id].fencing_token  # no lease was taken
            assert rec.updated_at == rows[r.run_id].updated_at
            assert len(rt.store.events(r.run_id)) == events[r.run_id]


def test_a_spec_the_workers_cannot_load_fails_the_batch_clearly(
    local_ray: None, tmp_path: Path
) -> None:
    spec = tmp_path / "loop.toml"
    spec.write_text(
        f"""
name = "unreachable"
[actor]
ref = "{WORK.parent / "driver_only.py"}:idle"
[[verifiers]]
ref = "{WORK.parent / "driver_only.py"}:judge"
[contract.budget]
max_cycles = 1
""",
        encoding="utf-8",
    )
    keys = ["lost:a", "lost:b"]
    with pytest.raises(RayBatchError) as err:
        run_on_ray(spec, [{}, {}], keys, str(tmp_path / "store.db"), max_retries=0, by="clerk")
    assert [r.task_key for r in err.value.results] == keys
    with lw.Runtime(tmp_path / "store.db") as rt:  # who started them: their requester
        assert {rt.store.get_run(k).created_by for k in keys} == {"clerk"}
    assert set(err.value.failures) == {r.run_id for r in err.value.results}
    assert all("not available on this node" in why for why in err.value.failures.values())
    assert all(r.status not in ENDED for r in err.value.results)  # resumable once fixed


def test_missing_inputs_are_refused_before_ray_starts(tmp_path: Path) -> None:
    spec, _ = write_spec(tmp_path / "spec")
    with pytest.raises(lw.ConfigError, match="2 task"):
        run_on_ray(spec, [{}, {}], ["k"], str(tmp_path / "s.db"))
    with pytest.raises(lw.SpecError):
        run_on_ray(tmp_path / "nope.toml", [{}], ["k"], str(tmp_path / "s.db"))


def test_without_ray_the_error_names_the_extra(tmp_path: Path, monkeypatch: Any) -> None:
    spec, _ = write_spec(tmp_path / "spec")
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(lw.ConfigError, match=r"pip install 'loopwright\[ray\]'"):
        run_on_ray(spec, [{}], ["k"], str(tmp_path / "s.db"))


def test_the_core_does_not_import_ray() -> None:
    code = "import sys, loopwright, loopwright.executors; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
