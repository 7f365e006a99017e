"""Feedback memory: scoped, typed feedback retrieved into later contexts (learning outside the
weights).

Each item has a **scope** — ``task`` (one task key), ``project`` (one project) or ``global`` —
and a **signal** from the feedback hierarchy (docs/concepts.md), whose default **strength**
says how much the signal can support (``DEFAULT_STRENGTH``). Feedback keeps its context: retrieval for a task
of project A sees that task's items, project A's items and confirmed global items, never
another task's or another project's. Nothing becomes global by itself: ``propose_global``
turns the same feedback active in several projects into a *candidate* that a person confirms.

Statuses: ``active`` (retrieved), ``candidate`` (waits for a person's ``confirm``; never
retrieved), ``forgotten`` (never retrieved; kept for audit). Every status change is recorded
in the item's ``history`` with who made it and when.
"""

from __future__ import annotations

import builtins
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast, get_args

from ._errors import ConfigError, LoopwrightError, check_choice
from ._json import check_text
from ._keys import MAX_KEY_CHARS
from ._memory_screen import check_json, no_held_out
from ._memory_search import (  # noqa: F401  (RELEVANCE_FLOOR, memory_search, query_terms: re-exported, their home before the split)
    RECALL_RANKED,
    RELEVANCE_FLOOR,
    check_ranked,
    feedback_key,
    memory_search,
    normalise_text,
    query_terms,
)
from ._redact import redact, redact_text

if TYPE_CHECKING:
    from .store._base import Store

__all__ = [
    "DEFAULT_STRENGTH",
    "MEMORY_SCOPES",
    "MEMORY_SIGNALS",
    "MEMORY_STATUSES",
    "FeedbackMemory",
    "MemoryItem",
    "MemoryNotFoundError",
    "MemoryStatus",
    "Scope",
    "Signal",
]

Scope = Literal["task", "project", "global"]
Signal = Literal["correction", "accept", "reject", "edit", "export", "repeated", "reflection"]
MemoryStatus = Literal["active", "candidate", "forgotten"]

MEMORY_SCOPES: tuple[Scope, ...] = get_args(Scope)
MEMORY_SIGNALS: tuple[Signal, ...] = get_args(Signal)
MEMORY_STATUSES: tuple[MemoryStatus, ...] = get_args(MemoryStatus)

DEFAULT_STRENGTH: dict[Signal, float] = {
    # An explicit correction says what was wrong and why: it supports a rule or a revised fact
    # (for its task), so it is the strongest signal.
    "correction": 1.0,
    # A final export selects the artifact for delivery: stronger evidence of acceptance than a
    # review click, but it does not prove every element was ideal.
    "export": 0.8,
    # Accept/reject says whether a candidate passed a review step, not why.
    "accept": 0.6,
    "reject": 0.6,
    # The same feedback across projects is a possible recurring preference, never a permanent
    # profile without a person's confirmation (global items start as candidates).
    "repeated": 0.5,
    # An edit shows which attributes or regions changed; not every edit reflects a stable
    # preference.
    "edit": 0.4,
    # A reflection is the system's own verbal note after a failed cycle (Reflexion): useful to
    # the next attempt, but no person said it, so it is the weakest.
    "reflection": 0.3,
}

MAX_TEXT_CHARS = 10_000
"""Longest text an item may hold: memory is notes for a context, not a place for artifacts."""

REFLECTOR = "reflector"
"""The ``by`` of the reflections a loop's reflector writes (``FeedbackMemory.reflect``)."""

PROPOSER = "loopwright:propose_global"
"""The ``by`` of global candidates created by ``propose_global``."""


class MemoryNotFoundError(LoopwrightError, LookupError):
    """No feedback-memory item has that id."""


