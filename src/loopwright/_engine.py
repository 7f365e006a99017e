"""The engine: one cycle is build context → actor → verifiers → decide → checkpoint.

The engine talks only to the ``Store`` protocol and to plain callables; it imports no backend,
adapter or interface. Each cycle ends in exactly one atomic commit (checkpoint, events, run
row), fenced by the run's lease token, so a crash at any point resumes from the last whole
cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _decide as rules
from ._calls import call_user
from ._contract import TERMINAL_STATUSES, Contract, status_for
from ._effects import Effect, EffectCall
from ._errors import (
    ApprovalError,
    ConfigError,
    RunNotFoundError,
    StaleLeaseError,
)
from ._exec import (
    EffectOutcome,
    GaveUp,
    OutOfTime,
    call_with_retry,
    error_info,
    perform_effect,
)
from ._exec import (
    Execution as _Exec,
)
from ._group import GroupCommitter, GroupRecall
from ._loop import Loop
from ._memory import FeedbackMemory, rank, recall_scopes
from ._packet import build_packet
from ._people import Decisions
from ._proposal import Context, Proposal, Verdict
from ._question import Question
from ._reversal import run_compensations
from ._state import Finding, PlanStep, TaskState, split_ref
from ._usage import Usage
from .store import CommitRequest, NewApproval, NewEvent, RunRecord, Store, open_store

__all__ = ["HELD_OUT_KEY", "RunResult", "Runtime"]

HELD_OUT_KEY = "held_out"

ProgressFn = Callable[[RunRecord], None]


@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run stands after the engine returned: ended, or parked for approval."""

    run_id: str
    task_key: str
    status: str
    stop_reason: str | None
    cycles: int
    best_score: float | None
    spent: Usage
    packet: dict[str, Any] | None
    state: TaskState
    held_out_passed: bool | None = None

    @property
    def accepted(self) -> bool:
        return self.status == "accepted"

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "task_key": self.task_key,
            "status": self.status,
            "stop_reason": self.stop_reason,
            "cycles": self.cycles,
            "best_score": self.best_score,
            "spent": self.spent.to_dict(),
            "held_out_passed": self.held_out_passed,
            "packet": self.packet,
        }


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _fault(where: str, kind: str, message: str) -> dict[str, Any]:
    return {"where": where, "type": kind, "message": message}


