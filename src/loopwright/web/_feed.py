"""Changes in the store, found by polling it from one background thread: new runs, runs that
changed status or cycle, new and decided approval requests.

Runs execute in other processes (``loopwright run``, workers), so the store is the only place
to learn of them. Each look reads the open runs, the runs created lately and the pending
requests through their indexes (``Store.run_marks``, ``pending_approval_marks``), compares them
with the previous look, and reads in full only what changed. The dashboard's server-sent events
(``_live``) and the webhook notifier (``_notify``) listen to the same feed. Stdlib only: a
``loopwright worker`` runs it without the ui extra.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._errors import RunNotFoundError
from .._redact_logs import masked_logger
from ..store import Approval, Event, RunRecord, Store
from ..store._live import RunMark

__all__ = ["Change", "Feed"]

log = masked_logger("loopwright.feed")
# Runs created this long before the previous look are still read: a writer's clock may lag
# this process's, and a run created and ended between two looks is seen only this way.
CREATED_MARGIN_S = 120.0
# Settlings are read from this many event ids below the newest event seen: PostgreSQL hands
# out ids as transactions start, so a settling may commit after an event with a higher id.
SETTLED_ID_MARGIN = 1_000
# At most this many settlings read a look: more than the margin can hold, so that a look
# whose margin is all settlings already heard still reads the new ones past it (review55a).
SETTLED_READ = 2 * SETTLED_ID_MARGIN
SETTLED = "effect_settled"


@dataclass(frozen=True, slots=True)
class Change:
    """One change. ``kind``: ``run`` (``run`` set; ``new`` for a run not seen before),
    ``approval`` (``approval`` set: pending when new, else decided or expired) or ``settled``
    (an effect in doubt settled by a person: ``event`` and its ``run`` set).
    ``baseline``: a request already pending at the first look (only the notifier wants
    those; they are not sent to browsers)."""

    seq: int
    kind: str
    run: RunRecord | None = None
    approval: Approval | None = None
    new: bool = False
    baseline: bool = False
    event: Event | None = None  # ``settled``: the run's ``effect_settled`` event


Listener = Callable[[Change], None]


@dataclass
class _Seen:
    runs: dict[str, RunMark] = field(default_factory=dict)
    pending: dict[str, str] = field(default_factory=dict)  # approval id -> run id


class Feed:
    """Polls ``store`` every ``interval_s`` seconds in a daemon thread once started; listeners
    are called on that thread (they must not block: the notifier queues).

    A listener with an ``active()`` method (the dashboard's stream, ``_live.Messages``) wants
    looks only while it says so: when no listener wants them, the thread makes no look at all
    (each reads every open run and pending request: 90 ms a second at 50,000 runs, with nobody
    watching). It keeps what it saw last: the first look after (``wake``) compares with it, so
    whatever differs then is found (a new run, a run's new status or cycle, a request pending
    now, one seen pending and decided since), not each step taken meanwhile: a change that
    came and went while nobody watched (a request opened and decided then) is not found,
    though looks once a second might have seen it. The first look is made at start whatever
    listens: the state later looks compare with."""

    def __init__(self, store: Store, *, interval_s: float = 1.0) -> None:
        self.store = store
        self.interval_s = interval_s
        self._listeners: list[Listener] = []
        self._seen: _Seen | None = None
        self._seq = 0
        self._last_look = 0.0
        self._settled_after = 0  # the newest event seen (``_settlings``)
        self._settled_seen: set[int] = set()  # the settlings within the margin below it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._nudge = threading.Event()  # cuts the wait short: stop, or wake
        self._poll_lock = threading.Lock()  # one look at a time (the thread's, a last one)
        self._thread: threading.Thread | None = None
        self.looks = 0  # looks made (store reads of every open run)
        self.ready = threading.Event()  # set once the first look is done

    def listen(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._stop.clear()
            self._nudge.clear()
            self._thread = threading.Thread(target=self._run, name="loopwright-feed", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        self._nudge.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def wake(self) -> None:
        """Look now (a listener became active after a while without one)."""
        self._nudge.set()

    def wanted(self) -> bool:
        """Whether a listener wants looks now: one without ``active()`` always does."""
        for listener in self._listeners:
            active = getattr(listener, "active", None)
            if active is None or active():
                return True
        return False

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                if self._seen is None or self.wanted():
                    self.poll()
                failures = 0
            except Exception:  # a store hiccup (locked, restarting): log it, look again later
                failures += 1
                if failures == 1 or failures % 60 == 0:  # not once a second while it lasts
                    log.exception("looking for changes in the store failed (%d times)", failures)
            self._nudge.wait(self.interval_s * min(2 ** max(failures - 1, 0), 30))
            self._nudge.clear()

    def poll(self) -> list[Change]:
        """One look: the changes since the previous one (the first look only records where
        things stand, apart from the baseline requests given to listeners)."""
        with self._poll_lock:
            self.looks += 1
            return self._look()

    def _look(self) -> list[Change]:
        now = time.time()
        since = (self._last_look or now) - CREATED_MARGIN_S
        marks = {m.run_id: m for m in self.store.run_marks(created_since=since)}
        pending = {m.approval_id: m.run_id for m in self.store.pending_approval_marks()}
        self._last_look = now
        seen, changes = self._seen, []
        if seen is None:
            self._seen = _Seen(marks, pending)
            self._settled_from_now()
            for aid, rid in pending.items():
                a = self._approval(rid, aid)
                if a is not None:
                    changes.append(self._change("approval", approval=a, baseline=True))
            self._emit(changes, first=True)
            self.ready.set()
            return changes
        for rid, m in marks.items():
            old = seen.runs.get(rid)
            if old is None or (old.status, old.cycle, old.updated_at) != (
                m.status,
                m.cycle,
                m.updated_at,
            ):
                rec = self._run_record(rid)
                if rec is not None:
                    # Not seen before: created since the last look, or an old run reopened.
                    new = old is None and m.created_at >= since
                    changes.append(self._change("run", run=rec, new=new))
        for rid in seen.runs.keys() - marks.keys():
            # Left the open set and created long ago: it ended (or was deleted).
            rec = self._run_record(rid)
            old = seen.runs[rid]
            if rec is not None and (rec.status, rec.cycle) != (old.status, old.cycle):
                changes.append(self._change("run", run=rec))
        for aid in pending.keys() - seen.pending.keys():
            a = self._approval(pending[aid], aid)
            if a is not None:
                changes.append(self._change("approval", approval=a, new=True))
        for aid in seen.pending.keys() - pending.keys():
            a = self._approval(seen.pending[aid], aid)
            if a is not None:
                changes.append(self._change("approval", approval=a))
        changes.extend(self._settlings())
        self._seen = _Seen(marks, pending)
        self._emit(changes)
        return changes

    def _settled_from_now(self) -> None:
        """The first look: settlings from now on. Those already written within the margin are
        marked heard (the next look reads from the margin below the newest event: a settling
        of before the feed was heard as new, review55a); one of an id below the newest that
        commits later is not among them, and is heard."""
        top = self.store.last_event_id()
        self._settled_after = top
        floor = max(0, top - SETTLED_ID_MARGIN)
        self._settled_seen = {
            e.id for e in self.store.events_after(SETTLED, floor, SETTLED_READ) if e.id <= top
        }

    def _settlings(self) -> list[Change]:
        """The effects in doubt a person settled since the previous look, wherever they did
        (`loopwright settle`, the API, the dashboard, a refund's settling: each writes one
        ``effect_settled`` event), each once (polish55: no listener heard of them). A look
        reads from the margin below the newest event of the previous look, not below the
        newest settling: a feed that saw none for a while read, every look, every event
        written since the last one (review55a)."""
        top = self.store.last_event_id()  # (before the read: one written after, read next)
        floor = max(0, self._settled_after - SETTLED_ID_MARGIN)
        found = self.store.events_after(SETTLED, floor, SETTLED_READ)
        # Their runs read before any is marked heard: a store failing meanwhile fails the look,
        # and the next one hears them (marked first, they were never heard; review55a)
        new = [(e, self._run_record(e.run_id)) for e in found if e.id not in self._settled_seen]
        out = []
        for e, rec in new:
            self._settled_seen.add(e.id)
            if rec is not None:
                out.append(self._change("settled", run=rec, event=e))
        self._settled_after = max([self._settled_after, *(e.id for e in found)])
        if len(found) < SETTLED_READ:  # (all read: none left between the floor and ``top``)
            self._settled_after = max(self._settled_after, top)
        floor = self._settled_after - SETTLED_ID_MARGIN
        self._settled_seen = {i for i in self._settled_seen if i > floor}
        return out

    def _change(
        self,
        kind: str,
        *,
        run: RunRecord | None = None,
        approval: Approval | None = None,
        new: bool = False,
        baseline: bool = False,
        event: Event | None = None,
    ) -> Change:
        self._seq += 1
        return Change(self._seq, kind, run, approval, new, baseline, event)

    def _emit(self, changes: list[Change], *, first: bool = False) -> None:
        # A listener with a ``baseline`` method gets the first look's baseline requests
        # together (the notifier posts many as one message; none: it still hears when the
        # first look was made); the rest one change at a time.
        base = [c for c in changes if c.baseline]
        rest = [c for c in changes if not c.baseline]
        for listener in self._listeners:
            together = getattr(listener, "baseline", None) if base or first else None
            for c in changes if together is None else rest:
                try:
                    listener(c)
                except Exception:
                    log.exception("a listener of the live feed failed")
            if together is not None:
                try:
                    together(base)
                except Exception:
                    log.exception("a listener of the live feed failed")

    def _run_record(self, run_id: str) -> RunRecord | None:
        try:
            return self.store.get_run(run_id)
        except RunNotFoundError:
            return None

    def _approval(self, run_id: str, approval_id: str) -> Approval | None:
        # One row by its id: not every request the run ever made (a run that parks every 25
        # cycles has made one more each time; invariant 8).
        a = self.store.approval(approval_id)
        return a if a is not None and a.run_id == run_id else None
