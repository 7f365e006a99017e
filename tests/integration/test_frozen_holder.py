"""A frozen holder (SIGSTOP standing in for a VM pause) past its lease: worker F writes an
effect's intent and is paused; G claims the run once F's lease has expired and settles the
effect; F is thawed. SQLite and PostgreSQL.

* Paused between the intent and the call: F never starts the call after its deadline (it lies
  inside the lease), so the payment happens once whatever the receiver does.
* Paused inside the call (the receiver reached, not yet acted): F completes it on thawing. A
  receiver that honours idempotency keys pays once; one that ignores them pays twice — the
  residual that docs/scale.md states.
* Claimed before the deadline (a forced takeover): G waits for the deadline, then asks the
  reconcile hook again before paying.

This file is also F's program: ``python test_frozen_holder.py URL LEDGER HONOUR FREEZE TTL``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.store import Event

HANG_S = 120.0  # a bound on waits that only a hang reaches (never a measurement)
TASK = {"artifacts": {"inv": {"amount": 0}}}
KEY = "pay:INV-7"  # the effect's key: its name and the business key


class Ledger:
    """A payment receiver in a file shared by processes: one line per payment it made. Honouring
    keys, it answers a key it has seen with its first payment (as a payment provider does);
    ignoring them, it pays again."""

    def __init__(self, path: Path, honour: bool) -> None:
        self.path = path
        self.honour = honour

    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        with self.path.open("a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0)
            paid = [json.loads(line) for line in fh if line.strip()]
            if self.honour:
                for p in paid:
                    if p["key"] == key:
                        return dict(p)
            entry = {"key": key, "invoice": invoice, "amount": amount, "pid": os.getpid()}
            fh.write(json.dumps(entry) + "\n")
            return entry

    def payments(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def find(self, key: str) -> dict[str, Any] | None:
        """The reconcile hook: the payment made under ``key``, if any."""
        return next((p for p in self.payments() if p["key"] == key), None)


def make_loop(ledger: Ledger, *, freeze_in_call: bool = False) -> lw.Loop:
    def pay(invoice: str, amount: float, key: str) -> dict[str, Any]:
        return ledger.pay(invoice, amount, key)

    async def pay_paused(invoice: str, amount: float, key: str) -> dict[str, Any]:
        # Paused inside the call, the receiver reached and not yet acted; on thawing it goes
        # on with no await in between, so nothing can cancel it first (deterministic).
        os.kill(os.getpid(), signal.SIGSTOP)
        return ledger.pay(invoice, amount, key)

    fn = pay_paused if freeze_in_call else pay
    eff = lw.effect("spend", name="pay", key=lambda a: a["invoice"], reconcile=ledger.find)(fn)

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"amount": 40.0}).edits,
            effects=(eff.call(invoice="INV-7", amount=40.0),),
        )

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=True, score=1.0)

    return lw.Loop(
        name="pay",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        effects=[eff],
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )


def _frozen_worker(argv: list[str]) -> int:
    """F: runs the loop under a short lease and pauses itself where told."""
    url, ledger, honour, freeze, ttl = argv
    loop = make_loop(Ledger(Path(ledger), honour == "1"), freeze_in_call=freeze == "in_call")
    with lw.Runtime(url, lease_ttl_s=float(ttl)) as rt:
        if freeze == "after_intent":
            paused: list[bool] = []

            def on_phase(phase: str) -> None:
                if phase == "after_effect_intent" and not paused:
                    paused.append(True)
                    os.kill(os.getpid(), signal.SIGSTOP)

            rt._on_phase = on_phase
        try:
            r = rt.run_sync(loop, TASK, task_key="frozen")
        except lw.StaleLeaseError as exc:
            print(json.dumps({"stale": str(exc)}))
            return 3
        print(json.dumps({"status": r.status}))
    return 0


def _until(what: str, cond: Any, proc: subprocess.Popen[bytes]) -> None:
    end = time.monotonic() + HANG_S
    while not cond():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"F exited ({proc.returncode}) before {what}: {out!r} {err!r}")
        if time.monotonic() > end:
            pytest.fail(f"hung waiting for {what}")
        time.sleep(0.02)


def _stopped(proc: subprocess.Popen[bytes]) -> bool:
    stat = Path(f"/proc/{proc.pid}/stat").read_text()
    return stat.rpartition(")")[2].split()[0] == "T"


def _spawn_f(url: str, ledger: Ledger, freeze: str, ttl: float) -> subprocess.Popen[bytes]:
    args = [url, str(ledger.path), "1" if ledger.honour else "0", freeze, str(ttl)]
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    _until("F paused itself", lambda: _stopped(proc), proc)
    return proc


def _thaw(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """SIGCONT F and wait for it: what it printed (it finds its lease taken)."""
    proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 3, (proc.returncode, out, err)
    said: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return said


@dataclass
class Frozen:
    """How one freeze went: G's result, what F said when thawed, the run's events, who paid."""

    result: lw.RunResult
    said: dict[str, Any]
    events: list[Event]
    payers: list[int]
    f_pid: int

    def of(self, *kinds: str) -> list[Event]:
        return [e for e in self.events if e.kind in kinds]

    @property
    def deadline(self) -> float:
        """The deadline F's intent gave the call (the first ``effect_started``; G's is next)."""
        deadline = self.of("effect_started")[0].data["deadline_at"]
        assert isinstance(deadline, float)
        return deadline

    @property
    def settled_at(self) -> float:
        [done] = self.of("effect_done", "effect_reconciled")
        return done.ts


def _frozen(
    url: str, ledger: Ledger, freeze: str, ttl: float, *, now: float | None = None
) -> Frozen:
    """F runs the loop and pauses itself; G claims the run (once F's lease has expired on the
    store's clock, or at ``now``) and resumes it; then F is thawed."""
    with lw.Runtime(url, lease_ttl_s=30) as g:
        run_id = g.create(make_loop(ledger), TASK, task_key="frozen")[0].run_id
        f = _spawn_f(url, ledger, freeze, ttl)
        claimed: list[tuple[str, int]] = []

        def claim() -> bool:
            claimed.extend(g.store.claim_runs(g.owner, g.lease_ttl_s, now=now))
            return bool(claimed)

        try:
            _until("F's lease to expire", claim, f)
            assert [rid for rid, _ in claimed] == [run_id]
            result = asyncio.run(g.resume(run_id, make_loop(ledger), token=claimed[0][1]))
        finally:
            said = _thaw(f)
        return Frozen(
            result, said, g.store.events(run_id), [p["pid"] for p in ledger.payments()], f.pid
        )


@pytest.mark.parametrize("honour", [True, False], ids=["keys", "no-keys"])
def test_frozen_before_the_call_pays_once(url: str, tmp_path: Path, honour: bool) -> None:
    run = _frozen(url, Ledger(tmp_path / "ledger.jsonl", honour), "after_intent", 2.0)
    assert run.result.accepted
    assert "stale" in run.said  # F's renewal before its call was refused: it never paid
    assert run.payers == [os.getpid()]  # G's, once
    # F's lease covered its deadline: by the time G could claim, the deadline had passed
    assert run.settled_at >= run.deadline and not run.of("effect_grace")


@pytest.mark.parametrize("honour", [True, False], ids=["keys", "no-keys"])
def test_frozen_inside_the_call(url: str, tmp_path: Path, honour: bool) -> None:
    run = _frozen(url, Ledger(tmp_path / "ledger.jsonl", honour), "in_call", 2.0)
    assert run.result.accepted and "stale" in run.said
    assert run.settled_at >= run.deadline
    if honour:
        assert run.payers == [os.getpid()]  # F's late request answered with G's payment
    else:
        # The documented residual (docs/scale.md): a receiver without keys, reached by a
        # holder paused past its lease inside the call, pays again when it thaws.
        assert run.payers == [os.getpid(), run.f_pid]


def test_a_claim_before_the_deadline_waits_for_it(url: str, tmp_path: Path) -> None:
    """G takes the run over while F's intent is inside its deadline (a claim at a clock far
    ahead, standing in for a lease lost early): G waits for the deadline, asks the reconcile
    hook again, and only then pays; F, thawed, finds its lease taken and never pays."""
    ledger = Ledger(tmp_path / "ledger.jsonl", honour=False)
    run = _frozen(url, ledger, "after_intent", 4.0, now=time.time() + 3600)
    assert run.result.accepted and "stale" in run.said
    [grace] = [e.data for e in run.of("effect_grace")]
    assert grace["until"] == run.deadline and grace["holder_alive"] is True
    assert run.settled_at >= run.deadline
    assert run.payers == [os.getpid()]


if __name__ == "__main__":
    sys.exit(_frozen_worker(sys.argv[1:]))
