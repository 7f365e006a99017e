"""Workers: `loopwright worker` processes claim runs from one store; a SIGKILLed worker's runs
finish on the others, no effect executes twice, and no run is ever written by two workers at
once (the fencing token of the checkpoints never goes back).

No step waits a fixed time: each waits for a condition (a worker's ready line, a barrier in the
actor, an effect paid, every run ended), so the outcome does not depend on the machine's load.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from forkserver import Forked, cli_popen

import loopwright as lw
from loopwright._owners import PROCESS_SPACE

HERE = Path(__file__).resolve().parent / "workers"
SPEC = HERE / "loop.toml"
GATED = HERE / "loop_gated.toml"  # its actor waits for $WORK_DIR/gate (work.py:gated_actor)
PATIENCE = 240.0  # seconds before a wait gives up and says what it waited for (never expected)
EXE = str(Path(sys.executable).with_name("loopwright"))


def _create(store: str, n: int, spec: Path = SPEC) -> list[str]:
    loop = lw.load_spec(spec)
    with lw.Runtime(store) as rt:
        return [
            rt.create(
                loop,
                {"id": f"t{i}", "artifacts": {"doc": {"a": 0, "b": 0, "c": 0}}},
                task_key=f"w/{i}",
            )[0].run_id
            for i in range(n)
        ]


# A worker: the `loopwright worker` process, forked by the CLI's fork server (tests/forkserver.py:
# Python's start and the CLI's imports paid once, not by each of the file's 11 workers; each is
# a process of its own, its pid, leases, connections, signals and exit code its own, SIGKILL
# included) or, where that server would not serve, a subprocess.
Proc = Forked | subprocess.Popen[bytes]


def _worker(store: str, work: Path, *extra: str, sleep: float = 0.02) -> Proc:
    """A worker process; its output goes to files beside the effects log (no pipes to leak
    when it is killed): ``worker-<pid>.out`` / ``.err``."""
    env = {**os.environ, "WORK_DIR": str(work), "WORK_SLEEP": str(sleep)}
    tag = f"{time.monotonic_ns()}"
    with (work / f"w{tag}.out").open("wb") as out, (work / f"w{tag}.err").open("wb") as err:
        proc = cli_popen(
            [EXE, "worker", "--store", store, "--poll", "0.1", *extra],
            env,
            out.fileno(),
            err.fileno(),
        )
    proc.out_path = work / f"w{tag}.out"  # type: ignore[attr-defined]
    proc.err_path = work / f"w{tag}.err"  # type: ignore[attr-defined]
    return proc


def _output(proc: Proc) -> tuple[str, str]:
    out: Path = proc.out_path  # type: ignore[attr-defined]
    err: Path = proc.err_path  # type: ignore[attr-defined]
    return out.read_text(), err.read_text()


def _said(proc: Proc) -> str:
    """The worker's stdout so far, whitespace collapsed (Rich wraps long lines in a file)."""
    return " ".join(_output(proc)[0].split())


def _until(what: str, cond: Callable[[], bool], *procs: Proc) -> None:
    """Wait until ``cond()``; fail at once if one of ``procs`` exits first."""
    deadline = time.monotonic() + PATIENCE
    while not cond():
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"worker exited ({p.returncode}) before {what}:\n{_output(p)[1]}")
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {PATIENCE:.0f} s waiting for {what}")
        time.sleep(0.05)


def _ready(*procs: Proc) -> None:
    """Wait for each worker's ready line (printed once its signal handlers are installed)."""
    for p in procs:
        _until("its ready line", lambda p=p: "claiming up to" in _said(p), p)


def _paid_by(work: Path, proc: Proc) -> int:
    log = work / "effects.log"
    lines = log.read_text().splitlines() if log.is_file() else []
    return sum(1 for line in lines if line.split(" ")[-1] == str(proc.pid))


def _statuses(store: str) -> Counter[str]:
    with lw.Runtime(store) as rt:
        return Counter(r.status for r in rt.store.list_runs())


def _wait_all_ended(store: str, n: int, *procs: Proc) -> Counter[str]:
    _until(f"all {n} runs accepted", lambda: _statuses(store).get("accepted", 0) == n, *procs)
    return _statuses(store)


def _effects(work: Path) -> list[str]:
    log = work / "effects.log"
    return [line.split(" ")[0] for line in log.read_text().splitlines()] if log.is_file() else []


