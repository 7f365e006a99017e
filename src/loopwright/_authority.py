"""People and authority: roles, who may decide a request, and authority a loop earns.

The model (docs/permissions.md):

- A store with no users is open: local use records the name given (or the OS user), as a
  single-user embedded store should. Once a user is added, every decision and action names an
  active user, and what they may do follows from their roles.
- Roles: ``viewer`` reads; ``operator`` also cancels, resumes, rolls back, forks, reruns and
  edits; ``approver`` also decides requests (optionally limited per effect kind and amount);
  ``admin`` manages users and may operate. Any other role name is a label a rule can require
  (``role = "finance"``): deciding such a request needs ``approver`` *and* that role.
- A rule can require several distinct approvers and separation of duties: whoever started the
  run or edited its parts cannot approve its requests.
- Earned authority (``EarnedAuthority``): a loop's clean record of approvals by people turns a
  kind of request into an automatic approval up to a limit, revoked at once by a denial, a
  compensation or a held-out failure (``_earned``).

Authentication (tokens) belongs to the interfaces; this module authorises *names*, so the
Python API, the CLI and the dashboard enforce the same rules. Every attempt, allowed or
refused, goes to the audit log.
"""

from __future__ import annotations

import hashlib
import json
import math
import shlex
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._audit import audit, audit_of, audit_once
from ._errors import ApprovalError, ConfigError, NotPermittedError, RunNotFoundError
from ._json import check_given_text
from ._keys import unprintable
from ._policy import ROLE_NAME
from .store import Approval, RunRecord, Store, UserRecord
from .store._people import PeopleStore, person_key

if TYPE_CHECKING:  # (the CLI's people commands import this module, not the engine)
    from ._loop import Loop

__all__ = [
    "BUILTIN_ROLES",
    "EARNED_BY",
    "audit",
    "audit_of",
    "audit_once",
    "check_decision",
    "check_person",
    "check_role_name",
    "expire",
    "hash_token",
    "may_operate",
    "new_token",
    "note_policy",
    "operate",
    "permits",
    "refused",
    "require",
    "same_person",
    "why_not_approve",
]

EARNED_BY = "policy:earned"
# What each built-in role may do; any other role is a label for approval rules.
BUILTIN_ROLES: dict[str, frozenset[str]] = {
    "viewer": frozenset({"read"}),
    "operator": frozenset({"read", "operate"}),
    "approver": frozenset({"read", "decide"}),
    "admin": frozenset({"read", "operate", "admin"}),
}
_NEEDS = {"read": "viewer", "operate": "operator", "decide": "approver", "admin": "admin"}
# Names loopwright itself decides under: never a person.
SYSTEM_ACTORS = frozenset({"loopwright", EARNED_BY})


def new_token() -> str:
    """A fresh token: 256 random bits, prefixed so a leaked one is recognisable."""
    import secrets  # (adding a person only: not at every engine's import, suite53)

    return "lw_" + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What the store keeps of a token. A plain SHA-256 suffices (no salt, no slow hash): a
    token is 256 random bits, not a password a dictionary could find."""
    return hashlib.sha256(token.strip().encode()).hexdigest()


def check_role_name(role: str) -> str:
    """A role name as stored (lower case letters, digits, ``_.-``), else ``ConfigError``."""
    name = role.strip().lower()
    if not ROLE_NAME.fullmatch(name):
        raise ConfigError(
            f"{role!r} is not a role name (lower-case letters, digits, '_', '.', '-')",
            field="role",
        )
    return name


def check_person(who: str, field: str = "by") -> None:
    """Refuse (``ConfigError``) a person's name that is one loopwright decides under itself
    (``loopwright``, ``policy:…``): a denial recorded so was taken for the system's and did not
    revoke earned authority, and a person's decision would read as loopwright's own. The OS
    user a CLI defaults to can be a service account of that name."""
    bad = unprintable(who)
    if bad is not None:
        raise ConfigError(f"a person's name {bad}", field=field)
    name = who.strip().lower()
    if name in SYSTEM_ACTORS or name.startswith("policy:"):
        raise ConfigError(
            f"{who.strip()!r} is the name loopwright records its own decisions under: say who "
            "you are (--by NAME, or a user's token)",
            field=field,
        )


def permits(user: UserRecord, permission: str) -> bool:
    """Whether an active user's roles grant ``permission`` (read, operate, decide, admin)."""
    return user.active and any(permission in BUILTIN_ROLES.get(r, ()) for r in user.roles)


