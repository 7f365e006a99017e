"""Earned authority: where a loop stands on each ``[[authority]]`` grant, read from the store's
record of its decisions, and which approvals count toward it (those whose people could have
approved the request at hand themselves). docs/permissions.md describes the model; the engine
grants it in ``_parking``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._authority import SYSTEM_ACTORS, amount_of, requesters, same_person
from ._errors import ConfigError
from ._policy import EarnedAuthority
from .store import RunRecord, Store, UserRecord

__all__ = ["AuthorityStatus", "authority_status", "earned_counts", "standings"]


@dataclass(frozen=True, slots=True)
class AuthorityStatus:
    """Where one loop stands on one grant: ``earned`` once ``clean`` reaches ``needed``."""

    loop: str
    version: str | None
    grant: EarnedAuthority
    clean: list[str]  # approval ids of the clean approvals by people since ``since``
    since: float | None  # the last revocation (None: never revoked)
    revoked_by: str | None  # what revoked it last, in words

    @property
    def earned(self) -> bool:
        return len(self.clean) >= self.grant.after

    @property
    def needed(self) -> int:
        return self.grant.after

    def evidence(self) -> dict[str, Any]:
        """What a decision by ``policy:earned`` records."""
        return {
            "loop": self.loop,
            "version": self.version,
            "grant": self.grant.to_dict(),
            "approvals": self.clean[-self.grant.after :],
            "clean_approvals": len(self.clean),
            "window_from": self.since,
            "last_revoked_by": self.revoked_by,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.evidence(),
            "kind": self.grant.kind,
            "earned": self.earned,
            "needed": self.needed,
        }


def _kinds(evidence: Mapping[str, Any]) -> set[str]:
    """The effect kinds a decided request was about."""
    needs = evidence.get("needs") or ()
    kinds = {str(n.get("effect_kind")) for n in needs if n.get("kind") == "effect"}
    if evidence.get("kind") and "effect" in evidence:  # a compensation's request
        kinds.add(str(evidence["kind"]))
    return kinds


def authority_status(
    store: Store,
    loop: str,
    version: str | None,
    grants: Iterable[EarnedAuthority],
    counts: Callable[[Mapping[str, Any], str, float], bool] | None = None,
) -> list[AuthorityStatus]:
    """Each grant's standing for this loop, read from the store's record of it. ``counts``
    (``(evidence, decided_by, decided_at) -> bool``) says which approvals count toward it:
    those whose people could have approved the request at hand (``earned_counts``); all,
    without it."""
    record = store.authority_record(loop, version)
    out = []
    for g in grants:
        revoked: list[tuple[float, str]] = []
        approved: list[tuple[float, str]] = []
        for aid, run_id, at, status, by, ev in record.decisions:
            if g.kind not in _kinds(ev) or by in SYSTEM_ACTORS:
                continue
            if "needs" not in ev:
                # A compensation's request. Approving a refund earns nothing; denying one
                # revokes nothing either: the person wants the action to stand, which says
                # nothing against the approvals of it (a refund that ran revokes, below).
                continue
            if status == "denied":
                revoked.append((at, f"{by} denied request {aid} (run {run_id[:12]})"))
            elif counts is None or counts(ev, by, at):
                approved.append((at, aid))
        revoked += [
            (at, f"a {k} action was compensated") for at, k in record.compensated if k == g.kind
        ]
        revoked += [
            (at, "an accepted run failed its held-out checks") for at in record.held_out_failed
        ]
        last = max(revoked) if revoked else None
        since = last[0] if last else None
        clean = [aid for at, aid in sorted(approved) if since is None or at > since]
        out.append(AuthorityStatus(loop, version, g, clean, since, last[1] if last else None))
    return out


def earned_counts(
    store: Store, run: RunRecord, kind: str, args: Mapping[str, Any], who: Mapping[str, Any]
) -> Callable[[Mapping[str, Any], str, float], bool]:
    """Which of a loop's approvals can earn it the authority to approve an action of ``kind``
    with ``args`` that a rule (``who``: its role, field, separation) sends to a person: those
    whose people could have approved it themselves. Each of them held the rule's roles when
    they approved (the request they decided named them), is still an active user whose limit
    covers this amount (read by the rule's field), was a user when they approved (a person
    revoked and added again earns from the new start: the revocation may have been for
    cause), and is none of this run's requesters where the rule separates duties. Earned
    authority never approves more than the people who earned it could."""
    roles = {str(r) for r in (who.get("roles") or ([who["role"]] if who.get("role") else []))}
    amount = amount_of(args, str(who.get("field") or "amount"))
    asked = requesters(store, run) if who.get("separate") else set()
    users = store.has_users()
    known: dict[str, UserRecord | None] = {}

    def could(name: str, at: float) -> bool:
        if same_person(name, asked):
            return False
        if not users:
            return True  # an open store: no roles or limits to read (roles refused above)
        if name not in known:
            known[name] = store.get_user(name)
        user = known[name]
        if user is None or not user.active or not roles <= set(user.roles):
            return False
        if at < user.created_at:
            return False  # approved before this user was (added again after a revocation)
        if not user.limits:
            return True
        if kind not in user.limits:
            return False
        limit = user.limits[kind]
        return limit is None or (amount is not None and amount <= limit)

    def counts(evidence: Mapping[str, Any], by: str, at: float) -> bool:
        had = evidence.get("who") or {}
        named = {str(r) for r in (had.get("roles") or ([had["role"]] if had.get("role") else []))}
        # the roles were checked when they approved only if their request named them
        return roles <= named and all(could(n.strip(), at) for n in by.split(","))

    return counts


def standings(store: Store, specs: Iterable[str] = ()) -> list[AuthorityStatus]:
    """Every earned-authority grant's standing: for the loop specs given, else for each loop
    with runs in the store whose spec file is here and has ``[[authority]]``."""
    from pathlib import Path

    from ._spec import load_spec

    paths = list(specs) or [ref for _n, _v, ref in store.loop_versions() if ref]
    out: list[AuthorityStatus] = []
    seen: set[tuple[str, str | None]] = set()
    for ref in paths:
        if not specs and not Path(ref).exists():
            continue
        try:
            loop = load_spec(ref)
        except ConfigError:
            if specs:
                raise
            continue  # a spec that no longer loads: nothing to say about it here
        if (loop.name, loop.version) in seen or not loop.approvals.earned:
            continue
        seen.add((loop.name, loop.version))
        out += authority_status(
            store, loop.name, loop.version, loop.approvals.earned, _by_active_people(store)
        )
    return out


def _by_active_people(store: Store) -> Callable[[Mapping[str, Any], str, float], bool] | None:
    """What counts toward a loop's standing shown on its own (``loopwright authority``):
    approvals whose people are all still active users. A revoked user's approvals count for
    no request (``earned_counts``), so a standing counting them said "earned" when nothing
    could use it; nor those made before the user was added again after a revocation. (Role,
    limit and requesters depend on the request: the request says.)"""
    if not store.has_users():
        return None
    since: dict[str, float | None] = {}  # name -> the active user's start, None: not active

    def counts(_evidence: Mapping[str, Any], by: str, at: float) -> bool:
        for name in (n.strip() for n in by.split(",")):
            if name not in since:
                user = store.get_user(name)
                since[name] = user.created_at if user is not None and user.active else None
            start = since[name]
            if start is None or at < start:
                return False
        return True

    return counts
