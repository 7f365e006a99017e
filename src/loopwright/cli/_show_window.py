"""``loopwright show``'s timeline records: every checkpoint's, or for the last cycles only
(``--last N``, the default) the newest checkpoints' — a page of a 10,000-cycle run's timeline
is not its every record read and decoded (a second of CPU, nine tenths of it for rows left
out)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._mid_cycle_records import decided_on, parked_words, shown_records

if TYPE_CHECKING:
    from ..store import Approval, RunRecord, Store

__all__ = ["timeline_records"]

_Records = list[tuple[int, dict[str, Any] | None]]


def timeline_records(
    st: Store,
    rec: RunRecord,
    decided: Mapping[str, Approval],
    *,
    newest_seq: int,
    ended: bool,
    last: int | None,
) -> Iterable[tuple[int, dict[str, Any] | None]]:
    """Each checkpoint's ``(cycle, record)`` as the timeline shows it, oldest first: every
    one (``last`` None, or where the newest cannot tell theirs), else those of the newest
    checkpoints that hold the last ``last`` cycles' rows and at least one cycle before them
    (the timeline's window leaves it out: its earlier records were not read).
    ``newest_seq``: the run's latest checkpoint's."""
    if last is not None:
        got = _newest(st, rec, decided, last, newest_seq=newest_seq, ended=ended)
        if got is not None:
            return got
    return _marked(shown_records(st, rec.run_id, ended=ended, decided=decided), decided)


def _newest(
    st: Store,
    rec: RunRecord,
    decided: Mapping[str, Approval],
    last: int,
    *,
    newest_seq: int,
    ended: bool,
) -> _Records | None:
    """The newest checkpoints' records, from a concluded cycle's on, holding more than
    ``last`` cycles' rows; read again over four times as many checkpoints while they hold
    fewer (a cycle may have several: parked, its effects, people's edits). None: read every
    one — a run rolled back (a redone cycle's record before the window may tell whether a
    mid-cycle one in it concluded), or one whose window reached its start."""
    from ._render import cycles_in

    if st.events_of_kinds(rec.run_id, ("rolled_back",), limit=1):
        return None
    span = 2 * last + 16
    while newest_seq - span >= 0:
        cks = st.checkpoints_after(rec.run_id, newest_seq - span)
        # From the first record of a concluded cycle: nothing before it is open then (the
        # cycle a run ended inside, a mid-cycle record waiting for its cycle's conclusion).
        start = next((i for i, c in enumerate(cks) if c.record and "proposal" in c.record), None)
        if start is not None:
            rows = ((c.seq, c.cycle, c.record, c.fields) for c in cks[start:])
            got = list(
                _marked(
                    shown_records(st, rec.run_id, ended=ended, decided=decided, rows_read=rows),
                    decided,
                )
            )
            if cycles_in(got) > last:
                return got
        span *= 4
    return None


def _marked(
    rows: Iterable[tuple[int, dict[str, Any] | None, Any, dict[str, Any] | None]],
    decided: Mapping[str, Approval],
) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """``shown_records``' rows as the timeline takes them: a cycle parked, or whose effects
    did not complete, as ``unapplied`` made it (what it proposed, its verdicts and spend: the
    run page shows the same), a parked cycle's marker with the decision on its request."""
    for c, r, _done, shown in rows:
        yield c, shown or _parked(r, decided)


def _parked(record: dict[str, Any] | None, decided: Mapping[str, Approval]) -> Any:
    """``record``, a parked cycle's marker with the decision on its request (``outcome``)."""
    if not record or record.get("decision") != "parked":
        return record
    said = decided_on(record, decided)
    marker = {**record, "parked_for": parked_words(record, decided)}
    return marker if said is None else {**marker, "outcome": said}