def _refuse(
    store: Store, who: str, action: str, target: str, origin: str, why: str, record: bool = True
) -> None:
    if record:  # a dry run (what a page may offer someone) is not an attempt
        audit(store, who, action, target, outcome="refused", origin=origin, reason=why)
    raise NotPermittedError(why)


def require(
    store: Store,
    who: str,
    permission: str,
    *,
    action: str,
    target: str,
    origin: str,
    doing: str | None = None,
    record: bool = True,
) -> UserRecord | None:
    """Check that ``who`` may do ``action`` (needing ``permission``) on ``target``; the user,
    or ``None`` in an open store. A refusal is audited (unless not ``record``) and raised as
    ``NotPermittedError``."""
    if not store.has_users():
        return None
    user = store.get_user(who)
    if user is None or not user.active:
        state = "is not a user of this store" if user is None else "is revoked"
        _refuse(store, who, action, target, origin, f"{who!r} {state}", record)
    assert user is not None
    if not permits(user, permission):
        roles = ", ".join(user.roles) or "no role"
        _refuse(
            store,
            who,
            action,
            target,
            origin,
            f"{who} ({roles}) may not {doing or action}: it needs the {_NEEDS[permission]} role",
            record,
        )
    return user


def note_policy(store: Store, loop: Loop, *, by: str | None) -> None:
    """Audit a loop's approval policy when a run starts under one this store has not seen for
    the loop before (a policy change is who-may-approve-what changing)."""
    if not store.has_users() and not loop.approvals.rules and not loop.approvals.earned:
        return  # an open store and the default policy: nothing worth a record per run
    policy = loop.approvals.to_list()
    digest = hashlib.sha256(json.dumps(policy, sort_keys=True, default=str).encode()).hexdigest()
    target = f"loop {loop.name}"
    seen = [a for a in store.audit(target=target) if a.action == "policy"]
    if seen and seen[-1].detail.get("digest") == digest[:16]:
        return
    audit(
        store,
        by or "loopwright",
        "policy",
        target,
        origin="engine",
        digest=digest[:16],
        version=loop.version,
        rules=policy,
        previous=seen[-1].detail.get("digest") if seen else None,
    )


def operate(
    store: Store, by: str | None, action: str, target: str, *, origin: str, **detail: Any
) -> None:
    """An operator's action (cancel, resume, rollback, fork, edit, rerun): refused unless
    ``by`` may operate (in a store with users), and audited either way."""
    who = may_operate(store, by, action, target, origin=origin)
    audit(store, who, action, target, origin=origin, **detail)


def may_operate(store: Store, by: str | None, action: str, target: str, *, origin: str) -> str:
    """Who does an operator's action, refused (audited) unless ``by`` may operate (in a store
    with users); a ``by`` that is no person's name (``check_person``) is a ``ConfigError``
    unless the engine acts (``origin="engine"``); nothing is recorded when they may: the caller records the action once it
    has checked what it can (``operate``, or ``refused`` for an action refused after)."""
    check_given_text(by, field="by")
    who = (by or "").strip()
    if who and origin != "engine":
        # The rule a decision's by is held to: a person acting as `loopwright` or `policy:…`
        # (or with an escape in the name) wrote the engine's own name into the audit log and
        # the run's events, in a store without users where no token says who acts.
        check_person(who)
    if store.has_users():
        if not who:
            _refuse(store, "?", action, target, origin, f"say who does the {action} (by=NAME)")
        require(store, who, "operate", action=action, target=target, origin=origin)
    return who or "(unnamed)"


