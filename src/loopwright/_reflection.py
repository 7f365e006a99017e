"""Reflection: after a cycle that was not accepted and did not end the run, the loop's reflector
writes a task-scoped note into feedback memory, which later cycles (and runs) of the task are
shown.

A reflection comes after its cycle's commit (the cycle is durable before time is spent on a
note), so a process can die between the two. The outcome of each reflection is therefore
marked in the run's journal (one entry, key ``reflection``, its ``cycle`` the last one
reflected on) in the transaction that records its event; a resumed run whose last concluded
cycle has no mark reflects on it then, from the context the actor had (rebuilt from the
checkpoint before the cycle and the memory items its record names) and the cycle's visible
verdicts (from its record). A note already in memory for that cycle is recorded, not asked
for again.
"""

from __future__ import annotations

import time
from typing import Any

from . import _decide as rules
from ._actor_context import shown_items
from ._calls import call_user, hook_timeout
from ._exec import Execution as _Exec
from ._host import RuntimeHost
from ._memory import MemoryItem
from ._modelcalls import clip_masked
from ._proposal import Verdict
from ._redact import redact_text
from ._store_threads import written
from .store import Checkpoint, NewEvent

REFLECTION_CHARS = 4000  # a reflection kept as a note: what is past it is cut (and said)

__all__ = ["REFLECTION_KEY", "Reflection"]

REFLECTION_KEY = "reflection"
"""The journal key (and kind) marking the last cycle reflected on."""

_REFLECTED = ("revise", "refused")  # the decisions a reflector writes a note about

# How far back a resume looks for the last cycle's commits: past the status-only commits that
# resumes write (one each); a run resumed more often than this between two cycles has its
# last reflection skipped, not read from further back (memory is best effort).
_LOOKBACK = 16


class Reflection(RuntimeHost):
    """Reflecting on a cycle, and on a cycle whose reflection a crash cut off (mixed into
    ``Runtime``)."""

    async def _reflect(self, ex: _Exec) -> None:
        """After a cycle that was not accepted, the loop's reflector writes a task-scoped
        reflection into memory. It sees the cycle's context and its visible verdicts only."""
        loop, s = ex.loop, ex.state
        last = s.history[-1] if s.history else {}
        if loop.reflector is None or ex.last_context is None:
            return
        if last.get("decision") not in _REFLECTED:
            return
        rem = rules.remaining(ex.contract, s).seconds
        t0 = time.perf_counter()
        try:
            text, _ = await call_user(
                loop.reflector,
                ex.last_context,
                dict(ex.last_visible),
                timeout=hook_timeout(loop.actor_timeout_s, rem),
                threaded=ex.threaded,
            )
        except Exception as exc:
            await self._mark_reflection(ex, "failed", exc)
            return
        finally:
            # Reflecting is part of the run's time, finished or not (invariant 7).
            s.spent = s.spent.add_seconds(time.perf_counter() - t0)
        if text is not None and not isinstance(text, str):
            bad = TypeError(f"the reflector returned {type(text).__name__}, expected str or None")
            await self._mark_reflection(ex, "failed", bad)
            return
        if not text or not text.strip():
            await self._mark_reflection(ex, "empty")
            return
        try:
            item, new = self.memory.reflect(
                task_key=s.task_key,
                # a reflection is a short note, not a transcript: masked, then cut (a secret
                # cut first could keep a part too short to be recognised)
                text=clip_masked(text.strip(), REFLECTION_CHARS),
                source={"run_id": ex.run_id, "cycle": s.cycle},
                keep=loop.reflections_kept,
            )
        except Exception as exc:  # memory is best effort: a failure never fails the run
            await self._mark_reflection(ex, "failed", exc)
            return
        data: dict[str, Any] = {"memory_id": item.memory_id}
        if not new:
            data["again"] = True  # the same note as a kept one: nothing new was written
        await self._mark_reflection(ex, "done", data=data)

    async def _mark_reflection(
        self,
        ex: _Exec,
        status: str,
        exc: BaseException | None = None,
        *,
        data: dict[str, Any] | None = None,
    ) -> None:
        """The reflection of the current cycle is over: its event and the run's mark, in one
        transaction (a resume reflects on a cycle without a mark). Fenced: a stale lease
        raises, as any write of the run does. On a store whose write can wait on the run's row
        lock (PostgreSQL), from a thread: on the event loop, a mark waiting on a row another
        session held stopped every run of the process, once a cycle (review53a)."""
        await written(self.store, self.store.journal_put, **_mark(ex, status, exc, data))

    def _owed_reflection(self, ex: _Exec) -> bool:
        """Whether the run, being resumed, owes its last concluded cycle a reflection (the
        process ended between that cycle's commit and its reflection). When it does, the
        cycle's context and visible verdicts are set on ``ex`` for ``_reflect``."""
        loop, s = ex.loop, ex.state
        last = s.history[-1] if s.history else {}
        if loop.reflector is None or last.get("decision") not in _REFLECTED:
            return False
        marks = self.store.journal(ex.run_id, key=REFLECTION_KEY)
        if marks and marks[0].cycle >= s.cycle:
            return False
        if not marks and any(
            e.cycle == s.cycle and e.kind in ("reflected", "reflection_failed")
            for e in self.store.events(ex.run_id)
        ):
            # No mark at all: a run written before marks (its events say it reflected), or one
            # owing its first reflection. Read once; every reflection from now on is marked.
            return False
        cps = self.store.checkpoints_after(ex.run_id, ex.seq - _LOOKBACK)
        found = _cycle_commits(cps, s.cycle)
        if found is None:
            return False
        before, own = found
        record = own.record or {}
        if (
            record.get("decision") not in _REFLECTED
            or record.get("ended")
            or own.fields.get("pending")
            or rules.record_no_attempt(record)  # no actor to reflect on: a person's edit judged
        ):
            # the cycle ended otherwise, ended the run (a request denied after an edit beside
            # it: the actor's attempt, then the edit judged), or the run waits on it
            return False
        kept = self._kept_note(ex)
        if kept is not None:
            # The note was written, the mark was not: record it, do not ask for another.
            # (once, as the run resumes: on the loop, as a parked run's writes then are)
            mark = _mark(ex, "done", None, {"memory_id": kept, "recovered": True})
            self.store.journal_put(**mark)
            return False
        state = before.task_state()
        ids = [str(m) for m in record.get("memory") or ()]
        # as the cycle's recall showed them (``shown_items``): a strength PostgreSQL kept as -0.0
        # (a row written before ``add`` made it 0.0) was shown to the reflector as -0
        shown = shown_items(
            [
                MemoryItem.from_dict(row)
                for mid in ids
                for row in self.store.memory_query(memory_id=mid)
            ]
        )
        ex.last_context = self._context(
            ex, s.cycle, shown, rules.remaining(ex.contract, state, shown=True), state=state
        )
        ex.last_visible = {
            str(k): Verdict.from_dict(v) for k, v in (record.get("visible") or {}).items()
        }
        return True

    def _kept_note(self, ex: _Exec) -> str | None:
        """The id of an active reflection this run wrote about its current cycle, if any."""
        s = ex.state
        for row in self.store.memory_query(scopes=[("task", s.task_key)], status="active"):
            src = row.get("source") or {}
            if (
                row.get("signal") == "reflection"
                and src.get("run_id") == ex.run_id
                and src.get("cycle") == s.cycle
            ):
                return str(row["memory_id"])
        return None


