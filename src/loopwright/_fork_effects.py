"""What a fork does with its origin's effects, said before and when it is made (effects53b).

A fork inherits the effects its origin did up to the fork point (journaled in the fork, never
done again). One its origin did *after* that point is not the fork's: a business key (``key=``)
names the action store-wide, so the fork asking for it reuses the origin's result; a run-scoped
key (the default) names the run, so the fork's cycles asking for it hand a new key and do it a
second time — a second payment, a second publish. By design (a run-scoped key says the action
is the run's), but nothing said so: ``loopwright fork``, ``Runtime.fork`` (a warning on the
``loopwright.runs`` logger, as a rollback's) and the dashboard's rerun now name them.
"""

from __future__ import annotations

from ._redact_logs import masked_logger
from .store import JournalEntry, Store

__all__ = [
    "again_names",
    "effect_names",
    "effects_text",
    "fork_effects",
    "fork_effects_text",
    "warn_fork_effects",
]

# Names listed in one line, the rest counted: a long run's line stays readable.
_LISTED = 8
# Rows a page view reads to name them (``again_names``): the first few, not the run's all.
_READ = 4 * _LISTED


def fork_effects(
    store: Store, run_id: str, at_cycle: int, *, inherited: bool = True
) -> tuple[list[JournalEntry], list[JournalEntry], bool]:
    """The effects ``run_id`` did up to ``at_cycle`` (a fork there inherits them; the first
    few, one more when there are more: named, not counted, so a late fork of a long run
    decodes no more than that, invariant 8) and those it did after it with a run-scoped key
    (a fork there runs each again if its cycles ask for it; read as a rollback reads the
    effects after its point): done, not compensations, done by this run (not reused from
    another's), and whether more were done after it than were read. ``inherited=False``: the
    first list is left empty, unread."""
    done = ("done",)
    kept = (
        _own(
            store.journal_where(
                run_id, kind="effect", statuses=done, upto_cycle=at_cycle, limit=4 * _LISTED
            )
        )
        if inherited
        else []
    )
    # The effects after it: the first ``_READ`` read (a late fork of a long run, or one at
    # cycle 0 of a run with an effect a cycle, reads no more than that: invariant 8), one
    # more kept when more were there, so that ``effects_text`` says "and more"
    after = store.journal_where(
        run_id, kind="effect", statuses=done, after_cycle=at_cycle, limit=_READ + 1
    )
    return kept[: _LISTED + 1], _run_scoped(_own(after[:_READ])), len(after) > _READ


def _own(entries: list[JournalEntry]) -> list[JournalEntry]:
    """Done by the run itself: not compensations, not reused from another run's."""
    from ._reversal import is_compensation  # (not at start-up: test_layering)

    return [e for e in entries if not is_compensation(e) and not e.data.get("from_run")]


def _run_scoped(entries: list[JournalEntry]) -> list[JournalEntry]:
    """Those with a run-scoped key (no business ``key=``, which names an action)."""
    return [e for e in entries if "action" not in e.data]


def again_names(store: Store, run_id: str, at_cycle: int) -> str:
    """The effects a fork of ``run_id`` at ``at_cycle`` may do again, named as
    ``effect_names`` names them, from a bounded read (the dashboard's rerun confirmation, on
    each view: a long run's page reads no more than a short one's, invariant 8): the first
    few, "and more" when the read stopped short of the run's last; empty when none."""
    read = store.journal_where(
        run_id, kind="effect", statuses=("done",), after_cycle=at_cycle, limit=_READ + 1
    )
    again = _run_scoped(_own(read[:_READ]))
    if len(read) <= _READ:
        return effect_names(again) if again else ""
    if not again:  # none among those read: the later ones were not read, so not said none
        return (
            f"perhaps some of its more than {_READ} effects after cycle {at_cycle} (not all read)"
        )
    return effect_names(again[:_LISTED]) + " and more"


def effect_names(entries: list[JournalEntry], with_cycle: bool = True) -> str:
    """Each effect's name (and cycle), the first few, the rest counted."""
    said = [
        f"{e.data.get('name')} (cycle {e.cycle})" if with_cycle else str(e.data.get("name"))
        for e in entries[:_LISTED]
    ]
    more = len(entries) - _LISTED
    return ", ".join(said) + (f" and {more} more" if more > 0 else "")


def _named_more(entries: list[JournalEntry], more: bool) -> str:
    """The first few named, "and more" when there were more than those (or than were read)."""
    more = more or len(entries) > _LISTED
    return effect_names(entries[:_LISTED]) + (" and more" if more else "")


def effects_text(
    kept: list[JournalEntry], again: list[JournalEntry], more: bool, at_cycle: int
) -> str | None:
    parts = []
    if kept:
        named = effect_names(kept[:_LISTED], False) + (" and more" if len(kept) > _LISTED else "")
        parts.append(f"effects done up to cycle {at_cycle} are inherited, not done again: {named}")
    if again:
        parts.append(
            f"done after cycle {at_cycle} with a run-scoped key, so done AGAIN by the new run "
            f"if its cycles ask for them: {_named_more(again, more)} — give such an effect a "
            "business key= (it names the action, which the new run then reuses)"
        )
    return "; ".join(parts) or None


def fork_effects_text(store: Store, run_id: str, at_cycle: int) -> str | None:
    """One line saying what a fork of ``run_id`` at ``at_cycle`` inherits and what it may
    do again, or ``None`` when the run did no effect."""
    return effects_text(*fork_effects(store, run_id, at_cycle), at_cycle)


def warn_fork_effects(store: Store, run_id: str, at_cycle: int, new_run: str) -> str | None:
    """Log (``loopwright.runs``, a warning) the effects a fork may do again, as a rollback's
    offers say an irreversible one may; the line said (``None``: none to warn of)."""
    _, again, more = fork_effects(store, run_id, at_cycle, inherited=False)
    if not again:
        return None
    text = effects_text([], again, more, at_cycle)
    masked_logger("loopwright.runs").warning(
        "fork %s of run %s at cycle %d: %s", new_run[:12], run_id[:12], at_cycle, text
    )
    return text
