"""The engine: one cycle is build context → actor → verifiers → decide → checkpoint.

The engine talks only to the ``Store`` protocol and to plain callables; it imports no backend,
adapter or interface. Each cycle ends in exactly one atomic commit (checkpoint, events, run
row), fenced by the run's lease token, so a crash at any point resumes from the last whole
cycle.

This module holds ``Runtime``: its arguments, run, resume (the execution's start and how it
stopped), result and events. ``Runtime`` inherits the rest from one mixin per seam:
``_resume_ready`` (what ``resume`` reads before it drives), ``_driving`` (``_drive``: what a
resume owes before its first cycle, then the loop of cycles and their boundaries),
``_lease_life`` (the heartbeat, and the wind-down that hands the lease back), ``_run_create``
(``create``), ``_run_many`` (``run_many``: many tasks at once), ``_cycle`` (context → actor →
verifiers; ``_edit_check``: the check-only cycle after a person's edit), ``_conclude`` (effects
→ decide), ``_checkpoint`` (the commit and its durability), ``_parking`` (approval requests and
questions), ``_finishing`` (ending a run), ``_reflection`` (the reflector's note, owed across a
crash); what people do: ``_people`` (``approve``, ``deny``, ``answer``), ``_cancel_rollback``
(``cancel``, ``rollback``), ``_pause`` (``pause``, ``unpause``), ``_settle`` (``settle_effect``:
an effect left in doubt), ``_fork`` (``fork``, ``edit``) and ``_person_async`` (their async
forms, off the event loop); ``_lifecycle`` (``drain``, ``close``). What ``result`` returns, and
the state a result holds, is ``_result``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

from ._backoff import Drained
from ._cancel_rollback import CancelRollback
from ._checkpoint import Checkpoints
from ._conclude import Concluding
from ._contract import TERMINAL_STATUSES
from ._cycle import HELD_OUT_KEY, Cycle
from ._driving import Driving
from ._edit_check import EditCheck
from ._errors import (
    ConfigError,
    ConflictError,
    StaleLeaseError,
    StoreUnavailableError,
    check_seconds,
)
from ._exec import error_info
from ._finishing import Finishing
from ._fork import Forking
from ._group import GroupCommitter, GroupRecall
from ._host import ProgressFn
from ._lease_life import LeaseLife
from ._lifecycle import Lifecycle
from ._live_owners import hold_owner, release_owner
from ._loop import Loop
from ._memory import FeedbackMemory
from ._otel_env import otel_tracing_configured, register_otlp_headers
from ._owners import owner_name
from ._parking import Parking
from ._pause import Pausing
from ._people import Decisions
from ._person_async import PersonAsync
from ._reflection import Reflection
from ._result import (
    Read,  # noqa: F401  (results pickled before it moved name it here)
    RunResult,
    lasting,
)
from ._resume_ready import Resuming
from ._run_create import Creating
from ._run_many import ManyRuns
from ._saying import Saying
from ._settle import Settling
from ._store_folder import missing_schema_error, missing_store_folder
from ._store_threads import loop_running, uncancelled, written
from ._stored_run_words import cost_over_budget, tokens_over_budget
from ._task_parts import say_ignored
from ._usage import Usage
from .store import DEFAULT_STORE, NewEvent, Store, open_store, resolve_store_url

__all__ = ["HELD_OUT_KEY", "RunResult", "Runtime"]

_T = TypeVar("_T")


def _owner() -> str:
    return owner_name()


class Runtime(
    Resuming,
    Driving,
    LeaseLife,
    Creating,
    ManyRuns,
    Cycle,
    EditCheck,
    Concluding,
    Checkpoints,
    Parking,
    Finishing,
    Reflection,
    Forking,
    Decisions,
    CancelRollback,
    Pausing,
    Settling,
    PersonAsync,
    Lifecycle,
):
    """Runs loops durably against a store.

    ``Runtime()`` uses ``./.loopwright/loopwright.db`` (or ``LOOPWRIGHT_STORE``); pass a path, a
    ``sqlite:///…`` URL or a ``Store``. A new store file is made only in a folder that exists
    (``./.loopwright`` excepted): a mistyped path is a ``ConfigError``, not a new, empty store
    where every task runs, and pays, again. ``owner``: the name this runtime's leases are held
    under (default ``host:pid:nonce:space``, unique); one name per process across every host
    on the store: a second open ``Runtime`` with it in this process is refused. Async methods
    have ``*_sync`` twins; a person's operations (``cancel``, ``edit`` ...) are synchronous,
    with ``*_async`` twins that wait off the event loop.
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
        snapshot_every: int = 50,
        history_window: int = 20,
        tracer_provider: Any | None = None,
        calls_in_threads: bool = False,
    ) -> None:
        if isinstance(store, os.PathLike):
            store = os.fspath(store)
        # Every argument is checked before the store is opened: a refused one leaves no store
        # open (or newly created) behind.
        for name, flag in (
            ("calls_in_threads", calls_in_threads),
            ("group_commit", group_commit),
            ("memory", memory),
        ):
            if not isinstance(flag, bool):  # (memory="no" would have turned memory on)
                raise ConfigError(f"must be True or False, got {flag!r}", field=name)
        if owner is not None and (not isinstance(owner, str) or not owner.strip()):
            raise ConfigError(f"must be a non-empty name, got {owner!r}", field="owner")
        if tracer_provider is not None and not callable(
            getattr(tracer_provider, "get_tracer", None)
        ):
            raise ConfigError(
                "must be an OpenTelemetry TracerProvider (with get_tracer), got "
                f"{type(tracer_provider).__name__}",
                field="tracer_provider",
            )
        if on_progress is not None and not callable(on_progress):
            # (called after every commit with its errors suppressed: never a word otherwise)
            raise ConfigError(f"{on_progress!r} is not callable", field="on_progress")
        if store is not None and not isinstance(store, Store | str):
            raise ConfigError(
                f"must be a Store, a path or a store URL, got {type(store).__name__}",
                field="store",
            )
        check_seconds(lease_ttl_s, "lease_ttl_s")
        self.lease_ttl_s = lease_ttl_s
        # A lone run calls sync actors and verifiers on the event loop (the cheap path): its
        # heartbeat waits for the call. True: in threads, as with many runs or in a Worker, so
        # a call longer than the lease does not let another process take the run over.
        self.calls_in_threads = calls_in_threads
        if isinstance(snapshot_every, bool) or not isinstance(snapshot_every, int):
            raise ConfigError("must be a whole number of checkpoints", field="snapshot_every")
        if snapshot_every < 1:
            raise ConfigError("must be at least 1", field="snapshot_every")
        if isinstance(history_window, bool) or not isinstance(history_window, int):
            raise ConfigError("must be a whole number of cycles", field="history_window")
        if history_window < 1:
            raise ConfigError("must be at least 1", field="history_window")
        if not isinstance(store, Store):
            _refuse_missing_folder(store)
        self.owner = owner or _owner()
        if owner is not None:  # (a generated name is unique: nothing to hold)
            hold_owner(owner, self)
        try:
            self.store: Store = store if isinstance(store, Store) else open_store(store)
        except BaseException:
            release_owner(self.owner, self)
            raise
        self._owns_store = not isinstance(store, Store)
        # A checkpoint is a delta from the one before, and every ``snapshot_every``-th a full
        # head, so loading the latest state reads at most that many rows (invariant 8).
        self.snapshot_every = snapshot_every
        # How many recent cycles the state (and the actor's Context.history) keeps.
        self.history_window = history_window
        self.on_progress = on_progress
        self._progress_said = False
        # Called at every phase boundary of a cycle; the crash-point tests kill the process
        # there. Not part of the public API.
        self._on_phase: Callable[[str], None] | None = None
        self._draining = False
        self._active = 0  # runs this runtime is driving right now
        # ...and which, each counted as often as it is driven here: a second drive of a run
        # (a token passed by hand) ending first left a set without the run, and this runtime
        # then took its lease from its own live execution (``_take_lease``; review48)
        self._driving: Counter[str] = Counter()
        self._claiming: Counter[int] = Counter()  # (a worker's claims in flight: ``_host``)
        # Words of executions that stopped alive the store refused (down as they stopped):
        # said again before this runtime's next resume counts crashes (``_say_unsaid``)
        self._unsaid: list[tuple[str, int, int, str, Any]] = []
        self._saying: Saying | None = None  # (one resume says them at a time)
        self.group_commit = group_commit
        self.memory_enabled = memory
        self._memory: FeedbackMemory | None = None
        self._group: GroupCommitter | None = None
        self._recall_group: GroupRecall | None = None
        # Live tracing (issue 20): spans go out through this OpenTelemetry TracerProvider, or
        # one the OTEL_EXPORTER_OTLP_* variables configure; None when neither. Imported here,
        # lazily and only then: the trace package (and opentelemetry) is not loaded otherwise.
        self._live = None
        if tracer_provider is not None or otel_tracing_configured():
            # the exporter's header credentials masked from now on (a provider given builds
            # its exporter from the same variables, unless told otherwise)
            register_otlp_headers()
            from .trace._live import live_tracer

            try:
                self._live = live_tracer(self.store, tracer_provider)
            except BaseException:
                # the owner name freed, the store opened here closed: the runtime being
                # built is kept by the error's traceback (an ``except`` block, a notebook's
                # last error), and a second ``Runtime(owner=...)`` was refused meanwhile
                self.close()
                raise

    # --- lifecycle (``drain``, ``close``: ``_lifecycle``) ------------------------------------
    def __repr__(self) -> str:
        # which store (its URL: a PostgreSQL store's drops the password) and which owner, not
        # ``<loopwright._engine.Runtime object at 0x…>``
        return f"Runtime(store={self.store_where()!r}, owner={self.owner!r})"

    def __enter__(self) -> Runtime:
        return self

    # ``async with Runtime() as rt:`` in async code, as ``with`` in a script (it was a
    # TypeError: the first line an asyncio user writes)
    async def __aenter__(self) -> Runtime:
        return self

    # --- starting and resuming -------------------------------------------------------------
    async def run(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
        by: str | None = None,
    ) -> RunResult:
        """Start (or, for an existing ``task_key``, continue) a run and drive it until it ends
        or parks for approval. The key is ``task_key``, else the task's ``"task_key"`` field
        (an ``"id"`` is not read, unlike a CLI task file); with neither, each call makes a
        new run under a new ``<loop>:<uuid>`` key. ``by``: who starts it (see ``create``)."""
        record, made = self.create(loop, task, task_key=task_key, project=project, by=by)
        if not made and task is not None:
            say_ignored(record, task)  # a changed task under an existing run's key
        return await self.resume(record.run_id, loop)

    def run_sync(
        self,
        loop: Loop,
        task: Mapping[str, Any] | None = None,
        *,
        task_key: str | None = None,
        project: str | None = None,
        by: str | None = None,
    ) -> RunResult:
        return _sync(self.run(loop, task, task_key=task_key, project=project, by=by))

    def run_many_sync(
        self,
        loop: Loop,
        tasks: Iterable[Mapping[str, Any]],
        *,
        concurrency: int = 8,
        key_of: Callable[[Mapping[str, Any], int], str] | None = None,
        by: str | None = None,
    ) -> list[RunResult]:
        """``run_many`` from synchronous code (the class's promise of a ``*_sync`` twin)."""
        return _sync(self.run_many(loop, tasks, concurrency=concurrency, key_of=key_of, by=by))

    async def resume(self, run_id: str, loop: Loop, *, token: int | None = None) -> RunResult:
        """Continue a run from its latest checkpoint (a no-op for an ended run; a parked run
        continues only once its approval request is decided). ``token``: the fencing token of
        a lease this runtime's owner already holds (``Store.claim_runs``)."""
        try:
            running = self._running.start_run(run_id)  # (what ``close`` waits for: _lifecycle)
        except ConflictError:
            if token is not None:  # (a worker's claim, handed back)
                await written(self.store, self.store.release_lease, run_id, token)
            raise
        try:
            return await self._resume(run_id, loop, token)
        finally:
            self._running.end(running)

    async def _resume(self, run_id: str, loop: Loop, token: int | None) -> RunResult:
        held: list[tuple[str, int]] = [] if token is None else [(run_id, token)]
        try:
            if self._unsaid or self._saying is not None:
                await self._say_unsaid()
            ready = await self._ready(run_id, loop, token, held)
        except BaseException:
            # A failure before the drive (a store read under the lease, a damaged checkpoint,
            # a lease handed in with a loop refused): the lease is handed back now, not held to
            # its TTL keeping every other executor from the run (review48). Fenced by its
            # token: a lease taken over since is left as it is. Off the event loop where it
            # can wait on the run's row lock (PostgreSQL): a resume cancelled while its
            # fork's start waited on a row held in psql released here on the loop, and
            # every run of the process waited for that lock with it (review54a).
            for held_id, held_token in held:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await uncancelled(
                        written(self.store, self.store.release_lease, held_id, held_token)
                    )
            raise
        if isinstance(ready, RunResult):
            return ready
        ex, rec = ready
        beat = asyncio.create_task(self._heartbeat(ex))
        self._active += 1
        if token is not None:  # (else counted since ``_ready`` took the lease, and kept)
            self._count_driven(rec.run_id)
        unavailable: StoreUnavailableError | None = None
        answered = False  # whether the store took the lease back (it answers again)
        opened = ex.seq  # (a commit since wrote this execution's start event: ``_said_alive``)
        alive: str | None = None  # how it stopped, alive, leaving the run resumable
        try:
            # (its lease named: an execution that stops alive says so by it, ``crashes_at``)
            started: dict[str, Any] = {"owner": self.owner, "lease": ex.token}
            selfish = [c.name for c in loop.checks if loop.self_reviewing(c)]
            if selfish:
                started["self_review_allowed"] = selfish  # recorded: the user said so
            ex.events.append(NewEvent(ex.state.cycle, "resumed" if ex.seq else "started", started))
            with contextlib.suppress(Drained):  # a retry's backoff cut short: resumable
                await self._drive(ex, rec)
            pend = ex.state.pending
            parked = (
                "approval_id" in pend
                if pend
                else ex.row_status == "awaiting_approval"  # (paused: ``_pause``)
            )
            if await self._settle(ex) and parked:
                # Cancelled while the cycle that parked was in flight: do not leave a person
                # a decision on a cancelled run.
                why = "cancellation requested while it was being verified"
                if self._stop_asked(ex, why, boundary=False):
                    await self._settle(ex)
        except StaleLeaseError:
            ex.lost = True
            raise
        except ConfigError:
            # a user mistake (e.g. resumed with the wrong loop): the run stays resumable
            alive = "ConfigError"
            raise
        except StoreUnavailableError as exc:
            # The store failed, not the run: nothing is marked failed (the write would fail too,
            # or, after a dropped connection, end a healthy run). Judged below, once the lease
            # is handed back.
            unavailable, alive = exc, "store unavailable"
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
        except (KeyboardInterrupt, SystemExit, asyncio.CancelledError) as exc:
            # Ctrl-C (KeyboardInterrupt, or the task cancelled), SystemExit: the process stops
            # alive, the run resumable; no crash (``crashes_at``). Another ``BaseException`` is
            # not known to leave the process alive (the test suite's simulated kills are such):
            # it says nothing, and counts as a crash, the safe side of the bound.
            alive = type(exc).__name__
            raise
        finally:
            self._active -= 1
            # Wound down to its lease's release even if cancelled again meanwhile (a second
            # Ctrl-C, ``asyncio.run``'s teardown cancelling what a ``gather`` left): cancelled
            # there, the release was skipped and the run shown running until its lease expired
            # (crash53b). The cancellation is raised once it is done (``_wind_down``).
            try:
                answered = await self._wind_down(ex, beat, opened, alive)
            finally:
                self._undrive(rec.run_id)  # (once its lease is handed back)
        # A store failure leaves the run as its last durable checkpoint has it; its lease
        # expires (or was handed back) and any worker, or `resume`, goes on. Unless the commit
        # that failed ended (or parked) it, durable with its answer lost: then the run ended
        # here and its result is returned (pg52: a worker counted it interrupted, "resume it",
        # and never reported it ended). Asked only of a store that answered the release: one
        # still down is not waited for twice.
        if unavailable is not None and not (answered and self._ended_here(ex, rec)):
            raise StoreUnavailableError(
                f"{unavailable} — run {rec.run_id} is left as its last checkpoint has it; resume "
                f"it when the store is back (loopwright resume {rec.run_id})"
            ) from unavailable
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
            spent=Usage._stored(rec.cost_usd, rec.tokens, rec.seconds),
            packet=rec.packet,
            state=lasting(
                ck.task_state(), self.store, rec.run_id, ended=rec.status in TERMINAL_STATUSES
            ),
            held_out_passed=rec.held_out_passed,
            held_out_self_reported=rec.held_out_self_reported,
            over_budget_usd=cost_over_budget(rec) or None,
            over_budget_tokens=tokens_over_budget(rec) or None,
        )

    def events(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        follow: bool = True,
        until: Literal["parked", "ended"] = "parked",
        poll_s: float = 0.5,
    ) -> AsyncIterator[dict[str, Any]]:
        """The run's events as they are written, whoever drives it (this process, another, a
        worker elsewhere): ``async for line in rt.events(run_id)``. Each is a line of the
        ``loopwright.trace/1`` format (docs/trace.md: ``seq``, ``kind``, ``cycle``, ``data``,
        ``event_id``...), secrets masked, as ``loopwright trace`` prints it.

        ``after_seq``: the ``seq`` of the last line handled; the lines after it come, each
        once (a consumer that reconnects passes what it last handled). ``follow=False``: the
        lines written so far, then stop. ``until``: ``"parked"`` stops once the run ends or
        parks for a person (as ``run`` returns; a parked run whose request is decided is
        followed through its resume), ``"ended"`` only once it ends. While nothing
        comes it looks again after ``poll_s`` seconds, doubling up to 5. A run nobody drives
        is waited for (a worker may claim it): break out, or bound it (``asyncio.timeout``).
        A mistake (an unknown run, an ``after_seq`` past the run's log) is raised here."""
        from .trace._follow import follow_events

        return follow_events(
            self.store, run_id, after_seq=after_seq, follow=follow, until=until, poll_s=poll_s
        )

    def events_sync(
        self,
        run_id: str,
        *,
        after_seq: int = 0,
        follow: bool = True,
        until: Literal["parked", "ended"] = "parked",
        poll_s: float = 0.5,
    ) -> Iterator[dict[str, Any]]:
        """``events`` for synchronous code (``for line in rt.events_sync(run_id)``): its waits
        block the calling thread. Following (``follow=True``) inside a running event loop (a
        notebook, an async function) is refused, as the other ``*_sync`` methods are: its
        waits would stop that loop, and a run driven on it, too."""
        from .trace._follow import follow_events_sync

        if follow is True and loop_running():
            raise RuntimeError(
                "events_sync() was called inside a running event loop (a notebook, an async "
                "function), where its waits would stop the loop; iterate the async one: "
                "`async for line in rt.events(...)` (or pass follow=False for what is "
                "written so far)"
            )

        return follow_events_sync(
            self.store, run_id, after_seq=after_seq, follow=follow, until=until, poll_s=poll_s
        )


