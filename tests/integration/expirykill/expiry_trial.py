"""Expiry, reuse and lease-release kill trials (kill49), driven from outside with real processes
(``expiry_runner.py``) SIGKILLed at deterministic points; shared by ``test_expiry_kills.py`` and
``bench/expiry_kills.py``.

Each scenario plays its steps on a fresh store and returns what ``check`` must find; ``check``
lists every rule the trial broke:

* expiry (a worker records the request expired, claims the run, escalates it): the run ends
  escalated once (one ``stopped``), one decision recorded (``approval_decided``, ``expired``
  by ``loopwright``), nothing paid, never left parked;
* a person's decision and a worker's expiry record: the one that lands first wins, recorded
  once; the other is refused (a person told so, a worker's ``expire`` a no-op);
* a reuse-only effect (B approved as A's payment reused) killed at each phase while A's refund
  runs: I6 paid once (``paid.log``), refunded at most once, every payment and refund the
  provider made in a run's journal, every run ended, B accepted on a refunded payment only
  told of it;
* edit, rollback and cancel killed with the lease taken: done again at once (the dead holder's
  lease is free), recorded once.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.store import open_store

HERE = Path(__file__).resolve().parent
RUNNER = HERE / "expiry_runner.py"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from expiry_runner import Paid, overdue  # noqa: E402
from forkserver import child_process  # noqa: E402

ENDED = ("accepted", "stopped", "escalated", "failed", "cancelled")


@dataclass
class Trial:
    work: Path
    db: str
    killed: int = 0
    broken: list[str] = field(default_factory=list)
    steps: list[tuple[str, str | None, float]] = field(default_factory=list)
    ends: dict[str, str] = field(default_factory=dict)  # each run's end, as checked

    def start(self, *args: str, kill: str | None = None, pause: str | None = None) -> Any:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for var in ("LOOPWRIGHT_STORE", "XK_KILL", "XK_PAUSE"):
            env.pop(var, None)
        if kill is not None:
            env["XK_KILL"] = kill
        if pause is not None:
            env["XK_PAUSE"] = pause
        # forked (tests/forkserver.py): the same runner, its own pid
        return child_process([sys.executable, str(RUNNER), self.db, str(self.work), *args], env)

    def wait(self, proc: Any, *, must_die: bool = False) -> dict[str, Any] | None:
        """The process's answer, or ``None`` when it was killed (then counted)."""
        out, err = proc.communicate(timeout=300)  # only a hung runner takes this long
        if proc.returncode == -signal.SIGKILL:
            self.killed += 1
            if "worker" in proc.args and self.db.startswith("postgres"):
                self.lapse(proc.pid)
            return None
        if must_die:
            self.broken.append(f"{proc.args[3:]} not killed where asked: {out.strip()}")
        if proc.returncode != 0:
            raise AssertionError((proc.args[3:], proc.returncode, err[-3000:]))
        answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return answer

    def do(self, *args: str, kill: str | None = None) -> dict[str, Any] | None:
        t0 = time.monotonic()
        out = self.wait(self.start(*args, kill=kill), must_die=kill is not None)
        self.steps.append((" ".join(args), kill, round(time.monotonic() - t0, 1)))
        return out

    def paused(self, *args: str, pause: str) -> Any:
        """The process stopped (SIGSTOP) at ``pause``, holding whatever it holds there."""
        proc = self.start(*args, pause=pause)
        _pid, status = os.waitpid(proc.pid, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            self.broken.append(f"{args} never reached {pause}")
            return None
        return proc

    def kill_paused(self, proc: Any) -> None:
        if proc is None:
            return
        os.kill(proc.pid, signal.SIGKILL)
        os.kill(proc.pid, signal.SIGCONT)
        self.wait(proc, must_die=True)

    def go_on(self, proc: Any) -> dict[str, Any] | None:
        if proc is None:
            return None
        os.kill(proc.pid, signal.SIGCONT)
        return self.wait(proc)

    def overdue(self, key: str) -> None:
        """Run ``key``'s pending requests are past their expiry (here: no process needed)."""
        with open_store(self.db) as store:
            overdue(store, store.get_run(key).run_id)

    def lapse(self, pid: int) -> None:
        """The leases of worker ``pid`` (killed) are past their TTL on the store's clock:
        on PostgreSQL a claim takes a dead worker's runs once its lease expired
        (docs/scale.md, "When a worker dies"), not at once as SQLite's does for a process of
        this host. Moved there, never waited for."""
        with open_store(self.db) as store:
            m = store._MARK  # type: ignore[attr-defined]
            with store._tx() as conn:  # type: ignore[attr-defined]
                conn.execute(
                    f"UPDATE runs SET lease_expires_at = {m} WHERE lease_owner LIKE {m}",
                    (store.clock() - 1, f"%:{pid}:%"),
                )

    def paid(self) -> list[str]:
        return Paid(self.work).lines()


def _run(rt: lw.Runtime, key: str) -> lw.store.RunRecord:
    return rt.store.get_run(key)


def _kinds(rt: lw.Runtime, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in rt.store.events(run_id) if e.kind == kind]


# --- expiry ------------------------------------------------------------------------------------
EXPIRY_KILLS = (
    "read_expired:1",
    "expired:1",
    "claimed:1",
    "before_checkpoint:1",
    "commit_tx:1",
    "after_checkpoint:1",
)


def expiry(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A parked on its payment's request, which expires; a worker killed at each of ``kills``
    in turn, then a worker's pass to the end."""
    t.do("run", "A")
    t.overdue("A")
    for kill in kills:
        t.do("worker", kill=kill)
    t.do("worker")
    return {"A": ("escalated", "expired", "loopwright", [])}


def person_first(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A person approves while the request is live, killed right after the decision (before
    resuming); the request's time then runs out; workers (killed at ``kills``) take the run:
    the approval stands, paid once."""
    t.do("run", "A")
    t.do("approve", "A", kill="decided:1")
    t.overdue("A")
    for kill in kills:
        t.do("worker", kill=kill)
    t.do("worker")
    # (a payment killed before its result, with no hook to ask the provider, is in doubt:
    # the run escalates saying so; paid once either way)
    doubt = "before_effect_result:1" in kills
    return {"A": ("escalated" if doubt else "accepted", "approved", "fin", ["I6"])}


def worker_first(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A worker records the expiry and is killed before it claims; a person's approval then is
    refused (told it expired); workers (killed at ``kills``) escalate the run."""
    t.do("run", "A")
    t.overdue("A")
    t.do("worker", kill="expired:1")
    said = t.do("approve", "A")
    if not said or not said.get("refused"):
        t.broken.append(f"a person's approval after the recorded expiry: {said}")
    for kill in kills:
        t.do("worker", kill=kill)
    t.do("worker")
    return {"A": ("escalated", "expired", "loopwright", [])}


def decision_lands_mid_poll(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A worker has read the expired request and is stopped before recording it; a person's
    decision (checked before it expired) lands then, its process killed right after; the
    worker is killed (``kills`` non-empty) or goes on; a worker's pass: the decision wins."""
    t.do("run", "A")
    t.overdue("A")
    w = t.paused("worker", pause="read_expired:1")
    t.do("decide_raw", "A", kill="decided:1")
    if kills:
        t.kill_paused(w)
        for kill in kills[1:]:
            t.do("worker", kill=kill)
    else:
        t.go_on(w)
    t.do("worker")
    return {"A": ("accepted", "approved", "fin", ["I6"])}


def check_decided(t: Trial, rt: lw.Runtime, key: str, want: tuple[Any, ...]) -> None:
    status, decision, by, paid = want
    rec = _run(rt, key)
    t.ends[key] = rec.status
    if rec.status != status:
        t.broken.append(f"{key} ended {rec.status}, not {status}")
    decided = [(d["status"], d["by"]) for d in _kinds(rt, rec.run_id, "approval_decided")]
    if decided != [(decision, by)]:
        t.broken.append(f"{key}'s decisions: {decided}, not once {decision} by {by}")
    stopped = [d["status"] for d in _kinds(rt, rec.run_id, "stopped")]
    if stopped != [status]:
        t.broken.append(f"{key} stopped {stopped}")
    asks = [(a.kind, a.status) for a in rt.store.approvals(run_id=rec.run_id)]
    if asks != [("effect", decision)]:
        t.broken.append(f"{key}'s requests: {asks}")
    cause = str((rec.packet or {}).get("cause"))
    if status == "escalated" and decision not in cause and "outcome was not recorded" not in cause:
        t.broken.append(f"{key}'s packet does not say it expired: {rec.packet}")
    if t.paid() != paid:
        t.broken.append(f"paid {t.paid()}, not {paid}")
    if _kinds(rt, rec.run_id, "worker_skipped"):
        t.broken.append(f"{key} skipped by a worker: {_kinds(rt, rec.run_id, 'worker_skipped')}")


# --- a reuse-only effect and its origin's refund ------------------------------------------------
# A reuse-only call's phases: its claim checked (``reuse_standing``) before its intent; the
# intent's claim write finds the key another run's done execution (held: nothing written); the
# reuse written done (``effect_reused``); the cycle's commit; after it.
REUSE_POINTS = (
    "before_effect_intent:1",
    "journal_EffectKeyHeld:1",
    "journal_done:1",
    "before_checkpoint:1",
    "after_checkpoint:1",
)


def _a_paid_b_approved_as_reuse(t: Trial) -> None:
    t.do("run", "A")
    t.do("approve", "A")
    t.do("run", "A")
    t.do("run", "B")  # parks: "its result is reused"
    t.do("approve", "B")


def reuse_refund_races(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """B's resumed cycle, its effect approved only as A's payment reused, stopped at
    ``kills[0]`` (holding its lease); A's refund runs meanwhile (killed at ``kills[1]``, then
    redone); B killed; every run resumed to its end."""
    _a_paid_b_approved_as_reuse(t)
    b = t.paused("run", "B", pause=kills[0])
    for kill in kills[1:]:
        t.do("refund", "A", kill=kill)
    t.do("refund", "A")
    t.kill_paused(b)
    t.do("finish", "B")
    t.do("finish", "A")
    return {}


def reuse_refund_then_go_on(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """As ``reuse_refund_races``, B let go on after the refund (not killed): the reuse its
    check read is undone under it (``reuse_standing``: never a payment under the next key)."""
    _a_paid_b_approved_as_reuse(t)
    b = t.paused("run", "B", pause=kills[0])
    t.do("refund", "A")
    t.go_on(b)
    t.do("finish", "B")
    t.do("finish", "A")
    return {}


def reuse_while_refund_cut(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A's refund killed at ``kills[1]`` and left so (its claim undoing, or its rollback not
    done); B, approved as A's payment reused and killed at ``kills[0]``, resumed meanwhile;
    then A's refund done and every run ended."""
    _a_paid_b_approved_as_reuse(t)
    t.do("run", "B", kill=kills[0])
    t.do("refund", "A", kill=kills[1])
    t.do("finish", "B")
    t.do("refund", "A")
    t.do("finish", "A")
    return {}


def reuse_killed_then_refund(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """B killed at ``kills[0]``; A's refund then (killed at the rest, redone); B resumed."""
    _a_paid_b_approved_as_reuse(t)
    t.do("run", "B", kill=kills[0])
    for kill in kills[1:]:
        t.do("refund", "A", kill=kill)
    t.do("refund", "A")
    t.do("finish", "B")
    t.do("finish", "A")
    return {}


def _check_money(t: Trial, rt: lw.Runtime) -> None:
    paid = t.paid()
    pays, refunds = paid.count("I6"), paid.count("-I6")
    if pays != 1:
        t.broken.append(f"I6 paid {pays} times: {paid}")
    if refunds > pays:
        t.broken.append(f"refunded {refunds} times, paid {pays}")
    runs = {k: _run(rt, k) for k in ("A", "B")}
    t.ends = {k: r.status for k, r in runs.items()}
    for key, rec in runs.items():
        if rec.status not in ENDED:
            t.broken.append(f"{key} left {rec.status}")
    # every payment and refund the provider made is in a journal: no lost record
    entries = [e for r in runs.values() for e in rt.store.journal(r.run_id, kind="effect")]
    ran = [e for e in entries if not (e.data.get("from_run") or e.data.get("inherited_from"))]
    if pays and not any(e.status in ("done", "compensated") for e in ran):
        t.broken.append(f"a payment made, none journaled: {[(e.key, e.status) for e in ran]}")
    # (a refund killed before its result, with no hook to ask, is journaled in doubt)
    undo = [e for e in entries if ".compensate:" in e.key and e.status != "intent"]
    if refunds and not undo:
        t.broken.append(f"a refund made, none journaled: {[(e.key, e.status) for e in entries]}")
    left = [(e.key, e.status) for e in entries if e.status in ("intent", "waiting")]
    if left:
        t.broken.append(f"effects never settled: {left}")
    b = runs["B"]
    if b.status == "accepted" and refunds >= pays:
        told = _kinds(rt, b.run_id, "effect_reuse_refunding") + _kinds(
            rt, b.run_id, "effect_reuse_refunded"
        )
        if not told:
            t.broken.append("B accepted on a refunded payment, never told")


# --- edit, rollback, cancel killed with the lease taken ----------------------------------------
LEASE_KILLS = ("lease:1", "commit_tx:1")


def edit_killed(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A parked; a person's edit killed at each of ``kills`` (with the lease taken), done
    again at once; approved, A pays once and is accepted with the edit."""
    t.do("run", "A")
    for kill in kills:
        t.do("edit", "A", kill=kill)
    t.do("edit", "A")
    t.do("approve", "A")
    t.do("finish", "A")
    return {"edits": 1, "A": "accepted", "paid": ["I6"]}


def rollback_killed(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A paid and accepted; its rollback killed at each of ``kills``, done again at once; the
    refund approved and run; A (parked asking to pay again) cancelled: refunded once."""
    t.do("run", "A")
    t.do("approve", "A")
    t.do("run", "A")
    for kill in kills:
        t.do("rollback", "A", kill=kill)
    t.do("refund", "A")
    t.do("finish", "A")
    return {"rollbacks": 1, "A": "cancelled", "paid": ["I6", "-I6"]}


def cancel_killed(t: Trial, kills: tuple[str, ...]) -> dict[str, Any]:
    """A parked; its cancel killed at each of ``kills``, done again at once: cancelled once."""
    t.do("run", "A")
    for kill in kills:
        t.do("cancel", "A", kill=kill)
    t.do("cancel", "A")
    t.do("finish", "A")
    return {"A": "cancelled", "paid": []}


def _check_lease_ops(t: Trial, rt: lw.Runtime, want: dict[str, Any]) -> None:
    rec = _run(rt, "A")
    t.ends["A"] = rec.status
    if rec.status != want["A"]:
        t.broken.append(f"A ended {rec.status}, not {want['A']}")
    if t.paid() != want["paid"]:
        t.broken.append(f"paid {t.paid()}, not {want['paid']}")
    if rec.lease_owner is not None and rec.status in ENDED:
        t.broken.append(f"A ended with its lease held by {rec.lease_owner}")
    if "edits" in want:
        n = len(_kinds(rt, rec.run_id, "edited"))
        if n != want["edits"]:
            t.broken.append(f"edited {n} times")
        if rt.result(rec.run_id).state.values()["inv"]["memo"] != "checked":
            t.broken.append("the edit lost")
    if "rollbacks" in want:
        n = len(_kinds(rt, rec.run_id, "rolled_back"))
        if n != want["rollbacks"]:
            t.broken.append(f"rolled back {n} times")
    if want["A"] == "cancelled" and len(_kinds(rt, rec.run_id, "cancelled")) > 1:
        t.broken.append(f"cancelled {len(_kinds(rt, rec.run_id, 'cancelled'))} times")


Scenario = Callable[[Trial, tuple[str, ...]], dict[str, Any]]
SCENARIOS: dict[str, tuple[Scenario, str]] = {
    "expiry": (expiry, "decided"),
    "person_first": (person_first, "decided"),
    "worker_first": (worker_first, "decided"),
    "decision_lands_mid_poll": (decision_lands_mid_poll, "decided"),
    "reuse_refund_races": (reuse_refund_races, "money"),
    "reuse_killed_then_refund": (reuse_killed_then_refund, "money"),
    "reuse_refund_then_go_on": (reuse_refund_then_go_on, "money"),
    "reuse_while_refund_cut": (reuse_while_refund_cut, "money"),
    "edit_killed": (edit_killed, "lease"),
    "rollback_killed": (rollback_killed, "lease"),
    "cancel_killed": (cancel_killed, "lease"),
}
REFUND_KILLS = ("", "after_effect_intent:1", "before_effect_result:1", "lease:1")


def all_trials() -> list[tuple[str, tuple[str, ...]]]:
    """Every scenario at every kill point (and two kills in a row where it has them)."""
    out: list[tuple[str, tuple[str, ...]]] = []
    out += [("expiry", (k,)) for k in EXPIRY_KILLS]
    # (a request decided, or recorded expired, is read as expired by no later worker)
    after = (*EXPIRY_KILLS[2:], "before_effect_result:1")
    out += [("person_first", (k,)) for k in after]
    out += [("worker_first", (k,)) for k in EXPIRY_KILLS[2:]]
    out += [("expiry", ("expired:1", "commit_tx:1")), ("expiry", ("claimed:1", "claimed:1"))]
    out += [("expiry", ())]
    out += [("decision_lands_mid_poll", ()), ("decision_lands_mid_poll", ("stop",))]
    out += [("decision_lands_mid_poll", ("stop", k)) for k in EXPIRY_KILLS[2:]]
    for p in REUSE_POINTS:
        for r in REFUND_KILLS:
            kills = (p, r) if r else (p,)
            out += [("reuse_refund_races", kills), ("reuse_killed_then_refund", kills)]
    out += [("reuse_refund_then_go_on", (p,)) for p in REUSE_POINTS]
    out += [("reuse_while_refund_cut", (p, r)) for p in REUSE_POINTS for r in REFUND_KILLS if r]
    for sc in ("edit_killed", "rollback_killed", "cancel_killed"):
        out += [(sc, (k,)) for k in LEASE_KILLS] + [(sc, LEASE_KILLS)]
    return out


def run_trial(work: Path, db: str, scenario: str, kills: tuple[str, ...]) -> Trial:
    t = Trial(work, db)
    play, kind = SCENARIOS[scenario]
    want = play(t, kills)
    with lw.Runtime(db) as rt:
        if kind == "decided":
            for key, w in want.items():
                check_decided(t, rt, key, w)
        elif kind == "money":
            _check_money(t, rt)
        else:
            _check_lease_ops(t, rt, want)
    return t
