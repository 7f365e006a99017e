"""What the ``Runtime`` mixins share: its attributes, and the methods one mixin calls in another.

``Runtime`` (``_engine``) is assembled from mixins, one per seam of the engine: a run's creation
(``_run_create``), many at once (``_run_many``), ``resume`` up to its drive (``_resume_ready``),
the drive of a run (``_driving``) and its lease's heartbeat and wind-down (``_lease_life``), the
cycle (``_cycle``; ``_edit_check``, the check-only one after a person's edit), effects and
decision (``_conclude``), the checkpoint's commit (``_checkpoint``), parking for a person
(``_parking``), finishing (``_finishing``), reflection (``_reflection``); what people do: decide
requests (``_people``), cancel and roll back (``_cancel_rollback``), pause (``_pause``), settle
an effect (``_settle``) and fork (``_fork``), each also awaited off the event loop
(``_person_async``); and the runtime's end (``_lifecycle``). Each mixin derives from
``RuntimeHost`` so mypy knows what ``self`` holds; the method stubs below exist only for the
type checker (the real methods live in the modules named beside them).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ._errors import ConflictError
from ._group import GroupCommitter, GroupRecall
from ._memory import FeedbackMemory
from ._person_gate import PersonOps
from ._redact import redact_text
from ._saying import Saying
from ._store_threads import in_store_thread, store_threads
from .store import Approval, ClosedApproval, NewApproval, RunRecord, Store

if TYPE_CHECKING:
    from ._effects import Effect, EffectCall
    from ._exec import Execution as _Exec
    from ._policy import PolicyDecision
    from ._proposal import Context, Proposal, Remaining, Verdict
    from ._question import Question
    from ._state import TaskState
    from .trace._live import LiveTracer

__all__ = ["RESERVED", "ProgressFn", "RuntimeHost"]

ProgressFn = Callable[[RunRecord], None]


class _Reserved(threading.local):
    """The run a person's operation awaited in this store thread counted as driven by its
    runtime for itself (``_person_async``), as ``(id(runtime), run_id)``: the one run whose
    lease ``_take_lease`` lets that operation take though it is counted as driven."""

    run: tuple[int, str] | None = None


RESERVED = _Reserved()

# ``RuntimeHost._driving``'s counts, changed on the event loop and, by a take that outlived its
# cancelled caller, in the store thread that made it (``_store_threads.in_store_thread``)
_DRIVING = threading.Lock()
# ...told when a worker's claim of runs for a runtime has ended (``RuntimeHost._claim_ended``)
_CLAIMED = threading.Condition(_DRIVING)


class RuntimeHost:
    """The attributes ``Runtime.__init__`` sets that the mixins read, and their cross calls."""

    store: Store
    owner: str
    lease_ttl_s: float
    on_progress: ProgressFn | None
    _progress_said: bool  # an on_progress failure was logged (once a runtime)
    group_commit: bool
    memory_enabled: bool
    calls_in_threads: bool  # (``_cycle.Cycle``'s default, set by ``Runtime``)
    snapshot_every: int
    history_window: int
    _active: int
    _driving: Counter[str]  # the runs this runtime is executing now (``Runtime.resume``)
    _claiming: Counter[int]  # its worker's claims in flight, by thread (``_claim_begun``)
    _unsaid: list[tuple[str, int, int, str, Any]]  # words of stops alive the store refused
    _saying: Saying | None  # a resume saying them now (``_say_unsaid``)
    _memory: FeedbackMemory | None
    _group: GroupCommitter | None
    _recall_group: GroupRecall | None
    _live: LiveTracer | None  # live tracing (trace/_live.py), when configured
    _on_phase: Callable[[str], None] | None  # a phase hook (the crash tests' kill points)

    def _take_lease(self, run_id: str) -> int:
        """The lease of ``run_id`` for an operation of this runtime (an edit, a cancel, a
        rollback, a resume): ``ConflictError`` while this runtime executes the run itself, as
        while another executor holds it. The store lets an owner take its own lease again: a
        person's edit through the runtime executing the run fenced that execution out
        mid-cycle (``StaleLeaseError``, the run left running with no holder; attack47)."""
        with _DRIVING:
            self._settled()
            self._refuse_driven(run_id)
        return self.store.acquire_lease(run_id, self.owner, self.lease_ttl_s)

    @property
    def _person_ops(self) -> PersonOps:
        """This runtime's person's operations awaited off the event loop (``_person_async``);
        made at the first use, one however many threads ask at once."""
        ops: PersonOps | None = self.__dict__.get("_person_ops_")
        if ops is None:
            ops = self.__dict__.setdefault(
                "_person_ops_", PersonOps(self.owner, self.store_where())
            )
        return ops

    def store_where(self) -> str:
        """The store's address as people read it (a PostgreSQL URL without its password)."""
        return redact_text(str(getattr(self.store, "url", None) or type(self.store).__name__))

    def _refuse_driven(self, run_id: str) -> None:
        if run_id in self._driving and RESERVED.run != (id(self), run_id):
            op = self._person_ops.runs.get(run_id)
            if op is not None:  # (not executed: a resume said so, async55b)
                raise ConflictError(
                    f"run {run_id} has a person's operation in progress in this runtime "
                    f"({self.owner}): {op}; try again once it has ended"
                )
            raise ConflictError(f"run {run_id} is being executed by this runtime ({self.owner})")

    async def _lease_to_drive(self, run_id: str) -> int:
        """``_take_lease`` for a run this runtime resumes: in a store thread where a write can
        wait on a row lock (``Store.concurrent_writers``: PostgreSQL), so that a take waiting
        on the run's row held by another session (a person in psql, the dashboard) holds no
        other run of the event loop (pgloop54); here otherwise (SQLite). The run counts as
        driven from the take's start: another operation of this runtime on it (a person's
        edit, a second resume) is refused meanwhile, as once it is driven (attack47). A take
        that ends after its caller was cancelled is handed back, and the run counts as driven
        until it has ended: let go at the cancellation, a resume of this runtime took the
        lease, and the orphaned take, landing after it, took it again (the store lets an
        owner take its own lease) and handed it back, the new execution fenced out mid-cycle
        (review54a). The run is returned counted as driven: the caller lets it go
        (``_undrive``)."""
        with _DRIVING:  # (the check and the count one step: a person's operation in another
            # thread found the run free between them, took its lease, and was fenced out)
            self._settled()
            self._refuse_driven(run_id)
            self._driving[run_id] += 1
        try:
            if not self.store.concurrent_writers:
                return self.store.acquire_lease(run_id, self.owner, self.lease_ttl_s)
            token: int = await in_store_thread(
                self.store.acquire_lease,
                run_id,
                self.owner,
                self.lease_ttl_s,
                orphaned=functools.partial(self._hand_back, run_id),
                ended=functools.partial(self._undrive, run_id),
            )
        except asyncio.CancelledError:
            raise  # (let go by ``ended`` once the take in flight has ended)
        except BaseException:
            self._undrive(run_id)
            raise
        return token

    def _drive_for(self, run_id: str, op: str) -> bool:
        """The run counted as driven by the person's operation ``op`` (``_person_turn``)
        unless this runtime drives it already (then False, nothing counted): the check and
        the count one step, as a resume's (``_lease_to_drive``)."""
        with _DRIVING:
            self._settled()
            if run_id in self._driving:
                return False
            self._driving[run_id] += 1
            self._person_ops.runs[run_id] = op
            return True

    def _claim_begun(self) -> frozenset[str]:
        """A claim of runs for this runtime begun (``_worker``): the runs it drives now, which
        the claim passes over. Until ``_claim_ended`` counts the runs the claim took as driven,
        a person's operation or a resume of this runtime in another thread waits before it
        asks whether the runtime drives its run (``_settled``): counted only after the claim,
        a run was free to such an operation between the two, which took its lease again (the
        store lets an owner take its own lease), the worker's execution fenced out
        (``StaleLeaseError``) or both driving the run (review56a)."""
        with _DRIVING:
            self._claiming[threading.get_ident()] += 1
            return frozenset(self._driving)

    def _claim_ended(self, runs: Iterable[str]) -> None:
        """The claim ``_claim_begun`` began has ended, taking ``runs``: counted as driven (the
        caller lets each go, ``_undrive``), and the operations that waited for it go on."""
        me = threading.get_ident()
        with _DRIVING:
            for run_id in runs:
                self._driving[run_id] += 1
            self._claiming[me] -= 1
            if self._claiming[me] <= 0:
                del self._claiming[me]
            _CLAIMED.notify_all()

    def _settled(self) -> None:
        """(``_DRIVING`` held) Until no claim of runs for this runtime is in flight in another
        thread (``_claim_begun``): one in this thread cannot be waited for here."""
        me = threading.get_ident()
        while any(t != me for t in self._claiming):
            _CLAIMED.wait()

    def _count_driven(self, run_id: str) -> None:
        with _DRIVING:
            self._driving[run_id] += 1

    def _undrive(self, run_id: str) -> None:
        with _DRIVING:
            self._driving[run_id] -= 1
            if self._driving[run_id] <= 0:
                del self._driving[run_id]

    def _hand_back(self, run_id: str, token: int) -> None:
        # (fenced by the token; refused on the row still locked, it lapses at its TTL)
        store_threads().submit(self.store.release_lease, run_id, token)

    def _lease_or_refused(
        self, run_id: str, who: str, action: str, *, origin: str, busy: str, **detail: Any
    ) -> int:
        """The lease of ``run_id`` for a person's ``action`` (an edit, a rollback, a settle):
        while another executor holds it, ``ConflictError(busy)``, audited as refused (the
        log says the action never happened), ``detail`` naming what was asked."""
        from ._authority import refused

        try:
            return self._take_lease(run_id)
        except ConflictError:
            exc = ConflictError(busy)
        refused(self.store, who, action, f"run {run_id}", origin=origin, why=exc, **detail)
        raise exc from None

    @contextlib.contextmanager
    def _holding(self, run_id: str, token: int) -> Iterator[None]:
        """The lease ``token`` of ``run_id`` handed back when the block ends, however it ends
        (fenced by the token: a lease taken over since is left alone). When the block failed,
        a release that fails too is suppressed: the error said is the one that happened (a
        refused edit's ``ConfigError``), not the store's (review48 for ``cancel``; edit and
        rollback released in a plain ``finally``, whose store error replaced the real one)."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.store.release_lease(run_id, token)
            raise
        self.store.release_lease(run_id, token)

    if TYPE_CHECKING:
        # _cycle.Cycle (_context: _actor_context.ActorContext); the signature repeats the
        # method it declares for the mixins that call it
        def _abort(self, ex: _Exec, t0: float, reason: str, **packet: Any) -> bool: ...

        def _context(
            self,
            ex: _Exec,
            n: int,
            memory: tuple[dict[str, Any], ...],
            remaining: Remaining | None = None,
            state: TaskState | None = None,
        ) -> Context: ...

        async def _evaluate(
            self,
            ex: _Exec,
            n: int,
            proposal: Proposal,
            digest: str,
            t0: float,
            *,
            approved: Sequence[Mapping[str, Any]] = (),
            settled: bool = False,
        ) -> bool: ...

        # _conclude.Concluding
        async def _apply(
            self,
            ex: _Exec,
            n: int,
            proposal: Proposal,
            digest: str,
            visible: dict[str, Verdict],
            held: dict[str, Verdict],
            t0: float,
            candidate: TaskState,
            duplicate: bool,
            calls: list[EffectCall],
            *,
            staged: bool = False,
            keys: list[tuple[str, bool]] | None = None,
            judged: tuple[float | None, bool, str | None] | None = None,
            reuse_only: Sequence[str] = (),
        ) -> bool: ...

        def _conclude(
            self,
            ex: _Exec,
            n: int,
            proposal: Proposal,
            digest: str,
            visible: dict[str, Verdict],
            held: dict[str, Verdict],
            t0: float,
            *,
            candidate: TaskState | None = None,
            duplicate: bool = False,
            decision: str | None = None,
            effects: list[dict[str, Any]] | None = None,
            judged: tuple[float | None, bool, str | None] | None = None,
            unanswered: tuple[str, Question] | None = None,
        ) -> bool: ...

        # _checkpoint.Checkpoints
        def _commit(
            self,
            ex: _Exec,
            record: dict[str, Any] | None,
            run: dict[str, Any],
            approval: NewApproval | None = None,
            approvals: Sequence[NewApproval] = (),
            closes: Sequence[ClosedApproval] = (),
            *,
            packed: bool = False,
        ) -> bool: ...

        async def _settle(self, ex: _Exec) -> bool: ...

        # _parking.Parking
        def _earned(
            self, ex: _Exec, n: int, eff: Effect, call: EffectCall, d: PolicyDecision
        ) -> tuple[bool, str | None]: ...

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
            *,
            ask: Question | None = None,
            calls: list[EffectCall] | None = None,
            approved: Sequence[Mapping[str, Any]] = (),
        ) -> bool: ...

        # _finishing.Finishing
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
            closes: Sequence[ClosedApproval] = (),
        ) -> None: ...

        @property
        def memory(self) -> FeedbackMemory: ...  # _finishing.Finishing

        # _cancel_rollback.CancelRollback
        def _cancel_now(self, ex: _Exec, cause: str, *, by: str | None = None) -> None: ...

        # _people.Decisions
        def approve(
            self,
            run_id: str,
            *,
            by: str,
            note: str | None = None,
            approval_id: str | None = None,
            origin: str = "python",
        ) -> Approval: ...

        # _driving.Driving
        async def _past_crash_bound(self, ex: _Exec) -> bool: ...

        async def _say_started(self, ex: _Exec) -> None: ...

        # _pause.Pausing
        def _stop_asked(self, ex: _Exec, cause: str, *, boundary: bool) -> bool: ...

        def _pause_if_asked(self, ex: _Exec, status: str) -> bool: ...
