"""A run's checkpoints (or records) in order, each with the cycles concluded: what the views of
a whole run (``show --json``, ``GET /api/runs/{id}``) need to tell a mid-cycle record whose
cycle concluded later (its concluding record shows the same) from one whose cycle never did.

They read every record twice, a page at a time: first the concluded cycles, then the records
to show (7-15 % of their time). Here the records are read once, in order: a mid-cycle record
is held back, with what follows it, until a record concluding its cycle is read (next, as a
rule) or the records end; a run that holds back more than ``HOLD`` reads the concluded
cycles of every record then, as before, and holds back nothing more.

A mid-cycle record whose cycle never concluded (a cycle parked for approval, or one whose
effects did not complete) is shown by every timeline as ``unapplied`` makes it: the proposal,
visible verdicts and spend its checkpoint's write-ahead state (``pending``) holds.

A parked record is judged by the decision stored for its request (``decided``), not by its
cycle's number alone: a denied or expired request's cycle never concluded, though a later
cycle may carry its number (the check-only cycle that judges a person's edit after the denial);
an approved one's spend is carried by the records its cycle wrote next (its effects' record
or its concluding one), and it is a plain marker once one follows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from .store import Approval, Checkpoint, Store

__all__ = [
    "ABANDONED",
    "HOLD",
    "MID_CYCLE",
    "AfterEnd",
    "asked_before_parked",
    "by_id",
    "concluded_cycles",
    "decided_on",
    "edits_after_run_ended",
    "in_order_with_concluded",
    "never_concluded",
    "parked_words",
    "shown_records",
    "unapplied",
]

#: Decisions of the records written inside a cycle: a cycle's effects write one before they
#: run, a parked cycle one when it parks. The cycle concluded if a later (or, after a
#: rollback, an earlier) record holds its proposal.
MID_CYCLE = frozenset({"parked", "effects"})
#: The statuses of a request whose parked cycle will never be applied.
ABANDONED = frozenset({"denied", "expired", "cancelled"})
#: The most checkpoints held back at once before the concluded cycles are read whole.
HOLD = 256

_T = TypeVar("_T")


def in_order_with_concluded(
    items: Iterable[_T],
    record_of: Callable[[_T], dict[str, Any] | None],
    every_record: Callable[[], Iterable[tuple[int, int, dict[str, Any] | None]]],
    pending_of: Callable[[_T], object] | None = None,
) -> Iterator[tuple[_T, set[Any]]]:
    """``items`` (a run's checkpoints or records, oldest first, read once), each with the
    cycles concluded (``store._records.concluded_cycles``) as far as it needs: the set holds
    its cycle if its cycle concluded at all in the run, when it is a mid-cycle record (one
    whose write-ahead state a later checkpoint let go, ``pending_of`` says, is given then: its
    cycle never concluded, whatever number a later one carries), and the marks
    ``never_concluded`` reads (``_Notes``). The set grows as the items are read: read it
    (never change it) for an item before taking the next. ``pending_of``: an item's
    write-ahead state (read only while a mid-cycle record is open). ``every_record``
    (``Store.iter_records`` of the run) is read only when more than ``HOLD`` items wait."""
    notes = _Notes()
    concluded = notes.concluded
    held: deque[_T] = deque()
    complete = False

    def waits(item: _T) -> bool:
        rec = record_of(item)
        return not complete and rec is not None and notes.open_mid_cycle(rec)

    for item in items:
        rec = record_of(item)
        notes.read(rec, None if pending_of is None else partial(pending_of, item))
        if not held and not waits(item):
            yield item, concluded
            continue
        held.append(item)
        while held and not waits(held[0]):
            yield held.popleft(), concluded
        if len(held) > HOLD:
            for _s, _c, r in every_record():
                notes.read(r, None)
            complete = True
            while held:
                yield held.popleft(), concluded
    complete = True  # every record read: a cycle not concluded now never was
    while held:
        yield held.popleft(), concluded


def asked_before_parked(
    rows: Iterable[_T],
    parked_in: Callable[[_T], object],
    asked_in: Callable[[_T], object],
) -> Iterator[_T]:
    """``rows`` (a timeline's, oldest first, read as they are asked for), each question's
    concluding row ahead of its cycle's parked marker. A cycle that asks a question concludes
    ("asked") and parks for the answer, its parking record written first: the timelines read
    "parked …: answered by ann" above the question it answered (polish52). ``parked_in``: a
    row's cycle if it is a parked marker, else None; ``asked_in``: its cycle if it is an
    "asked" cycle's row, else None. Any other order is kept: an approval's marker precedes
    its cycle's row, which is what was applied once it was approved."""
    held: list[_T] = []  # a parked marker, until the row after it is read
    for row in rows:
        if held:
            marker = held.pop()
            cycle = asked_in(row)
            if cycle is not None and cycle == parked_in(marker):
                yield row
                yield marker
                continue
            yield marker
        if parked_in(row) is not None:
            held.append(row)
        else:
            yield row
    yield from held


def concluded_cycles(
    items: Iterable[_T],
    record_of: Callable[[_T], Mapping[str, Any] | None],
    pending_of: Callable[[_T], object] | None = None,
) -> set[Any]:
    """The cycles concluded among ``items`` (a whole run's checkpoints), with the marks
    ``never_concluded`` reads: the set ``in_order_with_concluded`` gives once every one is
    read."""
    notes = _Notes()
    for it in items:
        notes.read(record_of(it), None if pending_of is None else partial(pending_of, it))
    return notes.concluded


def _token(record: Mapping[str, Any]) -> str:
    """What a mid-cycle record's write-ahead state is known by: its request (parked), its
    cycle's effects."""
    if record.get("decision") == "parked":
        return f"request:{record.get('approval_id')}"
    return f"effects:{record.get('cycle')}"


def _holds(pending: object) -> str | None:
    """The mid-cycle record (``_token``) a checkpoint's write-ahead state still holds."""
    if not isinstance(pending, Mapping):
        return None
    if pending.get("approval_id") is not None:
        return f"request:{pending.get('approval_id')}"
    if pending.get("stage") == "effects":
        return f"effects:{pending.get('cycle')}"
    return None


class _Notes:
    """What is known of a run's mid-cycle records as its records are read, in ``concluded``:
    each concluded cycle; ``("carried", token)`` for a mid-cycle record whose spend a later
    record of its cycle holds (a concluding one; or, of a parked cycle, its effects' record or
    its parking again); ``("dropped", token)`` for one whose write-ahead state a later
    checkpoint let go before any did (a request denied or expired and the run moved on; effects
    that failed): its cycle never concluded, whatever number a later cycle carries."""

    def __init__(self) -> None:
        self.concluded: set[Any] = set()
        self.open: dict[str, Any] = {}  # token -> cycle: mid-cycle records not carried yet

    def read(self, rec: Mapping[str, Any] | None, pending: Callable[[], object] | None) -> None:
        mid = bool(rec) and rec is not None and rec.get("decision") in MID_CYCLE
        if rec and ("proposal" in rec or mid):
            n, mine = rec.get("cycle"), _token(rec) if mid else None
            for token, c in list(self.open.items()):
                # a concluding record carries its cycle's every open one; a mid-cycle record,
                # a parked one's (what it spent is in the write-ahead state it writes)
                if c == n and token != mine and ("proposal" in rec or token[:8] == "request:"):
                    self.concluded.add(("carried", token))
                    del self.open[token]
        if self.open and pending is not None:
            held = _holds(pending())
            for token in [t for t in self.open if t != held]:
                self.concluded.add(("dropped", token))
                del self.open[token]
        if rec and "proposal" in rec:
            self.concluded.add(rec.get("cycle"))
        elif mid and rec is not None:
            self.open[_token(rec)] = rec.get("cycle")

    def open_mid_cycle(self, rec: Mapping[str, Any]) -> bool:
        """Whether ``rec`` is a mid-cycle record whose cycle has not concluded so far, and
        whose write-ahead state was not let go (then its cycle never concluded)."""
        if "proposal" in rec or rec.get("decision") not in MID_CYCLE:
            return False
        return (
            rec.get("cycle") not in self.concluded
            and ("dropped", _token(rec)) not in self.concluded
        )


def never_concluded(
    record: Mapping[str, Any] | None,
    concluded: set[Any],
    decided: Mapping[str, Approval] | None = None,
) -> bool:
    """Whether ``record`` is a mid-cycle record whose cycle never concluded (``concluded``:
    as ``in_order_with_concluded`` gives it with the record): its write-ahead state was let go
    before a record carried it (``_Notes``), or none did. A parked record waiting on a request
    (``decided``: the run's requests by id) never concluded yet."""
    if record is None or "proposal" in record or record.get("decision") not in MID_CYCLE:
        return False
    token = _token(record)
    if ("dropped", token) in concluded:
        return True
    req = _request(record, decided)
    if req is not None and req.status == "pending":
        return True
    if ("carried", token) in concluded:
        return False
    return record.get("decision") == "parked" or record.get("cycle") not in concluded


def _request(record: Mapping[str, Any], decided: Mapping[str, Approval] | None) -> Approval | None:
    """The request a parked ``record`` waited on, if ``decided`` holds it."""
    if not decided or record.get("decision") != "parked":
        return None
    return decided.get(str(record.get("approval_id")))


def unapplied(
    record: Mapping[str, Any],
    pending: object,
    *,
    ended: bool,
    decided: Mapping[str, Approval] | None = None,
) -> dict[str, Any] | None:
    """A never-concluded mid-cycle ``record`` (``never_concluded``) as the timelines show it,
    from its checkpoint's ``pending`` (the write-ahead state written with it): the cycle's
    proposal, visible verdicts (its held-out ones are the record's) and what it spent, which
    no other row lists; its ``decision`` says why it was not applied: a parked one, the
    decision on its request (``decided``: by id) where there was one. ``ended``: the run has
    ended, so it never will be. None where ``pending`` holds no proposal (an older store)."""
    if not isinstance(pending, Mapping) or not isinstance(pending.get("proposal"), Mapping):
        return None
    parked = record.get("decision") == "parked"
    if parked:
        req = _request(record, decided)
        asked = pending.get("kind") == "question" or _is_question(req)
        # (an actor's own question applies nothing; a risk rule's applies the proposal)
        said = (_answer_outcome if pending.get("question_only") else _outcome)(req, ended=ended)
        why = f"{QUESTION_PARKED if asked else APPROVAL_PARKED}: {said}"
    else:
        why = "not applied: its effects did not complete"
    return {
        "cycle": record.get("cycle"),
        "proposal": pending["proposal"],
        "visible": pending.get("visible"),
        "held_out": record.get("held_out"),
        "usage": pending.get("usage"),
        "decision": why,
    }


#: A parked cycle's words: waiting on an approval, or on the answer to a question it asked
#: (polish52b: a question's read "parked for approval: answered by ann").
APPROVAL_PARKED = "parked for approval"
QUESTION_PARKED = "parked for an answer"


def _is_question(req: Approval | None) -> bool:
    return req is not None and req.kind == "question"


def parked_words(record: Mapping[str, Any], decided: Mapping[str, Approval] | None) -> str:
    """What a parked ``record``'s row says it waited on: an answer to the question its cycle
    asked, or an approval (also where ``decided`` does not hold its request)."""
    return QUESTION_PARKED if _is_question(_request(record, decided)) else APPROVAL_PARKED


def _answer_outcome(req: Approval | None, *, ended: bool) -> str:
    """What became of a question a cycle parked on and never concluded."""
    if req is None or req.status == "pending":
        return "never answered" if ended else "not answered yet"
    by = f" by {req.decided_by}" if req.decided_by and req.status != "expired" else ""
    return f"{req.status}{by}"


def _outcome(req: Approval | None, *, ended: bool) -> str:
    """What became of a parked cycle not applied, by the decision on its request."""
    if req is not None and req.status in ABANDONED:
        by = f" by {req.decided_by}" if req.status == "denied" and req.decided_by else ""
        return f"{req.status}{by}, never applied"
    said = "never applied" if ended else "not applied yet"
    if req is not None and req.status != "pending":
        by = f" by {req.decided_by}" if req.decided_by else ""
        return f"{req.status}{by}, {said}"
    return said


def decided_on(record: Mapping[str, Any], decided: Mapping[str, Approval] | None) -> str | None:
    """The decision on the request a parked ``record`` waited on, as its marker says it
    ("approved by ann", "denied by ann", "expired"); None while it waits, or not known."""
    req = _request(record, decided)
    if req is None or req.status == "pending":
        return None
    by = req.decided_by if req.status not in ("expired", "cancelled") else None
    return f"{req.status} by {by}" if by else req.status


def by_id(approvals: Iterable[Approval]) -> dict[str, Approval]:
    """A run's requests by id: the ``decided`` the functions here read."""
    return {a.approval_id: a for a in approvals}


def shown_records(
    store: Store,
    run_id: str,
    *,
    ended: bool,
    decided: Mapping[str, Approval] | None = None,
    rows_read: Iterable[tuple[int, int, dict[str, Any] | None, Mapping[str, Any]]] | None = None,
) -> Iterator[tuple[int, dict[str, Any] | None, set[Any], dict[str, Any] | None]]:
    """The run's records, oldest first, read once a page at a time: each checkpoint's
    ``(cycle, record, concluded, shown)``, ``concluded`` as ``in_order_with_concluded`` gives
    it, ``shown`` a never-concluded mid-cycle record as ``unapplied`` makes it from its
    checkpoint's fields (else None), as the run page's rows are made. ``decided``: the run's
    requests by id (``by_id``). ``rows_read``: the checkpoints to read (``iter_fields``' rows,
    oldest first: the newest ones of a run without a rollback), else every one."""
    rows = in_order_with_concluded(
        store.iter_fields(run_id) if rows_read is None else rows_read,
        lambda row: row[2],
        lambda: store.iter_records(run_id),
        lambda row: row[3].get("pending"),
    )
    mark = AfterEnd(ended=ended, decided=decided)
    for (_seq, cycle, record, fields), concluded in rows:
        record, shown = mark.read(record, fields.get("pending"), concluded)
        yield cycle, record, concluded, shown


class AfterEnd:
    """A run's records read in order, a person's edit made after a cycle that never
    concluded ended the run given that cycle (``"after_run_ended": True``): its checkpoint
    carries the last concluded cycle's number (it read "cycle 0 edited by ana" after cycle
    1's row). One rule for ``show`` (``shown_records``), the run page and ``/api/runs/{id}``
    (``edits_after_run_ended``, ``found``). ``ended``, ``decided``: as ``unapplied``."""

    def __init__(self, *, ended: bool, decided: Mapping[str, Approval] | None = None) -> None:
        self.ended, self.decided = ended, decided
        self.ended_in: Any = None  # the cycle the run ended in, parked or its effects not done
        #: the edits marked so far, by ``(part, version)``: the cycle each is listed in
        self.found: dict[tuple[str, object], int] = {}

    def read(
        self, record: dict[str, Any] | None, pending: object, concluded: set[Any]
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The next record (``pending``: its checkpoint's write-ahead state; ``concluded``:
        as ``in_order_with_concluded`` gives it), marked if it is such an edit, with its row
        as ``unapplied`` makes it where it is a never-concluded mid-cycle record (else None)."""
        shown = None
        if record is not None and never_concluded(record, concluded, self.decided):
            shown = unapplied(record, pending, ended=self.ended, decided=self.decided)
        if record is not None and "proposal" in record:
            self.ended_in = None  # a cycle concluded since (the check-only one after an edit)
        elif shown is not None:
            self.ended_in = record.get("cycle") if record else None
        elif record and self.ended_in is not None and _edit_after_end(record):
            record = {**record, "cycle": self.ended_in, "after_run_ended": True}
            self.found[(str(record.get("part")), record.get("version"))] = self.ended_in
        return record, shown


def edits_after_run_ended(
    checkpoints: Sequence[Checkpoint],
    *,
    ended: bool,
    decided: Mapping[str, Approval] | None = None,
) -> dict[tuple[str, object], int]:
    """``AfterEnd.found`` of ``checkpoints`` (a run's, oldest first: the run page's window)."""
    concluded = concluded_cycles(checkpoints, lambda c: c.record, lambda c: c.fields.get("pending"))
    mark = AfterEnd(ended=ended, decided=decided)
    for ck in checkpoints:
        mark.read(ck.record, ck.fields.get("pending"), concluded)
    return mark.found


def _edit_after_end(record: dict[str, Any]) -> bool:
    """A person's edit made with no request waiting: one made while a cycle is parked keeps
    that cycle's held-out verdicts (``Runtime.edit``), listed in that cycle as it was."""
    return record.get("decision") == "edit" and "held_out" not in record
