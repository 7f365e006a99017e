"""One execution's lease, from its first beat to its release: the heartbeat that renews it
while ``resume`` drives the run, and the wind-down that ends every drive (its commits settled,
the heartbeat stopped, the stop said when the run stops alive, the lease handed back).

``resume`` (``_engine``) starts the heartbeat and calls ``_wind_down`` in its ``finally``;
``_said_alive`` is the ``interrupted`` event that keeps a stop alive from counting as a crash
(``_crash_bound.crashes_at``); ``_ended_here`` judges, after the release, whether a commit whose
answer was lost ended the run all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ._contract import TERMINAL_STATUSES
from ._crash_bound import LEASE_LOST
from ._errors import StaleLeaseError, StoreUnavailableError
from ._exec import Execution as _Exec
from ._host import RuntimeHost
from ._saying import Saying
from ._store_threads import in_store_thread, written
from ._usage import Usage
from .store import NewEvent, RunRecord, Store
from .store._protocol_commit import RowLocked

__all__ = ["LeaseLife"]


class LeaseLife(RuntimeHost):
    """An execution's heartbeat and wind-down (a mixin of ``Runtime``)."""

    async def _heartbeat(self, ex: _Exec) -> None:
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            try:
                # In a thread, not on the event loop: a renewal waiting on its run's row lock
                # (another process inside a transaction on that run: a cancel, the dashboard,
                # frozen up to the server's idle timeout) stalled every run of the process, so
                # their leases ran out under a live worker and were taken over mid-cycle (pg52).
                # One cancelled in flight may land after the release: it writes nothing (a
                # renewal needs the lease held under its token), its StaleLeaseError unread.
                # In threads of the store's own (``_store_threads``), not the event loop's
                # default executor (review52a).
                await in_store_thread(self.store.renew_lease, ex.run_id, ex.token, self.lease_ttl_s)
            except StaleLeaseError:
                ex.lost = True
                return
            except StoreUnavailableError:
                # a dropped connection or a locked store: try again at the next beat (ended
                # here, the lease expired under the live run and another worker took it over)
                continue

    async def _wind_down(
        self, ex: _Exec, beat: asyncio.Task[None], opened: int, alive: str | None
    ) -> bool:
        """``resume``'s end: its commits settled, its heartbeat stopped, its stop said, its
        lease handed back; whether the store took the lease back."""
        # Cancelled (again) meanwhile, each step is still taken, the release last, and the
        # cancellation raised at the end. Here, in the run's task: a task of its own was
        # cancelled before its first step by ``asyncio.run``'s teardown, and never ran.
        cancelled = False
        answered = False
        try:
            if self._active == 0:
                self._recall_group = None  # nothing waits on it any more: no event loop
            if self._active == 0 and self._group is not None:
                group, self._group = self._group, None
                with contextlib.suppress(Exception):
                    await group.close()
            elif self._group is not None:
                # Other runs go on: this run's commits queued (one cancelled at its
                # durability point stays queued) are written, or refused, before its
                # lease is handed back, not after it by the committer (crash53b).
                with contextlib.suppress(Exception):
                    await self._group.settle(ex.run_id)
        except asyncio.CancelledError:
            cancelled = True
        beat.cancel()
        try:
            await asyncio.wait([beat])  # (its outcome not raised; a cancellation of this is)
        except asyncio.CancelledError:
            cancelled = True
        try:
            spent = _uncharged(ex) if ex.lost else None
            if (ex.seq > opened or ex.started_said or spent) and (ex.lost or alive is not None):
                why = LEASE_LOST if ex.lost else str(alive)
                word = (ex.run_id, ex.token, ex.state.cycle, why, spent)
                if not await written(self.store, _said_alive, self.store, *word):
                    with WORDS:
                        self._unsaid = [*self._unsaid[1 - _UNSAID_KEPT :], word]
        except asyncio.CancelledError:
            cancelled = True
        if not ex.lost:
            with contextlib.suppress(Exception):
                try:
                    if cancelled:  # (here, where no cancellation reaches it)
                        self.store.release_lease(ex.run_id, ex.token)
                    else:  # (from a thread where a release can wait on the run's row
                        # lock, which held every run of the event loop; evloop53)
                        await written(self.store, self.store.release_lease, ex.run_id, ex.token)
                except asyncio.CancelledError:
                    cancelled = True
                    self.store.release_lease(ex.run_id, ex.token)  # (fenced: once)
                answered = True
        if cancelled:
            raise asyncio.CancelledError
        return answered

    async def _say_unsaid(self) -> None:
        """The words the store refused as their executions stopped alive, said now, in order,
        until it refuses one again: matched by lease wherever they lie, they are read by the
        count of the resume about to start (a worker's next claim after an outage, a caller
        that resumes once the store answers), not counted as crashes there (crash54)."""
        # Said by one resume at a time: the others wait for it, in this event loop or another
        # (a thread's ``resume_sync``), a write of it that outlived it included (``Saying``).
        # On a store whose writes go to threads (PostgreSQL), a second resume went on while
        # the first said them, found none left, and counted its own run's stop, its word still
        # on its way, as a crash (``max_crashes = 0``: escalated; review54c, polish55).
        here = asyncio.get_running_loop()

        def ended() -> None:
            with WORDS:
                if self._saying is said:
                    self._saying = None

        while True:
            await self._after_saying(here)
            # The look at ``_saying`` and its setting, the words' take and the keeping of those
            # refused meanwhile are made under ``WORDS``: ``resume``s in other threads' event
            # loops do them too, and a switch between a look and its setting said the words
            # twice, one between the take and its reset lost a word kept meanwhile
            # (lifecycle55).
            with WORDS:
                if self._saying is not None:
                    continue  # (another began saying them meanwhile)
                if not self._unsaid:
                    return
                words, self._unsaid = self._unsaid, []
                self._saying = said = Saying(words, here, ended)
                break
        try:
            for i, word in enumerate(words):
                if not await written(self.store, said.say, i, _said_alive, self.store, *word):
                    return
        finally:
            # Refused, or cancelled on the way (Ctrl-C, a worker's shutdown, ``asyncio.run``'s
            # teardown): the words not written are kept, not dropped (review54c); a write
            # under way in a store thread ends the saying when it ends.
            kept = said.stop()
            with WORDS:
                self._unsaid = [*kept, *self._unsaid][-_UNSAID_KEPT:]

    async def _after_saying(self, here: asyncio.AbstractEventLoop) -> None:
        """Once no resume says the words (in this event loop or another)."""
        while (saying := self._saying) is not None:
            its_end = asyncio.wrap_future(saying.done)
            # Whether its event loop still runs is looked at again while this waits: one that
            # stops after the wait began (``run_until_complete`` of something else returned),
            # the saying suspended in it, never ends it (review55a)
            while not saying.gone(here):
                if (await asyncio.wait([its_end], timeout=_LOOK_AGAIN_S))[0]:
                    break
            else:
                # left in an event loop that runs no more: what it had not said is said here
                kept = saying.stop()
                with WORDS:
                    self._unsaid = [*kept, *self._unsaid][-_UNSAID_KEPT:]
                await asyncio.shield(its_end)

    def _ended_here(self, ex: _Exec, started: RunRecord) -> bool:
        """Whether a commit of ``ex`` (its answer lost: the connection dropped after the server
        committed) ended or parked its run: the store holds the run so, under ``ex``'s own
        lease (a claim since would have raised the token), at a checkpoint newer than the one
        ``ex`` started from (a run resumed from ``awaiting_approval`` that failed before its
        first commit is not "parked here"). A store still failing: no."""
        try:
            now = self.store.get_run(ex.run_id)
        except Exception:
            return False
        return (
            now.fencing_token == ex.token
            and now.status not in ("pending", "running")
            and now.last_seq > started.last_seq
        )


