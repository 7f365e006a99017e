"""The Store protocol: everything the engine persists goes through these methods.

The engine relies on transactions only (never on file locks or SQLite quirks), so a PostgreSQL
implementation can satisfy the same protocol. Every write that belongs to a running run carries
the run's fencing token; a store must reject a write whose token is not the current one.

Each part of the protocol is a class of its own module (``_protocol_runs``,
``_protocol_checkpoints``, ``_protocol_commit``, ``_protocol_journal``, ``_protocol_approvals``,
``_protocol_memory``, ``_people``, ``_live``); ``Store`` is made of them all. The records and
helpers the protocol speaks in are re-exported here, their home before the split.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self

from ._live import LiveStore
from ._people import PeopleStore
from ._protocol_approvals import approvals_matching  # noqa: F401  (re-exported)
from ._protocol_checkpoints import CheckpointsStore
from ._protocol_commit import CommitStore
from ._protocol_journal import JournalStore
from ._protocol_memory import MemoryStore
from ._records import (  # noqa: F401  (re-exported: their home before the split)
    VERSION_COST,
    Approval,
    Checkpoint,
    CheckpointRow,
    ClosedApproval,
    CommitRequest,
    EffectClaim,
    EffectReuse,
    Event,
    JournalEntry,
    MemoryFound,
    MemoryRecall,
    MemorySearch,
    NewApproval,
    NewEvent,
    RunRecord,
    VersionRow,
    concluded_cycles,
    own_fields,
)

# (re-exported, explicitly for mypy: the engine and third-party code import it from here)
from ._with_newer import with_newer as with_newer  # noqa: PLC0414

__all__ = [
    "Approval",
    "Checkpoint",
    "CheckpointRow",
    "CommitRequest",
    "Event",
    "JournalEntry",
    "MemoryFound",
    "MemoryRecall",
    "MemorySearch",
    "NewApproval",
    "NewEvent",
    "RunRecord",
    "Store",
    "VersionRow",
]


class Store(LiveStore, PeopleStore, CheckpointsStore, CommitStore, JournalStore, MemoryStore, ABC):
    """Durable storage for runs, checkpoints, events and approvals."""

    # Whether one run's write can wait (on a row lock another session holds) while other runs'
    # writes go through: PostgreSQL. The engine then writes a cycle's commits, and a run's
    # lease and journal writes, from threads, so that a run whose row is locked does not stop
    # the event loop every run of the process shares (evloop53). False (SQLite, the default
    # for a store of one's own): one write lock for the whole store, which every run's next
    # write waits on anyway; written on the event loop, which costs less (docs/decisions.md).
    concurrent_writers: bool = False
    # How many connections the store holds at most (its pool's size), where a write waiting on
    # a row lock holds one for the wait: a person's operations awaited off the event loop take
    # at most half of them at once (``_person_gate``). None: no such bound (SQLite).
    connections: int | None = None

    def __repr__(self) -> str:
        where = getattr(self, "url", None)
        return f"<{type(self).__name__} {where}>" if where else super().__repr__()

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