class Runtime(Decisions):
    """Runs loops durably against a store.

    ``Runtime()`` uses ``./.loopwright/loopwright.db`` (or ``LOOPWRIGHT_STORE``); pass a path, a
    ``sqlite:///…`` URL or a ``Store``. Async methods have ``*_sync`` twins.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        owner: str | None = None,
        lease_ttl_s: float = 60.0,
        on_progress: ProgressFn | None = None,
        group_commit: bool = True,
        memory: bool = True,
    ) -> None:
        if isinstance(store, os.PathLike):
            store = os.fspath(store)
        self.store: Store = store if isinstance(store, Store) else open_store(store)
        self._owns_store = not isinstance(store, Store)
        self.owner = owner or _owner()
        if lease_ttl_s <= 0:
            raise ConfigError("must be positive", field="lease_ttl_s")
        self.lease_ttl_s = lease_ttl_s
        self.on_progress = on_progress
        # Called at every phase boundary of a cycle; the crash-point tests kill the process
        # there. Not part of the public API.
        self._on_phase: Callable[[str], None] | None = None
        self._draining = False
        self._active = 0  # runs this runtime is driving right now
        self.group_commit = group_commit
        self.memory_enabled = memory
        self._memory: FeedbackMemory | None = None
        self._group: GroupCommitter | None = None
        self._recall_group: GroupRecall | None = None

    def drain(self) -> None:
        """Finish the cycle in flight of every run, then stop before the next (graceful
        shutdown: runs stay resumable, leases are released)."""
        self._draining = True

    # --- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- starting and resuming -------------------------------------------------------------
    def create(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create the run for ``task_key`` (or return the existing one) without executing it."""
        task = dict(task or {})
        key = task_key or str(task.get("task_key") or f"{loop.name}:{uuid.uuid4().hex}")
        proj = project if project is not None else str(task.get("project") or loop.project)
        init = loop.init or (lambda t: TaskState.from_task(t, task_key=key, project=proj))
        try:
            state = init(task)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(f"could not build the initial state: {exc}", field="task") from exc
        if not isinstance(state, TaskState):
            raise ConfigError(
                f"the loop's init returned {type(state).__name__}, expected TaskState", field="init"
            )
        state.task_key = state.task_key or key
        state.project = state.project or proj
        state.refresh_plan()
        return self.store.create_run(
            run_id=uuid.uuid4().hex[:16],
            task_key=key,
            loop_name=loop.name,
            project=proj,
            spec_ref=loop.spec_ref,
            loop_version=loop.version,
            contract=loop.contract.to_dict(),
            task=task,
            initial_state=state.to_dict(),
        )

    async def run(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
    ) -> RunResult:
        """Start (or, for an existing ``task_key``, continue) a run and drive it until it ends
        or parks for approval."""
        record, _ = self.create(loop, task, task_key=task_key, project=project)
        return await self.resume(record.run_id, loop)

    def run_sync(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
    ) -> RunResult:
        return _sync(self.run(loop, task, task_key=task_key, project=project))

    async def run_many(
        self,
        loop: Loop,
        tasks: Iterable[Mapping[str, Any]],
        *,
        concurrency: int = 8,
        key_of: Callable[[Mapping[str, Any], int], str] | None = None,
    ) -> list[RunResult]:
        """Run many tasks concurrently in this process (at most ``concurrency`` at once)."""
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(i: int, t: Mapping[str, Any]) -> RunResult:
            async with sem:
                key = key_of(t, i) if key_of else None
                return await self.run(loop, t, task_key=key)

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))

    async def resume(self, run_id: str, loop: Loop, *, token: int | None = None) -> RunResult:
        """Continue a run from its latest checkpoint (a no-op for an ended run; a parked run
        continues only once its approval request is decided). ``token``: the fencing token of
        a lease this runtime's owner already holds (``Store.claim_runs``)."""
        rec = self.store.get_run(run_id)
        if rec.status in TERMINAL_STATUSES and not _compensating(self.store, rec.run_id):
            if token is not None:
                self.store.release_lease(rec.run_id, token)
            return self.result(rec.run_id)
        if token is None:
            token = self.store.acquire_lease(rec.run_id, self.owner, self.lease_ttl_s)
        ck = self.store.latest_checkpoint(rec.run_id)
        ex = _Exec(
            run_id=rec.run_id,
            loop=loop,
            contract=self._contract(rec, loop),
            token=token,
            seq=ck.seq,
            state=TaskState.from_dict(ck.state),
            record=ck.record,
            phase=self._on_phase,
            grouped=True,
        )
        # Failed attempts of the cycle about to run (or rerun) count against its retry bound.
        nxt = ex.state.cycle + 1
        ex.retries = {
            e.key: e
            for e in self.store.journal(rec.run_id, kind="retry")
            if e.cycle == nxt and e.status != "retired"
        }
        beat = asyncio.create_task(self._heartbeat(ex))
        self._active += 1
        try:
            started: dict[str, Any] = {"owner": self.owner}
            selfish = [c.name for c in loop.verifiers if loop.self_reviewing(c)]
            if selfish:
                started["self_review_allowed"] = selfish  # recorded: the user said so
            ex.events.append(NewEvent(ex.state.cycle, "resumed" if ck.seq else "started", started))
            await self._drive(ex, rec)
            if await self._settle(ex) and ex.state.pending and "approval_id" in ex.state.pending:
                # Cancelled while the cycle that parked was in flight: do not leave a person
                # a decision on a cancelled run.
                self._cancel_now(ex, "cancellation requested while it was being verified")
                await self._settle(ex)
        except StaleLeaseError:
            ex.lost = True
            raise
        except ConfigError:
            raise  # a user mistake (e.g. resumed with the wrong loop): the run stays resumable
        except Exception as exc:
            if ex.lost:
                raise
            # A bug in loopwright itself: end the run as failed, keeping its last checkpoint.
            with contextlib.suppress(Exception):
                with contextlib.suppress(Exception):
                    await self._settle(ex)
                ex.pending_commit = None
                self._finish(ex, "error", error=error_info("engine", exc))
                await self._settle(ex)
            raise
        finally:
            self._active -= 1
            if self._active == 0:
                self._recall_group = None  # nothing waits on it any more: hold no event loop
            if self._active == 0 and self._group is not None:
                group, self._group = self._group, None
                with contextlib.suppress(Exception):
                    await group.close()
            beat.cancel()
            with contextlib.suppress(BaseException):
                await beat
            if not ex.lost:
                with contextlib.suppress(Exception):
                    self.store.release_lease(ex.run_id, ex.token)
        return self.result(rec.run_id)

    def resume_sync(self, run_id: str, loop: Loop) -> RunResult:
        return _sync(self.resume(run_id, loop))

    # --- reading ------------------------------------------------------------------------
    def result(self, run_id: str) -> RunResult:
        rec = self.store.get_run(run_id)
        ck = self.store.latest_checkpoint(rec.run_id)
        return RunResult(
            run_id=rec.run_id,
            task_key=rec.task_key,
            status=rec.status,
            stop_reason=rec.stop_reason,
            cycles=rec.cycle,
            best_score=rec.best_score,
            spent=Usage(rec.cost_usd, rec.tokens, rec.seconds),
            packet=rec.packet,
            state=TaskState.from_dict(ck.state),
            held_out_passed=rec.held_out_passed,
        )

    # --- internals ----------------------------------------------------------------------
    def _contract(self, rec: RunRecord, loop: Loop) -> Contract:
        # The snapshot taken at creation governs the run; callables of risk checks are rebuilt
        # from the live loop by rule name (a snapshot holds only their names).
        live = {r.name: r.check for r in loop.contract.risk if callable(r.check)}
        risk = [
            {**r, "check": live[r["name"]]}
            if isinstance(r.get("check"), str) and r["name"] in live
            else r
            for r in rec.contract.get("risk") or ()
        ]
        return Contract.from_dict({**rec.contract, "risk": risk})

    async def _heartbeat(self, ex: _Exec) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                self.store.renew_lease(ex.run_id, ex.token, self.lease_ttl_s)
            except StaleLeaseError:
                ex.lost = True
                return

    async def _drive(self, ex: _Exec, rec: RunRecord) -> None:
        pend = ex.state.pending or {}
        if pend.get("stage") == "compensations":
            notes = await run_compensations(self.store, ex, pend)
            if notes is None:
                self.store.append_events(
                    ex.run_id, [*ex.events, NewEvent(ex.state.cycle, "still_waiting", {})]
                )
                ex.events = []
                return
            ex.state.notes.extend(notes)
            ex.state.pending = None
            bad = [n for n in notes if n["status"] in ("failed", "in_doubt")]
            if rec.status in TERMINAL_STATUSES:
                # A cancelled run stays cancelled; its packet says what was undone and what
                # could not be.
                packet = dict(rec.packet or {})
                packet["compensations"] = notes
                if bad:
                    causes = "; ".join(str(n.get("cause")) for n in bad)
                    packet["recommended_action"] = (
                        f"Undo by hand what the compensations could not ({causes}). "
                        + str(packet.get("recommended_action", ""))
                    ).strip()
                self._commit(ex, None, {"packet": packet})
                return
            if bad:
                self._finish(
                    ex,
                    "escalated",
                    cause="compensation failed: " + "; ".join(str(n["cause"]) for n in bad),
                    evidence={"compensations": notes},
                )
                return
            if rec.cancel_requested:
                self._cancel_now(ex, "cancelled before it resumed")
                return
            self._commit_status(ex, "running")
        elif rec.cancel_requested:
            self._cancel_now(ex, "cancelled before it resumed")
            return
        elif ex.state.pending is not None:
            done = await self._settle_pending(ex)
            if done:
                return
        else:
            self._commit_status(ex, "running")
        reflect = False
        while True:
            # A cycle boundary: let other runs, heartbeats and signal handlers in; the last
            # cycle must be durable before the next starts (or its reflection is written).
            await asyncio.sleep(0)
            if await self._settle(ex):
                self._cancel_now(ex, "cancellation requested")
                return
            if reflect:
                reflect = False
                await self._reflect(ex)
            if self._draining:
                # Shutting down: the run stays resumable from this checkpoint; the lease is
                # released on the way out, so another worker can take it at once.
                self.store.append_events(
                    ex.run_id, [*ex.events, NewEvent(ex.state.cycle, "drained", {})]
                )
                ex.events = []
                return
            reason = rules.stop_before_cycle(ex.contract, ex.state)
            if reason is not None:
                self._finish(ex, reason)
                return
            if await self._cycle(ex):
                return
            reflect = True

    def _commit_status(self, ex: _Exec, status: str) -> None:
        """A commit that changes only the status (same cycle, same state)."""
        self._commit(ex, None, {"status": status})

    def _commit(
        self,
        ex: _Exec,
        record: dict[str, Any] | None,
        run: dict[str, Any],
        approval: NewApproval | None = None,
        approvals: Sequence[NewApproval] = (),
    ) -> bool:
        if ex.lost:
            raise StaleLeaseError(f"run {ex.run_id}: lease lost; another executor owns it")
        ex.at("before_checkpoint")
        s = ex.state
        cols = {
            "cycle": s.cycle,
            "best_score": s.best_score,
            "cost_usd": s.spent.cost_usd,
            "tokens": s.spent.tokens,
            "seconds": s.spent.seconds,
            "lease_expires_at": time.time() + self.lease_ttl_s,
            **run,
        }
        reqs = [*([approval] if approval is not None else []), *approvals]
        if self.group_commit and ex.grouped and (self._active > 1 or ex.pending_commit is not None):
            # Several runs share this loop: queue it into the next group commit; the run
            # waits for durability at its next durability point (``_settle``).
            ex.pending_req = CommitRequest(
                ex.run_id,
                ex.token,
                ex.seq + 1,
                s.cycle,
                s.to_dict(),
                record,
                list(ex.events),
                cols,
                reqs,
            )
            ex.pending_commit = self._committer().submit(ex.pending_req)
            ex.seq += 1
            ex.events = []
            return False  # the cancel flag arrives with durability
        cancel = self.store.commit(
            ex.run_id,
            ex.token,
            seq=ex.seq + 1,
            cycle=s.cycle,
            state=s.to_dict(),
            record=record,
            events=ex.events,
            run=cols,
            approvals=reqs,
        )
        ex.seq += 1
        ex.events = []
        self._committed(ex)
        return cancel

    def _committed(self, ex: _Exec) -> None:
        ex.at("after_checkpoint")
        if self.on_progress is not None:
            with contextlib.suppress(Exception):
                self.on_progress(self.store.get_run(ex.run_id))

    def _recaller(self) -> GroupRecall:
        loop = asyncio.get_running_loop()
        if self._recall_group is None or self._recall_group.loop is not loop:
            self._recall_group = GroupRecall(self.store)
        return self._recall_group

    def _committer(self) -> GroupCommitter:
        loop = asyncio.get_running_loop()
        if self._group is None or self._group.loop is not loop:
            self._group = GroupCommitter(self.store)
        return self._group

    async def _settle(self, ex: _Exec) -> bool:
        """Wait until the run's queued commits are durable; returns the cancel flag."""
        fut = ex.pending_commit
        if fut is None:
            return False
        try:
            cancel = await fut
        except StaleLeaseError:
            ex.lost = True
            raise
        except Exception:
            # Not written: what it carried is still to be written (checkpoints stay contiguous).
            req = ex.pending_req
            if req is not None:
                ex.seq = req.seq - 1
                ex.events = [*req.events, *ex.events]
            raise
        finally:
            if ex.pending_commit is fut:
                ex.pending_commit = None
                ex.pending_req = None
        self._committed(ex)
        return cancel

    def _finish(
        self,
        ex: _Exec,
        reason: str,
        *,
        record: dict[str, Any] | None = None,
        cause: str | None = None,
        error: dict[str, Any] | None = None,
        held_out: dict[str, Any] | None = None,
        evidence: dict[str, Any] | None = None,
        unverified: dict[str, Any] | None = None,
        approvals: Sequence[NewApproval] = (),
    ) -> None:
        status = status_for(reason)
        packet = None
        if status != "accepted":
            packet = build_packet(
                reason,
                ex.state,
                ex.contract,
                run_id=ex.run_id,
                cause=cause,
                error=error,
                evidence=evidence,
                held_out=held_out,
                unverified=unverified,
            )
        ex.state.next_action = (
            "" if status == "accepted" else (packet or {}).get("recommended_action", "")
        )
        ex.events.append(
            NewEvent(
                ex.state.cycle, "stopped", {"reason": reason, "status": status, "cause": cause}
            )
        )
        run: dict[str, Any] = {
            "status": status,
            "stop_reason": reason,
            "packet": packet,
            "ended_at": time.time(),
        }
        if held_out:
            run["held_out_passed"] = int(all(v.get("passed") for v in held_out.values()))
        self._commit(ex, record, run, approvals=approvals)

    def _context(self, ex: _Exec, n: int, memory: tuple[dict[str, Any], ...]) -> Context:
        s = ex.state
        return Context(
            run_id=ex.run_id,
            cycle=n,
            goal=s.goal,
            # The task's reserved ``held_out`` key (hidden tests, expected answers) is for
            # held-out verifiers only; the actor never sees it (invariant 3).
            task={k: v for k, v in s.task.items() if k != HELD_OUT_KEY},
            artifacts=s.values(),
            accepted=s.accepted_values(),
            findings=tuple(s.findings),
            plan=tuple(s.plan),
            next_step=s.next_step(),
            remaining=rules.remaining(ex.contract, s),
            notes=tuple(s.notes),
            history=tuple(s.history),
            memory=memory,
        )

    async def _recall(self, ex: _Exec) -> tuple[dict[str, Any], ...]:
        """Feedback memory for this task and project (never another project's). Runs sharing
        this event loop read theirs together, one query per loop turn (``GroupRecall``)."""
        if not self.memory_enabled:
            return ()
        s = ex.state
        query = " ".join([s.goal, *(f.message for f in s.findings[:10])])
        try:
            scopes = recall_scopes(s.task_key, s.project)
            if self.group_commit and ex.grouped and self._active > 1:
                rows = await self._recaller().fetch(scopes)
            else:
                rows = self.store.memory_query(scopes=scopes, status="active")
            items = rank(rows, scopes=scopes, query=query)
        except Exception:  # memory is best effort: a failing store never fails a cycle
            return ()
        return tuple(
            {
                "memory_id": m.memory_id,
                "scope": m.scope,
                "signal": m.signal,
                "strength": m.strength,
                "text": m.text,
                "rule": m.rule,
            }
            for m in items
        )

    @property
    def memory(self) -> FeedbackMemory:
        """Feedback memory in this runtime's store (learning outside the weights)."""
        if self._memory is None:
            self._memory = FeedbackMemory(self.store)
        return self._memory

    async def _reflect(self, ex: _Exec) -> None:
        """After a cycle that was not accepted, the loop's reflector writes a task-scoped
        reflection into memory. It sees the cycle's context and its visible verdicts only."""
        loop, s = ex.loop, ex.state
        last = s.history[-1] if s.history else {}
        if (
            loop.reflector is None
            or ex.last_context is None
            or last.get("decision")
            not in (
                "revise",
                "refused",
            )
        ):
            return
        rem = rules.remaining(ex.contract, s).seconds
        t0 = time.perf_counter()
        try:
            text, _ = await call_user(
                loop.reflector,
                ex.last_context,
                dict(ex.last_visible),
                timeout=_reflect_timeout(loop.actor_timeout_s, rem),
                threaded=ex.threaded,
            )
        except Exception as exc:
            self.store.append_events(
                ex.run_id, [NewEvent(s.cycle, "reflection_failed", {"error": str(exc)[:300]})]
            )
            return
        finally:
            # Reflecting is part of the run's time, finished or not (invariant 7).
            s.spent = s.spent + Usage(seconds=time.perf_counter() - t0)
        if not text or not str(text).strip():
            return
        try:
            item = self.memory.add(
                scope="task",
                scope_key=s.task_key,
                signal="reflection",
                text=str(text).strip()[:4000],  # a reflection is a short note, not a transcript
                source={"run_id": ex.run_id, "cycle": s.cycle},
                by="reflector",
            )
        except Exception as exc:  # memory is best effort: a failure never fails the run
            self.store.append_events(
                ex.run_id, [NewEvent(s.cycle, "reflection_failed", {"error": str(exc)[:300]})]
            )
            return
        self.store.append_events(
            ex.run_id, [NewEvent(s.cycle, "reflected", {"memory_id": item.memory_id})]
        )

    async def _cycle(self, ex: _Exec) -> bool:
        """Run one cycle; returns True when the run ended or parked."""
        s, loop, contract = ex.state, ex.loop, ex.contract
        n = s.cycle + 1
        t0 = time.perf_counter()
        ex.events.append(NewEvent(n, "cycle_started", {}))
        ex.calls = []
        ex.threaded = self._active > 1
        rem = rules.remaining(contract, s).seconds
        # The time budget is a wall-clock deadline for this cycle's calls and their retries.
        ex.deadline = None if rem is None else time.time() + rem
        ex.last_context = self._context(ex, n, await self._recall(ex))
        ex.last_visible = {}
        ex.at("before_actor")
        try:
            proposal, secs = await call_with_retry(
                self.store,
                ex,
                scope="actor",
                cycle=n,
                policy=loop.retry,
                fn=loop.actor,
                args=(ex.last_context,),
                timeout=loop.actor_timeout_s,
                deadline=ex.deadline,
            )
        except OutOfTime as exc:
            return self._abort(ex, t0, "budget_time", cause=str(exc))
        except GaveUp as gave:
            return self._abort(
                ex, t0, "escalated", cause=_gave_up("the actor", gave), error=gave.error
            )
        ex.at("after_actor")
        if not isinstance(proposal, Proposal):
            return self._abort(
                ex,
                t0,
                "escalated",
                cause="the actor returned the wrong type",
                error=_fault(
                    "actor",
                    "TypeError",
                    f"the actor returned {type(proposal).__name__}, expected Proposal",
                ),
            )
        usage = proposal.usage or Usage()
        digest = proposal.digest()
        cycle_usage = Usage(usage.cost_usd, usage.tokens, 0.0)
        ex.calls.append({"who": "actor", "cost_usd": usage.cost_usd, "tokens": usage.tokens})
        s.spent = s.spent + cycle_usage
        ex.events.append(
            NewEvent(
                n,
                "proposal",
                {
                    "kind": proposal.kind,
                    "digest": digest,
                    "note": proposal.note,
                    "parts": [e.ref for e in proposal.changes()],
                    "effects": [c.name for c in proposal.effects],
                    "usage": usage.to_dict(),
                    "seconds": secs,
                },
            )
        )
        if proposal.escalate:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"the actor asked for a person: {proposal.escalate}",
                unverified=proposal.to_dict() if proposal.changes() else None,
            )
        crossed = rules.budget_crossed(contract, s.spent)
        if crossed:
            return self._abort(
                ex,
                t0,
                crossed,
                cause="crossed during the actor call",
                unverified=proposal.to_dict(),
            )
        if proposal.question is not None:
            q = proposal.question
            need = {
                "kind": "question",
                "rule": None,
                "why": proposal.note or "the actor needs an answer to continue",
                "what": q.text,
                "expires_after_s": None,
            }
            return self._park(ex, n, proposal, digest, {}, {}, [need], t0, cycle_usage, ask=q)
        return await self._evaluate(ex, n, proposal, digest, t0, cycle_usage)

    async def _evaluate(
        self, ex: _Exec, n: int, proposal: Proposal, digest: str, t0: float, cycle_usage: Usage
    ) -> bool:
        s, loop, contract = ex.state, ex.loop, ex.contract
        needs: list[dict[str, Any]] = []
        # Accepted work is protected (invariant 6): without a policy rule for
        # overwrite_accepted the proposal is refused and the actor told why.
        protected = [
            e.ref
            for e in proposal.changes()
            if (p := s.part(e.ref)) is not None and p.status == "accepted" and p.value != e.value
        ]
        if protected:
            ow = loop.approvals.match("overwrite_accepted", "edit", {"parts": protected})
            if ow is None:
                return self._refuse(ex, n, proposal, digest, protected, t0, cycle_usage)
            if ow.action == "deny":
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"overwriting accepted {', '.join(protected)} is denied: {ow.why}",
                    unverified=proposal.to_dict(),
                )
            if ow.action == "require":
                needs.append(
                    {
                        "kind": "overwrite_accepted",
                        "rule": ow.rule,
                        "why": ow.why,
                        "what": f"overwrite accepted {', '.join(protected)}",
                        "expires_after_s": ow.expires_after_s,
                    }
                )
        unknown = sorted({c.name for c in proposal.effects if loop.effect(c.name) is None})
        if unknown:
            return self._abort(
                ex,
                t0,
                "escalated",
                cause=f"the actor asked for effects this loop does not declare: {unknown} "
                f"(declared: {[e.name for e in loop.effects]})",
                unverified=proposal.to_dict(),
            )
        duplicate = digest in s.rejected
        candidate = _candidate(s, proposal, n)
        visible: dict[str, Verdict] = {}
        held: dict[str, Verdict] = {}
        # Held-out checks judge a private copy, so nothing they do to the state can reach the
        # actor's next context (invariant 3 holds even against a misbehaving verifier).
        private: TaskState | None = None
        # ...and their own copy of the proposal, whose values the candidate shares.
        proposal_copy = (
            Proposal.from_dict(json.loads(json.dumps(proposal.to_dict())))
            if loop.held_out
            else proposal
        )
        for check in loop.verifiers:
            subject = candidate
            if check.held_out:
                private = private or TaskState.from_dict(
                    json.loads(json.dumps(candidate.to_dict()))
                )
                subject = private
            where = f"verifier {check.name}"
            try:
                verdict, secs = await call_with_retry(
                    self.store,
                    ex,
                    scope=f"verifier:{check.name}",
                    cycle=n,
                    policy=check.retry or loop.retry,
                    fn=check.fn,
                    args=(subject, proposal_copy if check.held_out else proposal),
                    timeout=check.timeout_s,
                    deadline=ex.deadline,
                )
            except OutOfTime as exc:
                return self._abort(
                    ex, t0, "budget_time", cause=str(exc), unverified=proposal.to_dict()
                )
            except GaveUp as gave:
                return self._abort(
                    ex, t0, "escalated", cause=_gave_up(where, gave), error=gave.error
                )
            if not isinstance(verdict, Verdict):
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"{where} failed",
                    error=_fault(
                        where, "TypeError", f"returned {type(verdict).__name__}, expected Verdict"
                    ),
                )
            if verdict.findings and any(not f.verifier for f in verdict.findings):
                verdict = Verdict(
                    passed=verdict.passed,
                    score=verdict.score,
                    findings=tuple(_tag(f, check.name) for f in verdict.findings),
                    evidence=verdict.evidence,
                    usage=verdict.usage,
                    checked=verdict.checked,
                )
            (held if check.held_out else visible)[check.name] = verdict
            vu = verdict.usage or Usage()
            cycle_usage = cycle_usage + Usage(vu.cost_usd, vu.tokens, 0.0)
            ex.calls.append(
                {"who": f"verifier:{check.name}", "cost_usd": vu.cost_usd, "tokens": vu.tokens}
            )
            s.spent = s.spent + Usage(vu.cost_usd, vu.tokens, 0.0)
            ex.events.append(
                NewEvent(
                    n,
                    "verdict",
                    {
                        "verifier": check.name,
                        "held_out": check.held_out,
                        "passed": verdict.passed,
                        "score": verdict.value,
                        "findings": len(verdict.findings),
                        "seconds": secs,
                    },
                )
            )
            crossed = rules.budget_crossed(contract, s.spent)
            if crossed and check is not loop.verifiers[-1]:
                return self._abort(
                    ex,
                    t0,
                    crossed,
                    cause=f"crossed during verifier {check.name}",
                    unverified=proposal.to_dict(),
                )
        # Which requested effects run: those of an accepted cycle, and those declared to run
        # whatever the verdict.
        score = rules.aggregate_score(loop.verifiers, visible) if visible else None
        ok = rules.success(contract, loop.verifiers, visible, score)
        calls = [c for c in proposal.effects if ok or not _effect(loop, c).requires_success]
        held_back = [c.name for c in proposal.effects if c not in calls]
        if held_back:
            ex.events.append(
                NewEvent(n, "effects_held", {"effects": held_back, "why": "cycle not accepted"})
            )
        for c in calls:
            eff = _effect(loop, c)
            d = loop.approvals.decide(eff.kind, eff.name, c.args)
            if d.action == "deny":
                return self._abort(
                    ex,
                    t0,
                    "escalated",
                    cause=f"{eff.describe(c.args)} is denied by the approval policy: {d.why}",
                    evidence={"effect": c.to_dict(), "rule": d.rule},
                    unverified=proposal.to_dict(),
                )
            if d.action == "require":
                needs.append(
                    {
                        "kind": "effect",
                        "effect": eff.name,
                        "rule": d.rule,
                        "why": d.why,
                        "what": eff.describe(c.args),
                        "expires_after_s": d.expires_after_s,
                    }
                )
        # An approval covers the one cycle it was given for (it resumes that cycle directly);
        # the same action proposed again later is asked about again, never waved through.
        hit = rules.risk_reason(contract.risk, candidate, proposal, visible, loop.verifiers)
        if hit is not None:
            rule, why = hit
            needs.append(
                {
                    "kind": "question" if rule.ask else "risk",
                    "rule": rule.name,
                    "why": why,
                    "what": rule.ask or f"apply the cycle-{n} proposal ({proposal.kind})",
                    "expires_after_s": rule.expires_after_s,
                }
            )
        if needs:
            ask = Question(str(hit[0].ask)) if hit is not None and hit[0].ask else None
            return self._park(
                ex,
                n,
                proposal,
                digest,
                visible,
                held,
                needs,
                t0,
                cycle_usage,
                ask=ask,
                calls=calls,
            )
        return await self._apply(
            ex, n, proposal, digest, visible, held, t0, cycle_usage, candidate, duplicate, calls
        )

    def _refuse(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        protected: list[str],
        t0: float,
        cycle_usage: Usage,
    ) -> bool:
        s = ex.state
        s.findings = [f for f in s.findings if f.dimension != "protected"] + [
            Finding(
                f"{ref} is accepted and may not be changed",
                *split_ref(ref),
                dimension="protected",
                verifier="loopwright",
            )
            for ref in protected
        ]
        ex.events.append(NewEvent(n, "proposal_refused", {"parts": protected}))
        return self._conclude(
            ex, n, proposal, digest, {}, {}, t0, cycle_usage, decision="refused", duplicate=True
        )

    async def _apply(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        t0: float,
        cycle_usage: Usage,
        candidate: TaskState,
        duplicate: bool,
        calls: list[EffectCall],
        *,
        staged: bool = False,
    ) -> bool:
        """Run the cycle's effects (journaled, at most once), then conclude it."""
        outcomes: list[EffectOutcome] = []
        if calls:
            # Never start an effect once a budget is crossed (invariant 7).
            crossed = rules.budget_crossed(ex.contract, ex.state.spent)
            if crossed:
                ex.state.pending = None
                return self._abort(
                    ex,
                    t0,
                    crossed,
                    cause=f"crossed before the effects {[c.name for c in calls]} ran",
                    unverified=proposal.to_dict(),
                )
            if not staged:
                # Write-ahead: the cycle's proposal and verdicts are stored before any effect
                # runs, so a crash during the effects resumes *this* proposal, never a new one
                # with different arguments (which would be a second payment).
                ex.state.pending = {
                    "stage": "effects",
                    "cycle": n,
                    "proposal": proposal.to_dict(),
                    "digest": digest,
                    "duplicate": duplicate,
                    "visible": {k: v.to_dict() for k, v in visible.items()},
                    "usage": cycle_usage.to_dict(),
                    "calls": [c.to_dict() for c in calls],
                    "spend": list(ex.calls),
                }
                cancel = self._commit(
                    ex,
                    {
                        "cycle": n,
                        "decision": "effects",
                        "held_out": {k: v.to_dict() for k, v in held.items()},
                    },
                    {"status": "running"},
                )
                cancel = await self._settle(ex) or cancel  # durable before any effect runs
                if cancel:  # cancelled while this cycle was verified: pay for nothing
                    self._cancel_now(ex, "cancellation requested before the effects ran")
                    return True
            for i, c in enumerate(calls):
                outcome = await perform_effect(self.store, ex, n, _effect(ex.loop, c), c)
                outcomes.append(outcome)
                if outcome.usage is not None:
                    u = Usage(outcome.usage.cost_usd, outcome.usage.tokens, 0.0)
                    ex.calls.append(
                        {"who": f"effect:{c.name}", "cost_usd": u.cost_usd, "tokens": u.tokens}
                    )
                    cycle_usage = cycle_usage + u
                    ex.state.spent = ex.state.spent + u
                stop: tuple[str, str] | None = None
                if outcome.status != "done":
                    stop = ("escalated", outcome.cause)
                elif i + 1 < len(calls):
                    crossed = rules.budget_crossed(ex.contract, ex.state.spent)
                    if crossed:
                        rest = [x.name for x in calls[i + 1 :]]
                        stop = (crossed, f"crossed during effect {c.name}; {rest} not run")
                if stop is not None:
                    # What did run is kept: its notes, its cost, and the packet lists it.
                    ex.state.pending = None
                    ex.state.notes.extend(
                        _effect_notes(n, outcomes[:-1] if stop[0] == "escalated" else outcomes)
                    )
                    return self._abort(
                        ex,
                        t0,
                        stop[0],
                        cause=stop[1],
                        evidence={
                            "effect": outcome.to_dict(),
                            "effects_done": [o.to_dict() for o in outcomes if o.status == "done"],
                        },
                        unverified=proposal.to_dict(),
                    )
            ex.state.pending = None
            candidate.notes.extend(_effect_notes(n, outcomes))
        return self._conclude(
            ex,
            n,
            proposal,
            digest,
            visible,
            held,
            t0,
            cycle_usage,
            candidate=candidate,
            duplicate=duplicate,
            effects=[o.to_dict() for o in outcomes],
        )

    def _abort(self, ex: _Exec, t0: float, reason: str, **packet: Any) -> bool:
        """End the run in the middle of a cycle: charge the cycle's time so far, then finish."""
        ex.state.spent = ex.state.spent + Usage(seconds=time.perf_counter() - t0)
        self._finish(ex, reason, **packet)
        return True

    def _park(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        needs: list[dict[str, Any]],
        t0: float,
        cycle_usage: Usage,
        *,
        ask: Question | None = None,
        calls: list[EffectCall] | None = None,
    ) -> bool:
        """Park the run mid-cycle with one request covering everything that needs a person."""
        s = ex.state
        s.spent = s.spent + Usage(seconds=time.perf_counter() - t0)
        approval_id = uuid.uuid4().hex[:12]
        first = needs[0]
        kind = "question" if ask is not None else str(first["kind"])
        s.pending = {
            "approval_id": approval_id,
            "cycle": n,
            "rule": first.get("rule"),
            "kind": kind,
            "question": ask.to_dict() if ask is not None else None,
            # An actor's own question applies nothing; a risk rule's applies the proposal.
            "question_only": proposal.question is not None,
            "proposal": proposal.to_dict(),
            "digest": digest,
            "visible": {k: v.to_dict() for k, v in visible.items()},
            "usage": cycle_usage.to_dict(),
            "calls": [c.to_dict() for c in calls or ()],
            "spend": list(ex.calls),
        }
        s.next_action = (
            f"waiting for an answer to question {approval_id}"
            if ask is not None
            else f"waiting for a decision on approval {approval_id} ({first.get('rule') or kind})"
        )
        why = "; ".join(str(x["why"]) for x in needs)
        ex.events.append(
            NewEvent(
                n,
                "approval_requested",
                {"approval_id": approval_id, "kind": kind, "rule": first.get("rule"), "why": why},
            )
        )
        limits = [float(x["expires_after_s"]) for x in needs if x.get("expires_after_s")]
        if ask is None:
            what = "; ".join(str(x["what"]) for x in needs)
            if proposal.changes():
                what += f" (cycle {n}: {proposal.kind} of "
                what += f"{', '.join(e.ref for e in proposal.changes())})"
        else:
            others = [str(x["what"]) for x in needs if x["kind"] != "question"]
            # Answering also approves what else the cycle needed a person for: say so.
            what = ask.text + (f" (answering also approves: {'; '.join(others)})" if others else "")
        req = NewApproval(
            approval_id=approval_id,
            cycle=n,
            kind=kind,
            rule=first.get("rule"),
            what=what,
            why=why,
            evidence={
                "needs": needs,
                "question": ask.to_dict() if ask is not None else None,
                "findings": [f.to_dict() for v in visible.values() for f in v.findings],
                "scores": {k: v.value for k, v in visible.items()},
                "effects": [c.to_dict() for c in calls or ()],
                "note": proposal.note,
            },
            diff=_diff(s, proposal) or None,
            action_hash=digest,
            expires_at=time.time() + min(limits) if limits else None,
        )
        cancel = self._commit(
            ex,
            # Held-out verdicts of the parked cycle wait here, outside the state.
            {
                "cycle": n,
                "decision": "parked",
                "approval_id": approval_id,
                "held_out": {k: v.to_dict() for k, v in held.items()},
            },
            {"status": "awaiting_approval"},
            approval=req,
        )
        if cancel:
            self._cancel_now(ex, "cancellation requested while it was being verified")
        return True

    async def _settle_pending(self, ex: _Exec) -> bool:
        """A parked run resumed: continue if approved or answered, escalate if denied or
        expired, else stay parked; a cycle stopped during its effects finishes them. Returns
        True when the run should not continue now."""
        s = ex.state
        pend = s.pending or {}
        if pend.get("stage") == "effects":
            s.pending = None
            return await self._resume_cycle(ex, pend, staged=True)
        reqs = [
            a
            for a in self.store.approvals(run_id=ex.run_id)
            if a.approval_id == pend.get("approval_id")
        ]
        if not reqs:
            raise RunNotFoundError(
                f"run {ex.run_id}: approval {pend.get('approval_id')} is missing"
            )
        req = reqs[0]
        if req.status == "pending" and req.expires_at is not None and req.expires_at < time.time():
            with contextlib.suppress(ApprovalError):
                req = self.store.decide_approval(
                    req.approval_id,
                    status="expired",
                    by="loopwright",
                    note="expired",
                    now=time.time(),
                )
        if req.status == "pending":
            self.store.append_events(
                ex.run_id,
                [*ex.events, NewEvent(s.cycle, "still_waiting", {"approval_id": req.approval_id})],
            )
            ex.events = []
            return True
        n = int(pend["cycle"])
        note: dict[str, Any] = {
            "kind": "answer" if req.status == "answered" else "approval",
            "cycle": n,
            "decision": req.status,
            "by": req.decided_by,
            "note": req.note,
            "rule": pend.get("rule"),
        }
        if pend.get("question"):
            note["question"] = pend["question"]["text"]
        if req.status == "answered":
            note["answer"] = req.answer
        s.notes.append(note)
        s.pending = None
        if req.status not in ("approved", "answered"):
            s.next_action = ""
            who = f" by {req.decided_by}" if req.decided_by else ""
            self._finish(
                ex,
                "escalated",
                cause=f"{'question' if pend.get('question') else 'approval'} {req.status}{who}"
                + (f": {req.note}" if req.note else ""),
                evidence={"approval": req.to_dict()},
            )
            return True
        ex.calls = list(pend.get("spend") or ())
        if pend.get("question_only"):
            # The actor asked; nothing of its proposal is applied. The answer is in the notes.
            return self._conclude(
                ex,
                n,
                Proposal.from_dict(pend["proposal"]),
                str(pend["digest"]),
                {},
                {},
                time.perf_counter(),
                Usage.from_dict(pend.get("usage")),
                decision="asked",
            )
        s.approved.append(str(pend["digest"]))
        return await self._resume_cycle(ex, pend, staged=False)

    async def _resume_cycle(self, ex: _Exec, pend: Mapping[str, Any], *, staged: bool) -> bool:
        """Finish a cycle from what was stored mid-cycle (verdicts are not asked again)."""
        ex.calls = list(pend.get("spend") or ())
        s = ex.state
        n = int(pend["cycle"])
        proposal = Proposal.from_dict(pend["proposal"])
        visible = {k: Verdict.from_dict(v) for k, v in pend["visible"].items()}
        parked = ex.record or {}
        held = {k: Verdict.from_dict(v) for k, v in (parked.get("held_out") or {}).items()}
        digest = str(pend["digest"])
        calls = [EffectCall.from_dict(c) for c in pend.get("calls") or ()]
        missing = sorted({c.name for c in calls if ex.loop.effect(c.name) is None})
        if missing:
            raise ConfigError(
                f"run {ex.run_id} must finish effects {missing}, which this loop does not "
                "declare: resume it with the loop that started it",
                field="effects",
            )
        return await self._apply(
            ex,
            n,
            proposal,
            digest,
            visible,
            held,
            time.perf_counter(),
            Usage.from_dict(pend.get("usage")),
            _candidate(s, proposal, n),
            bool(pend.get("duplicate", digest in s.rejected)),
            calls,
            staged=staged,
        )

    def _conclude(
        self,
        ex: _Exec,
        n: int,
        proposal: Proposal,
        digest: str,
        visible: dict[str, Verdict],
        held: dict[str, Verdict],
        t0: float,
        cycle_usage: Usage,
        *,
        candidate: TaskState | None = None,
        duplicate: bool = False,
        decision: str | None = None,
        effects: list[dict[str, Any]] | None = None,
    ) -> bool:
        """Decide the cycle by the contract and commit it. Returns True when the run ended."""
        old, loop, contract = ex.state, ex.loop, ex.contract
        s = candidate if candidate is not None else old
        score = rules.aggregate_score(loop.verifiers, visible) if visible else None
        ok = decision is None and rules.success(contract, loop.verifiers, visible, score)
        if decision is None:
            s.findings = [f for v in visible.values() for f in v.findings]
            rules.accept_clean_parts(
                s,
                loop.verifiers,
                visible,
                all_parts=ok,
                when_clean=contract.success.accept_parts == "when_clean",
            )
            s.refresh_plan()
        required = {c.name for c in loop.visible if c.required}
        newly = sorted(
            k
            for k, v in visible.items()
            if v.passed and k in required and k not in old.passed_checks
        )
        delta = contract.no_progress.min_delta if contract.no_progress else 0.0
        improved = (
            not duplicate
            and decision is None
            and rules.improved(old.best_score, score, delta, bool(newly))
        )
        if improved:
            s.best_score = max(v for v in (old.best_score, score) if v is not None)
            s.best_cycle = n
            s.best_parts = {ref: len(p.versions) for ref, p in s.iter_parts()}
            s.stall = 0
        elif decision == "asked":
            s.stall = old.stall  # waiting for an answer is not a cycle without progress
        else:
            s.stall = old.stall + 1
        s.passed_checks = sorted(set(old.passed_checks) | set(newly))
        if not ok and not duplicate and decision != "asked":
            s.rejected = [*old.rejected, digest]
        s.cycle = n
        s.score = score
        s.spent = old.spent + Usage(seconds=time.perf_counter() - t0)
        decision = decision or ("accepted" if ok else "revise")
        s.history = [
            *old.history,
            {
                "cycle": n,
                "score": score,
                "decision": decision,
                "kind": proposal.kind,
                "improved": improved,
            },
        ]
        ex.state = s
        ex.last_visible = visible
        held_d = {k: v.to_dict() for k, v in held.items()}
        record = {
            "cycle": n,
            "proposal": proposal.to_dict(),
            "digest": digest,
            "duplicate": duplicate,
            "visible": {k: v.to_dict() for k, v in visible.items()},
            "held_out": held_d,
            "score": score,
            "improved": improved,
            "decision": decision,
            "effects": effects or [],
            # The feedback memory the actor was shown (ids): what context_reuse_rate counts.
            "memory": [m["memory_id"] for m in (ex.last_context.memory if ex.last_context else ())],
            # Every priced call of the cycle in order: what replay needs to re-decide budgets.
            "calls": list(ex.calls),
            "usage": Usage(
                cycle_usage.cost_usd, cycle_usage.tokens, s.spent.seconds - old.spent.seconds
            ).to_dict(),
        }
        ex.events.append(
            NewEvent(
                n,
                "decision",
                {
                    "decision": decision,
                    "score": score,
                    "best_score": s.best_score,
                    "improved": improved,
                    "duplicate": duplicate,
                },
            )
        )
        if ok:
            s.next_action = ""
            self._finish(ex, "success", record=record, held_out=held_d)
            return True
        reason: str | None = None
        if contract.no_progress is not None and s.stall >= contract.no_progress.cycles:
            reason = "no_progress"
        else:
            reason = rules.stop_before_cycle(contract, s)
        if reason is not None:
            self._finish(
                ex,
                reason,
                record=record,
                held_out=held_d,
                evidence={k: dict(v.evidence) for k, v in visible.items()},
            )
            return True
        nxt = s.next_step()
        s.next_action = (f"repair {len(s.findings)} finding(s)" if s.findings else "continue") + (
            f"; next step: {nxt.id}" if nxt else ""
        )
        cancel = self._commit(ex, record, {"status": "running"})
        if cancel:
            self._cancel_now(ex, "cancellation requested")
            return True
        return False