def _cycle_commits(cps: list[Checkpoint], cycle: int) -> tuple[Checkpoint, Checkpoint] | None:
    """The checkpoint before cycle ``cycle`` began and the one that concluded it, found among
    the newest checkpoints ``cps``. Status-only commits (no record) and a person's edits (an
    ``edit`` record, allowed on a run whose process died) are passed over: the newest other
    record must be the cycle's conclusion, and the cycle's first commit (a cycle that ran
    effects, or waited for a person, commits more than once) must have one before it."""
    i = len(cps) - 1
    while i >= 0 and _passed_over(cps[i].record):
        i -= 1
    if i < 0 or (cps[i].record or {}).get("cycle") != cycle:
        return None
    first, j = i, i - 1
    while j >= 0:
        record = cps[j].record
        if record is not None and record.get("cycle") == cycle:
            first = j
        elif not _passed_over(record):
            break
        j -= 1
    if first == 0:
        return None
    return cps[first - 1], cps[i]


def _passed_over(record: dict[str, Any] | None) -> bool:
    return record is None or record.get("decision") == "edit"


def _mark(
    ex: _Exec, status: str, exc: BaseException | None, data: dict[str, Any] | None
) -> dict[str, Any]:
    """``Store.journal_put``'s arguments for the mark of the current cycle's reflection."""
    n = ex.state.cycle
    event: NewEvent | None = None
    if exc is not None:
        # An error's text can hold what the reflector was given, a key included.
        data = {"error": redact_text(str(exc))[:300]}
        event = NewEvent(n, "reflection_failed", data)
    elif status == "done":
        event = NewEvent(n, "reflected", dict(data or {}))
    return {
        "run_id": ex.run_id,
        "token": ex.token,
        "key": REFLECTION_KEY,
        "kind": REFLECTION_KEY,
        "cycle": n,
        "status": status,
        "data": dict(data or {}),
        "events": [event] if event is not None else [],
    }