def refused(
    store: Store,
    who: str,
    action: str,
    target: str,
    *,
    origin: str,
    why: Exception,
    **detail: Any,
) -> None:
    """Audit an action a permitted person asked for that was refused for what it asked (a
    cycle the run does not have, a run executing elsewhere): the log says it never happened.
    ``detail``: what was asked (an edit's part)."""
    audit(store, who, action, target, outcome="refused", origin=origin, reason=str(why), **detail)


# --- decisions --------------------------------------------------------------------------------
def _actions(req: Approval) -> list[tuple[str, float | None]]:
    """The (effect kind, amount) pairs a request would let happen."""
    ev = req.evidence or {}
    if req.kind == "compensation":
        # the argument the rule reads (its ``field``), as for the effect it undoes: "amount"
        # alone let a limited approver approve the refund of a payment above their limit
        field = str((ev.get("who") or {}).get("field") or "amount")
        return [(str(ev.get("kind") or "compensation"), amount_of(ev.get("args") or {}, field))]
    out = []
    for need in ev.get("needs") or ():
        if need.get("kind") == "effect":
            amount = need.get("amount")
            out.append((str(need.get("effect_kind") or "effect"), _number(amount)))
    return out  # a risk or a question alone is no effect: kind limits do not apply


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value):
        return float(value)
    return None


def amount_of(args: Mapping[str, Any], field: str) -> float | None:
    return _number(args.get(field))


#: The operations on a run whose author asked for what its later requests would do: an edit
#: (the loop goes on from it), a rollback or a cancel (each offers the refunds of what was
#: done, and a rollback's redone cycles do it again).
REQUESTING = ("edit", "rollback", "cancel")


#: How far back a fork's origins are followed for their requesters (a chain of forks).
FORK_DEPTH = 32


def requesters(store: Store, run: RunRecord) -> set[str]:
    """Who asked for what a run's requests would do (``run_requesters``), and for a fork (or
    a rerun) those of the runs it was forked from too: the fork carries their task and their
    edits, so whoever started the origin does not approve the fork's payment because
    another operator forked it."""
    names = run_requesters(store, run)
    seen = {run.run_id}
    origin = run.forked_from
    while origin and origin not in seen and len(seen) <= FORK_DEPTH:
        seen.add(origin)
        try:
            rec = store.get_run(origin)
        except RunNotFoundError:
            break
        names |= run_requesters(store, rec)
        origin = rec.forked_from
    return names


def run_requesters(store: Store, run: RunRecord) -> set[str]:
    """Who asked for what a run's requests would do: whoever started it, edited its parts,
    rolled it back or cancelled it (separation of duties: the refund a rollback offers, or
    the payment its redone cycles make again, is not approved by whoever rolled it back).
    They are read from the audit log's records of those operations on the run (indexed reads
    of the run's operations: a decision, or an inbox listing requests, costs the same however
    long the run); a store that keeps no audit log is read from the run's ``edited`` and
    ``rolled_back`` events."""
    names = {run.created_by} if run.created_by else set()
    if type(store).audit is PeopleStore.audit:
        names |= {
            str(e.data.get("by"))
            for e in store.events(run.run_id)
            if e.kind in ("edited", "rolled_back")
        }
    else:
        # filtered in the database: the run's other operations are not read
        records = audit_of(store, f"run {run.run_id}", REQUESTING)
        names |= {a.actor for a in records if a.outcome == "allowed"}
    return {n for n in names if n and n not in ("None", "(unnamed)")}