# A runtime's ``_unsaid`` and ``_saying``, looked at and changed by its resumes in several
# threads' event loops (``resume_sync``, a worker's): nothing is awaited while it is held
WORDS = threading.RLock()
_LOOK_AGAIN_S = 1.0  # (how often a resume waiting on another loop's saying looks at that loop)
_UNSAID_KEPT = 1000  # (an outage of many runs: the oldest words beyond it are let go)


def _uncharged(ex: _Exec) -> dict[str, Any] | None:
    """What an execution taken over was billed that no commit of it charged and no journal
    entry holds (the bills its fence refused: ``fenced_bill``), as its word says it, with the
    held-out share apart (``held_out``); None for nothing. A bill journaled before the
    takeover is left out: the cycle redone charges it from the journal (crash55c: it was
    charged twice, by the word and by the redone cycle)."""
    if ex.refused is None or ex.charged is None:
        return None
    every, held = ex.refused
    seconds = max(0.0, ex.state.spent.seconds - float(ex.charged.get("seconds") or 0.0))
    said = Usage._stored(every.cost_usd, every.tokens, seconds).to_dict()
    if held.cost_usd or held.tokens:
        said["held_out"] = {"cost_usd": held.cost_usd, "tokens": held.tokens}
    return said


def _said_alive(
    store: Store, run_id: str, token: int, cycle: int, why: str, spent: Any = None
) -> bool:
    """An execution (lease ``token``) that wrote its start event stops alive, the run left
    resumable: said by its lease (``interrupted``), so that resuming the run counts no crash of
    it (``crashes_at``). Written before the lease is handed back; one whose lease was taken
    over writes it late, unfenced, after its successor's start maybe (read by its token, not
    where it lies): the one write of a fenced-out executor, its own word and its refused
    bills (the run's fenced spend), no state; the word only to a run still open (an ended one
    is resumed no more: its log stays as its last executor left it), the bills to an ended
    one too. False when the store fails it (``StoreUnavailableError``): its runtime
    says it again before its next resume (``Runtime._say_unsaid``; its bills named by its lease,
    added once though the first write was durable: fenced56b); a process that exits
    first leaves a crash to count, as one that died. Refused on its run's row held by another
    session (``RowLocked``, from a store thread): raised, so that it is tried again once the
    lock goes, not dropped."""
    try:
        now = store.get_run(run_id)
        lost = why == LEASE_LOST or now.fencing_token != token or now.lease_owner is None
        # What it spent and never committed (the bills its fence refused), added to the run's
        # fenced spend, which every read of the run's spend counts and the next resume
        # charges to its state (fenced56; crash55b said it in the word alone, charged only
        # by a later resume); a stop alive under its own lease charges nothing: its cycle is
        # done again.
        fenced = spent if spent and lost else None
        if now.status in TERMINAL_STATUSES:
            # ended: by another since a takeover (its spend counted all the same), or by this
            # execution itself, its last commit durable though its answer was lost (the store
            # failing at it: ``_ended_here``)
            if fenced:  # (by its lease: said again, it adds nothing; fenced56b)
                store.add_fenced_spend(run_id, fenced, lease=token)
            return True
        if lost:
            # taken over meanwhile (a process frozen while its store failed it, too): late
            why = LEASE_LOST
        data: dict[str, Any] = {"lease": token, "why": why}
        if fenced:
            data["fenced"] = fenced  # (said; counted by the row, not by the word)
            word = [NewEvent(cycle, "interrupted", data)]
            store.add_fenced_spend(run_id, fenced, word, lease=token)
        else:
            store.append_events(run_id, [NewEvent(cycle, "interrupted", data)])
    except RowLocked:
        raise  # (nothing of it written: ``in_store_thread`` tries it again)
    except StoreUnavailableError:
        return False
    except Exception:
        return True  # (refused for good, the run gone say: nothing to say it again for)
    return True
