"""The audit log's writes and reads for the engine and the interfaces: one append-only record
per decision, operation, refusal and policy change (docs/permissions.md), written once when
the engine may write it again (a cycle redone after a crash).
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._redact import redact
from .store import AuditRecord, Store

__all__ = ["audit", "audit_entry", "audit_of", "audit_once", "takes_audit"]


def audit(
    store: Store,
    actor: str,
    action: str,
    target: str,
    *,
    outcome: str = "allowed",
    origin: str = "python",
    **detail: Any,
) -> None:
    """Append one audit record (see ``Store.audit_put``)."""
    store.audit_put(**audit_entry(actor, action, target, outcome=outcome, origin=origin, **detail))


def audit_entry(
    actor: str,
    action: str,
    target: str,
    *,
    outcome: str = "allowed",
    origin: str = "python",
    **detail: Any,
) -> dict[str, Any]:
    """The fields of one audit record (``Store.audit_put``'s), for a store that writes it in
    the transaction of the action it records (``Store.request_pause``)."""
    return {
        "actor": actor or "?",
        "action": action,
        "target": target,
        "outcome": outcome,
        "origin": origin,
        # what an operator typed (a note, a reason) is stored masked (invariant 9)
        "detail": redact({k: v for k, v in detail.items() if v is not None}),
        "now": time.time(),
    }


def takes_audit(write: Callable[..., Any]) -> bool:
    """Whether the store's ``write`` (``request_pause``, ``decide_approval``) takes ``audit``,
    the record of what it writes, to write in its own transaction; a store of one's own
    written before that argument (or a wrapper taking ``**kwargs``) does not: the engine
    writes the record after, with ``audit_put``, as it did."""
    try:
        return "audit" in inspect.signature(write).parameters
    except (TypeError, ValueError):  # (no signature to read: a builtin, a C callable)
        return False


def audit_once(
    store: Store,
    actor: str,
    action: str,
    target: str,
    *,
    origin: str,
    key: Mapping[str, Any],
    **detail: Any,
) -> None:
    """``audit`` unless ``actor`` has a record of ``action`` on ``target`` whose detail holds
    ``key`` already: what the engine records of a cycle before the cycle commits is written
    again when a crash makes it redo the cycle (the same decision, recorded once)."""
    said = {**key, **detail}
    for a in audit_of(store, target, (action,)):
        if a.actor == actor and all(a.detail.get(k) == v for k, v in key.items()):
            return
    audit(store, actor, action, target, origin=origin, **said)


def audit_of(store: Store, target: str, actions: Iterable[str]) -> list[AuditRecord]:
    """The audit records of ``actions`` on ``target``, filtered in the database."""
    try:
        return [a for op in actions for a in store.audit(target=target, action=op)]
    except TypeError:  # a store of one's own written before ``action=``
        wanted = set(actions)
        return [a for a in store.audit(target=target) if a.action in wanted]
