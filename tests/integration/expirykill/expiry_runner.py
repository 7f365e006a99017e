"""One process of an expiry/reuse kill trial (kill49): ``expiry_runner.py DB WORK ACTION [KEY] [ARG]``.

Actions: ``run KEY`` (start the run of task KEY, or resume it), ``worker`` (one worker pass:
``Worker.run(once=True)``), ``overdue KEY`` (KEY's pending requests are past their expiry on
the store's clock: moved there, never waited for), ``approve KEY`` / ``deny KEY`` (a person,
``fin``, decides KEY's pending payment requests; a refusal is printed, not raised),
``decide_raw KEY`` (a decision checked before the request expired, landing now: the store's
``decide_approval`` as a person's, without ``approve``'s expiry check), ``refund KEY`` (``ops``
rolls KEY back to cycle 0 unless that is done, ``fin`` approves its refund requests, the refunds run),
``edit KEY`` (``eve`` edits ``inv/memo``), ``rollback KEY``, ``cancel KEY``, ``finish KEY``
(resume to its end; a run still parked is cancelled by ``ops`` and its refunds run).

``XK_KILL=POINT:N`` SIGKILLs the process the N-th time it reaches ``POINT``; ``XK_PAUSE=POINT:N``
stops it there (SIGSTOP) until the trial continues or kills it. Points: the engine's phase
boundaries (``crashpoints/killpoint.PHASES``) and these, placed by wrapping the store:
``read_expired`` (a worker read requests past their expiry, none recorded yet), ``expired``
(a worker recorded one expired, before it claims), ``claimed`` (a worker's claim returned a
run, before its resume), ``commit_tx`` (a commit's rows written inside its transaction, not
committed: for an escalation, its packet), ``lease`` (a lease taken: inside edit, rollback,
cancel), ``decided`` (a decision recorded, before anything after it), ``journal_STATUS`` (a journal
entry written: ``journal_intent``, ``journal_done``...) and ``journal_ERROR`` (a journal write
refused, nothing written: ``journal_EffectKeyHeld`` where a reuse-only call finds the key
another run's). Every point reached is
appended to ``$WORK/points.log`` first. On a normal return it prints the result as JSON.

The loop pays invoice I6 (``pay:I6``), each payment needing a person's approval; each payment
and refund the provider made is a line of ``$WORK/paid.log`` (``I6``, ``-I6``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "crashpoints"), str(HERE.parents[1])]

from killpoint import kill_point  # noqa: E402

import loopwright as lw  # noqa: E402
from loopwright import _worker  # noqa: E402

TASK: dict[str, Any] = {"artifacts": {"inv": {"status": "open", "memo": ""}}}
PAID = "paid.log"


class Paid:
    """The provider's side: each payment and refund it made, one line each, in a file."""

    def __init__(self, work: Path) -> None:
        self.path = work / PAID

    def append(self, line: str) -> None:
        with open(self.path, "a") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []


def make_loop(paid: Paid) -> lw.Loop:
    """``test_approval_card_done_already._loop`` with its provider in a file."""

    def refund(key: str, result: Any, args: dict[str, Any]) -> None:
        paid.append("-" + args["invoice"])

    @lw.effect("spend", name="pay", key=lambda a: f"pay:{a['invoice']}", compensate=refund)
    def pay(invoice: str, amount: float) -> dict[str, Any]:
        paid.append(invoice)
        return {"paid": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(
            edits=lw.Proposal.edit("inv", {"status": "paid"}).edits,
            effects=(pay.call(invoice="I6", amount=10.0),),
        )

    return lw.Loop(
        name="payer",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="ok")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
        effects=[pay],
        approvals=lw.ApprovalPolicy(rules=[lw.PolicyRule(kind="spend", action="require")]),
    )


def points(work: Path) -> Callable[[str], None]:
    """``hit(point)``: logs the point, then kills (``XK_KILL``) or stops (``XK_PAUSE``) here."""
    kill, pause = kill_point("XK_KILL"), kill_point("XK_PAUSE")
    seen: Counter[str] = Counter()
    pid = os.getpid()

    def hit(point: str) -> None:
        seen[point] += 1
        with open(work / "points.log", "a") as fh:
            fh.write(f"{pid} {point}\n")
        if kill == (point, seen[point]):
            os.kill(pid, signal.SIGKILL)
        if pause == (point, seen[point]):
            os.kill(pid, signal.SIGSTOP)

    return hit


