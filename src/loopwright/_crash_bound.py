"""The contract's crash bound (``Budget.max_crashes``): how many executions of a run died at
one cycle (``crashes_at``, read once from the end of the event log at resume), the crashes a
cycle may have and still be driven again (``crash_bound``), and the stop's words for a run
ended by it (``crash_cause``). Apart from ``_resume_ready`` and ``_driving``, which ask it,
and from ``_contract``, whose setting it reads: its rules in one place (``_effect_run``'s
uncharged kills are bounded by it too)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from ._contract import Contract
from ._contract_rules import DEFAULT_MAX_CRASHES
from ._hints import settle_command
from ._usage import Usage
from .store import Event, Store

# Events after which the run was left for a person or ended, each written under the run's lease
# by who held it (a commit, or its holder at once): a park for a person, a rollback, an end.
# The count starts again after one. (A person's decision is none: it is written beside an
# execution, a pause lifted before the run parked among them; the park before it counts.)
_HANDED_OVER = frozenset(
    {
        *("approval_requested", "paused", "still_waiting", "rolled_back"),
        *("stopped", "compensation_reused"),
    }
)
_STARTS = frozenset({"started", "resumed"})
# An execution's word that it stopped alive, naming its lease (``lease``, its fencing token): a
# drain at shutdown, or ``interrupted`` (Ctrl-C, the store failing under it, a lease lost to
# another executor). Matched to the execution by that token, never by where it lies in the
# log: a lost lease is said after the executor that took the run over has started, maybe
# died. A ``drained`` without a lease (written before leases were named) is read as it was
# then: a handoff.
LEFT_ALIVE = frozenset({"drained", "interrupted"})
LEASE_LOST = "lease lost"  # (the one such word written late, by an executor taken over)
_PAGE = 16  # (a crashed execution leaves one event; a page or two reach the count's end)


def crashes_at(store: Store, run_id: str, cycle: int, token: int | None = None) -> int:
    """How many executions of a run died at the cycle after ``cycle`` (``crashes_and_alive``)."""
    return crashes_and_alive(store, run_id, cycle, token).crashes


class ReadBack(NamedTuple):
    """What ``crashes_and_alive`` read back."""

    crashes: int
    alive: frozenset[int]  # the leases that said they stopped alive
    fenced: Usage  # what fenced-out executions' words after the event ``upto`` say they spent
    held: Usage  # the held-out verifiers' share of ``fenced`` (kept apart: invariant 3)
    upto: int  # the id of the last such word (the one asked with when none)


def crashes_and_alive(
    store: Store, run_id: str, cycle: int, token: int | None = None, upto: int = 0
) -> ReadBack:
    """How many executions of a ``running`` run died while driving the cycle after ``cycle``
    (its last concluded one) since that cycle concluded: read from the end of its event log at
    resume (each execution commits its ``started``/``resumed`` event, naming its lease, with
    the status, before its first call), never during a cycle (invariant 8). ``token``: the
    lease of the execution asking (the one after the last in the log).

    Read backwards up to a ``_HANDED_OVER`` event. Each execution met (its start event) died
    unless it said it stopped alive (``LEFT_ALIVE``, by its lease); so did the one that
    concluded ``cycle`` (its ``decision`` met before its start, naming its lease), unless its
    lease said so. (A decision of an older log names none: a word after it, or one by the lease
    before its successor's, a takeover taking the lease before plus one.) An event written
    beside the executions (a person's decision, a worker's or the dashboard's note, a person's
    operation taking the lease between two executions) is passed over.

    Also the leases read that said they stopped alive: an effect's call cut by one of them is
    no uncharged kill (``_effect_run``), as its execution is no crash here. And what the words
    of executions taken over (``lease lost``) after the event ``upto`` say they spent and
    never committed (fenced out): charged by the resume (invariant 7; crash55b). They lie
    where this reads: said late, after the start of the execution that took the run over.
    Only an earlier release's words (``spent``): one said since fenced56 names its bills
    ``fenced``, added to the run's row as it was said (``RunRecord.fenced``), not read here."""
    before: int | None = None
    met: list[int | None] = []  # the leases of the executions met (their start events)
    alive: set[int] = set()
    after = token  # the lease of the execution after the one met next
    said = False  # a word written under its lease met since the last start (its execution's)
    concluder = 0  # 1: the execution that concluded ``cycle`` died after it
    fenced, held, last = Usage(), Usage(), upto
    while True:
        page = store.events_tail(run_id, before_id=before, limit=_PAGE)
        for e in page:
            kind = e.kind
            if kind in _STARTS:
                lease = event_lease(e)
                met.append(lease)
                if e.cycle < cycle:
                    break
                after, said = lease, False
            elif kind in LEFT_ALIVE:
                lease = event_lease(e)
                if lease is None:
                    break
                alive.add(lease)
                lost = e.data.get("why") == LEASE_LOST
                said = said or not lost
                if lost and e.id > upto and isinstance(spent := e.data.get("spent"), dict):
                    fenced, last = fenced + Usage.from_dict(spent), max(last, e.id)
                    if isinstance(part := spent.get("held_out"), dict):
                        held = held + Usage.from_dict(part)
            elif kind in _HANDED_OVER:
                break
            elif kind == "decision" and e.cycle <= cycle:
                # the execution that concluded ``cycle`` (its start further back) died after
                # it, unless it said otherwise by the lease its decision names. A decision of
                # an older log names none: a word under its lease after it, or one said late
                # by the lease before its successor's (a takeover's; a person's operation
                # between them took a lease too, and this over-counted: crash54)
                lease = event_lease(e)
                if lease is not None:
                    concluder = 0 if lease in alive else 1
                else:
                    concluder = 0 if said or (after is not None and after - 1 in alive) else 1
                break
        else:
            if len(page) == _PAGE:
                before = page[-1].id
                continue
        # (judged once all is read: a word said as a commit of a group was still on its way
        # may lie before its execution's start)
        crashed = sum(1 for lease in met if lease is None or lease not in alive)
        return ReadBack(concluder + crashed, frozenset(alive), fenced, held, last)


def event_lease(e: Event) -> int | None:
    """The lease an execution's event names (none in a log written before they did)."""
    lease = e.data.get("lease")
    return lease if isinstance(lease, int) and not isinstance(lease, bool) else None


def crash_bound(contract: Contract) -> int:
    """The crashes one cycle may have and still be driven again (``Budget.max_crashes``)."""
    bound = contract.budget.max_crashes
    return DEFAULT_MAX_CRASHES if bound is None else bound


def crash_cause(
    crashes: int,
    cycle: int,
    bound: int,
    *,
    effects: Mapping[str, list[str]] | None = None,
    run_id: str = "RUN",
) -> str:
    """The stop's words for a run ended by its crash bound (``effects``: ended in the cycle's
    effects, those its journal holds done and those whose outcome is unknown, in doubt: how
    a person settles each once checked)."""
    said = (
        f"the run's executor crashed {crashes} time{'s' * (crashes != 1)} at cycle {cycle} "
        "(killed, out of memory, "
        f"a crash in native code or os._exit) and budget.max_crashes allows {bound}: escalated "
        "instead of driving the cycle again; find what kills the process, then fork the run"
    )
    if effects is not None:
        done, unknown = effects.get("done") or [], effects.get("unknown") or []
        said += f". It died in the cycle's effects: done {done or 'none'}"
        if unknown:
            said += unknown_tail(unknown, run_id)
    return said


def unknown_tail(unknown: list[str], run_id: str) -> str:
    """``crash_cause``'s words for the effects of unknown outcome left to settle (``_settle``
    rewrites them as each is settled: crash55c)."""
    key = unknown[0] if len(unknown) == 1 else "KEY"
    return (
        f"; started and not known to have finished {unknown}: check them, then settle "
        f"each: `{settle_command(run_id, key)}` if it happened, "
        "`--not-done` if not"
    )
