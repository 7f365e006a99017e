"""Workers: claim runnable runs from a shared store and drive them, as many hosts as you like.

A worker asks the store for runnable runs (new, interrupted, parked-and-decided) with
``Store.claim_runs`` — one atomic claim that takes the lease and a new fencing token, without
blocking other claimers (``FOR UPDATE SKIP LOCKED`` on PostgreSQL) — and resumes each with the
loop named by the run's spec. A worker that dies loses its leases when they expire; any other
worker then resumes those runs from their last checkpoint (effects are journaled, so nothing
runs twice). ``stop()`` drains: every run finishes its cycle in flight, checkpoints, and
releases its lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._authority import expire
from ._contract import TERMINAL_STATUSES
from ._engine import RunResult, Runtime
from ._errors import (
    ConfigError,
    ConflictError,
    LoopwrightError,
    StaleLeaseError,
    StoreError,
    StoreUnavailableError,
    check_seconds,
)
from ._loop import Loop
from ._redact import redact_text
from ._spec import loop_of_run
from ._store_threads import in_store_thread
from .store import NewEvent, RunRecord
from .store._base import with_newer
from .store._protocol_commit import RowLocked

__all__ = ["Worker", "WorkerStats"]

_log = logging.getLogger("loopwright.worker")

LoopResolver = Callable[[RunRecord], Loop]

SKIPPED_WHY_KEPT = 100
"""The most runs ``WorkerStats.skipped_why`` names (the latest skipped; ``skipped`` counts them
all): a worker that runs for weeks beside runs it has no loop for holds a bounded map."""
# The most expired requests one poll records (the rest at the next poll).
EXPIRE_BATCH = 100
# A run's events after which a worker's skip still stands (``loopwright show`` reads its
# newest of them: a drive started since, ``started``/``resumed``, ends it).
_SKIP_EVENTS = ("worker_skipped", "started", "resumed")
# The most runs one claim asks for: more than any store holds runnable, and within a SQL
# LIMIT (a 64-bit integer, with the runs a claim passes over added to it).
CLAIM_MAX = 2**31 - 1
# How long a run claimed and not driven here (skipped, or failed before its drive) is left alone.
SKIP_S = 30.0


@dataclass(slots=True)
class WorkerStats:
    claimed: int = 0
    ended: Counter[str] = field(default_factory=Counter)  # by status
    skipped: int = 0  # claimed but no loop for them here
    lost: int = 0  # lease lost to another worker mid-run
    errors: int = 0  # runs that failed with an internal error
    interrupted: int = 0  # runs left resumable because the store failed under them
    store_errors: int = 0  # claims that failed because the store did (the worker went on)
    # why each skipped run was skipped (the latest reason; a run is skipped again after 30 s),
    # for the SKIPPED_WHY_KEPT runs skipped last
    skipped_why: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "claimed": self.claimed,
            "ended": dict(self.ended),
            "skipped": self.skipped,
            "skipped_why": dict(self.skipped_why),
            "lost": self.lost,
            "errors": self.errors,
            "interrupted": self.interrupted,
            "store_errors": self.store_errors,
        }


class Worker:
    """Claims and drives runs until stopped (or, with ``once``, until nothing is runnable).

    ``loops`` maps loop names to live loops; runs of other loops are resolved from their spec
    file (``RunRecord.spec_ref``), cached by spec path and version. ``on_result`` is called
    with each run that ended here; ``on_skip`` with each run it claimed and could not drive
    (its run id, and why: no spec for it on this host, a spec that does not load...).
    """

    def __init__(
        self,
        runtime: Runtime,
        *,
        loops: Mapping[str, Loop] | None = None,
        concurrency: int = 8,
        poll_s: float = 0.5,
        on_result: Callable[[RunResult], None] | None = None,
        on_skip: Callable[[str, LoopwrightError], None] | None = None,
    ) -> None:
        if not isinstance(runtime, Runtime):
            raise ConfigError(
                f"must be a loopwright Runtime, got {type(runtime).__name__}", field="runtime"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(
                f"must be a whole number of runs, at least 1, got {concurrency!r}",
                field="concurrency",
            )
        check_seconds(poll_s, "poll_s")  # (a NaN: a ValueError from asyncio, once idle)
        if not isinstance(loops, Mapping | None) or not all(
            isinstance(k, str) and isinstance(v, Loop) for k, v in (loops or {}).items()
        ):
            raise ConfigError("must map loop names to Loops", field="loops")
        for name, fn in (("on_result", on_result), ("on_skip", on_skip)):
            if fn is not None and not callable(fn):
                raise ConfigError(f"{fn!r} is not callable", field=name)
        self.runtime = runtime
        runtime.calls_in_threads = True  # its heartbeat renews the lease during a long call
        self.loops = dict(loops or {})
        self.concurrency = concurrency
        self.poll_s = poll_s
        self.on_result = on_result
        self.on_skip = on_skip
        self.stats = WorkerStats()
        self._stopping = False
        self._specs: dict[tuple[str, str | None], Loop] = {}
        self._no_loop: dict[str, float] = {}  # run id -> when it may be tried again
        self._expiry_said = False  # a store error of the expiry poll was logged
        self._driving: set[str] = set()  # runs this worker drives now: never claimed again

    def stop(self) -> None:
        """Graceful shutdown: claim nothing more; runs finish their cycle in flight."""
        self._stopping = True
        self.runtime.drain()

    def _loop_for(self, rec: RunRecord) -> Loop:
        if rec.loop_name in self.loops:
            return self.loops[rec.loop_name]
        key = (rec.spec_ref or "", rec.loop_version)
        if key not in self._specs:
            self._specs[key] = loop_of_run(rec)
        return self._specs[key]

    async def _drive(self, run_id: str, token: int) -> None:
        try:
            await self._drive_run(run_id, token)
        finally:
            self._driving.discard(run_id)
            self.runtime._undrive(run_id)

    async def _drive_run(self, run_id: str, token: int) -> None:
        store = self.runtime.store
        try:
            rec = store.get_run(run_id)
            loop = self._loop_for(rec)
        except StoreUnavailableError:
            # The store failed, not the run: no skip (that would keep the run from this
            # worker for 30 s). Hand the lease back if the store answers again, so any
            # worker claims the run at once; otherwise it expires.
            self.stats.interrupted += 1
            with contextlib.suppress(StoreError):
                store.release_lease(run_id, token)
            return
        except LoopwrightError as exc:
            self._skip(run_id, token, exc)
            return
        try:
            result = await self.runtime.resume(run_id, loop, token=token)
        except StoreUnavailableError:
            # left resumable: resume handed its lease back if the store answered, else the
            # lease expires; then any worker claims it
            self.stats.interrupted += 1
            return
        except (StaleLeaseError, ConflictError):
            self.stats.lost += 1  # another worker owns it now (stale token)
            return
        except StoreError as exc:
            # The store refused this run for good (a damaged checkpoint): resume handed the
            # lease back, and counted "lost" and said nothing, the run was claimed again at
            # the next poll, for ever (``--once`` never ended; review49a). Skipped, saying why.
            self._skip(run_id, None, exc)
            return
        except ConfigError as exc:
            # (a loop that is not the run's, a contract it refuses): its lease handed back by
            # the resume; why recorded on the run, as for the skips above (it was only
            # counted and said to ``on_skip``: ``loopwright show`` had nothing to say)
            self._skip(run_id, None, exc)
            return
        except Exception as exc:
            # A bug in loopwright itself: the engine has marked the run failed with its
            # traceback in the packet; one before the drive left the run as it was, its lease
            # handed back: recorded on it, and not claimed again here for a while, as a
            # skipped run. This worker goes on with the others.
            self.stats.errors += 1
            self._no_loop[run_id] = time.monotonic() + SKIP_S
            with contextlib.suppress(LoopwrightError):  # (the store failing too, or no run)
                if store.get_run(run_id).status not in TERMINAL_STATUSES:
                    self._said_skipped(run_id, f"{type(exc).__name__}: {exc}")
            return
        self.stats.ended[result.status] += 1
        if self.on_result is not None:
            self.on_result(result)

    def _skip(self, run_id: str, token: int | None, exc: LoopwrightError) -> None:
        """``run_id`` claimed and not driven: the why recorded on the run, its lease (``token``,
        when still held) handed back, then ``_skipped``."""
        self._said_skipped(run_id, str(exc))
        # handed back even when the event could not be written (it kept the run from every
        # other worker to its TTL; review48)
        if token is not None:
            with contextlib.suppress(StoreError):
                self.runtime.store.release_lease(run_id, token)
        # said once the run is handed back: an on_skip that raises (or a console whose
        # reader went away) ends the worker, never with the run's lease still held
        self._skipped(run_id, exc)

    def _said_skipped(self, run_id: str, why: str) -> None:
        """Why the run was not driven here, recorded on it (``worker_skipped``) if the store
        answers."""
        why = redact_text(why)  # (stored: a module's error can quote a secret)
        said = {"owner": self.runtime.owner, "why": why}
        store = self.runtime.store
        with contextlib.suppress(StoreError):
            # Once per reason: a run that fails for good is tried again every SKIP_S, and
            # each try wrote one more event with the same words (2,880 a day a worker). Said
            # again once the run was driven since (show's rule: its newest of these events).
            last = store.events_of_kinds(run_id, _SKIP_EVENTS, limit=1)
            if last and last[0].kind == "worker_skipped" and last[0].data == said:
                return
            store.append_events(run_id, [NewEvent(0, "worker_skipped", said)])

    def _skipped(self, run_id: str, why: LoopwrightError) -> None:
        """``run_id`` claimed and not driven: counted, left alone here for 30 s, and said."""
        self.stats.skipped += 1
        said = self.stats.skipped_why
        said.pop(run_id, None)  # (the latest at the end: the oldest is the first dropped)
        said[run_id] = redact_text(str(why))  # (it is printed as JSON)
        if len(said) > SKIPPED_WHY_KEPT:
            del said[next(iter(said))]
        self._no_loop[run_id] = time.monotonic() + SKIP_S
        if self.on_skip is not None:
            self.on_skip(run_id, why)

    async def _expire_due(self) -> None:
        """Record as expired the pending requests whose time ran out on the store's clock
        (``Store.expired_requests``), so the runs parked on them are claimable now, and their
        resume escalates (expiry escalates). Before, expiry was recorded only when someone
        resumed the run or tried to decide the request: no worker ever took such a run. A
        request decided meanwhile keeps its decision (``expire``: one outcome, recorded once).

        In a store thread where a write can wait on a row lock (PostgreSQL): a request whose
        run's row another session holds (a person deciding it, the dashboard) is left to a
        later poll (``RowLocked``). Recorded on the event loop, it waited there for the lock,
        and the worker claimed nothing and its runs in flight stood still (evloop53b)."""
        store = self.runtime.store
        if store.concurrent_writers:
            exc = await in_store_thread(self._expire_batch)
        else:
            exc = self._expire_batch()
        if exc is not None:
            # asked again at the next poll. Any store error, not only a lost connection: one
            # damaged request row (read first at every poll, the soonest expired) ended the
            # worker at its first poll, every run with it, and every restart alike.
            self.stats.store_errors += 1
            if not isinstance(exc, StoreUnavailableError) and not self._expiry_said:
                self._expiry_said = True
                _log.warning("recording expired requests failed (asked again each poll): %s", exc)

    def _expire_batch(self) -> StoreError | None:
        """``_expire_due``'s writes: the store's failure, if it failed (counted on the loop)."""
        store = self.runtime.store
        held: set[str] = set()  # runs whose row another session holds: the next poll's
        try:
            for req in store.expired_requests(limit=EXPIRE_BATCH):
                if req.run_id in held:
                    continue  # (one lock wait a run a poll, not one a request)
                try:
                    expire(store, req)
                except RowLocked:
                    held.add(req.run_id)
        except StoreError as exc:
            return exc
        return None

    async def run(self, *, once: bool = False, max_runs: int | None = None) -> WorkerStats:
        """Work until ``stop()`` (or, with ``once``, until nothing is runnable and all runs
        taken are done; ``max_runs`` caps how many runs it claims)."""
        if max_runs is not None and (
            isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1
        ):
            raise ConfigError(
                f"must be a whole number of runs, at least 1, got {max_runs!r}", field="max_runs"
            )
        active: set[asyncio.Task[None]] = set()
        store = self.runtime.store
        idle = self.poll_s
        while True:
            # (a claim's LIMIT is a 64-bit integer in either store: a --concurrency beyond
            # CLAIM_MAX is every claimable run, as it is below; it was an OverflowError)
            free = min(self.concurrency - len(active), CLAIM_MAX)
            if max_runs is not None:
                free = min(free, max_runs - self.stats.claimed)
            claimed: list[tuple[str, int]] = []
            # (a runtime drained, or closing, which drains first, claims nothing more: each
            # run claimed was wound down at once and handed back, then claimed again)
            winding_down = self._stopping or self.runtime._draining
            if free > 0 and not winding_down:
                now = time.monotonic()
                self._no_loop = {k: t for k, t in self._no_loop.items() if t > now}
                claim: dict[str, Any] = {
                    "owner": self.runtime.owner,
                    "ttl_s": self.runtime.lease_ttl_s,
                    "limit": free,
                }
                await self._expire_due()
                # (the runs it takes counted as its runtime's from the claim, one step with it:
                # a person's operation of this runtime in another thread, between the claim and
                # a count after it, found a run free and took its lease again, the same owner,
                # the worker's execution fenced out or both driving it: review56a)
                driven = self.runtime._claim_begun()
                try:
                    # Not the runs it drives: frozen past their leases (SIGSTOP, a VM pause),
                    # this worker would otherwise take them over from itself on waking,
                    # fencing their cycles in flight only to do them again. Nor those its
                    # runtime executes otherwise (``run``, ``resume``: the same owner; its
                    # own runs only, before: review48a).
                    # Nor those skipped here a moment ago (``_no_loop``): claimed (the oldest
                    # first) and handed back at every poll, as many of them as the worker
                    # had free slots kept every newer run from it until they were tried again.
                    mine = driven.union(self._driving, self._no_loop)
                    try:
                        taken = with_newer(store.claim_runs, claim, {"exclude": mine or None})
                        if taken is None:  # a store whose claim_runs takes no exclude
                            taken = store.claim_runs(**claim)
                    except StoreUnavailableError:
                        # a dropped connection or a locked store: keep working, ask again later
                        self.stats.store_errors += 1
                        taken = []
                    for run_id, token in taken:
                        if run_id in self._no_loop:
                            # no loop for it here yet; a store that fails now lets the lease
                            # expire instead of ending the worker
                            try:
                                store.release_lease(run_id, token)
                            except StoreError:
                                self.stats.store_errors += 1
                            continue
                        claimed.append((run_id, token))
                finally:
                    self.runtime._claim_ended(run_id for run_id, _ in claimed)
            for run_id, token in claimed:
                self.stats.claimed += 1
                self._driving.add(run_id)  # until _drive ends
                # (and its runtime's, counted by ``_claim_ended``, not from ``resume``'s start:
                # a person's operation of this runtime (``edit_async``, ``cancel``) found it
                # undriven meanwhile and took its lease again, the same owner, fencing the
                # worker's execution out before its first cycle: lifecycle55)
                active.add(asyncio.create_task(self._drive(run_id, token)))
            if not active:
                done_claiming = winding_down or (
                    max_runs is not None and self.stats.claimed >= max_runs
                )
                if done_claiming or (once and not claimed):
                    return self.stats
                await asyncio.sleep(idle)
                idle = min(idle * 2, max(self.poll_s, 5.0))  # back off while idle
                continue
            idle = self.poll_s
            done, active = await asyncio.wait(
                active, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED
            )
            for t in done:
                t.result()  # _drive handles its own errors; this surfaces a worker bug
