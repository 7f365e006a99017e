"""The Store protocol's runs and leases: creating, reading and listing runs; a run's lease and
its fencing token (``RunsStore``, part of ``Store``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from typing import Any

from ._records import JournalEntry, RunRecord, VersionRow

__all__ = ["RunsStore"]


class RunsStore(ABC):
    """The runs and their leases (mixed into ``Store``)."""

    url: str

    # --- runs ---------------------------------------------------------------------------
    @abstractmethod
    def create_run(
        self,
        *,
        run_id: str,
        task_key: str,
        loop_name: str,
        project: str,
        spec_ref: str | None,
        loop_version: str | None,
        contract: dict[str, Any],
        task: dict[str, Any],
        initial_state: dict[str, Any],
        initial_versions: Sequence[VersionRow] = (),
        forked_from: tuple[str, int] | None = None,
        inherited: Sequence[JournalEntry] = (),
        initial_rejected: Sequence[tuple[str, int]] = (),
        created_by: str | None = None,
        copy_versions: Sequence[tuple[str, str, int]] = (),
        copy_effects: tuple[str, int] | None = None,
        copy_rejected: tuple[str, int] | None = None,
        fork_seq: int | None = None,
        maker_starts: bool | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create a run with its first checkpoint (a full state, and its version rows), or
        return the existing run with that ``task_key``. Returns ``(run, created)``.

        ``copy_versions`` (a fork's: ``(origin_run_id, ref, upto)`` each) copies the origin's
        stored versions 1..``upto`` of part ``ref`` to the new run, in the same transaction,
        before ``initial_versions`` are written over them (``LookupError`` when one is
        missing). A store whose ``create_run`` predates it is given every version in
        ``initial_versions`` instead (``Runtime.fork`` asks through ``with_newer``).

        ``copy_effects`` (a fork's: ``(origin_run_id, upto_cycle)``) copies, in the same
        transaction, the origin's done effect entries (``kind="effect"``, ``status="done"``)
        of cycles up to ``upto_cycle``, written as ``inherited`` writes them (their data with
        ``inherited_from``: the origin's own when set, else the origin's run id), none read
        into Python (not with ``inherited`` too: one key each). A store whose ``create_run``
        predates it is given them as ``inherited``.

        ``copy_rejected`` (a fork's: ``(origin_run_id, upto_cycle)``) copies, in the same
        transaction, the digests the origin rejected up to ``upto_cycle``, as
        ``initial_rejected`` writes them, none read into Python. A store whose ``create_run``
        predates it is given them as ``initial_rejected``.

        ``fork_seq`` (a fork's): the ``seq`` of the origin's checkpoint the fork starts from,
        kept in the fork's ``run_created`` event (``data["forked_from"]["seq"]``), so that what
        the fork inherited is found by it, not by comparing times written on two hosts'
        clocks. A store whose ``create_run`` predates it is not given it (``Runtime.fork``
        asks through ``with_newer``); its forks are found by time, as before.

        A fork (``forked_from=(run_id, cycle)``) is created in the same one transaction with
        the origin's journal entries it inherits (``inherited``: done effects, kept under their
        keys and marked inherited, so they are not done again) and the digests of proposals
        the origin rejected up to that cycle (``initial_rejected``). Each business action it
        inherits done (``data["action"]``) whose claim still says done by the run that did it
        (``from_run``, else ``inherited_from``, at the entry's ``generation``) is recorded,
        in that transaction, as reused by the fork (``effect_reuses``): the fork relies on it
        as a run that reused it does. ``created_by``: the person who started it, when known
        (the requester, for separation of duties).

        ``maker_starts`` (a fork's): no worker claims the run (``claim_runs``) until someone
        starts it (``mark_started``, which ``Runtime.resume`` calls under its lease): a fork
        is made to be edited or reviewed first. A store whose ``create_run`` predates it is
        not given it (``Runtime.fork`` asks through ``with_newer``); its forks are claimable
        at once, as before."""

    @abstractmethod
    def get_run(self, run_id: str) -> RunRecord:
        """The run with this id, or with an id starting with this prefix (unique), or with this
        task key. Raises ``RunNotFoundError``, also when ``run_id`` is one run's task key and,
        8 characters or more, the start of another run's id (a whole run id always names its
        run). A prefix is compared as written."""

    @abstractmethod
    def list_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        limit: int | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
        after: tuple[float, str] | None = None,
        since: float | None = None,
        until: float | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first (by ``created_at``, then ``run_id``). ``search``: a
        case-insensitive substring of the task key, loop, project, stop reason or packet, or a
        run id prefix; ``after``: the ``(created_at, run_id)`` of the last run of the previous
        page (keyset pagination); ``since``/``until``: epoch seconds, ``since ≤ created_at ≤
        until`` (either optional), selected by the database, so a window reads only its runs.
        The built-in stores refuse a ``search`` over 1,000 characters, or with a NUL, with a
        ``ConfigError`` naming ``search``, and a ``status`` not in ``RUN_STATUSES`` with one
        naming ``status`` and the statuses allowed (a misspelt one matched no run)."""

    @abstractmethod
    def count_runs(
        self,
        *,
        status: str | None = None,
        project: str | None = None,
        loop_name: str | None = None,
        stop_reason: str | None = None,
        search: str | None = None,
    ) -> int:
        """How many runs ``list_runs`` would return with these filters and no limit."""

    def run_projects(self) -> list[str]:
        """The distinct non-empty projects of the runs, sorted."""
        return sorted({r.project for r in self.list_runs() if r.project})

    def run_loops(self) -> list[str]:
        """The distinct non-empty loop names of the runs, sorted. (Added in a later release
        than ``run_projects``: a store written before it is served by this default.)"""
        return sorted({r.loop_name for r in self.list_runs() if r.loop_name})

    def first_accepted(self, loop_names: Sequence[str]) -> dict[tuple[str, str], float]:
        """(loop name, loop version) → the earliest ``ended_at`` of an accepted run of it, over
        the whole store, for the loops named (runs without a version or an end are left out)."""
        first: dict[tuple[str, str], float] = {}
        for name in sorted(set(loop_names)):
            for r in self.list_runs(status="accepted", loop_name=name):
                if r.ended_at is None or r.loop_version is None:
                    continue
                key = (r.loop_name, r.loop_version)
                first[key] = min(first.get(key, r.ended_at), r.ended_at)
        return first

    # --- leases -------------------------------------------------------------------------
    @abstractmethod
    def acquire_lease(self, run_id: str, owner: str, ttl_s: float) -> int:
        """Take the run's lease and return a new fencing token. Raises ``ConflictError`` when
        another live owner holds it."""

    @abstractmethod
    def claim_runs(
        self,
        owner: str,
        ttl_s: float,
        *,
        limit: int = 1,
        now: float | None = None,
        exclude: Collection[str] | None = None,
    ) -> list[tuple[str, int]]:
        """Atomically claim up to ``limit`` runnable runs for ``owner``; returns
        ``(run_id, fencing_token)`` for each, oldest ``updated_at`` first. Runs named in
        ``exclude`` are never claimed: a worker names those it is driving, so that after a
        freeze longer than their leases it does not take its own runs over (fencing its own
        cycles in flight, to do them again).

        Runnable: status ``pending`` or ``running``, or ``awaiting_approval`` with no pending
        approval request (decided, so the run can go on), but never a run its maker starts
        (``maker_starts``: a fork nobody has started); and the lease free (no owner, no
        expiry) or expired (``lease_expires_at < now``; ``now`` defaults to the store's clock —
        the database server's on PostgreSQL — and one passed in is used as is, a hook for
        tests). A claim is exactly an ``acquire_lease`` of each run: owner set, expiry ``now +
        ttl_s``, fencing token incremented, so a previous holder's writes are refused from then
        on. Unlike ``acquire_lease`` it never takes a live lease over — except, on SQLite (one
        host by nature), one held by a process of this host that no longer exists.

        Concurrent claimers (threads, processes, hosts) never claim the same run and never
        wait for each other's choice: PostgreSQL locks candidates with ``FOR UPDATE SKIP
        LOCKED``; SQLite claims in one ``BEGIN IMMEDIATE`` transaction."""

    def mark_started(self, run_id: str, token: int) -> None:
        """The run is started by whoever made it (``RunRecord.maker_starts`` cleared), under
        the lease ``token`` they hold (a stale token writes nothing): from then on it is
        claimable as any run. This default does nothing (a store without the mark has none to
        clear)."""
        return

    @abstractmethod
    def renew_lease(self, run_id: str, token: int, ttl_s: float) -> None:
        """Extend a held lease; ``StaleLeaseError`` when the token is no longer current or
        the lease was released (a renewal landing after the release writes nothing)."""

    @abstractmethod
    def release_lease(self, run_id: str, token: int) -> None:
        """Give the lease up (no error when it was already taken over)."""