def _refuse_missing_folder(store: str | None) -> None:
    """``ConfigError`` when the store named (or ``$LOOPWRIGHT_STORE``) is an SQLite file, not
    there yet, in a folder that does not exist, or a PostgreSQL ``?schema=`` its database
    lacks (``_store_folder``): not made, as the CLI's ``--store`` is not. The user makes the
    folder (the schema) to start a store there."""
    url = resolve_store_url(store)
    source, instead = (
        ("the store argument", "leave the store out")
        if store
        else ("$LOOPWRIGHT_STORE", "unset LOOPWRIGHT_STORE")
    )
    schema_error = missing_schema_error(url, source)
    if schema_error is not None:
        raise schema_error
    missing = missing_store_folder(url)
    if missing is None:
        return
    path, folder = missing
    # (a path is read as it is: `~/runs/lw.db` named a folder `~` here, made before api49)
    tilde = " (a '~' is not expanded: pass os.path.expanduser(path))" if "~" in path else ""
    raise ConfigError(
        f"no folder {folder} for the store {path} (from {source}): the folder does not "
        f"exist{tilde}, and a new store there would run every task, and its effects, "
        f"again. Create it first (os.makedirs({str(folder)!r}, exist_ok=True)) to start a "
        f"new store there, or {instead} for the default ./{DEFAULT_STORE} (created when "
        "missing)",
        field="store",
    )


def _sync(coro: Coroutine[Any, Any, _T]) -> _T:
    if loop_running():
        # named (``run_sync`` in a notebook cell: "a *_sync method" left the user to guess
        # which, and what to write instead)
        name = getattr(coro, "__name__", "run")
        coro.close()
        raise RuntimeError(
            f"{name}_sync() was called inside a running event loop (a notebook, an async "
            f"function), where it cannot wait; await the async one: `await rt.{name}(...)`"
        )
    # (run outside the ``except``: inside it, every error of the run, the user code's and the
    # one raised to the caller, would be chained to "no running event loop")
    return asyncio.run(coro)
