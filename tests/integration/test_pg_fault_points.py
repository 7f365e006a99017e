"""PostgreSQL faults placed at chosen points, from outside the workers (pg52).

Each fault is placed without timing: the test holds the run rows locked (``SELECT … FOR
UPDATE`` in its own transaction) so that the worker's next write waits on the lock, finds that
write in ``pg_stat_activity`` (its ``application_name`` is the worker's own, its statement
names which write it is), and acts on it there:

* ``pg_terminate_backend`` on the waiting backend — mid-commit (a cycle's checkpoint),
  mid-heartbeat, in the write of an effect's result, in the group committer (four runs);
* SIGSTOP of the worker while its write waits, then the lock released: the write goes through
  and the transaction idles, holding the run's row lock, until the server ends it
  (``idle_tx_timeout_s=1``); the lease is made expired as an expired one is (its
  ``lease_expires_at`` passed on the server's clock); another worker takes the run over and
  ends it; then SIGCONT — the frozen worker writes nothing more;
* a proxy that loses the answer of the COMMIT that ended the run (durable, the worker told the
  connection died): the worker reports the run ended (it said "interrupted");
* ``approve`` and ``deny`` from two processes at once, both waiting on the request's row lock;
* one run's row held locked while the worker's other leases must be renewed, and while its
  other runs go on (their cycles committed while its commit waits);
* workers whose host clocks are skewed (libfaketime), and five workers draining a queue while
  one, drawn by a seeded RNG, is SIGKILLed at drawn actor-call counts and replaced.

Actors and payments wait on files (``pgfaults/work.py``: ``actor_hold``, ``effect_hold``), so
every step waits for a condition, never a fixed time. After each: every run accepted, once,
in the state an uninterrupted run ends in; every payment key paid once; the fencing tokens of a
run's checkpoints never go back.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw

pytestmark = pytest.mark.postgres

HERE = Path(__file__).resolve().parent / "pgfaults"
SPEC = HERE / "loop.toml"
ASK = HERE / "loop_ask.toml"  # the payment asks a person first
EXE = str(Path(sys.executable).with_name("loopwright"))
PATIENCE = 240.0  # a bound that only a hang reaches (never a measurement)
DOC = {"a": 1, "b": 2, "c": 3}  # what every run ends with (work.py: WANT)


class Faults:
    """One test's store, work folder, worker processes and SQL to the server."""

    def __init__(self, base: str, schema: str, url: str, work: Path) -> None:
        self.base, self.schema, self.url, self.work = base, schema, url, work
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pays = True
        self._lock: Any = None

    # --- the store ---------------------------------------------------------------------
    def sql(self, statement: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{self.schema}"')
            cur = conn.execute(statement, args)
            return cur.fetchall() if cur.description else []

    def create(self, n: int, spec: Path = SPEC, *, pay: bool = True) -> list[str]:
        loop = lw.load_spec(spec)
        self.pays = pay
        with lw.Runtime(self.url) as rt:
            return [
                rt.create(
                    loop,
                    {"id": f"t{i}", "pay": pay, "artifacts": {"doc": {"a": 0, "b": 0, "c": 0}}},
                    task_key=f"t/{i}",
                )[0].run_id
                for i in range(n)
            ]

    def lock_runs(self) -> None:
        """Every run row locked by this test until ``unlock``."""
        import psycopg

        self._lock = psycopg.connect(self.base)
        self._lock.execute(f'SET search_path TO "{self.schema}"')
        self._lock.execute("SELECT 1 FROM runs FOR UPDATE").fetchall()

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.rollback()
            self._lock.close()
            self._lock = None

    def backends(self, app: str) -> list[tuple[int, str, str, str]]:
        """(pid, state, wait event type, statement) of each connection of ``app``."""
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid, coalesce(state, ''), coalesce(wait_event_type, ''), query "
                "FROM pg_stat_activity WHERE application_name = %s",
                (app,),
            ).fetchall()
        return [(int(r[0]), r[1], r[2], r[3]) for r in rows]

    def waiting(self, app: str, marks: tuple[str, ...]) -> list[tuple[int, str, str, str]]:
        """``app``'s connections waiting on a lock in a statement that says one of ``marks``."""
        return [b for b in self.backends(app) if b[2] == "Lock" and any(m in b[3] for m in marks)]

    def terminate(self, pid: int) -> None:
        import psycopg

        with psycopg.connect(self.base, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))

    def statuses(self) -> Counter[str]:
        return Counter(r[0] for r in self.sql("SELECT status FROM runs"))

    # --- processes ---------------------------------------------------------------------
    def worker(
        self, app: str, *extra: str, url: str | None = None, faketime: str = ""
    ) -> subprocess.Popen[bytes]:
        """``loopwright worker`` as ``app`` (its connections' application_name); under
        libfaketime's ``faketime -f OFFSET`` when ``faketime`` is given."""
        env = {**os.environ, "WORK_DIR": str(self.work)}
        skewed = ["faketime", "-f", faketime] if faketime else []
        store = f"{url or self.url}&application_name={app}"
        with (
            (self.work / f"{app}.out").open("wb") as out,
            (self.work / f"{app}.err").open("wb") as err,
        ):
            proc = subprocess.Popen(
                [*skewed, EXE, "worker", "--store", store, "--poll", "0.1", "--json", *extra],
                env=env,
                stdout=out,
                stderr=err,
            )
        proc.app = app  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def said(self, proc: subprocess.Popen[bytes]) -> dict[str, Any]:
        """The worker's --json summary, once it has exited."""
        app = proc.app  # type: ignore[attr-defined]
        out = (self.work / f"{app}.out").read_text()
        assert out.strip(), (self.work / f"{app}.err").read_text()
        summary: dict[str, Any] = json.loads(out)
        return summary

    def stop(self, *procs: subprocess.Popen[bytes]) -> None:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=PATIENCE)
            assert p.returncode == 0, (self.work / f"{p.app}.err").read_text()  # type: ignore[attr-defined]

    def until(self, what: str, cond: Callable[[], Any], *procs: subprocess.Popen[bytes]) -> Any:
        deadline = time.monotonic() + PATIENCE
        while not (got := cond()):
            for p in procs:
                if p.poll() is not None:
                    err = (self.work / f"{p.app}.err").read_text()  # type: ignore[attr-defined]
                    pytest.fail(f"{p.app} exited ({p.returncode}) before {what}:\n{err}")  # type: ignore[attr-defined]
            if time.monotonic() > deadline:
                pytest.fail(f"gave up after {PATIENCE:.0f} s waiting for {what}")
            time.sleep(0.02)
        return got

    def lines(self, name: str) -> list[str]:
        path = self.work / name
        return path.read_text().splitlines() if path.is_file() else []

    def hold(self, gate: str) -> None:
        (self.work / gate).touch()

    def lift(self, gate: str) -> None:
        (self.work / gate).unlink(missing_ok=True)

    def all_accepted(self, n: int) -> bool:
        return self.statuses() == Counter({"accepted": n})

    # --- the outcome -------------------------------------------------------------------
    def check(self, ids: list[str]) -> None:
        """As uninterrupted runs end: accepted on their third cycle, one `stopped` each, the
        document repaired, every key paid once, tokens never going back."""
        rows = self.sql("SELECT run_id, status, stop_reason, cycle FROM runs")
        assert {r[0] for r in rows} == set(ids)
        assert {r[1:] for r in rows} == {("accepted", "success", 3)}, rows
        stopped = Counter(r[0] for r in self.sql("SELECT run_id FROM events WHERE kind='stopped'"))
        assert stopped == Counter(ids), stopped
        tokens: dict[str, list[int]] = {}
        for run_id, token in self.sql(
            "SELECT run_id, fencing_token FROM checkpoints ORDER BY run_id, seq"
        ):
            tokens.setdefault(run_id, []).append(int(token))
        assert all(seq == sorted(seq) for seq in tokens.values()), tokens
        with lw.Runtime(self.url) as rt:
            for run_id in ids:
                assert rt.result(run_id).state.artifacts["doc"].values() == DOC
        paid = Counter(line.split()[0] for line in self.lines("paid.log"))
        assert paid == Counter(f"pay:t{i}" for i in range(len(ids)) if self.pays), paid

    def close(self) -> None:
        self.unlock()
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()


