"""Driving a money-kill trial from outside (real processes, SIGKILL at phase boundaries) and
checking its end against the provider's ledger; shared by ``test_money_kills.py`` and
``bench/money_kills.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loopwright as lw

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "runner.py"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from forkserver import Forked, child_process  # noqa: E402
from ledger import Ledger  # noqa: E402

ENDED = ("accepted", "stopped", "escalated", "failed")


@dataclass
class Trial:
    """One trial's folder, store and settings (``env``: the runner's ``MK_*`` settings)."""

    work: Path
    db: str
    env: dict[str, str] = field(default_factory=dict)
    killed: int = 0
    killed_pids: set[int] = field(default_factory=set)
    refunded_later: list[str] = field(default_factory=list)
    unpaid_accepted: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # rules a scenario checked on the way

    def start(
        self, action: str, key: str, *extra: str, crash: str | None = None, **env: str
    ) -> Forked | subprocess.Popen[str]:
        full = {**os.environ, "PYTHONUNBUFFERED": "1", "MK_DIR": str(self.work), **self.env}
        full.pop("LOOPWRIGHT_STORE", None)
        full.pop("MK_CRASH", None)
        full.update(env)
        if crash is not None and crash.startswith("provider:"):
            full["MK_PROVIDER_KILL"] = crash.removeprefix("provider:")
        elif crash is not None:
            full["MK_CRASH"] = crash
        # forked from a server that imported loopwright once: the same runner, its own pid
        return child_process([sys.executable, str(RUNNER), self.db, action, key, *extra], full)

    def wait(self, proc: Forked | subprocess.Popen[str]) -> str | None:
        """The run's status, or ``None`` when the process was killed (SIGKILL, as asked)."""
        out, err = proc.communicate(timeout=300)  # only a hung runner takes this long
        if proc.returncode == -9:
            self.killed += 1
            self.killed_pids.add(proc.pid)
            return None
        assert proc.returncode == 0, (proc.returncode, err[-3000:])
        status: str = json.loads(out.strip().splitlines()[-1])["status"]
        return status

    def do(
        self, action: str, key: str, *extra: str, crash: str | None = None, **env: str
    ) -> str | None:
        return self.wait(self.start(action, key, *extra, crash=crash, **env))

    def finish(self, keys: list[str]) -> dict[str, str]:
        """Every run resumed to its end (a parked one cancelled by a person)."""
        ends: dict[str, str] = {}
        for key in keys:
            for _ in range(4):
                status = self.do("finish", key)
                if status in ENDED or status == "cancelled":
                    break
            assert status is not None
            ends[key] = status
        return ends

    def check(self, ends: dict[str, str]) -> list[str]:
        """Every rule the trial must keep, against the provider's ledger: what it broke."""
        ledger = Ledger(self.work / "provider.db")
        charges, requests = ledger.charges(), ledger.requests()
        bad: list[str] = list(self.broken)
        standing = Counter(inv for _k, inv, st, refunds in charges if st == "paid" and not refunds)
        bad += [f"{inv} charged {n} times, standing" for inv, n in standing.items() if n > 1]
        bad += [f"{k} refunded {r} times" for k, _inv, _st, r in charges if r > 1]
        # A declined key asked again: only when the decline had been answered to a process
        # that lived to journal it (one killed before it could is asked again by its resume,
        # whose reconcile hook found no charge, and the provider declines again: no harm).
        declined_to = {k: p for _s, op, k, p, a in requests if op == "pay" and a == "declined"}
        bad += [
            f"declined key {k} asked again"
            for _s, op, k, _p, a in requests
            if a == "again:declined" and declined_to[k] not in self.killed_pids
        ]
        refunded_at = {k: s for s, op, k, _p, a in requests if op == "refund" and a == "refund#1"}
        state = {k: (st, r) for k, _inv, st, r in charges}
        with lw.Runtime(self.db) as rt:
            for key, status in ends.items():
                if status != "accepted":
                    continue
                run = rt.store.get_run(key)
                final = max(s for s, op, k, _p, _a in requests if op == "final" and k == key)
                held = _payment(rt.store.journal(run.run_id, kind="effect"))
                if held is None:
                    bad.append(f"run {key} accepted without a payment")
                    continue
                st, refunds = state.get(held, ("missing", 0))
                if st != "paid":
                    bad.append(f"run {key} accepted on {held}, which the provider has {st}")
                elif refunds and refunded_at[held] < final:
                    bad.append(f"run {key} accepted on {held}, refunded before its last cycle")
                elif refunds and not _told(rt.store, run.run_id):
                    bad.append(f"run {key} accepted on {held}, refunded with no person told")
                elif refunds:
                    # A person cancelled the run that paid, after this one was accepted on
                    # its payment, and approved its refund told of this run: counted, not a
                    # broken rule (a person decided).
                    self.refunded_later.append(key)
                    if not standing.get(state_invoice(charges, held)):
                        # ...and the invoice ends unpaid: nobody paid it again
                        self.unpaid_accepted.append(key)
        return bad