def wire(rt: lw.Runtime, hit: Callable[[str], None]) -> Callable[[], None]:
    """The harness's points, by wrapping the store (and the worker's ``expire``); returns
    what puts the worker's ``expire`` back (in process: ``test_expiry_kills``)."""
    store: Any = rt.store
    rt._on_phase = hit
    real_read, real_claim = store.expired_requests, store.claim_runs
    real_commit, real_lease, real_decide = (
        store._commit_in,
        store.acquire_lease,
        store.decide_approval,
    )
    real_expire = _worker.expire

    def expired_requests(*, limit: int) -> Any:
        due = real_read(limit=limit)
        if due:
            hit("read_expired")
        return due

    def expire(s: Any, req: Any) -> Any:
        out = real_expire(s, req)
        if out is not None:
            hit("expired")
        return out

    def claim_runs(*a: Any, **kw: Any) -> Any:
        taken = real_claim(*a, **kw)
        if taken:
            hit("claimed")
        return taken

    def commit_in(*a: Any, **kw: Any) -> Any:
        out = real_commit(*a, **kw)
        hit("commit_tx")  # the transaction is open: nothing of it committed yet
        return out

    real_batch = store._commit_batch

    def commit_batch(*a: Any, **kw: Any) -> Any:
        # (a PostgreSQL run's commit goes through the group committer's ``commit_many`` since
        # evloop53, whose one-pass path writes without ``_commit_in``)
        out = real_batch(*a, **kw)
        hit("commit_tx")  # the transaction is open: nothing of it committed yet
        return out

    def acquire_lease(*a: Any, **kw: Any) -> Any:
        token = real_lease(*a, **kw)
        hit("lease")
        return token

    def decide_approval(*a: Any, **kw: Any) -> Any:
        out = real_decide(*a, **kw)
        hit("decided")
        return out

    real_put = store.journal_put

    def journal_put(*a: Any, **kw: Any) -> Any:
        try:
            out = real_put(*a, **kw)
        except Exception as exc:
            hit(f"journal_{type(exc).__name__}")  # refused: nothing written
            raise
        hit(f"journal_{kw.get('status')}")
        return out

    store.journal_put = journal_put
    store.expired_requests, store.claim_runs = expired_requests, claim_runs
    store._commit_in, store.acquire_lease = commit_in, acquire_lease
    store._commit_batch = commit_batch
    store.decide_approval = decide_approval
    _worker.expire = expire

    def unwire() -> None:
        _worker.expire = real_expire

    return unwire


def overdue(store: Any, run_id: str) -> None:
    """The run's pending requests are past their expiry on the store's clock."""
    m = store._MARK
    with store._tx() as conn:
        conn.execute(
            f"UPDATE approvals SET expires_at = {m} WHERE run_id = {m} AND status = 'pending'",
            (store.clock() - 1, run_id),
        )


def _pending(rt: lw.Runtime, run_id: str, kind: str) -> list[lw.Approval]:
    return [a for a in rt.store.approvals(run_id=run_id, status="pending") if a.kind == kind]


def act(rt: lw.Runtime, loop: lw.Loop, action: str, key: str, arg: str) -> dict[str, Any]:
    if action == "worker":
        stats = asyncio.run(
            _worker.Worker(rt, loops={loop.name: loop}, poll_s=0.001).run(once=True)
        )
        return {"claimed": stats.claimed}
    try:
        rec = rt.store.get_run(key)
    except lw.RunNotFoundError:
        rec = None
    if rec is None:
        return {"status": rt.run_sync(loop, TASK, task_key=key).status}
    rid = rec.run_id
    if action == "overdue":
        overdue(rt.store, rid)
    elif action in ("approve", "deny"):
        # (none pending: as a person asking anyway, told why not)
        for aid in [r.approval_id for r in _pending(rt, rid, "effect")] or [None]:
            try:
                getattr(rt, action)(rid, by="fin", approval_id=aid)
            except lw.ApprovalError as exc:
                return {"refused": str(exc)}
    elif action == "decide_raw":
        for req in _pending(rt, rid, "effect"):
            rt.store.decide_approval(
                req.approval_id, status="approved", by="fin", note=None, now=rt.store.clock()
            )
    elif action == "refund":
        if rec.status == "accepted":  # (done again after a kill: rolled back once)
            rt.rollback(rid, to_cycle=0, by="ops", loop=loop)
        for req in _pending(rt, rid, "compensation"):
            rt.approve(rid, by="fin", approval_id=req.approval_id)
        return {"status": rt.resume_sync(rid, loop).status}
    elif action == "edit":
        rt.edit(rid, "inv/memo", arg or "checked", by="eve")
    elif action == "rollback":
        rt.rollback(rid, to_cycle=int(arg or 0), by="ops", loop=loop)
    elif action == "cancel":
        rt.cancel(rid, by="ops", loop=loop)
    elif action in ("run", "finish"):
        out = rt.resume_sync(rid, loop)
        if action == "finish" and out.status == "awaiting_approval":
            rt.cancel(rid, by="ops", loop=loop)
            out = rt.resume_sync(rid, loop)
        return {"status": out.status}
    else:
        raise SystemExit(f"no action {action!r}")
    return {"status": rt.store.get_run(rid).status}


def main(argv: list[str]) -> int:
    db, work, action, *rest = argv
    key, arg = [*rest, "", ""][:2]
    loop = make_loop(Paid(Path(work)))
    with lw.Runtime(db) as rt:
        wire(rt, points(Path(work)))
        out = act(rt, loop, action, key, arg)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
