"""``resume`` up to its drive: the run read again under its lease, its execution built from the
latest checkpoint (state, contract, the history window, the retries its next cycle has used).
Apart from ``_engine`` so that ``resume`` there reads as an execution's start and how it stopped
(its drive: ``_driving``; its wind-down: ``_lease_life``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._contract import TERMINAL_STATUSES, Contract, contract_from_snapshot
from ._contract_rules import DEFAULT_MAX_CRASHES
from ._errors import ConfigError
from ._exec import Execution as _Exec
from ._exec import fit_history
from ._host import RuntimeHost
from ._loop import Loop, check_loop, other_loop
from ._state import TaskState
from ._store_threads import written
from .store import Event, RunRecord, Store

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._result import RunResult


class Resuming(RuntimeHost):
    """``Runtime.resume``'s preparation (a mixin of ``Runtime``)."""

    if TYPE_CHECKING:
        _on_phase: Callable[[str], None] | None
        _draining: bool

        def result(self, run_id: str) -> RunResult: ...  # _engine.Runtime

    async def _ready(
        self, run_id: str, loop: Loop, token: int | None, held: list[tuple[str, int]]
    ) -> RunResult | tuple[_Exec, RunRecord]:
        """``resume`` up to its drive: the run's result when there is nothing to drive, else
        its execution under the lease (``token``, or one taken here and added to ``held``).
        Its writes (the lease taken, or handed back) are made off the event loop where they
        can wait on a row lock (``_store_threads.written``, pgloop54); its reads are not
        (PostgreSQL's reads wait on no row lock)."""
        check_loop(loop)
        rec = self.store.get_run(run_id)
        held[:] = [(rec.run_id, t) for _, t in held]  # (the run's id, not a prefix of it)
        if other_loop(loop, rec.loop_name, rec.spec_ref):
            if token is not None:
                await written(self.store, self.store.release_lease, rec.run_id, token)
            # Another loop's actor, verifiers and contract would go on with this run's state (as
            # a fork with another loop is refused); a renamed spec is the same file: let through.
            raise ConfigError(
                f"is loop {loop.name!r}, not run {rec.run_id}'s loop {rec.loop_name!r}"
                f"{f' (spec {rec.spec_ref})' if rec.spec_ref else ''}: resume it with its own "
                f"loop, or start a new run of {loop.name!r}",
                field="loop",
            )
        if rec.status in TERMINAL_STATUSES and not _compensating(self.store, rec.run_id):
            if token is not None:
                await written(self.store, self.store.release_lease, rec.run_id, token)
            return self.result(rec.run_id)
        if token is None:
            # (counted as driven by this runtime from the take until ``resume`` counts it
            # itself: its writes below wait off the loop (PostgreSQL), and a second resume or
            # an edit of this runtime meanwhile took the lease again, this one fenced out)
            token = await self._lease_to_drive(rec.run_id)
            try:
                return await self._taken(rec, loop, token, held)
            finally:
                self._undrive(rec.run_id)
        return await self._prepared(rec, loop, token)

    async def _taken(
        self, rec: RunRecord, loop: Loop, token: int, held: list[tuple[str, int]]
    ) -> RunResult | tuple[_Exec, RunRecord]:
        """``_ready`` under the lease ``token`` it took."""
        held.append((rec.run_id, token))
        # Read again under the lease: the run may have ended between the read before and
        # the lease (a worker finished it, a person cancelled it, each releasing its lease).
        # Gone on from the stale status, an accepted run was executed again (its actor paid
        # again) and a cancelled one un-cancelled and run (attack47).
        rec = self.store.get_run(rec.run_id)
        if rec.status in TERMINAL_STATUSES and not _compensating(self.store, rec.run_id):
            await written(self.store, self.store.release_lease, rec.run_id, token)
            return self.result(rec.run_id)
        return await self._prepared(rec, loop, token)

    async def _prepared(self, rec: RunRecord, loop: Loop, token: int) -> tuple[_Exec, RunRecord]:
        """The run's execution under the lease ``token``."""
        if rec.maker_starts:
            # A fork nobody had started, started now by a person's resume: from here on it is
            # any run, a worker's to go on with should this execution stop (its lease held).
            # (off the event loop where it can wait on the run's row lock, as the take above:
            # on it, a person holding the fork's row in psql held every run of the process)
            await written(self.store, self.store.mark_started, rec.run_id, token)
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
            draining=lambda: self._draining,
            threaded=self.calls_in_threads,  # (a parked cycle's verifiers too, before any cycle)
        )
        ex.adopt(self.store, ck.state)
        fit_history(self.store, rec.run_id, ex.state, self.history_window)
        # Failed attempts of the cycle about to run (or rerun) count against its retry bound.
        nxt = ex.state.cycle + 1
        ex.retries = {
            e.key: e
            for e in self.store.journal(rec.run_id, kind="retry", cycle=nxt)
            if e.status != "retired"
        }
        return ex, rec

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
        return contract_from_snapshot({**rec.contract, "risk": risk})


