"""``resume`` up to its drive: the run read again under its lease, its execution built from the
latest checkpoint (state, contract, the history window, the retries its next cycle has used).
Apart from ``_engine`` so that ``resume`` there reads as an execution's start and how it stopped
(its drive: ``_driving``; its wind-down: ``_lease_life``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._contract import TERMINAL_STATUSES, Contract, contract_from_snapshot
from ._errors import ConfigError
from ._exec import Execution as _Exec
from ._exec import fit_history
from ._host import RuntimeHost
from ._loop import Loop, check_loop, other_loop
from ._state import TaskState
from ._store_threads import written
from ._usage import Usage
from .store import RunRecord, Store

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
            # (counted as driven by this runtime from the take: its writes below wait off the
            # loop (PostgreSQL), and a second resume or an edit of this runtime meanwhile took
            # the lease again, this one fenced out; an execution returned keeps the count,
            # ``resume``'s until its lease is handed back: let go here and counted again
            # there, an operation in another thread found the run free between the two and
            # took its lease, the execution fenced out, review56a)
            token = await self._lease_to_drive(rec.run_id)
            handed = False
            try:
                got = await self._taken(rec, loop, token, held)
                handed = isinstance(got, tuple)
                return got
            finally:
                if not handed:
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
        if rec.fenced:  # (read under the lease: a word said after it is left to the next)
            _fold_fenced(ex, rec.fenced)
        ex.charged = ex.state.spent.to_dict()  # (what the store holds charged: ``_lease_life``)
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


def _fold_fenced(ex: _Exec, fenced: Mapping[str, Any]) -> None:
    """What executions fenced out of the run spent and no commit charged (the run's
    ``fenced_*``), charged to the state now, before the budgets are checked, the held-out share
    kept from what the actor is shown (invariant 3); the commit that writes it takes it off the
    row (``ex.unfolded``), so that it is counted once: by the row until then, by the state
    after (fenced56)."""
    s = ex.state
    usage = Usage.from_dict(dict(fenced))
    held = Usage.from_dict(fenced.get("held_out"))
    s.spent = s.spent + usage
    if held.cost_usd or held.tokens:
        s.held_out_spent = s.held_out_spent + held
    ex.unfolded = {
        "fenced_cost_usd": usage.cost_usd,
        "fenced_tokens": usage.tokens,
        "fenced_seconds": usage.seconds,
        "fenced_held_cost_usd": held.cost_usd,
        "fenced_held_tokens": held.tokens,
    }
