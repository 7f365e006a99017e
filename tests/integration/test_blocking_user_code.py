"""User code that blocks or never returns cannot hang a governed run, and what it says after
the run gave up on it is never applied.

Every call blocks on a ``threading.Event`` the test holds, the timeouts are tiny, and what is
asserted is the outcome (stop reason, the error's type and where, the store's rows), never a
duration. ``gate.wait(_SAFETY)`` is a safety net only: on code that called the hook inline
the wait ends by itself, the run goes on, and the outcome assertions fail.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import loopwright as lw
from loopwright import _calls, _gates

TASK: dict[str, Any] = {"artifacts": {"inv": {"qty": 0}}}
_SAFETY = 10.0  # how long a blocked call waits at most (a test that fails must not hang)
_SRC = str(Path(lw.__file__).resolve().parents[1])


def _good(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    ok = state.artifacts["inv"].values()["qty"] == 1
    return lw.Verdict(passed=ok, score=1.0 if ok else 0.0)


async def _fix(ctx: lw.Context) -> lw.Proposal:
    # async: it ends in its first step, before the tiny timeout can fire however loaded the
    # machine (a sync one, in a thread, could be timed out itself)
    return lw.Proposal.edit("inv", {"qty": 1})


def _loop(
    actor: Any = _fix,
    *,
    risk: tuple[lw.RiskRule, ...] = (),
    actor_timeout_s: float | None = 0.05,
    effects: tuple[lw.Effect, ...] = (),
    **budget: Any,
) -> lw.Loop:
    return lw.Loop(
        name="blocking",
        actor=actor,
        verifiers=[lw.Check(fn=_good, name="good")],
        contract=lw.Contract(budget=lw.Budget(**(budget or {"max_cycles": 3})), risk=risk),
        actor_timeout_s=actor_timeout_s,
        retry=lw.RetryPolicy(attempts=1),
        effects=effects,
        approvals=lw.ApprovalPolicy((lw.PolicyRule(kind="spend", action="allow"),)),
    )


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    ev = threading.Event()
    yield ev
    ev.set()  # no blocked call outlives its test


class _Deliveries:
    """Each result a call thread handed back to the event loop: (whether the engine had given
    up on it already, the result); ``until(n)`` waits, on the loop, for the n-th."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, Any]] = []
        self._arrived: asyncio.Event | None = None

    def add(self, given_up: bool, result: Any) -> None:  # on the event loop's thread
        self.seen.append((given_up, result))
        if self._arrived is not None:
            self._arrived.set()

    async def until(self, n: int) -> None:
        self._arrived = asyncio.Event()
        while len(self.seen) < n:
            await self._arrived.wait()
            self._arrived.clear()


