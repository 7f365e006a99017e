"""What the actor of a cycle is shown: its context (copied as it is read, the held-out key
left out) and the feedback memory recalled for it (mixed into ``Runtime`` through ``Cycle``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from . import _decide as rules
from ._copy_on_read import CopyOnRead, json_copy
from ._exec import Execution as _Exec
from ._gates import Gates
from ._group import GroupRecall
from ._memory import MemoryItem, recall_scopes
from ._memory_screen import HELD_OUT_KEY, held_out_in
from ._proposal import Context, Remaining
from ._recall import recall
from ._state import TaskState

__all__ = ["HELD_OUT_KEY", "ActorContext"]

log = logging.getLogger("loopwright.memory")


class ActorContext(Gates):
    """A cycle's context and recall; ``Cycle`` builds on it."""

    def _context(
        self,
        ex: _Exec,
        n: int,
        memory: tuple[dict[str, Any], ...],
        remaining: Remaining | None = None,
        state: TaskState | None = None,
    ) -> Context:
        """What the actor of cycle ``n`` is shown: ``ex.state``'s, or ``state``'s (a cycle's
        context rebuilt after a crash, for its reflection)."""
        s = ex.state if state is None else state
        task = s.task
        # A part's values and the task are copied as they are read: an actor that changes what
        # it was shown in place (appends to a part's list, the common case) changes its copy,
        # never the run's state, whose next commit would not hold the change. Findings, notes
        # and history entries are shared, read-only by contract (docs/concepts.md): copying
        # them every cycle cost about a tenth of a trivial cycle (bench/RESULTS.md).
        # Every field by position, in Context's order (a class called with its thirteen
        # keywords goes through a dict of them: about a microsecond a cycle more).
        return Context(
            ex.run_id,
            n,
            s.goal,
            # The task's reserved ``held_out`` key (hidden tests, expected answers) is for
            # held-out verifiers only; the actor never sees it (invariant 3).
            CopyOnRead(  # (``copied_on_read`` without its call, as below)
                task
                if HELD_OUT_KEY not in task
                else {k: v for k, v in task.items() if k != HELD_OUT_KEY},
                json_copy,
            ),
            _copied_on_read(s.values()),
            _copied_on_read(s.accepted_values()),
            tuple(s.findings),
            tuple(s.plan),
            s.next_step(),
            remaining if remaining is not None else rules.remaining(ex.contract, s, shown=True),
            tuple(s.notes),
            tuple(s.history),
            memory,
        )

    def _fresh_context(
        self, ex: _Exec, n: int, memory: tuple[dict[str, Any], ...], left: Remaining | None
    ) -> tuple[Context]:
        """A retried actor's arguments: the context built again."""
        return (self._context(ex, n, memory, left),)

    def _recall_now(self, ex: _Exec) -> tuple[dict[str, Any], ...] | None:
        """``_recall``'s answer where it has nothing to wait for (no memory, or this run reads
        its own: a plain call, no coroutine a cycle); None where it reads with the runs
        sharing this event loop (then ``_recall``)."""
        if not self.memory_enabled:
            return ()
        if self.group_commit and ex.grouped and self._active > 1:
            return None
        s = ex.state
        said = [s.goal]  # (``_asked`` written out: no call a cycle)
        for f in s.findings[:10]:  # (a loop: no comprehension a cycle)
            said.append(f.message)
        try:
            scopes, query = recall_scopes(s.task_key, s.project), " ".join(said)
            # people's feedback first, then reflections if it leaves slots free (most loops
            # keep no memory: an indexed probe for each)
            items = recall(self.store, scopes, query, ranked=ex.loop.recall_ranked)
        except Exception:  # memory is best effort: a failing store never fails a cycle
            return ()
        return shown_items(items) if items else ()

    async def _recall(self, ex: _Exec) -> tuple[dict[str, Any], ...]:
        """Feedback memory for this task and project (never another project's). Runs sharing
        this event loop read theirs together, one query per loop turn (``GroupRecall``)."""
        now = self._recall_now(ex)
        if now is not None:
            return now
        try:
            scopes, query = _asked(ex.state)
            ranked = ex.loop.recall_ranked
            found = await self._recaller().fetch(scopes, query, ranked)
            items = recall(self.store, scopes, query, ranked=ranked, found=found)
        except Exception:  # memory is best effort: a failing store never fails a cycle
            return ()
        return shown_items(items) if items else ()

    def _recaller(self) -> GroupRecall:
        loop = asyncio.get_running_loop()
        if self._recall_group is None or self._recall_group.loop is not loop:
            self._recall_group = GroupRecall(self.store)
        return self._recall_group


def _copied_on_read(artifacts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each artifact's values ``copied_on_read`` (a loop: no comprehension a cycle; the class
    built directly: no call of ``copied_on_read`` an artifact)."""
    out: dict[str, Any] = {}
    for name, values in artifacts.items():
        out[name] = CopyOnRead(values, json_copy)
    return out


def _asked(s: TaskState) -> tuple[list[tuple[str, str | None]], str]:
    """A recall's scopes (``s``'s task and project) and its query: the goal and the last
    findings' messages."""
    said = [s.goal]
    for f in s.findings[:10]:  # (a loop: no comprehension a cycle)
        said.append(f.message)
    return recall_scopes(s.task_key, s.project), " ".join(said)


def shown_items(items: Sequence[MemoryItem]) -> tuple[dict[str, Any], ...]:
    """Recalled items as a context shows them; one whose rule or source holds a held-out
    marker (a row written before ``FeedbackMemory.add`` screened them, or into the store past
    it) is left out, with a warning: held-out verdicts never reach an actor (invariant 3)."""
    shown: list[dict[str, Any]] = []
    for m in items:  # (a loop: no comprehension a cycle)
        at = held_out_in(m)
        if at is not None:
            log.warning("memory item %s not shown: marked held out at %s", m.memory_id, at)
            continue
        shown.append(
            {
                "memory_id": m.memory_id,
                "scope": m.scope,
                "signal": m.signal,
                "strength": m.strength,
                "text": m.text,
                "rule": m.rule,
            }
        )
    return tuple(shown)