def _told(store: Any, run_id: str) -> bool:
    """Whether a person approved a refund whose request named run ``run_id`` as reusing the
    payment, and the run was told (its ``effect_reuse_refunding`` event, written before the
    refund is asked for, or ``effect_reuse_refunded``): a refund killed in doubt is told too."""
    named = any(
        run_id in [r.get("run_id") for r in (a.evidence or {}).get("reused_by") or ()]
        for a in store.approvals(status="approved")
        if a.kind == "compensation"
    )
    said = ("effect_reuse_refunding", "effect_reuse_refunded")
    return named and any(e.kind in said for e in store.events(run_id))


def state_invoice(charges: list[tuple[str, str, str, int]], key: str) -> str:
    return next(inv for k, inv, _st, _r in charges if k == key)


def _payment(entries: list[Any]) -> str | None:
    """The charge key of the run's payment that stands in its journal (done, not undone)."""
    for e in reversed(entries):
        if e.key.startswith("effect:pay:") and e.status == "done":
            result = e.data.get("result")
            if isinstance(result, dict) and "key" in result:
                return str(result["key"])
    return None


# --- the scenarios: each runs its processes (one killed at ``kill``, a phase boundary
# ``PHASE:N``) and returns the task keys of its runs -------------------------------------------
def declined_then_another(t: Trial, kill: str | None) -> list[str]:
    """A's payment is declined (killed around it at ``kill``); B asks for the same invoice."""
    t.env["MK_DECLINE"] = "I6"
    t.do("run", "A", crash=kill)
    t.do("run", "B")
    return ["A", "B"]


def declined_resumed_then_another(t: Trial, kill: str | None) -> list[str]:
    """A's payment is declined (killed around it at ``kill``) and A is resumed to its end
    before B asks for the same invoice (and C after B)."""
    t.env["MK_DECLINE"] = "I6"
    t.do("run", "A", crash=kill)
    t.finish(["A"])
    t.do("run", "B")
    t.do("run", "C")
    return ["A", "B", "C"]


def refund_then_another(t: Trial, kill: str | None) -> list[str]:
    """A pays and parks; a person cancels it and its refund is killed at ``kill``; B asks for
    the same invoice, then A is resumed."""
    t.do("run", "A", MK_PARK="1")
    t.do("cancel", "A", crash=kill, MK_PARK="1")
    t.do("run", "B")
    return ["A", "B"]


def reused_then_refunded(t: Trial, kill: str | None) -> list[str]:
    """A pays and parks; B asks for the same invoice (reuses A's payment) and is accepted;
    then a person cancels A, whose refund is killed at ``kill``."""
    t.do("run", "A", MK_PARK="1")
    t.do("run", "B")
    t.do("cancel", "A", crash=kill, MK_PARK="1")
    return ["A", "B"]


def reused_then_refund_approved(t: Trial, kill: str | None) -> list[str]:
    """As ``reused_then_refunded``, the refund (which waits for a person, naming B) approved
    by one, and its run killed at ``kill``."""
    t.do("run", "A", MK_PARK="1")
    t.do("run", "B")
    t.do("cancel", "A", MK_PARK="1")
    t.do("approve", "A", crash=kill, MK_PARK="1")
    return ["A", "B"]


def forked_then_refunded(t: Trial, kill: str | None) -> list[str]:
    """A pays and parks; a person forks A at the payment's cycle, and the fork F (which
    never asks for the invoice again: it inherited the payment) is accepted; then a person
    cancels A, whose refund is killed at ``kill``."""
    t.env["MK_NO_REPAY"] = "1"
    t.do("run", "A", MK_PARK="1")
    t.do("fork", "F", "2", "A")
    t.do("cancel", "A", crash=kill, MK_PARK="1")
    return ["A", "F"]


def forked_then_refund_approved(t: Trial, kill: str | None) -> list[str]:
    """As ``forked_then_refunded``, the refund (which waits for a person, naming F)
    approved by another person, and its run killed at ``kill``."""
    t.env["MK_NO_REPAY"] = "1"
    t.do("run", "A", MK_PARK="1")
    t.do("fork", "F", "2", "A")
    t.do("cancel", "A", MK_PARK="1")
    t.do("approve", "A", crash=kill, MK_PARK="1")
    return ["A", "F"]


def refund_bug_then_another(t: Trial, kill: str | None) -> list[str]:
    """As ``refund_then_another``, the refund's own code raising after it refunded."""
    t.env["MK_REFUNDS"] = "refund_bug"
    return refund_then_another(t, kill)


def refund_refused_then_another(t: Trial, kill: str | None) -> list[str]:
    """As ``refund_then_another``, the refund refused by the provider (nothing refunded)."""
    t.env["MK_REFUNDS"] = "refund_refused"
    return refund_then_another(t, kill)