def same_person(name: str, names: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``names`` as people are told apart (``person_key``): spaces
    around it, letter case or an invisible character do not make another person ("Rita"
    started the run, "rita" approved it)."""
    key = person_key(name)
    return any(key == person_key(n) for n in names)


def _spelled(limits: Mapping[str, Any], kind: str) -> str:
    """What to add to a refusal for ``kind`` when a limit names it in another letter case
    (``--limit Spend=100`` for a ``spend`` request): kinds are matched exactly, never folded."""
    near = sorted(k for k in limits if k.casefold() == kind.casefold())
    if not near:
        return ""
    return (
        f" (the limit names {near[0]!r}, the request's kind is {kind!r}: kinds are matched "
        f"exactly; an admin gives the limit as {kind!r})"
    )


def _fmt(value: float | None) -> str:
    if value is None:
        return "any amount"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def check_decision(
    store: Store,
    req: Approval,
    run: RunRecord,
    who: str,
    status: str,
    *,
    origin: str,
    record: bool = True,
) -> dict[str, Any]:
    """Refuse (audited ``NotPermittedError``; not audited without ``record``) a decision
    ``who`` may not make on ``req``; returns the request's rule for who decides (``role``,
    ``approvers``, ``separate``)."""
    rule = dict((req.evidence or {}).get("who") or {})
    action = {"approved": "approve", "denied": "deny", "answered": "answer"}[status]
    target = f"request {req.approval_id}"

    def no(why: str) -> None:
        _refuse(store, who, action, target, origin, why, record)

    roles = [str(r) for r in rule.get("roles") or ([rule["role"]] if rule.get("role") else [])]
    user = require(
        store,
        who,
        "decide",
        action=action,
        target=target,
        origin=origin,
        doing=f"{action} requests",
        record=record,
    )
    if status == "denied":
        return rule  # any approver may stop an action: roles, limits and who asked do not apply
    if user is None and roles:
        # the command names the person deciding (polish55: `users add NAME`, typed as
        # printed, made a user called NAME; and it was refused, the first user not an admin),
        # with every role the request needs
        need = " ".join(
            f"--role {shlex.quote(r)}" for r in dict.fromkeys(["admin", "approver", *roles])
        )
        no(
            f"request {req.approval_id} needs a person with the {' and '.join(roles)} role, and "
            f"this store has no users: add them (loopwright users add {shlex.quote(who)} {need})"
        )
    missing = [r for r in roles if user is not None and r not in user.roles]
    if user is not None and missing:
        no(
            f"request {req.approval_id} needs the {' and '.join(missing)} role; {who} has "
            f"{', '.join(user.roles)}"
        )
    if user is not None and user.limits:
        for kind, amount in _actions(req):
            if kind not in user.limits:
                may = ", ".join(sorted(user.limits))
                no(
                    f"{who} may approve only {may} requests; this one is {kind}"
                    + _spelled(user.limits, kind)
                )
            limit = user.limits[kind]
            if limit is not None and (amount is None or amount > limit):
                no(
                    f"{who} may approve {kind} up to {_fmt(limit)}; this request is for "
                    f"{_fmt(amount) if amount is not None else 'an unknown amount'}"
                )
    if rule.get("separate") or int(rule.get("approvers") or 1) > 1:
        asked = requesters(store, run)
        if same_person(who, asked):
            no(
                f"{who} started, edited, rolled back or cancelled run {run.run_id[:12]}"
                + (" or a run it was forked from" if run.forked_from else "")
                + " and cannot approve its requests (separation of duties): another person must"
            )
    return rule


def why_not_approve(store: Store, req: Approval, run: RunRecord, who: str) -> str | None:
    """Why ``who`` may not approve ``req`` (the rule's roles, their limits, separation of
    duties, a vote already given), or None when they may: what a page offers them, checked
    without recording an attempt. The engine checks again when they decide."""
    try:
        check_decision(store, req, run, who, "approved", origin="", record=False)
    except NotPermittedError as exc:
        return str(exc)
    if same_person(who, (v.by for v in store.votes(req.approval_id))):
        return f"{who} already approved it; it needs another person"
    return None


def expire(store: Store, req: Approval) -> Approval | None:
    """Record that the pending request ``req`` expired undecided (decided by ``loopwright``):
    the request so decided, or ``None`` when it was decided meanwhile (``ApprovalError``)."""
    try:
        return store.decide_approval(
            req.approval_id, status="expired", by="loopwright", note="expired", now=store.clock()
        )
    except ApprovalError:
        return None