def _effect_notes(n: int, outcomes: Sequence[EffectOutcome]) -> list[dict[str, Any]]:
    """What the next context learns about the cycle's effects."""
    return [
        {
            "kind": "effect",
            "cycle": n,
            "effect": o.name,
            "key": o.key,
            "status": o.status,
            "result": o.result,
            "reused": o.reused,
        }
        for o in outcomes
        if o.status == "done"
    ]


def _compensating(store: Store, run_id: str) -> bool:
    """Whether an ended run still has compensations to run (a cancelled run's)."""
    pending = store.latest_checkpoint(run_id).state.get("pending") or {}
    return bool(pending.get("stage") == "compensations")


def _gave_up(who: str, gave: GaveUp) -> str:
    err = gave.error
    what = f"{err.get('type')}: {err.get('message')}"
    if gave.kind == "needs_human":
        return f"{who} failed with an error a person must resolve ({what})"
    if gave.kind == "transient":
        return f"{who} failed transiently {gave.attempts} time(s), the retry bound; last: {what}"
    if err.get("type") in ("Timeout", "CallTimeout"):
        return f"{who} timed out ({what})"
    return f"{who} raised an exception ({what})"


def _effect(loop: Loop, call: EffectCall) -> Effect:
    eff = loop.effect(call.name)
    if eff is None:  # checked when the proposal arrived; a resumed run checks it again
        raise ConfigError(f"this loop declares no effect {call.name!r}", field="effects")
    return eff