@dataclass(frozen=True)
class MemoryItem:
    """One piece of feedback, as stored."""

    memory_id: str
    scope: Scope
    scope_key: str
    """The task key (``task``), the project (``project``) or ``""`` (``global``)."""
    signal: Signal
    strength: float
    """In [0, 1]; by default ``DEFAULT_STRENGTH[signal]``."""
    text: str
    rule: dict[str, Any] | None
    """Optional structured form of the feedback (for instance ``{"palette": "blue"}``)."""
    source: dict[str, Any]
    """Where it came from: ``run_id``, ``cycle``, ``part``, … (``projects`` for proposals)."""
    by: str
    """Who gave it: a person's name, or the component that wrote it."""
    status: MemoryStatus
    created_at: float
    updated_at: float
    history: tuple[dict[str, Any], ...] = field(default=())
    """Status changes after creation, oldest first: ``{"status", "by", "at"}`` each."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "memory_id": self.memory_id,
            "scope": self.scope,
            "scope_key": self.scope_key,
            "signal": self.signal,
            "strength": self.strength,
            "text": self.text,
            "rule": self.rule,
            "source": self.source,
            "by": self.by,
            "status": self.status,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "history": [dict(h) for h in self.history],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryItem:
        rule = data.get("rule")
        return cls(
            memory_id=str(data["memory_id"]),
            scope=cast("Scope", data["scope"]),
            scope_key=str(data.get("scope_key") or ""),
            signal=cast("Signal", data["signal"]),
            strength=float(data["strength"]) + 0.0,  # a -0.0 stored before: read as 0.0
            text=str(data["text"]),
            rule=dict(rule) if rule is not None else None,
            source=dict(data.get("source") or {}),
            by=str(data["by"]),
            status=cast("MemoryStatus", data["status"]),
            created_at=float(data["created_at"]),
            updated_at=float(data["updated_at"]),
            history=tuple(dict(h) for h in data.get("history") or ()),
        )


# --- validation ------------------------------------------------------------------------------
def _check_name(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError("must be a non-empty string", field=name)
    check_text(value, field=name)
    return value.strip()


class _Screened(dict[str, Any]):
    """A row ``FeedbackMemory.add`` has just screened (masked, no held-out marker):
    ``screened_row`` passes it as it is. Any other mapping given to ``Store.memory_add`` is
    screened there (stop 53: ``add`` and the store each masked the text, rule and source, and a
    reflection's text was masked four times on its way in)."""


class _Masked(str):
    """A text ``reflect`` has just masked (``redact_text`` of it stripped): ``add`` stores it
    as it is. Any other text given to ``add`` is masked there."""

    __slots__ = ()


def screened_row(item: Mapping[str, Any]) -> dict[str, Any]:
    """``item`` (``MemoryItem.to_dict()``'s keys) as a store keeps it: ``add``'s screens run
    again in ``Store.memory_add``, which a caller may call straight, so no path into the store
    keeps a secret (invariant 9: its text, rule and source masked) or a held-out marker
    (invariant 3: ``ConfigError`` naming where). A row ``add`` screened itself
    (``_Screened``) comes through as it is, not screened a second time."""
    if type(item) is _Screened:
        return item
    row = dict(item)
    text = row.get("text")
    if isinstance(text, str):
        row["text"] = redact_text(text)
    for name in ("rule", "source"):
        value = row.get(name)
        if value is not None:
            value = redact(value)
            no_held_out(value, name)
            row[name] = value
    return row


class FeedbackMemory:
    """Scoped feedback memory over a store (SQLite or PostgreSQL).

    Not fenced by a run lease: people write it too (``loopwright memory add``), and every write
    is a single row, so concurrent writers need no coordination.
    """

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        from .store._base import Store

        if not isinstance(store, Store):  # (a path, or the Runtime: an AttributeError later)
            raise ConfigError(
                f"must be a Store (runtime.store, or open_store(path)), got {type(store).__name__}",
                field="store",
            )
        self.store = store
        self._clock = clock

    # --- writing -------------------------------------------------------------------------
    def add(
        self,
        *,
        scope: Scope,
        scope_key: str = "",
        signal: Signal,
        text: str,
        rule: Mapping[str, Any] | None = None,
        source: Mapping[str, Any] | None = None,
        by: str,
        strength: float | None = None,
    ) -> MemoryItem:
        """Store one piece of feedback. Task and project items are ``active`` at once; a
        ``global`` item is always a ``candidate`` until a person ``confirm``\\ s it.

        Raises ``ConfigError`` naming the field at fault."""
        check_choice(scope, MEMORY_SCOPES, "scope")
        check_choice(signal, MEMORY_SIGNALS, "signal")
        if not isinstance(scope_key, str):
            raise ConfigError("must be a string", field="scope_key")
        check_text(scope_key, field="scope_key")
        scope_key = scope_key.strip()
        if len(scope_key) > MAX_KEY_CHARS:  # a task key or a project name: indexed as they are
            raise ConfigError(
                f"must be at most {MAX_KEY_CHARS} characters (got {len(scope_key)})",
                field="scope_key",
            )
        if scope in ("task", "project") and not scope_key:
            what = "task key" if scope == "task" else "project"
            raise ConfigError(f"{scope} scope needs the {what}", field="scope_key")
        if scope == "global" and scope_key:
            raise ConfigError("global scope takes no key", field="scope_key")
        if not isinstance(text, str):
            raise ConfigError("must be a string", field="text")
        # a lone surrogate (UTF-8 cannot store it) or a NUL (PostgreSQL's text refuses it,
        # SQLite kept it): refused alike on every store
        check_text(text, field="text")
        # Invariant 9: feedback is stored, indexed and shown to later actors; a secret in it
        # (a correction quoting a key, a reflection echoing one) is masked first.
        # (a text ``reflect`` masked already, to compare it with the kept notes: not again)
        text = text.strip() if type(text) is _Masked else redact_text(text.strip())
        rule_obj = redact(check_json(rule, "rule"))
        no_held_out(rule_obj, "rule")
        if not text and not rule_obj:
            raise ConfigError("give the feedback as text or as a rule", field="text")
        if len(text) > MAX_TEXT_CHARS:
            raise ConfigError(
                f"{len(text)} characters; at most {MAX_TEXT_CHARS} (memory holds notes, not "
                "artifacts)",
                field="text",
            )
        source_obj = redact(check_json(source, "source") or {})
        no_held_out(source_obj, "source")
        by = _check_name(by, "by")
        if strength is None:
            strength = DEFAULT_STRENGTH[signal]
        elif (
            isinstance(strength, bool)
            or not isinstance(strength, int | float)
            or not math.isfinite(strength)
            or not 0.0 <= strength <= 1.0
        ):
            raise ConfigError(f"must be a number in [0, 1] (got {strength!r})", field="strength")
        now = self._clock()
        item = MemoryItem(
            memory_id=uuid.uuid4().hex[:16],
            scope=scope,
            scope_key=scope_key,
            signal=signal,
            strength=float(strength) + 0.0,  # -0.0 is 0.0: stored and printed as 0
            text=text,
            rule=rule_obj,
            source=source_obj,
            by=by,
            status="candidate" if scope == "global" else "active",
            created_at=now,
            updated_at=now,
        )
        self.store.memory_add(_Screened(item.to_dict()))  # (screened above: not again)
        return item

    def reflect(
        self, *, task_key: str, text: str, source: Mapping[str, Any], keep: int
    ) -> tuple[MemoryItem, bool]:
        """Keep a reflector's note for ``task_key``; returns ``(item, new)``.

        A reflector writes after every failed cycle, so a long run would otherwise pile up
        reflections that every later cycle's recall ranks: the same note (normalised text)
        is kept once (``new`` is False and nothing is written), and only the ``keep`` newest
        of the task's reflections stay active: older ones are ``forgotten`` by the reflector
        (kept for audit, never retrieved). A cycle's cost then stays the same however long
        the run, and later runs of the task see the newest notes."""
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ConfigError(f"must be a positive integer (got {keep!r})", field="keep")
        task_key = _check_name(task_key, "task_key")
        mine = [
            r
            for r in self.store.memory_query(scopes=[("task", task_key)], status="active")
            if r["signal"] == "reflection" and r["by"] == REFLECTOR
        ]  # newest first; at most ``keep`` once this has run
        if not isinstance(text, str):
            raise ConfigError("must be a string", field="text")
        check_text(text, field="text")
        masked = redact_text(text.strip())  # as ``add`` stores it: masked once, for both
        norm = normalise_text(masked)
        for r in mine:
            if normalise_text(r["text"]) == norm:
                return MemoryItem.from_dict(r), False
        item = self.add(
            scope="task",
            scope_key=task_key,
            signal="reflection",
            text=_Masked(masked),
            source=source,
            by=REFLECTOR,
        )
        for r in mine[keep - 1 :]:
            self.store.memory_set_status(
                r["memory_id"], "forgotten", by=REFLECTOR, now=self._clock(), expect=("active",)
            )
        return item, True

    def confirm(self, memory_id: str, *, by: str) -> MemoryItem:
        """A person confirms a candidate: it becomes ``active`` (and is retrieved from now on).
        Confirming an active item changes nothing; a forgotten one raises ``ConflictError``;
        in a store with users, its adder's ``NotPermittedError`` (a second person checks)."""
        by = _check_name(by, "by")
        row = self.store.memory_set_status(
            _check_name(memory_id, "memory_id"),
            "active",
            by=by,
            now=self._clock(),
            expect=("candidate",),
            # in a store with users a second person checks: its adder does not confirm it
            not_by=by if self.store.has_users() else None,
        )
        return MemoryItem.from_dict(row)

    def forget(self, memory_id: str, *, by: str) -> MemoryItem:
        """Hide an item from retrieval for good; it stays in the store for audit."""
        by = _check_name(by, "by")
        row = self.store.memory_set_status(
            _check_name(memory_id, "memory_id"), "forgotten", by=by, now=self._clock()
        )
        return MemoryItem.from_dict(row)

    def propose_global(self, *, min_projects: int = 3) -> list[MemoryItem]:
        """Turn the same feedback (normalised text and rule) active in project scope in at
        least ``min_projects`` distinct projects into one global **candidate** (signal
        ``repeated``; ``source["projects"]`` lists the projects). Returns the new candidates.

        Idempotent: feedback that already has a global item — candidate, active or forgotten
        (a person declined it) — is not proposed again."""
        if isinstance(min_projects, bool) or not isinstance(min_projects, int) or min_projects < 2:
            raise ConfigError(
                "must be an integer of at least 2 (one project's habit is not a global preference)",
                field="min_projects",
            )
        project_items = self.store.memory_query(scopes=[("project", None)], status="active")
        seen_global = {
            feedback_key(g["text"], g.get("rule"))
            for g in self.store.memory_query(scopes=[("global", None)])
        }
        groups: dict[tuple[str, str], list[MemoryItem]] = {}
        for row in project_items:
            it = MemoryItem.from_dict(row)
            groups.setdefault(feedback_key(it.text, it.rule), []).append(it)
        out = []
        for key, items in groups.items():
            projects = sorted({it.scope_key for it in items})
            if len(projects) < min_projects or key in seen_global:
                continue
            first = min(items, key=lambda it: (it.created_at, it.memory_id))
            out.append(
                self.add(
                    scope="global",
                    signal="repeated",
                    text=first.text,
                    rule=first.rule,
                    source={
                        "projects": projects,
                        "memory_ids": sorted(it.memory_id for it in items),
                        "signals": sorted({it.signal for it in items}),
                    },
                    by=PROPOSER,
                )
            )
            seen_global.add(key)
        return out

    # --- reading -------------------------------------------------------------------------
    def get(self, memory_id: str) -> MemoryItem:
        """The item with this id; ``MemoryNotFoundError`` if there is none."""
        rows = self.store.memory_query(memory_id=_check_name(memory_id, "memory_id"))
        if not rows:
            raise MemoryNotFoundError(f"no memory item {memory_id!r} in {self.store.url}")
        return MemoryItem.from_dict(rows[0])

    def list(
        self,
        *,
        scope: Scope | None = None,
        scope_key: str | None = None,
        status: MemoryStatus | None = None,
        limit: int | None = None,
    ) -> list[MemoryItem]:
        """Items, newest first, optionally of one scope, one key, one status."""
        if scope is not None:
            check_choice(scope, MEMORY_SCOPES, "scope")
        if status is not None:
            check_choice(status, MEMORY_STATUSES, "status")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ConfigError("must be a non-negative integer", field="limit")
        scopes = _list_scopes(scope, scope_key)
        rows = self.store.memory_query(scopes=scopes, status=status, limit=limit)
        return [MemoryItem.from_dict(r) for r in rows]

    def count(
        self,
        *,
        scope: Scope | None = None,
        scope_key: str | None = None,
        status: MemoryStatus | None = None,
    ) -> int:
        """How many items ``list`` with the same filters returns without a limit (counted
        in the store)."""
        if scope is not None:
            check_choice(scope, MEMORY_SCOPES, "scope")
        if status is not None:
            check_choice(status, MEMORY_STATUSES, "status")
        return self.store.memory_count(scopes=_list_scopes(scope, scope_key), status=status)

    def retrieve(
        self,
        *,
        task_key: str,
        project: str,
        query: str = "",
        limit: int = 5,
        ranked: int | None = RECALL_RANKED,
    ) -> builtins.list[MemoryItem]:
        """The feedback to put in a context for task ``task_key`` of ``project``: active items of
        that task, of that project, and confirmed global ones — never another task's or
        project's. What people said (every signal but ``reflection``) always comes before
        what the loop told itself (reflections), which only fill the slots left; each side is
        ranked in the store by strength × relevance to ``query`` (full-text
        relevance over text and rule — FTS5 ``bm25()`` on SQLite, ``ts_rank`` on PostgreSQL —
        with a floor, so an empty query ranks by strength alone); on ties task scope comes
        before project before global, then newer before older. The same feedback held in several
        scopes is returned once, in its best-ranked scope. ``ranked``: how many matches are
        scored for relevance, the newest (``RECALL_RANKED``; None: every one)."""
        if not isinstance(task_key, str):
            raise ConfigError("must be a string", field="task_key")
        if not isinstance(project, str):
            raise ConfigError("must be a string", field="project")
        if not isinstance(query, str):
            raise ConfigError("must be a string", field="query")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError("must be a non-negative integer", field="limit")
        if limit == 0:
            return []
        from ._recall import recall  # (it ranks with this module's ``rank``)

        scopes = recall_scopes(task_key, project)
        return recall(self.store, scopes, query, limit, check_ranked(ranked))


def recall_scopes(task_key: str, project: str) -> builtins.list[tuple[str, str | None]]:
    """The scopes a context of task ``task_key`` in ``project`` may read: that task, that
    project, and global (only confirmed global feedback is ever active)."""
    scopes: builtins.list[tuple[str, str | None]] = [("global", "")]
    if task_key:
        scopes.append(("task", task_key))
    if project:
        scopes.append(("project", project))
    return scopes


def rank(
    rows: Iterable[Mapping[str, Any]],
    *,
    scopes: Iterable[tuple[str, str | None]],
    limit: int = 5,
) -> builtins.list[MemoryItem]:
    """``FeedbackMemory.retrieve`` on rows the store ranked already (``Store.memory_search``,
    best first): the items of ``scopes``, the same feedback once (in its best-ranked scope),
    at most ``limit``."""
    allowed = set(scopes)
    out: builtins.list[MemoryItem] = []
    if limit <= 0:
        return out
    seen: set[tuple[str, str]] = set()
    for r in rows:
        # Belt and braces: the store filtered already; nothing of another scope gets through.
        if (r["scope"], r["scope_key"]) not in allowed:
            continue
        it = MemoryItem.from_dict(r)
        key = feedback_key(it.text, it.rule)
        if key in seen:
            continue
        seen.add(key)
        out.append(it)
        if len(out) == limit:
            break
    return out


def _list_scopes(
    scope: str | None, scope_key: str | None
) -> builtins.list[tuple[str, str | None]] | None:
    """``memory_query``'s scopes for ``FeedbackMemory.list``'s filters."""
    if scope is not None:
        return [(scope, scope_key)]
    if scope_key is not None:
        return [(s, scope_key) for s in MEMORY_SCOPES]
    return None