def _compensating(store: Store, run_id: str) -> bool:
    """Whether an ended run still has compensations to run (a cancelled run's)."""
    pending = store.latest_checkpoint(run_id).state.get("pending") or {}
    return bool(pending.get("stage") == "compensations")


# Events after which the run was left for a person or ended, each written under the run's lease
# by who held it (a commit, or its holder at once): a park for a person, a rollback, an end.
# The count starts again after one. (A person's decision is none: it is written beside an
# execution, a pause lifted before the run parked among them; the park before it counts.)
_HANDED_OVER = frozenset(
    {
        *("approval_requested", "paused", "still_waiting", "rolled_back"),
        *("stopped", "compensation_reused"),
    }
)
_STARTS = frozenset({"started", "resumed"})
# An execution's word that it stopped alive, naming its lease (``lease``, its fencing token): a
# drain at shutdown, or ``interrupted`` (Ctrl-C, the store failing under it, a lease lost to
# another executor). Matched to the execution by that token, never by where it lies in the
# log: a lost lease is said after the executor that took the run over has started, maybe
# died. A ``drained`` without a lease (written before leases were named) is read as it was
# then: a handoff.
_LEFT_ALIVE = frozenset({"drained", "interrupted"})
LEASE_LOST = "lease lost"  # (the one such word written late, by an executor taken over)
_PAGE = 16  # (a crashed execution leaves one event; a page or two reach the count's end)


def crashes_at(store: Store, run_id: str, cycle: int, token: int | None = None) -> int:
    """How many executions of a ``running`` run died while driving the cycle after ``cycle``
    (its last concluded one) since that cycle concluded: read from the end of its event log at
    resume (each execution commits its ``started``/``resumed`` event, naming its lease, with
    the status, before its first call), never during a cycle (invariant 8). ``token``: the
    lease of the execution asking (the one after the last in the log).

    Read backwards up to a ``_HANDED_OVER`` event. Each execution met (its start event) died
    unless it said it stopped alive (``_LEFT_ALIVE``, by its lease); so did the one that
    concluded ``cycle`` (its ``decision`` met before its start, naming its lease), unless its
    lease said so. (A decision of an older log names none: a word after it, or one by the lease
    before its successor's, a takeover taking the lease before plus one.) An event written
    beside the executions (a person's decision, a worker's or the dashboard's note, a person's
    operation taking the lease between two executions) is passed over."""
    before: int | None = None
    met: list[int | None] = []  # the leases of the executions met (their start events)
    alive: set[int] = set()
    after = token  # the lease of the execution after the one met next
    said = False  # a word written under its lease met since the last start (its execution's)
    concluder = 0  # 1: the execution that concluded ``cycle`` died after it
    while True:
        page = store.events_tail(run_id, before_id=before, limit=_PAGE)
        for e in page:
            kind = e.kind
            if kind in _STARTS:
                lease = _lease(e)
                met.append(lease)
                if e.cycle < cycle:
                    break
                after, said = lease, False
            elif kind in _LEFT_ALIVE:
                lease = _lease(e)
                if lease is None:
                    break
                alive.add(lease)
                said = said or e.data.get("why") != LEASE_LOST
            elif kind in _HANDED_OVER:
                break
            elif kind == "decision" and e.cycle <= cycle:
                # the execution that concluded ``cycle`` (its start further back) died after
                # it, unless it said otherwise by the lease its decision names. A decision of
                # an older log names none: a word under its lease after it, or one said late
                # by the lease before its successor's (a takeover's; a person's operation
                # between them took a lease too, and this over-counted: crash54)
                lease = _lease(e)
                if lease is not None:
                    concluder = 0 if lease in alive else 1
                else:
                    concluder = 0 if said or (after is not None and after - 1 in alive) else 1
                break
        else:
            if len(page) == _PAGE:
                before = page[-1].id
                continue
        # (judged once all is read: a word said as a commit of a group was still on its way
        # may lie before its execution's start)
        return concluder + sum(1 for lease in met if lease is None or lease not in alive)


def _lease(e: Event) -> int | None:
    """The lease an execution's event names (none in a log written before they did)."""
    lease = e.data.get("lease")
    return lease if isinstance(lease, int) and not isinstance(lease, bool) else None


def crash_bound(contract: Contract) -> int:
    """The crashes one cycle may have and still be driven again (``Budget.max_crashes``)."""
    bound = contract.budget.max_crashes
    return DEFAULT_MAX_CRASHES if bound is None else bound


def crash_cause(crashes: int, cycle: int, bound: int) -> str:
    """The stop's words for a run ended by its crash bound."""
    return (
        f"the run's executor crashed {crashes} time{'s' * (crashes != 1)} at cycle {cycle} "
        "(killed, out of memory, "
        f"a crash in native code or os._exit) and budget.max_crashes allows {bound}: escalated "
        "instead of driving the cycle again; find what kills the process, then fork the run"
    )