def declined_rolled_back(t: Trial, kill: str | None) -> list[str]:
    """A's payment is declined; a person rolls A back before it, and its redo (the next
    generation's key) is killed at ``kill``; B asks for the invoice."""
    t.env["MK_DECLINE"] = "I6"
    t.do("run", "A")
    t.do("rollback", "A", "1", crash=kill)
    t.do("run", "B")
    return ["A", "B"]


def refund_among_askers(t: Trial, kill: str | None, askers: int = 2) -> list[str]:
    """A pays and parks; its cancel (killed at ``kill``) runs while ``askers`` other runs ask
    for the same invoice, all at once; the first of them is killed at ``kill`` too."""
    t.do("run", "A", MK_PARK="1")
    keys = [f"R{i}" for i in range(askers)]
    procs = [t.start("cancel", "A", crash=kill, MK_PARK="1")]
    procs += [t.start("run", k, crash=kill if i == 0 else None) for i, k in enumerate(keys)]
    for p in procs:
        t.wait(p)
    return ["A", *keys]


def racing_payers(t: Trial, kill: str | None, askers: int = 2) -> list[str]:
    """``askers`` runs ask for the same unpaid invoice at once; the first is killed at
    ``kill`` (with ``provider:``, whichever is answered first)."""
    keys = [f"R{i}" for i in range(askers)]
    procs = [t.start("run", k, crash=kill if i == 0 else None) for i, k in enumerate(keys)]
    for p in procs:
        t.wait(p)
    return keys


def racing_declined(t: Trial, kill: str | None, askers: int = 2) -> list[str]:
    """As ``racing_payers``, the invoice's first key declined."""
    t.env["MK_DECLINE"] = "I6"
    return racing_payers(t, kill, askers)


def redo_after_a_bug(t: Trial, kill: str | None) -> list[str]:
    """A's payment charges and then its own code raises (it may have acted); a person rolls
    A back before the payment and its redo is killed at ``kill``; B asks for the invoice."""
    t.env["MK_BUG_AFTER"] = "I6"
    t.do("run", "A", MK_PARK="1")
    t.do("rollback", "A", "1", crash=kill, MK_PARK="1")
    t.do("run", "B")
    return ["A", "B"]


def reuse_card_refunded(t: Trial, kill: str | None) -> list[str]:
    """A's payment approved and made, A parks; B parks on a card promising A's payment reused;
    a person cancels A, another approves its refund, killed at ``kill``; then B's card is approved as it stood
    (stop 47, newuser47): that approval must pay nothing (B is asked again, or held while the
    refund is in doubt)."""
    t.env["MK_APPROVE_PAY"] = "1"
    t.do("run", "A", MK_PARK="1")
    t.do("approve_pay", "A", MK_PARK="1")
    t.do("run", "B")
    t.do("cancel", "A", MK_PARK="1")  # its refund waits for a person (a spend)
    t.do("approve", "A", crash=kill, MK_PARK="1")
    ledger = Ledger(t.work / "provider.db")
    before = len(ledger.requests())
    t.do("approve_pay", "B")
    paid = [k for _s, op, k, _p, _a in ledger.requests()[before:] if op == "pay"]
    if paid:
        t.broken.append(f"B's card promising a reuse, approved, asked the provider for {paid}")
    return ["A", "B"]


SCENARIOS = {
    "declined_then_another": declined_then_another,
    "declined_resumed_then_another": declined_resumed_then_another,
    "refund_then_another": refund_then_another,
    "reused_then_refunded": reused_then_refunded,
    "reused_then_refund_approved": reused_then_refund_approved,
    "forked_then_refunded": forked_then_refunded,
    "forked_then_refund_approved": forked_then_refund_approved,
    "refund_bug_then_another": refund_bug_then_another,
    "refund_refused_then_another": refund_refused_then_another,
    "declined_rolled_back": declined_rolled_back,
    "refund_among_askers": refund_among_askers,
    "racing_payers": racing_payers,
    "racing_declined": racing_declined,
    "redo_after_a_bug": redo_after_a_bug,
    "reuse_card_refunded": reuse_card_refunded,
}

# Where a payment's or a refund's process dies: before the provider is asked, inside the
# call right after the provider recorded its answer (``provider:``: the first request so
# answered), after the call returned and before its result is journaled, after it is.
KILLS = (
    None,
    "after_effect_intent:1",
    "provider:pay:declined",
    "provider:pay:paid",
    "provider:refund",
    "before_effect_result:1",
    "after_effect_result:1",
)


def run_trial(
    work: Path, db: str, scenario: str, kill: str | None, hooks: str, **kw: Any
) -> tuple[Trial, dict[str, str], list[str]]:
    """One trial: its runs' ends and the rules broken (``Trial.killed``: processes killed)."""
    t = Trial(work, db, env={"MK_HOOKS": hooks})
    keys = SCENARIOS[scenario](t, kill, **kw)
    ends = t.finish(keys)
    return t, ends, t.check(ends)