@pytest.fixture
def faults(pg_url: str, pg_schema: tuple[str, str], tmp_path: Path) -> Iterator[Faults]:
    base, schema = pg_schema
    f = Faults(base, schema, pg_url, tmp_path)
    try:
        yield f
    finally:
        f.close()  # (before the schema is dropped: nothing holds its rows)


def _stopped(proc: subprocess.Popen[bytes]) -> bool:
    return Path(f"/proc/{proc.pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"


# The statements a worker waits in, by what each writes.
COMMIT = ("UPDATE runs SET cycle=", "FOR NO KEY UPDATE")  # a checkpoint, alone or grouped
HEARTBEAT = ("SET lease_expires_at=",)
FENCE = ("fencing_token=fencing_token",)  # an effect's journal write, fenced


def _to_the_point(f: Faults, proc: subprocess.Popen[bytes], point: str, n: int) -> None:
    """Hold ``proc``'s runs where ``point`` says, with their rows locked by the test."""
    if point == "effect":  # inside the payment, its intent journaled
        f.until("every payment started", lambda: len(f.lines("attempts.log")) >= n, proc)
    else:  # inside every run's first actor call
        f.until("every actor called", lambda: len(f.lines("actors.log")) >= n, proc)
    f.lock_runs()


@pytest.mark.parametrize(
    ("point", "n", "ttl", "marks"),
    [
        ("commit", 1, "600", COMMIT),
        ("heartbeat", 1, "3", HEARTBEAT),
        ("effect", 1, "600", FENCE),
        ("commit", 4, "600", COMMIT),  # several runs' commits: the group committer
        ("effect", 4, "600", FENCE),
    ],
    ids=["commit", "heartbeat", "effect_result", "group_commit", "group_effect_result"],
)
def test_a_terminated_connection_at_a_chosen_write(
    faults: Faults, point: str, n: int, ttl: str, marks: tuple[str, ...]
) -> None:
    f = faults
    ids = f.create(n)
    gate = "effect_hold" if point == "effect" else "actor_hold"
    f.hold(gate)
    w = f.worker("lw_pg52_t", "--lease-ttl", ttl, "--concurrency", str(n))
    _to_the_point(f, w, point, n)
    if point != "heartbeat":  # (the heartbeat comes while the actor waits)
        f.lift(gate)
    waiting = f.until("the write waiting on the lock", lambda: f.waiting("lw_pg52_t", marks), w)
    for pid, *_ in waiting:
        f.terminate(pid)
    f.unlock()
    f.lift(gate)
    f.until("every run accepted", lambda: f.all_accepted(n), w)
    f.stop(w)
    said = f.said(w)
    assert said["ended"] == {"accepted": n} and said["errors"] == 0, said
    f.check(ids)
    # the payment whose result write was cut is settled by its reconcile hook, not made again
    assert Counter(line.split()[0] for line in f.lines("attempts.log")) == Counter(
        f"pay:t{i}" for i in range(n)
    )


@pytest.mark.parametrize("point", ["commit", "effect"])
def test_a_worker_frozen_mid_write_is_fenced_when_thawed(faults: Faults, point: str) -> None:
    """A frozen in its commit (its transaction holding the run's row lock) or inside a payment;
    its lease expires; B takes the run over and ends it; A thawed writes nothing."""
    f = faults
    ids = f.create(1)
    gate = "effect_hold" if point == "effect" else "actor_hold"
    f.hold(gate)
    ttl = "2" if point == "effect" else "600"  # (the commit's lease is made expired below)
    a = f.worker("lw_pg52_a", "--lease-ttl", ttl, url=f"{f.url}&idle_tx_timeout_s=1")
    if point == "commit":
        _to_the_point(f, a, point, 1)
        f.lift(gate)
        f.until("A's commit waiting", lambda: f.waiting("lw_pg52_a", COMMIT), a)
        a.send_signal(signal.SIGSTOP)
        f.until("A frozen", lambda: _stopped(a))
        f.unlock()  # A's write goes through, then its transaction idles, A frozen
        f.until(
            "the server ending A's idle transaction",
            lambda: not [b for b in f.backends("lw_pg52_a") if "transaction" in b[1]],
        )
        # what an expired lease looks like: its expiry passed on the server's clock
        f.sql("UPDATE runs SET lease_expires_at = extract(epoch from clock_timestamp()) - 1")
    else:
        f.until("A paying", lambda: f.lines("attempts.log"), a)
        a.send_signal(signal.SIGSTOP)
        f.until("A frozen", lambda: _stopped(a))
        f.lift(gate)  # A's lease (2 s) runs out while it is frozen
    b = f.worker("lw_pg52_b", "--lease-ttl", "30")
    f.until("B ending the run", lambda: f.all_accepted(1), b)
    checkpoints = f.sql("SELECT count(*) FROM checkpoints")
    events = f.sql("SELECT count(*) FROM events")
    a.send_signal(signal.SIGCONT)
    f.stop(a, b)
    said = f.said(a)
    assert said["ended"] == {} and said["lost"] + said["interrupted"] == 1, said
    assert f.said(b)["ended"] == {"accepted": 1}
    assert f.sql("SELECT count(*) FROM checkpoints") == checkpoints  # nothing of A's after
    assert f.sql("SELECT count(*) FROM events") == events
    f.check(ids)  # (A thawed inside the payment reaches the receiver: it pays nothing again)


def test_the_lost_answer_of_the_commit_that_ended_a_run(faults: Faults) -> None:
    """The COMMIT of the run's last checkpoint is durable and its answer lost: the worker
    reports the run accepted (before: ``interrupted``, "left resumable", never ``ended``)."""
    f = faults
    ids = f.create(1, pay=False)  # (no payment: the third cycle's commit is the run's last)
    proxy = subprocess.Popen(
        [sys.executable, str(HERE / "lose_commit.py"), "127.0.0.1", _pg_port(f.base), str(f.work)]
    )
    proxy.app = "proxy"  # type: ignore[attr-defined]
    f.procs.append(proxy)
    port = f.until(
        "the proxy's port", lambda: (f.work / "port").is_file() and (f.work / "port").read_text()
    )
    via = f.url.replace(f"{_pg_host_port(f.base)}", f"127.0.0.1:{port}") + "&sslmode=disable"
    f.hold("actor_hold_3")
    w = f.worker("lw_pg52_l", "--lease-ttl", "600", url=via)
    f.until("the third cycle's actor", lambda: len(f.lines("actors.log")) == 3, w)
    f.lock_runs()  # its next commit is the run's last: locked, then armed, then let go
    f.lift("actor_hold_3")
    f.until("the last commit waiting", lambda: f.waiting("lw_pg52_l", COMMIT), w)
    (f.work / "arm").touch()
    f.unlock()
    f.until("the answer lost", (f.work / "fired").is_file, w)
    f.until("the run accepted", lambda: f.all_accepted(1), w)
    f.stop(w)
    said = f.said(w)
    assert said["ended"] == {"accepted": 1} and said["interrupted"] == 0, said
    f.check(ids)


def test_approve_and_deny_at_once_one_decides(faults: Faults) -> None:
    f = faults
    [run_id] = f.create(1, ASK)
    w = f.worker("lw_pg52_p", "--once")
    w.wait(timeout=PATIENCE)
    assert f.statuses() == Counter({"awaiting_approval": 1})
    [(approval_id,)] = f.sql("SELECT approval_id FROM approvals")
    import psycopg

    lock = psycopg.connect(f.base)
    lock.execute(f'SET search_path TO "{f.schema}"')
    lock.execute("SELECT 1 FROM approvals FOR UPDATE").fetchall()
    env = {**os.environ, "WORK_DIR": str(f.work)}
    votes = {
        verb: subprocess.Popen(
            [EXE, verb, run_id, "--by", who, "--store", f"{f.url}&application_name=lw_pg52_{verb}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for verb, who in (("approve", "alice"), ("deny", "bob"))
    }
    try:
        f.until(
            "both deciders waiting",
            lambda: all([b for b in f.backends(f"lw_pg52_{v}") if b[2] == "Lock"] for v in votes),
        )
    finally:
        lock.rollback()
        lock.close()
    out = {verb: (p.communicate(timeout=PATIENCE), p.returncode) for verb, p in votes.items()}
    [(status, by)] = f.sql("SELECT status, decided_by FROM approvals")
    won = {"approved": "approve", "denied": "deny"}[status]
    lost = "deny" if won == "approve" else "approve"
    assert out[won][1] == 0, out[won]
    (stdout, stderr), rc = out[lost]
    assert rc == 2 and stdout == "", out[lost]
    assert stderr.strip() == (
        f"loopwright: error: run {run_id}: request {approval_id} was already {status} by {by}"
    )
    decided = f.sql("SELECT count(*) FROM events WHERE kind = 'approval_decided'")
    assert decided == [(1,)]
    refused = f.sql("SELECT actor, action FROM audit WHERE outcome = 'refused'")
    assert refused == [({"approve": "alice", "deny": "bob"}[lost], lost)]


def _pg_host_port(base: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(base)
    return f"{parts.hostname}:{parts.port or 5432}"


def _pg_port(base: str) -> str:
    return _pg_host_port(base).rpartition(":")[2]


def test_one_locked_run_does_not_stall_the_workers_other_leases(faults: Faults) -> None:
    """One run's row held locked by another process (a `cancel` or the dashboard frozen inside
    its transaction, up to the server's idle timeout): the worker's heartbeat for that run
    waits on the lock. It waited on the event loop, so every other run of the worker stopped
    renewing too; their leases ran out while the worker lived, and other workers took them
    over mid-cycle (pg52). Now the other runs' leases are renewed meanwhile."""
    f = faults
    x, y = f.create(2)
    f.hold("actor_hold")
    w = f.worker("lw_pg52_h", "--lease-ttl", "15", "--concurrency", "2")
    f.until("both actors called", lambda: len(f.lines("actors.log")) >= 2, w)
    import psycopg

    lock = psycopg.connect(f.base)
    lock.execute(f'SET search_path TO "{f.schema}"')
    lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (x,)).fetchall()
    try:
        f.until("x's heartbeat waiting", lambda: f.waiting("lw_pg52_h", HEARTBEAT), w)
        [(x_at,)] = f.sql("SELECT lease_expires_at FROM runs WHERE run_id = %s", (x,))
        [(before,)] = f.sql("SELECT lease_expires_at FROM runs WHERE run_id = %s", (y,))

        def renewed() -> bool:
            [(at,)] = f.sql("SELECT lease_expires_at FROM runs WHERE run_id = %s", (y,))
            return bool(at > before)

        # y's renewal, while x's still waits on the lock (held until `finally`): a renewal
        # fenced by y's token alone, so one that lands after y's lease ran out counts too (no
        # other worker is there to take y over); waiting for it races nothing. Blocked behind
        # x's, it never lands: PATIENCE, a bound that only that hang reaches, fails the test.
        f.until("y's lease renewed while x's heartbeat waits", renewed, w)
        # (x's renewal waits on the lock a moment at a time, its connection the pool's between
        # tries, evloop53b: none of them landed)
        assert f.sql("SELECT lease_expires_at FROM runs WHERE run_id = %s", (x,)) == [(x_at,)]
    finally:
        lock.rollback()
        lock.close()
    f.lift("actor_hold")
    f.until("every run accepted", lambda: f.all_accepted(2), w)
    f.stop(w)
    assert f.said(w)["ended"] == {"accepted": 2}
    f.check([x, y])


@pytest.mark.parametrize(("point", "marks"), [("commit", COMMIT), ("effect_result", FENCE)])
def test_one_runs_blocked_write_does_not_stall_the_workers_other_runs(
    faults: Faults, point: str, marks: tuple[str, ...]
) -> None:
    """Run A's row held locked by another session (a `cancel`, the dashboard, a person in
    psql inside a transaction): A's next write (its cycle's commit; the journal write of its
    payment's result) waits on the lock. It waited on the event loop (a group commit of one
    is written there, an effect's journal always), so the worker's other runs, B and C, made
    no progress at all until the lock went, and their leases, renewed from the same loop's
    timers, could run out under the live worker (evloop53). Now B and C run to their end
    while A's write waits; A then goes on from where it was, nothing written or paid twice."""
    f = faults
    pay = point != "commit"  # (no payment: each cycle's one write is its commit)
    a, b, c = f.create(3, pay=pay)
    f.hold("actor_hold_t1")
    f.hold("actor_hold_t2")
    f.hold("effect_hold" if pay else "actor_hold_t0")
    w = f.worker("lw_ev53_w", "--lease-ttl", "600", "--concurrency", "3")
    f.until("every actor called", lambda: len(f.lines("actors.log")) >= 3, w)
    if pay:  # A inside its payment, its intent journaled
        f.until("A paying", lambda: f.lines("attempts.log"), w)
    import psycopg

    lock = psycopg.connect(f.base)
    lock.execute(f'SET search_path TO "{f.schema}"')
    lock.execute("SELECT 1 FROM runs WHERE run_id = %s FOR UPDATE", (a,)).fetchall()
    try:
        f.lift("effect_hold" if pay else "actor_hold_t0")
        f.until("A's write waiting on the lock", lambda: f.waiting("lw_ev53_w", marks), w)
        before = dict(f.sql("SELECT run_id, count(*) FROM checkpoints GROUP BY run_id"))
        f.lift("actor_hold_t1")
        f.lift("actor_hold_t2")
        # B and C's cycles, while A's write still waits (the lock is held until `finally`):
        # blocked behind it, they never come, and PATIENCE, a bound only that hang reaches,
        # fails the test.
        f.until(
            "B and C accepted while A's write waits",
            lambda: (
                {r[0] for r in f.sql("SELECT run_id FROM runs WHERE status='accepted'")} == {b, c}
            ),
            w,
        )
        # (A's write waits on the lock a moment at a time, its connection the pool's between
        # tries, evloop53b: nothing of it lands)
        after = dict(f.sql("SELECT run_id, count(*) FROM checkpoints GROUP BY run_id"))
        assert after[a] == before[a]  # nothing of A's written past the lock
        assert after[b] - before[b] >= 3 and after[c] - before[c] >= 3, (before, after)
        # one lease each, never taken over: their checkpoints since creation's (token 0)
        # under one fencing token
        tokens = f.sql(
            "SELECT run_id, count(DISTINCT fencing_token) FROM checkpoints "
            "WHERE fencing_token > 0 GROUP BY run_id"
        )
        assert dict(tokens) == {a: 1, b: 1, c: 1}, tokens
    finally:
        lock.rollback()
        lock.close()
    f.until("every run accepted", lambda: f.all_accepted(3), w)
    f.stop(w)
    said = f.said(w)
    assert said["ended"] == {"accepted": 3} and said["errors"] == 0, said
    f.check([a, b, c])


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt: faketime)")
def test_workers_with_skewed_host_clocks_follow_the_servers(faults: Faults) -> None:
    """Workers under libfaketime, an hour ahead and an hour behind: the leases they take and
    renew expire the TTL after the server's now, and a third, two hours ahead, finds both
    runs held (it claims nothing) though its clock says they ran out long ago."""
    f = faults
    ids = f.create(2)
    f.hold("actor_hold")
    workers = []
    for k, skew in enumerate(("+1h", "-1h")):
        w = f.worker(f"lw_pg52_skew{k}", "--lease-ttl", "30", "--max-runs", "1", faketime=skew)
        f.until(f"{skew}'s actor", lambda k=k: len(f.lines("actors.log")) == k + 1, w)
        workers.append(w)
    left = f.sql(
        "SELECT lease_expires_at - extract(epoch from clock_timestamp()) FROM runs "
        "WHERE lease_owner IS NOT NULL"
    )
    assert len(left) == 2 and all(0 < s <= 30 for (s,) in left), left
    ahead = f.worker("lw_pg52_skew2", "--once", faketime="+2h")
    ahead.wait(timeout=PATIENCE)
    assert f.said(ahead)["claimed"] == 0
    f.lift("actor_hold")
    f.until("every run accepted", lambda: f.all_accepted(2), *workers)
    for w in workers:
        w.wait(timeout=PATIENCE)
        assert f.said(w)["ended"] == {"accepted": 1}
    f.check(ids)


def test_workers_killed_at_seeded_points_drain_the_queue(faults: Faults) -> None:
    """Five workers drain the queue; at actor-call counts drawn by a seeded RNG one of them
    (drawn too) is SIGKILLed and another started. Each task has one run, each run ends once
    as an uninterrupted run does, each key is paid once. ``PG_DRAIN_RUNS`` for more (200)."""
    f = faults
    n = int(os.environ.get("PG_DRAIN_RUNS", "60"))
    rng = random.Random(52)
    ids = f.create(n)
    calls = sorted(rng.sample(range(3 * n // 10, 3 * n * 8 // 10), 4))
    workers = [
        f.worker(f"lw_pg52_d{i}", "--lease-ttl", "2", "--concurrency", "4") for i in range(5)
    ]
    for k, at in enumerate(calls):
        f.until(f"{at} actor calls", lambda at=at: len(f.lines("actors.log")) >= at, *workers)
        i = rng.randrange(len(workers))
        workers[i].kill()
        workers[i].wait()
        workers[i] = f.worker(f"lw_pg52_r{k}", "--lease-ttl", "2", "--concurrency", "4")
    f.until(f"all {n} runs accepted", lambda: f.all_accepted(n), *workers)
    f.stop(*workers)
    assert Counter(r[0] for r in f.sql("SELECT task_key FROM runs")) == Counter(
        f"t/{i}" for i in range(n)
    )
    f.check(ids)