def _tag(f: Finding, verifier: str) -> Finding:
    if f.verifier:
        return f
    return Finding(f.message, f.artifact, f.part, f.dimension, f.severity, verifier, f.evidence)


def _candidate(state: TaskState, proposal: Proposal, n: int) -> TaskState:
    """The state as it would be with ``proposal`` applied in cycle ``n`` (``state`` untouched)."""
    candidate = state.fork()
    for e in proposal.changes():
        candidate.set_part(e.artifact, e.part, e.value, n)
    _apply_plan(candidate, proposal)
    return candidate


def _apply_plan(state: TaskState, proposal: Proposal) -> None:
    known = {s.id for s in state.plan}
    for step in proposal.new_steps:
        if step.id not in known:
            state.plan.append(PlanStep.from_dict(step.to_dict()))
    for step_id, status in proposal.plan.items():
        for s in state.plan:
            if s.id == step_id and status in ("pending", "in_progress", "done", "blocked"):
                s.status = status  # type: ignore[assignment]


def _diff(state: TaskState, proposal: Proposal) -> str:
    lines = []
    for e in proposal.changes():
        p = state.part(e.ref)
        old = "∅" if p is None else repr(p.value)
        lines.append(f"- {e.ref}: {old}\n+ {e.ref}: {e.value!r}")
    return "\n".join(lines)


def _reflect_timeout(actor_s: float | None, remaining_s: float | None) -> float:
    """A reflector gets what the actor would (its timeout, the time left), 60 s by default:
    a hung reflector must not hold a run forever."""
    limit = _min(actor_s, remaining_s)
    return max(0.001, limit) if limit is not None else 60.0


def _min(a: float | None, b: float | None) -> float | None:
    vals = [v for v in (a, b) if v is not None]
    return min(vals) if vals else None


def _sync(coro: Coroutine[Any, Any, RunResult]) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError("called a *_sync method inside a running event loop; await the async one")
