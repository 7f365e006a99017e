"""The people part of the Store protocol: users, token hashes, votes, the audit log, and the
record earned authority is read from (docs/permissions.md).

Kept apart from ``_base`` so the run/checkpoint protocol stays readable; ``Store`` inherits it.
A store that keeps no people (a custom one) inherits these defaults: no users, so local use
stays open, and writes that need the tables say so in one line.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import StoreError

if TYPE_CHECKING:
    from ._base import Approval, NewApproval

__all__ = ["AuditRecord", "AuthorityRecord", "PeopleStore", "UserRecord", "Vote", "person_key"]


# Cyrillic and Greek letters that print as a Latin one (in lower or upper case: names are
# compared without case, so "ΒΕΝ" is "BEN" is "ben"), as their case-folded forms. NFKC keeps
# them apart from Latin, so "аna" (a Cyrillic a) was a second user beside "ana", votes as
# a second person on a four-eyes request, and reads as "ana, аna" in `decided_by`.
_LOOKALIKES = str.maketrans(
    "аеорсухіјѕԁԛԝвнкмтӏһүαβεζηικμνορτυχϳ",
    "aeopcyxijsdqwbhkmtlhyabezhikmnoptyxj",
)


def person_key(name: str) -> str:
    """A name as people are told apart, not as typed: compatibility forms folded (NFKC: a
    fullwidth "ｂen" is "ben"), invisible format characters dropped (U+200B: "be\u200bn" prints
    as "ben"), spaces around it and letter case ignored, and a Cyrillic or Greek letter that
    prints as a Latin one read as that letter (a Cyrillic "аna" is "ana")."""
    folded = unicodedata.normalize("NFKC", name)
    kept = "".join(c for c in folded if unicodedata.category(c) != "Cf").strip().casefold()
    return kept.translate(_LOOKALIKES)


@dataclass(frozen=True, slots=True)
class UserRecord:
    """A person who may use the store: roles, and per-kind amount limits on what they approve
    (``limits[kind]``: the most they may approve, ``None``: any amount; an empty map: any kind)."""

    name: str
    roles: tuple[str, ...]
    limits: dict[str, float | None]
    created_at: float
    created_by: str
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "roles": list(self.roles),
            "limits": dict(self.limits),
            "created_at": self.created_at,
            "created_by": self.created_by,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One line of the audit log: ``actor`` did ``action`` on ``target``; ``outcome`` is
    ``allowed`` or ``refused`` (with the reason in ``detail``); ``origin`` says from where
    (``cli``, ``http 127.0.0.1``, ``python``, ``engine``)."""

    audit_id: int
    at: float
    actor: str
    action: str
    target: str
    outcome: str
    origin: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "audit_id": self.audit_id,
            "at": self.at,
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "outcome": self.outcome,
            "origin": self.origin,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Vote:
    """One person's approval of a request that needs several."""

    approval_id: str
    by: str
    at: float
    note: str | None


@dataclass(frozen=True, slots=True)
class AuthorityRecord:
    """What a loop (name and version) has done that earned authority is read from.

    ``decisions``: ``(approval_id, run_id, decided_at, status, decided_by, evidence)`` of its
    decided requests, oldest first. ``compensated``: ``(at, effect kind)`` of compensations that
    ran. ``held_out_failed``: when an accepted run of the loop failed its held-out checks."""

    decisions: list[tuple[str, str, float, str, str, dict[str, Any]]]
    compensated: list[tuple[float, str]]
    held_out_failed: list[float]


class PeopleStore:
    """Users, tokens, votes and the audit log (defaults: a store that keeps none)."""

    def has_users(self) -> bool:
        """Whether people were ever added (from then on every decision names a user)."""
        return False

    def _no_people(self) -> StoreError:
        return StoreError(
            f"{type(self).__name__} keeps no users; use the SQLite or PostgreSQL store"
        )

    def add_user(
        self,
        name: str,
        *,
        roles: Sequence[str],
        limits: dict[str, float | None],
        by: str,
        now: float,
    ) -> UserRecord:
        """Add a user (or give a revoked one back their access with these roles).
        ``ConflictError`` when an active user has the name."""
        raise self._no_people()

    def get_user(self, name: str) -> UserRecord | None:
        return None

    def list_users(self) -> list[UserRecord]:
        return []

    def revoke_user(self, name: str, *, now: float) -> UserRecord:
        """Revoke a user and every token of theirs, at once, and withdraw their votes on requests
        still pending. ``ConfigError`` for an unknown name."""
        raise self._no_people()

    def set_token(self, name: str, token_hash: str, *, now: float) -> None:
        """Make ``token_hash`` the user's one live token (earlier ones are revoked)."""
        raise self._no_people()

    def user_by_token(self, token_hash: str) -> UserRecord | None:
        """The active user whose live token has this hash, else ``None``."""
        return None

    def add_vote(
        self,
        approval_id: str,
        by: str,
        *,
        note: str | None,
        now: float,
        audit: Callable[[Sequence[Vote]], Mapping[str, Any]] | None = None,
    ) -> list[Vote]:
        """Record ``by``'s approval of a pending request; all its votes, oldest first, counted
        after any vote being recorded at the same time (a lock on the run, as
        ``decide_approval`` takes). ``audit``: made from those votes, the vote's audit record
        (``audit_put``'s fields), written in the vote's transaction. ``ConflictError`` when ``by`` already voted,
        ``ApprovalError`` when the request is no longer pending or ``by`` is a revoked user
        (revoked after the engine checked them: ``revoke_user`` withdraws pending votes)."""
        raise self._no_people()

    def votes(self, approval_id: str) -> list[Vote]:
        return []

    def grant_approval(
        self, run_id: str, approval: NewApproval, *, by: str, note: str | None, now: float
    ) -> Approval:
        """Record a request decided as it is raised (approved by ``by``: earned authority).
        Idempotent by ``approval_id``: a cycle redone after a crash records it once."""
        raise self._no_people()

    def audit_put(
        self,
        *,
        actor: str,
        action: str,
        target: str,
        outcome: str,
        origin: str,
        detail: dict[str, Any],
        now: float,
    ) -> int:
        """Append one audit record; its id."""
        return 0

    def audit(
        self,
        *,
        after: int = 0,
        limit: int | None = None,
        actor: str | None = None,
        target: str | None = None,
        action: str | None = None,
    ) -> list[AuditRecord]:
        """Audit records with ids above ``after`` (of one ``actor``, ``target``, ``action``),
        oldest first."""
        return []

    def loop_versions(self) -> list[tuple[str, str | None, str | None]]:
        """``(loop name, version, spec_ref)`` of the loops with runs here, newest first."""
        return []

    def authority_record(self, loop_name: str, loop_version: str | None) -> AuthorityRecord:
        return AuthorityRecord([], [], [])