@pytest.fixture
def delivered(monkeypatch: pytest.MonkeyPatch) -> _Deliveries:
    seen = _Deliveries()
    real = _calls._set

    def spy(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
        seen.add(fut.done(), result)
        real(fut, result, exc)

    monkeypatch.setattr(_calls, "_set", spy)
    return seen


def _rows(rt: lw.Runtime, run_id: str) -> tuple[Any, ...]:
    """What the store holds of a run: its row, its checkpoints, events and approvals."""
    run = rt.store.get_run(run_id)
    cps = [(c.seq, c.record) for c in rt.store.checkpoints(run_id)]
    events = [(e.kind, e.data) for e in rt.store.events(run_id)]
    approvals = [a.to_dict() for a in rt.store.approvals(run_id=run_id)]
    return run.status, run.stop_reason, cps, events, approvals


def _run_then_release(
    rt: lw.Runtime,
    loop: lw.Loop,
    gate: threading.Event,
    done: threading.Event,
    delivered: _Deliveries,
) -> tuple[lw.RunResult, tuple[Any, ...], tuple[Any, ...]]:
    """Run ``loop`` on a live event loop until it ends (a call blocked on ``gate`` was given
    up on), then release the call and let its late answer reach the same event loop: the
    result, and what the store held before and after the late answer."""

    async def main() -> tuple[lw.RunResult, tuple[Any, ...], tuple[Any, ...]]:
        r = await rt.run(loop, TASK, task_key="k")
        before, n = _rows(rt, r.run_id), len(delivered.seen)
        gate.set()
        await asyncio.to_thread(done.wait, _SAFETY)
        await delivered.until(n + 1)
        return r, before, _rows(rt, r.run_id)

    return asyncio.run(main())


# --- risk rules' own checks ------------------------------------------------------------------
def test_a_risk_check_that_blocks_escalates_naming_the_rule_and_its_late_answer_is_ignored(
    tmp_path: Path, gate: threading.Event, delivered: _Deliveries
) -> None:
    done = threading.Event()

    def blocks(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        gate.wait(_SAFETY)
        # released after the run gave up: change everything it was given, ask to park
        state.set_part("inv", "qty", 99, 99)
        verdicts.clear()
        done.set()
        return "park it" if gate.is_set() else None

    rule = lw.RiskRule(name="vendor_check", check=blocks)

    with lw.Runtime(tmp_path / "s.db") as rt:
        r, before, after = _run_then_release(rt, _loop(risk=(rule,)), gate, done, delivered)
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None
    assert r.packet["cause"].startswith("the check of risk rule 'vendor_check' timed out")
    assert r.packet["error"]["where"] == "risk rule vendor_check"
    assert r.packet["error"]["type"] == "Timeout"
    assert r.state.values()["inv"]["qty"] == 0
    # the late answer reached the loop after the engine gave up, and changed nothing stored
    assert delivered.seen[-1] == (True, "park it")
    assert after == before


def test_a_risk_check_cut_off_by_the_time_budget_is_a_budget_time_stop(
    tmp_path: Path, gate: threading.Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    def blocks(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        gate.wait(_SAFETY)
        return None

    # The budget's end is placed at the risk check, not reached by waiting: the actor and the
    # verifier have an hour, and the gates' clock (read only for a risk check's time left)
    # stands an hour less a second ahead, so the check is given at most the budget's last
    # second. A 0.2 s budget could run out on a loaded machine during the verifier's call
    # (in a thread), and the stop then named the verifier, not the rule.
    monkeypatch.setattr(_gates, "time", SimpleNamespace(time=lambda: time.time() + 3600 - 1))
    rule = lw.RiskRule(name="slow", check=blocks)
    loop = _loop(risk=(rule,), actor_timeout_s=None, max_seconds=3600)
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("stopped", "budget_time")
    assert r.packet is not None
    assert "risk rule 'slow'" in r.packet["cause"]


def test_an_async_risk_check_is_awaited(tmp_path: Path) -> None:
    """Before, its coroutine was taken for a reason: every proposal parked, asked about
    ``<coroutine object ...>``."""

    async def quiet(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return None

    async def loud(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        return "a person should look"

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(risk=(lw.RiskRule(name="q", check=quiet),)), TASK, task_key="a")
        assert (r.status, r.stop_reason) == ("accepted", "success")
        r = rt.run_sync(_loop(risk=(lw.RiskRule(name="l", check=loud),)), TASK, task_key="b")
        assert r.status == "awaiting_approval"
        [req] = rt.store.approvals(run_id=r.run_id)
        assert (req.rule, req.why) == ("l", "a person should look")


def test_an_async_risk_check_that_never_returns_escalates(tmp_path: Path) -> None:
    async def hangs(state: lw.TaskState, proposal: lw.Proposal, verdicts: Any) -> str | None:
        await asyncio.Event().wait()
        return None

    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(_loop(risk=(lw.RiskRule(name="h", check=hangs),)), TASK, task_key="k")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert r.packet is not None and r.packet["error"]["type"] == "Timeout"


# --- actors ----------------------------------------------------------------------------------
def test_a_timed_out_sync_actors_late_proposal_is_never_applied(
    tmp_path: Path, gate: threading.Event, delivered: _Deliveries
) -> None:
    done = threading.Event()

    def actor(ctx: lw.Context) -> lw.Proposal:
        gate.wait(_SAFETY)
        done.set()
        return lw.Proposal.edit("inv", {"qty": 1})  # what the verifier would accept

    with lw.Runtime(tmp_path / "s.db") as rt:
        r, before, after = _run_then_release(rt, _loop(actor), gate, done, delivered)
        assert (r.status, r.stop_reason) == ("escalated", "escalated")
        assert r.packet is not None and r.packet["error"]["type"] == "Timeout"
        late = delivered.seen[-1]
        assert late[0] is True and isinstance(late[1], lw.Proposal)
        assert after == before
        assert rt.result(r.run_id).state.values()["inv"]["qty"] == 0


# --- the process ends ------------------------------------------------------------------------
_SCRIPT = """
import sys, threading
import loopwright as lw

which, store = sys.argv[1], sys.argv[2]
forever = threading.Event()  # never set: the blocked calls never return

def good(state, proposal):
    return lw.Verdict(passed=True)

def stuck(ctx):
    forever.wait()

async def fix(ctx):  # ends before its tiny timeout can fire
    return lw.Proposal.edit("inv", {"qty": 1})

def check(state, proposal, verdicts):
    forever.wait()

risk = (lw.RiskRule(name="stuck", check=check),) if which == "risk" else ()
loop = lw.Loop(
    name="exit",
    actor=stuck if which == "actor" else fix,
    verifiers=[good],
    contract=lw.Contract(budget=lw.Budget(max_cycles=2), risk=risk),
    actor_timeout_s=0.05,
    retry=lw.RetryPolicy(attempts=1),
)
with lw.Runtime(store) as rt:
    r = rt.run_sync(loop, {"artifacts": {"inv": {"qty": 0}}})
print("ended", r.stop_reason, r.packet["error"]["where"], flush=True)
"""


@pytest.mark.parametrize(("which", "where"), [("actor", "actor"), ("risk", "risk rule stuck")])
def test_the_process_exits_with_a_call_that_never_returns(
    tmp_path: Path, which: str, where: str
) -> None:
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(_SCRIPT))
    try:
        p = subprocess.run(
            [sys.executable, str(script), which, str(tmp_path / "s.db")],
            capture_output=True,
            check=False,
            text=True,
            timeout=60,  # a safety net: what is asserted is the exit status and the output
            env={"PYTHONPATH": _SRC, "PATH": "/usr/bin:/bin"},
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the process did not end: {e.stdout!r} {e.stderr!r}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"ended escalated {where}"
    assert "Traceback" not in p.stderr


# --- effects' reconcile hooks ----------------------------------------------------------------
def test_a_reconcile_hook_that_blocks_is_bounded_by_the_lease(
    tmp_path: Path, gate: threading.Event
) -> None:
    """An effect without ``timeout_s`` is bounded by its lease; before, its reconcile hook was
    not (called inline, no timeout): one that blocked hung the run for good."""

    def reconcile(key: str) -> Any:
        gate.wait(_SAFETY)
        return {"ref": "found late"}

    def pay(invoice: str, key: str) -> Any:
        raise lw.TransientError("connection reset after commit")

    eff = lw.effect("spend", name="pay", reconcile=reconcile)(pay)
    call = eff.call(invoice="A-1")

    async def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=lw.Proposal.edit("inv", {"qty": 1}).edits, effects=(call,))

    with lw.Runtime(tmp_path / "s.db", lease_ttl_s=0.2) as rt:
        r = rt.run_sync(_loop(actor, effects=(eff,)), TASK, task_key="k")
        [entry] = rt.store.journal(r.run_id, kind="effect")
    assert (r.status, r.stop_reason) == ("escalated", "escalated")
    assert entry.status == "in_doubt"
    assert "the reconcile hook timed out (no result after" in entry.data["cause"]
