"""Exceptions raised by loopwright.

The tree::

    LoopwrightError                 root of everything raised on purpose
    ├── ConfigError                 a user mistake: bad contract, spec, task file or argument
    │   └── SpecError               a loop spec (TOML) that cannot be loaded
    ├── StoreError                  the durable store failed or refused
    │   ├── StoreCorruptError       not a loopwright store, damaged, or a newer schema
    │   ├── StoreUnavailableError   the store failed for now (connection lost, locked, disk
    │   │                           full): runs stay resumable, nothing is marked failed
    │   ├── ConflictError           an optimistic write lost a race
    │   │   └── EffectKeyHeld       another run holds an effect's idempotency key
    │   └── StaleLeaseError         a write with an old fencing token (another executor owns the run)
    ├── RunNotFoundError            no run with that id or task key
    ├── MemoryNotFoundError         no feedback-memory item with that id (loopwright._memory)
    └── ApprovalError               no such pending request, or it was already decided

Errors raised by user code (actors, verifiers) are never wrapped in these: the engine records
them in the run's escalation packet instead of letting them escape.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "ApprovalError",
    "ConfigError",
    "ConflictError",
    "EffectKeyHeld",
    "LoopwrightError",
    "NotPermittedError",
    "RunNotFoundError",
    "SpecError",
    "StaleLeaseError",
    "StoreCorruptError",
    "StoreError",
    "StoreUnavailableError",
]


class LoopwrightError(Exception):
    """Root of every error loopwright raises on purpose."""


class ConfigError(LoopwrightError, ValueError):
    """Invalid configuration; the message names the field at fault. ``str(e)`` is
    ``"field: message"`` (or ``message`` with no field); ``field`` and ``message`` are the two
    halves, for a caller that says the same under another name or place (no text to split).
    A field set after the error is made (``e.field = ...``) names it without changing the
    text: ``message`` is then the whole text."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)

    def __reduce__(self) -> tuple[Any, ...]:
        # Made again as it was, not through ``__init__`` (a subclass may take other arguments):
        # its text, field and message as they are. (Made again from the message alone, it
        # lost its "field: " in another process.)
        return (_made_again, (type(self), self.args), dict(self.__dict__))


def _made_again(cls: type[ConfigError], args: tuple[Any, ...]) -> ConfigError:
    """A pickled ``ConfigError`` with its text (``args``); pickle then restores its fields."""
    return cls.__new__(cls, *args)


def check_choice(value: object, choices: Sequence[str], field: str) -> None:
    """Refuse a value outside ``choices`` in the one wording every enum refusal uses:
    ``--status: must be one of queued, running, ... (got 'done')``."""
    if value not in choices:
        raise ConfigError(f"must be one of {', '.join(choices)} (got {value!r})", field=field)


def check_seconds(value: object, field: str) -> None:
    """Refuse what is not a positive, finite number of seconds (a bool, text, 0, NaN: a NaN
    timeout never ran out, every comparison with it being false)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ConfigError(
            f"must be a positive, finite number of seconds, got {value!r}", field=field
        )


class SpecError(ConfigError):
    """A loop spec that cannot be loaded or validated."""


class StoreError(LoopwrightError):
    """The store failed or refused an operation."""


class StoreCorruptError(StoreError):
    """The store file is not a loopwright store, is damaged, or was written by a newer version."""


class StoreUnavailableError(StoreError):
    """The store could not be used just now (a dropped connection, a lock held too long, a full
    disk): nothing of the failed write was kept. Not a run failure — the run is left as its last
    durable checkpoint has it, to be resumed."""


class ConflictError(StoreError):
    """An optimistic write lost a race with another writer."""


class StaleLeaseError(StoreError):
    """A write carried a fencing token that is no longer current: another executor owns the run."""


class EffectKeyHeld(ConflictError):
    """Another run of the store holds this effect's idempotency key (it did the action, or
    may be doing it): the journal write that would start it again wrote nothing.
    ``generation``: the redo generation the holder was handed (1: the key itself; ``n``: the
    key with ``~n``), which may not be the one the writer read before its write."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        status: str,
        args_hash: str,
        result: object,
        generation: int = 1,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status
        self.args_hash = args_hash
        self.result = result
        self.generation = generation


class EffectKeyMoved(ConflictError):
    """An intent asked for a redo generation of an undone action that is no longer the next
    one (another run took the action since it was read): nothing was written; read the
    claim again (``Store.effect_claim``) and ask for ``generation``."""

    def __init__(self, message: str, *, generation: int) -> None:
        super().__init__(message)
        self.generation = generation


class EffectReused(ConflictError):
    """The undoing of an action (a refund) would start while runs that reused its result are
    not among those a person was told of (``runs``: every run that reused it, each
    ``(run_id, status)``): nothing was written; a person decides, told of them."""

    def __init__(self, message: str, *, runs: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.runs = runs


class RunNotFoundError(LoopwrightError, LookupError):
    """No run matches the given id or task key."""


class ApprovalError(LoopwrightError):
    """An approval decision that cannot be applied (unknown, or already decided)."""


def already_decided(run_id: str, approval_id: str, status: str, by: str | None) -> ApprovalError:
    """The one wording of "this request was decided already", whichever check finds it: the
    engine's, reading the request before deciding, or the store's, deciding after another
    person's decision committed (stop 50: the store said "approval X was already denied", the
    engine "run R: request X was already denied": one situation, two messages)."""
    return ApprovalError(
        f"run {run_id}: request {approval_id} was already {status}" + (f" by {by}" if by else "")
    )


class NotPermittedError(LoopwrightError):
    """A person tried what their roles, limits or the approval rule do not allow (refused and
    recorded in the audit log; CLI exit 2, HTTP 403)."""
