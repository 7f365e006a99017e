"""People's edits of a run's parts: whose version of a part is current, and the people's
versions a rollback replaces."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._state import TaskState

__all__ = ["edits_dropped", "person_edit", "said_dropped"]


def person_edit(s: TaskState, ref: str) -> dict[str, Any] | None:
    """The ``edit`` note (``Runtime.edit``) of the person who wrote part ``ref``'s current
    version, if a person did."""
    part = s.part(ref)
    if part is None:
        return None
    for note in reversed(s.notes):
        if note.get("kind") == "edit" and note.get("part") == ref:
            return dict(note) if note.get("version") == part.count else None
    return None


def edits_dropped(now: TaskState, then: TaskState) -> list[dict[str, Any]]:
    """The people's versions current in ``now`` that restoring ``then``'s artifacts (a
    rollback) replaces: each part a person wrote last (``person_edit``) whose value ``then``
    does not hold, as ``{"part", "by", "version"}``."""
    out: list[dict[str, Any]] = []
    for ref, p in now.iter_parts():
        edit = person_edit(now, ref)
        if edit is None:
            continue
        old = then.part(ref)
        if old is None or old.count == 0 or old.value != p.value:
            out.append({"part": ref, "by": edit.get("by"), "version": edit.get("version")})
    return out


def said_dropped(dropped: Sequence[Mapping[str, Any]]) -> str:
    """``edits_dropped`` as a sentence's end: "alice's version of doc/c (v3), ..."."""
    return ", ".join(
        f"{d.get('by')}'s version of {d.get('part')} (v{d.get('version')})" for d in dropped
    )
