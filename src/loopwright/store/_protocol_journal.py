"""The Store protocol's effect/retry journal and the store-wide effect claims
(``JournalStore``, part of ``Store``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from ._records import EffectClaim, EffectReuse, JournalEntry, JournalWrite, NewEvent

__all__ = ["JournalStore"]


class JournalStore(ABC):
    """The effect/retry journal (mixed into ``Store``)."""

    # --- effect/retry journal -----------------------------------------------------------
    @abstractmethod
    def journal_put(
        self,
        run_id: str,
        token: int,
        *,
        key: str,
        kind: str,
        cycle: int,
        status: str,
        data: Mapping[str, Any],
        attempts: int | None = None,
        expect_status: str | None = None,
        events: Sequence[NewEvent] = (),
        claim: tuple[str, str, str] | None = None,
        lazy: bool = False,
        audit: Mapping[str, Any] | None = None,
    ) -> JournalEntry:
        """Insert or update the journal entry ``(run_id, key)`` and append ``events``, in one
        transaction. ``lazy``: the write must survive the process, not the machine (a call's
        bill, written ahead of the commit that records it: that commit syncs both), so a store
        may commit it without waiting for the disk; a store may also ignore it. An update keeps ``created_at`` and sets ``updated_at`` to now;
        ``attempts=None`` keeps the stored count (0 for a new entry).

        ``expect_status`` guards the write: ``""`` means the entry must not exist yet, any
        other string means it must exist with exactly that status; otherwise ``ConflictError``.
        A stale ``token`` raises ``StaleLeaseError``. Either error writes nothing.

        ``claim=(effect kind, idempotency key, hash of the arguments)`` makes the key the
        store's, not the run's (invariant 2 per business action), in the same transaction:
        an ``intent`` takes the key for this run — unless another run holds it (done, or not
        known to have failed or been undone): then ``EffectKeyHeld`` says which run and how,
        and nothing is written; any other status is recorded on this run's claim (``done``
        with ``data["result"]``; ``failed`` and ``compensated`` free the key: an intent of any
        run, its own included, takes it back as ``claimed``; ``failed`` with ``data["spent"]``
        is recorded ``refused``, which frees it for the next generation as ``compensated``
        does). A ``done`` entry with ``data["from_run"]`` (another run's result reused) leaves
        the claim as it is, and is written only while that run's claim is still ``done``:
        otherwise ``EffectKeyHeld`` with the claim as it is now, and nothing is written;
        the reuse is recorded on the claim (``effect_reuses``). An ``undoing`` entry whose
        ``data["reusers_known"]`` lists run ids starts the undoing only when every run that
        reused the action is among them (``EffectReused`` otherwise, nothing written); a
        ``compensated`` one appends an ``effect_reuse_refunded`` event to each such run (the
        ``undoing`` one, an ``effect_reuse_refunding`` event; a ``done`` one putting an
        undoing back, the refund refused, an ``effect_reuse_refund_refused`` event).

        ``audit``: the record of a person's write (``audit_put``'s fields: a settling),
        written in the same transaction: neither lands without the other."""

    def journal_put_all(
        self,
        run_id: str,
        token: int,
        writes: Sequence[JournalWrite],
        *,
        packet: Mapping[str, Any] | None = None,
        audit: Mapping[str, Any] | None = None,
    ) -> list[JournalEntry]:
        """Several ``journal_put`` writes (each with its expectation, claim and events) under
        the run's lease ``token``, the run's ``packet`` replaced (``None``: kept) and the
        ``audit`` record of the person's write, all in ONE transaction: a settling of a
        refund, whose payment's entries, compensation, rewritten packet and record must
        stand or fall together. Any error writes nothing. The entries as written, in order.

        A store of one's own that does not override it gets these writes one by one, each in
        its own transaction, the record last, and its packet left as it was (it has no other
        way to write one outside a commit)."""
        got = [
            self.journal_put(
                run_id, token, key=w.key, kind=w.kind, cycle=w.cycle, status=w.status,
                data=w.data, expect_status=w.expect_status, events=w.events, claim=w.claim,
            )
            for w in writes
        ]  # fmt: skip
        if audit is not None:
            self.audit_put(**audit)  # type: ignore[attr-defined]  # (Store's, mixed in)
        return got

    @abstractmethod
    def effect_claim(self, kind: str, key: str) -> EffectClaim | None:
        """The store-wide claim of the business effect key ``key`` of ``kind``, or ``None``
        when no run ever claimed it (``journal_put``'s ``claim``)."""

    def effect_claims(
        self, pairs: Collection[tuple[str, str]]
    ) -> dict[tuple[str, str], EffectClaim]:
        """The claims of several ``(kind, key)`` pairs at once, as ``effect_claim`` reads
        each (a backend reads them in one query): a pair never claimed is left out."""
        out: dict[tuple[str, str], EffectClaim] = {}
        for kind, key in dict.fromkeys(pairs):
            claim = self.effect_claim(kind, key)
            if claim is not None:
                out[(kind, key)] = claim
        return out

    def effect_reuses(self, kind: str, key: str) -> list[EffectReuse]:
        """The runs that reused the recorded result of the claim of ``key`` of ``kind`` (its
        current generation), oldest first: ``journal_put`` records them with the reuse, and
        ``create_run`` the forks that inherit the action done. A store that records none
        (this default) has its refunds run as their rules say."""
        return []

    @abstractmethod
    def journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        key: str | None = None,
        cycle: int | None = None,
    ) -> list[JournalEntry]:
        """A run's journal entries (optionally of one ``kind``, one ``key``, one ``cycle``),
        oldest first (by ``created_at``, then ``key``)."""

    def journal_where(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        after_cycle: int | None = None,
        statuses: Collection[str] | None = None,
        keys: Collection[str] | None = None,
        limit: int | None = None,
        upto_cycle: int | None = None,
    ) -> list[JournalEntry]:
        """The run's journal entries that match every filter given (of ``kind``, of a cycle
        above ``after_cycle`` and at most ``upto_cycle``, with one of ``statuses``, under one
        of ``keys``), oldest first as ``journal`` gives them, at most ``limit`` (the oldest):
        what a rollback, a cancel or a fork reads (the effects after its point, their
        compensations by key, the entries in flight, the failed ones, the done effects up to
        a fork's cycle), not the long run's every entry; a store that can reads only those
        rows. This default reads ``journal`` (by key when ``keys`` are given) and filters."""
        if keys is not None:
            found = [e for k in dict.fromkeys(keys) for e in self.journal(run_id, key=k)]
            found.sort(key=lambda e: (e.created_at, e.key))
        else:
            found = self.journal(run_id, kind=kind)
        out = [
            e
            for e in found
            if (kind is None or e.kind == kind)
            and (after_cycle is None or e.cycle > after_cycle)
            and (upto_cycle is None or e.cycle <= upto_cycle)
            and (statuses is None or e.status in statuses)
        ]
        return out if limit is None else out[: max(limit, 0)]

    def count_journal(
        self,
        run_id: str,
        *,
        kind: str | None = None,
        statuses: Collection[str] | None = None,
        limit: int | None = None,
    ) -> int:
        """How many of the run's journal entries are of ``kind`` with one of ``statuses``,
        counted up to ``limit`` (``limit=1``: whether there is one): what ``loopwright
        cancel`` tells of the done effects it could not offer to undo, whether a cancel or a
        rollback without its loop left any; the built-in stores count in the database and
        stop at ``limit``. This default reads ``journal_where``."""
        return len(self.journal_where(run_id, kind=kind, statuses=statuses, limit=limit))