def test_one_worker_drains_a_sqlite_store(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    ids = _create(store, 12)
    w = _worker(store, tmp_path, "--once", "--concurrency", "4", "--json")
    w.wait()
    out, err = _output(w)
    assert w.returncode == 0, err
    stats = json.loads(out)
    assert stats["claimed"] == 12 and stats["ended"] == {"accepted": 12}
    assert _statuses(store) == Counter({"accepted": 12})
    assert sorted(_effects(tmp_path)) == sorted(f"notify:t{i}" for i in range(len(ids)))


def test_sigterm_drains_gracefully_and_another_worker_finishes(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    _create(store, 6, GATED)
    w = _worker(store, tmp_path, "--concurrency", "6")
    _ready(w)
    started = tmp_path / "started.log"

    def in_flight() -> list[str]:
        return started.read_text().splitlines() if started.is_file() else []

    # Every run is inside its first cycle, held there by the actor's gate.
    _until("six runs in their first cycle", lambda: len(in_flight()) == 6, w)
    w.send_signal(signal.SIGTERM)
    _until("the stopping line", lambda: "stopping" in _said(w), w)
    (tmp_path / "gate").touch()  # the cycles in flight may finish now
    w.wait()
    assert w.returncode == 0, _output(w)[1]
    assert sorted(in_flight()) == [f"t{i} 1" for i in range(6)]  # no cycle began after SIGTERM
    with lw.Runtime(store) as rt:
        runs = rt.store.list_runs()
        assert all(r.lease_owner is None for r in runs)  # every lease released
        assert [(r.status, r.cycle) for r in runs] == [("running", 1)] * 6
        for r in runs:
            assert [e.kind for e in rt.store.events(r.run_id)].count("drained") == 1
    w2 = _worker(store, tmp_path, "--once")
    w2.wait()
    assert w2.returncode == 0, _output(w2)[1]
    assert _statuses(store) == Counter({"accepted": 6})
    assert sorted(_effects(tmp_path)) == sorted(f"notify:t{i}" for i in range(6))


def _checkpoint_tokens_pg(url: str) -> dict[str, list[int]]:
    import psycopg
    from psycopg import sql

    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base) as conn:
        rows = conn.execute(
            sql.SQL("SELECT run_id, fencing_token FROM {}.checkpoints ORDER BY run_id, seq").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    out: dict[str, list[int]] = {}
    for run_id, token in rows:
        out.setdefault(run_id, []).append(int(token))
    return out


def test_four_workers_on_postgres_one_killed(pg_url: str, tmp_path: Path) -> None:
    n = int(os.environ.get("WORKER_TEST_RUNS", "300"))  # 1000 and more for a scale check
    ids = _create(pg_url, n)

    def start() -> Proc:
        return _worker(pg_url, tmp_path, "--concurrency", "8", "--lease-ttl", "3", sleep=0.005)

    # The victim starts first and is killed once it has paid some effects: it then holds
    # live leases on the runs it is driving, whatever the others have done meanwhile.
    victim = start()
    _ready(victim)
    workers = [victim, start(), start(), start()]
    _until("the victim paying 20 effects", lambda: _paid_by(tmp_path, victim) >= 20, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    final = _wait_all_ended(pg_url, n, *workers[1:])
    _ready(*workers[1:])  # each has its SIGTERM handler
    for w in workers[1:]:
        w.send_signal(signal.SIGTERM)
    for w in workers[1:]:
        w.wait()
        assert w.returncode == 0, _output(w)[1]
    assert final == Counter({"accepted": n}), final
    # no effect executed twice; every run paid exactly once
    paid = Counter(_effects(tmp_path))
    assert max(paid.values()) == 1
    assert set(paid) == {f"notify:t{i}" for i in range(n)}
    # never two executors at once: within a run, a later checkpoint never carries an older
    # fencing token than an earlier one
    tokens = _checkpoint_tokens_pg(pg_url)
    assert set(tokens) == set(ids)
    for run_id, seq in tokens.items():
        assert seq == sorted(seq), (run_id, seq)
    taken_over = [r for r, seq in tokens.items() if len(set(seq)) > 2]
    assert taken_over, "some run of the killed worker should have been resumed by another"


def _checkpoint_tokens_sqlite(path: str) -> dict[str, list[int]]:
    db = sqlite3.connect(path)
    try:
        rows = db.execute("SELECT run_id, fencing_token FROM checkpoints ORDER BY run_id, seq")
        out: dict[str, list[int]] = {}
        for run_id, token in rows:
            out.setdefault(run_id, []).append(int(token))
        return out
    finally:
        db.close()


def test_two_workers_on_sqlite_one_killed(tmp_path: Path) -> None:
    store = str(tmp_path / "s.db")
    ids = _create(store, 40)
    # a claims first and is killed mid-work (after its first effect, with runs in flight).
    a = _worker(store, tmp_path, "--concurrency", "8", "--lease-ttl", "2", sleep=0.05)
    _ready(a)
    b = _worker(store, tmp_path, "--concurrency", "8", "--lease-ttl", "2", sleep=0.05)
    _until("a paying an effect", lambda: _paid_by(tmp_path, a) >= 1, a)
    a.send_signal(signal.SIGKILL)
    a.wait()
    final = _wait_all_ended(store, 40, b)
    _ready(b)
    b.send_signal(signal.SIGTERM)
    b.wait()
    assert b.returncode == 0, _output(b)[1]
    assert final == Counter({"accepted": 40}), final
    paid = Counter(_effects(tmp_path))
    assert max(paid.values()) == 1 and len(paid) == 40
    tokens = _checkpoint_tokens_sqlite(store)
    assert set(tokens) == set(ids)
    for run_id, seq in tokens.items():
        assert seq == sorted(seq), (run_id, seq)


def test_sqlite_claims_take_over_a_dead_local_workers_runs_at_once(tmp_path: Path) -> None:
    import socket

    store = str(tmp_path / "s.db")
    (dead_run, live_run) = _create(store, 2)
    probe = subprocess.Popen([sys.executable, "-c", "pass"])
    probe.wait()  # a pid that existed and is gone
    with lw.Runtime(store) as rt:
        st = rt.store
        st.acquire_lease(dead_run, f"{socket.gethostname()}:{probe.pid}:w:{PROCESS_SPACE}", 600)
        st.acquire_lease(live_run, f"{socket.gethostname()}:{os.getpid()}:w:{PROCESS_SPACE}", 600)
        claimed = st.claim_runs("claimer:1:c", 30, limit=5)
        assert [run_id for run_id, _ in claimed] == [dead_run]  # not the live one
        assert claimed[0][1] == st.get_run(dead_run).fencing_token


def test_two_workers_on_postgres_survive_dropped_connections(pg_url: str, tmp_path: Path) -> None:
    """Issue 16, item 5: the server drops every connection of the workers five times while they
    drive 100 runs. Every run ends once (accepted), no effect runs twice, no run is `failed`,
    and both workers are still running at the end (they drain on SIGTERM)."""
    import uuid

    import psycopg

    n = 100
    _create(pg_url, n)
    app = f"lw-drop-{uuid.uuid4().hex[:8]}"
    url = f"{pg_url}&application_name={app}"  # the test's own connections are not dropped
    base = pg_url.split("?", maxsplit=1)[0]

    def drop_all() -> None:
        with psycopg.connect(base, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name=%s",
                (app,),
            )

    workers = [
        _worker(url, tmp_path, "--concurrency", "8", "--lease-ttl", "3", sleep=0.005)
        for _ in range(2)
    ]
    _ready(*workers)
    for k in range(1, 6):
        target = k * n // 7
        _until(
            f"{target} runs accepted",
            lambda t=target: _statuses(pg_url).get("accepted", 0) >= t,
            *workers,
        )
        drop_all()
    final = _wait_all_ended(pg_url, n, *workers)
    assert all(w.poll() is None for w in workers)  # both survived every drop
    for w in workers:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        w.wait()
        assert w.returncode == 0, _output(w)[1]
    assert final == Counter({"accepted": n}), final
    paid = Counter(_effects(tmp_path))
    assert max(paid.values()) == 1
    assert set(paid) == {f"notify:t{i}" for i in range(n)}


def test_a_worker_says_why_it_skipped_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Outside probe (stop 42): `loopwright worker --once` over a run started from Python
    (no spec to load its loop from) printed "skipped 1" and nothing of why; the reason went
    only to the run's events."""
    from loopwright.cli import main

    loop = lw.Loop(
        name="py-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"p": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"p": ""}}}, task_key="py")
    capsys.readouterr()
    assert main(["worker", "--once", "--store", db]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert (
        f"skipped {rec.run_id[:12]}: RUN: run {rec.run_id} of loop 'py-only' was started from Python"
        in out
    )
    assert main(["worker", "--once", "--json", "--store", db]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert "started from Python" in stats["skipped_why"][rec.run_id]


def test_a_workers_skip_reasons_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (stop 42): ``WorkerStats.skipped_why`` kept one entry for every run a worker
    ever skipped: a worker running for weeks beside runs it has no loop for (runs started
    from Python) grew it without bound. It names the latest ``SKIPPED_WHY_KEPT`` runs;
    ``skipped`` still counts them all."""
    import asyncio

    from loopwright import _worker

    monkeypatch.setattr(_worker, "SKIPPED_WHY_KEPT", 3, raising=False)
    loop = lw.Loop(
        name="py-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"p": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        for i in range(5):
            rt.create(loop, {"artifacts": {"doc": {"p": ""}}}, task_key=f"py{i}")
        stats = asyncio.run(_worker.Worker(rt, concurrency=8).run(once=True))
    assert stats.skipped == 5
    assert len(stats.skipped_why) == 3
    assert all("started from Python" in why for why in stats.skipped_why.values())


def test_a_skipped_run_is_handed_back_before_on_skip_is_called(tmp_path: Path) -> None:
    """Review (stop 42): ``on_skip`` was called before the skipped run's lease was released:
    one that raised (user code; the CLI's console on a closed stdout) ended the worker with
    the run still leased to it, so no other worker could take it until the lease ran out."""
    import asyncio

    from loopwright._worker import Worker

    loop = lw.Loop(
        name="py-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"p": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )

    def on_skip(run_id: str, why: lw.LoopwrightError) -> None:
        raise RuntimeError("the callback failed")

    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"p": ""}}}, task_key="py")
        with pytest.raises(RuntimeError, match="the callback failed"):
            asyncio.run(Worker(rt, on_skip=on_skip).run(once=True))
        after = rt.store.get_run(rec.run_id)
        assert after.lease_owner is None and after.lease_expires_at is None
        assert [e.kind for e in rt.store.events(rec.run_id)][-1] == "worker_skipped"


def test_why_a_run_was_skipped_is_stored_masked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review (stop 42): the worker's ``worker_skipped`` event stored the error's text as it
    was, while ``skipped_why`` beside it was masked: a spec whose import failed quoting a
    registered secret (an API key in a module's error) had it written to the store
    (invariant 9)."""
    import asyncio

    from loopwright import _redact, _worker

    _redact.reset()
    secret = "sk-review42-0123456789abcdef"
    _redact.register_secret(secret)

    def unloadable(rec: object) -> lw.Loop:
        raise lw.SpecError(f"cannot import 'llm.py': RuntimeError: bad key {secret}", field="x")

    monkeypatch.setattr(_worker, "loop_of_run", unloadable)
    loop = lw.Loop(
        name="py-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"p": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        rec, _ = rt.create(loop, {"artifacts": {"doc": {"p": ""}}}, task_key="py")
        stats = asyncio.run(_worker.Worker(rt).run(once=True))
        [event] = [e for e in rt.store.events(rec.run_id) if e.kind == "worker_skipped"]
    assert stats.skipped == 1 and secret not in stats.skipped_why[rec.run_id]
    assert "bad key" in event.data["why"] and secret not in event.data["why"]


def test_a_concurrency_beyond_a_claims_limit_claims_every_run(url: str) -> None:
    """``loopwright worker --concurrency 99999999999999999999``: the free slots went into the
    claim's LIMIT, a 64-bit integer in either store, and the worker ended at once with an
    internal OverflowError (review50b). A concurrency beyond it is every claimable run."""
    import asyncio

    from doc_loop import TASK
    from test_lease_handed_back import _loop

    from loopwright._worker import Worker

    loop = _loop()
    with lw.Runtime(url) as rt:
        made = [rt.create(loop, TASK, task_key=k)[0].run_id for k in ("A", "B")]
        w = Worker(rt, loops={loop.name: loop}, concurrency=10**20, poll_s=0.001)
        stats = asyncio.run(w.run(once=True))
        assert stats.claimed == 2 and stats.ended["accepted"] == 2, stats
        assert {rt.store.get_run(r).status for r in made} == {"accepted"}
