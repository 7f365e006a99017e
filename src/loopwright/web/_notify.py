"""Webhook notifications: a signed JSON POST when a run asks a person for a decision, when a
person settles an effect left in doubt (and, when asked for, when a run ends).

The body carries a one-line ``text`` (what chat tools' incoming webhooks show: Slack,
Mattermost, Rocket.Chat, Google Chat; Discord through its ``/slack`` URL) and the structured
fields beside it. With a secret, ``X-Loopwright-Signature: sha256=<hex>`` is the HMAC-SHA256 of
``<X-Loopwright-Timestamp>.<raw body>``: a receiver checks it with :func:`verify`, which also
refuses a stale timestamp (a replayed request). The secret is held in memory only (never in
the store, never in a log line), and so is the target URL (a chat webhook's URL is itself a
credential): a delivery is recorded in the run's event log under a digest of the URL.

Deliveries run on one thread per URL, a round of tries with capped exponential backoff on a
network error, a timeout, 408, 429 or 5xx (a failed round: one warning, another round later);
a failure never reaches the server's requests. A request is posted once per URL: a
``notified`` event on its run marks it delivered, so a restarted server does not post it
again. A person's settlings are read by each URL's thread from its cursor in the store
(``Store.notify_cursor``): one made while no process notified is posted when one starts,
once. A request or settling whose post fails ``settled_rounds`` rounds in a row (a 4xx at
once) is given up: marked failed, audited, said once (a settling's cursor moves on).
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._audit import audit
from .._contract import TERMINAL_STATUSES
from .._errors import ConfigError, LoopwrightError
from .._redact import redact, register_secret
from .._redact_logs import masked_logger
from .._userinfo import without_userinfo
from ..store import Approval, Event, NewEvent, RunRecord, Store
from ..store._live import NOTIFIED, Position
from ._feed import Change
from ._notify_bodies import approval_body, run_end_body, settled_body, waiting_body
from ._webhook_post import check_webhook_url, http_post, masked_error, target_id, url_where

__all__ = [
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Notifier",
    "NotifyConfig",
    "check_webhook_url",
    "sign",
    "url_where",
    "verify",
]

log = masked_logger("loopwright.notify")
SIGNATURE_HEADER = "X-Loopwright-Signature"
TIMESTAMP_HEADER = "X-Loopwright-Timestamp"
EVENT_HEADER = "X-Loopwright-Event"
DELIVERY_HEADER = "X-Loopwright-Delivery"
MARKER = NOTIFIED  # the event kind recording a delivery
# At most this many settlings read at a time (a notifier starting over a long backlog reads
# it in bounded steps).
SETTLED_READ = 100
# The longest wait between two reads of the settlings (``--notify-every``): an hour.
SETTLED_EVERY_MAX = 3600.0

Post = Callable[[str, bytes, Mapping[str, str], float], int]


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp`` (Unix seconds)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str,
    body: bytes,
    timestamp: str,
    signature: str,
    *,
    tolerance_s: float = 300.0,
    now: float | None = None,
) -> bool:
    """Whether ``signature`` (the ``X-Loopwright-Signature`` header) signs ``body`` (the raw
    bytes received) at ``timestamp`` (the ``X-Loopwright-Timestamp`` header) with ``secret``,
    and the timestamp is within ``tolerance_s`` of now. Compared in constant time."""
    try:
        at = int(timestamp)
    except (TypeError, ValueError):
        return False
    if abs((time.time() if now is None else now) - at) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body).encode(), signature.encode())


@dataclass(frozen=True)
class NotifyConfig:
    """Where and how to notify. ``link_base``: the dashboard's URL as people reach it (the
    messages link to it). ``run_ends``: also post when a run ends. ``baseline_posts``: at most
    this many requests already waiting when notifying begins are posted one by one; more go
    as one message listing them."""

    urls: tuple[str, ...] = field(repr=False)  # credentials, as the secret
    secret: str | None = field(default=None, repr=False)
    link_base: str | None = None
    run_ends: bool = False
    attempts: int = 6
    first_wait_s: float = 1.0
    max_wait_s: float = 60.0
    timeout_s: float = 10.0
    baseline_posts: int = 5
    settled_every_s: float = 1.0  # how often each URL's thread reads the settlings
    # A settling whose post fails this many rounds in a row (each round ``attempts`` tries,
    # about 31 s of back-off) is given up: marked failed, audited, the cursor moves past it
    settled_rounds: int = 10

    @classmethod
    def of(
        cls,
        urls: Iterable[str],
        *,
        secret: str | None = None,
        link_base: str | None = None,
        run_ends: bool = False,
        settled_every_s: float = 1.0,
        settled_rounds: int = 10,
    ) -> NotifyConfig:
        checked = tuple(dict.fromkeys(check_webhook_url(u) for u in urls))
        if secret is not None and not secret.strip():
            raise ConfigError("must not be empty", field="--notify-secret")
        if not 0 < settled_every_s <= SETTLED_EVERY_MAX:  # (NaN too)
            raise ConfigError(
                f"must be more than 0 and at most {SETTLED_EVERY_MAX:g} seconds, "
                f"got {settled_every_s:g}",
                field="--notify-every",
            )
        if settled_rounds < 1:
            raise ConfigError(f"must be 1 or more, got {settled_rounds}", field="--notify-rounds")
        base = check_webhook_url(link_base, "--public-url").rstrip("/") if link_base else None
        return cls(
            checked,
            secret or None,
            base,
            run_ends,
            settled_every_s=settled_every_s,
            settled_rounds=settled_rounds,
        )


def _retryable(status: int) -> bool:
    return status in (408, 425, 429) or status >= 500


@dataclass(frozen=True, slots=True)
class _Job:
    key: str  # what the marker records: "approval:<id>" or "run_ended:<id>"
    run_id: str
    cycle: int
    event: str
    make: Callable[[], dict[str, Any]]
    # The requests already waiting when notifying began (``Notifier.baseline``): posted one by
    # one when few, else as one message listing them.
    covers: tuple[_Job, ...] = ()


_IDLE = _Job("", "", 0, "", dict)  # a wait for a job that ended with none


class _Target:
    """One URL: its queue and delivery thread."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.id = target_id(url)
        self.where = url_where(url)
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.queued: set[str] = set()  # never twice from one process
        self.thread: threading.Thread | None = None
        # Settlings: the cursor (every settling up to it posted), the ones posted past it
        # (read again while a transaction that may commit before them is open), the last read
        self.cursor: Position | None = None
        self.posted: set[Position] = set()
        self.read_at = 0.0
        self.retry = False  # the last failed post may succeed later (a 5xx, a timeout)
        self.error = ""  # why the last failed post failed (``HTTP 500``, ``ConnectionRefused…``)
        self.rounds: dict[str, int] = {}  # a post's failed rounds in this process, by key
        self.held: dict[str, _Job] = {}  # requests whose last round failed: the next round's


class Notifier:
    """A ``Feed`` listener posting webhooks; ``start`` its threads, ``stop`` them at exit."""

    def __init__(self, store: Store, config: NotifyConfig, *, post: Post = http_post) -> None:
        self.store = store
        self.config = config
        self._post = post
        # The URLs' credentials and the signing secret masked from now on, not from the
        # first post (``without_userinfo`` registers them then): what this process masks
        # does not depend on whether a run has ended yet
        for u in config.urls:
            without_userinfo(u)
        register_secret(config.secret)
        self._targets = [_Target(u) for u in config.urls]
        self._stop = threading.Event()
        self.delivered = 0  # counters for tests and the log
        self.failed = 0
        self.failed_for_good = 0  # requests and settlings given up (``_give_up``)

    def start(self) -> None:
        self._stop.clear()
        for t in self._targets:
            if t.thread is None:
                t.thread = threading.Thread(
                    target=self._deliver_all, args=(t,), name="loopwright-notify", daemon=True
                )
                t.thread.start()

    def stop(self, grace_s: float = 0.0) -> None:
        """Stop the threads; ``grace_s``: first let them deliver what is queued for up to that
        long (a process about to exit: a request raised in its last moments)."""
        for t in self._targets:
            t.jobs.put(None)  # after the queued jobs
        deadline = time.monotonic() + grace_s
        for t in self._targets:
            if grace_s > 0 and t.thread is not None and t.thread is not threading.current_thread():
                t.thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._stop.set()  # ends a backoff wait at once
        for t in self._targets:
            if t.thread is not None and t.thread is not threading.current_thread():
                t.thread.join(timeout=10)
            t.thread = None

    def drain(self) -> None:
        """Deliver what is queued on this thread (a caller without ``start``: tests, tools):
        one round for each request held by a failed one, then the queue, then the settlings."""
        for t in self._targets:
            self._retry_held(t)
            while True:
                try:
                    job = t.jobs.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    self._deliver(t, job)
            self.post_settlings(t)

    def _approval_job(self, a: Approval) -> _Job:
        base = self.config.link_base
        return _Job(
            f"approval:{a.approval_id}",
            a.run_id,
            a.cycle,
            "approval_requested",
            lambda: approval_body(a, self._run(a.run_id), base),
        )

    def baseline(self, changes: list[Change]) -> None:
        """The requests pending at the feed's first look, together (``Feed`` hands a listener
        with this method the whole first look): the ones not yet posted go one by one when
        they are few, as one message listing them when there are more than
        ``config.baseline_posts`` (turning notifications on over a store with 40 waiting
        requests posts one message, not 40). A URL never posted to starts its settlings
        here (``post_settlings``)."""
        for t in self._targets:
            self._cursor(t)
        jobs = tuple(
            self._approval_job(c.approval)
            for c in changes
            if c.approval is not None and c.approval.status == "pending"
        )
        if jobs:
            self._queue(_Job("baseline", jobs[0].run_id, jobs[0].cycle, "", dict, covers=jobs))

    def __call__(self, change: Change) -> None:
        # (a person's settling: each URL's thread reads them from its cursor, ``post_settlings``)
        a, rec = change.approval, change.run
        if a is not None and a.status == "pending" and (change.new or change.baseline):
            self._queue(self._approval_job(a))
        elif rec is not None and self.config.run_ends and rec.status in TERMINAL_STATUSES:
            base = self.config.link_base
            self._queue(
                _Job(
                    f"run_ended:{rec.run_id}",
                    rec.run_id,
                    rec.cycle,
                    "run_ended",
                    lambda: run_end_body(rec, base),
                )
            )

    def _queue(self, job: _Job) -> None:
        for t in self._targets:
            if job.key not in t.queued:
                t.queued.add(job.key)
                t.jobs.put(job)

    def _run(self, run_id: str) -> RunRecord | None:
        try:
            return self.store.get_run(run_id)
        except LoopwrightError:
            return None

    def _deliver_all(self, t: _Target) -> None:
        every = self.config.settled_every_s
        while not self._stop.is_set():
            try:
                job = t.jobs.get(timeout=max(0.0, t.read_at + every - time.monotonic()))
            except queue.Empty:
                job = None if self._stop.is_set() else _IDLE
            if self._stop.is_set():
                return
            try:
                if job is not None and job is not _IDLE:
                    self._deliver(t, job)
                if job is None or time.monotonic() >= t.read_at + every:
                    if job is not None:
                        self._retry_held(t)  # (not as the process stops: a whole round)
                    self.post_settlings(t)  # (a last read as the process stops: job None)
            except Exception:  # the store went away mid-delivery: log, go on with the next
                log.exception("notifying %s failed", t.where)
            if job is None:
                return

    def post_settlings(self, t: _Target) -> None:
        """Post to ``t`` the settlings after its cursor, each once, and move the cursor on.

        Every settling there is (``loopwright settle`` from any host, the API, the dashboard,
        a refund's settling: each writes one ``effect_settled`` event) is read, in position
        order, from where this URL's posting stands in the store: one made while no process
        notified is posted when one starts. A URL never posted starts from now (a webhook set
        up today is not sent the store's history). The cursor moves only over settlings no
        open transaction can still commit before (``SettledRead.final``); those past it that
        were posted are read again until then, and posted once (by their markers)."""
        t.read_at = time.monotonic()
        while True:
            before = self._cursor(t)
            read = self.store.settlings_after(before, SETTLED_READ)
            rows = read.rows
            if len(rows) == SETTLED_READ and all(p in t.posted for p, _ in rows):
                # a window of settlings posted, none final yet (a long transaction open): the
                # ones after it, so that they are not held up behind it
                rows = rows + self.store.settlings_after(max(t.posted), SETTLED_READ).rows
            cursor, moving = before, True
            for pos, ev in rows:
                if pos not in t.posted and not self._post_settled(t, pos, ev):
                    break  # to be tried again, the cursor before it
                moving = moving and read.final(pos)
                if moving:
                    cursor = pos
            if cursor != before:
                self.store.set_notify_cursor(t.id, cursor)
                t.cursor = cursor
                t.posted = {p for p in t.posted if p > cursor}
            # read again while a full read moved the cursor on (a backlog, in bounded reads)
            if len(read.rows) < SETTLED_READ or cursor == before or self._stop.is_set():
                return

    def _cursor(self, t: _Target) -> Position:
        """Where ``t``'s posting of settlings stands: read from the store, else now (the
        first time this URL is notified: recorded, so a restart goes on from here)."""
        if t.cursor is None:
            t.cursor = self.store.notify_cursor(t.id)
            if t.cursor is None:
                t.cursor = self._start(t)
        return t.cursor

    def _start(self, t: _Target) -> Position:
        """A URL's first cursor: now. On PostgreSQL "now" is below the oldest transaction
        still open anywhere on the server, and settlings committed since by younger ones
        are visible past it: those are history too, marked so (``skipped``), never posted."""
        start = self.store.settled_start()
        self.store.set_notify_cursor(t.id, start)
        after = start
        while True:
            rows = self.store.settlings_after(after, SETTLED_READ).rows
            for pos, ev in rows:
                if not self._done_before(t, self._settled_job(ev)):
                    data = {"key": f"settled:{ev.id}", "target": t.id, "skipped": True}
                    self.store.append_events(ev.run_id, [NewEvent(ev.cycle, MARKER, data)])
                t.posted.add(pos)
            if len(rows) < SETTLED_READ:
                return start
            after = rows[-1][0]

    @staticmethod
    def _settled_job(ev: Event) -> _Job:
        return _Job(f"settled:{ev.id}", ev.run_id, ev.cycle, "effect_settled", dict)

    def _post_settled(self, t: _Target, pos: Position, ev: Event) -> bool:
        """Post one settling to ``t`` unless its marker says it was: whether it is done with
        (posted, found posted, or refused for good by a 4xx: logged)."""
        job = self._settled_job(ev)
        if not self._done_before(t, job):
            body = settled_body(ev, self._run(ev.run_id), self.config.link_base)
            attempts = self._send(t, job.key, job.event, body)
            if not attempts and self._stop.is_set():
                return False
            if attempts:
                self._mark(t, job, attempts)
            elif self._round_failed(t, job):
                return False  # the next round, the cursor before it
        t.posted.add(pos)
        return True

    def _round_failed(self, t: _Target, job: _Job) -> bool:
        """After a round of ``job`` (a settling or a request) failed: whether it gets another
        (a failure that may pass, under ``settled_rounds``: one warning), else ``_give_up``."""
        rounds = t.rounds.get(job.key, 0) + 1
        limit = self.config.settled_rounds
        if t.retry and rounds < limit:
            t.rounds[job.key] = rounds
            log.warning(
                "webhook %s for %s: %s (round %d of %d); tried again in the next round",
                t.where,
                job.key,
                t.error,
                rounds,
                limit,
            )
            return True
        self._give_up(t, job, rounds if t.retry else 1)
        return False

    def _give_up(self, t: _Target, job: _Job, rounds: int) -> None:
        """A post ``t`` refused for good (a 4xx) or failed ``settled_rounds`` rounds in a row
        (a settling, an approval request, the requests already waiting, a run's end): marked
        failed (a ``notified`` marker for each request it carried: a settling's cursor moves
        on, a restart does not post it again), audited once (``loopwright audit``: action
        ``notify``, outcome ``failed``), and said once in the log with what to do."""
        self.failed_for_good += 1
        t.rounds.pop(job.key, None)
        covered = job.covers or (job,)
        for j in covered:
            data = {"key": j.key, "target": t.id, "failed": True, "rounds": rounds,
                    "error": t.error} | ({"summary": True} if job.covers else {})  # fmt: skip
            self.store.append_events(j.run_id, [NewEvent(j.cycle, MARKER, data)])
        audit(self.store, "notifier", "notify", f"run {job.run_id}", outcome="failed",
              origin="webhook", url=t.where, target_id=t.id, event=job.event, key=job.key,
              rounds=rounds, error=t.error, requests=len(covered))  # fmt: skip
        log.error(
            "webhook %s: %s of run %s not delivered (%s, %d round(s)); given up, the later "
            "posts go on. Fix the webhook; it is in `loopwright audit --target 'run %s'` "
            "and the run's events",
            t.where,
            job.key,
            job.run_id[:12],
            t.error,
            rounds,
            job.run_id,
        )

    def _done_keys(self, t: _Target, run_id: str) -> set[str]:
        """The keys already delivered to ``t`` for this run, from its ``notified`` markers (a
        partial index of the store holds just those: the run's log is not read)."""
        return {
            str(e.data.get("key"))
            for e in self.store.events_of_kind(run_id, MARKER)
            if e.data.get("target") == t.id
        }

    def _done_before(self, t: _Target, job: _Job) -> bool:
        # the markers of this key only (a partial index by run and key): a run with thousands
        # of requests posted costs a delivery as much as one with a single request
        return self.store.was_notified(job.run_id, job.key, t.id)

    def _deliver(self, t: _Target, job: _Job) -> None:
        if job.covers:
            self._deliver_waiting(t, job.covers)
            return
        if not self._done_before(t, job):
            self._post_job(t, job)

    def _post_job(self, t: _Target, job: _Job) -> None:
        attempts = self._send(t, job.key, job.event, job.make())
        if attempts:
            self._mark(t, job, attempts)
            t.rounds.pop(job.key, None)
        elif not self._stop.is_set() and self._round_failed(t, job):
            t.held[job.key] = job  # tried again in the next round (``_retry_held``)

    def _retry_held(self, t: _Target) -> None:
        """A round for each request whose last one failed (unless posted since, elsewhere)."""
        held, t.held = t.held, {}
        for key, job in held.items():
            left = self._undecided(job)
            if left is None:  # decided meanwhile: a post would ask for a decision made
                t.rounds.pop(key, None)
                continue
            self._deliver(t, left)

    def _undecided(self, job: _Job) -> _Job | None:
        """``job`` less the requests decided since its round failed; None when none is left
        (a run's end is never decided)."""
        if job.covers:
            left = tuple(j for j in job.covers if self._undecided(j) is not None)
            return replace(job, covers=left) if left else None
        if not job.key.startswith("approval:"):
            return job
        a = self.store.approval(job.key.removeprefix("approval:"))
        return job if a is not None and a.status == "pending" else None

    def _deliver_waiting(self, t: _Target, jobs: tuple[_Job, ...]) -> None:
        done: dict[str, set[str]] = {}  # each run's delivered keys, read once for the batch
        for j in jobs:
            if j.run_id not in done:
                done[j.run_id] = self._done_keys(t, j.run_id)
        left = [j for j in jobs if j.key not in done[j.run_id]]  # a restart: most were posted
        if len(left) <= self.config.baseline_posts:
            for j in left:
                self._post_job(t, j)  # known not posted: no second look at the store
            return
        body = waiting_body([j.make() for j in left], self.config.link_base)
        first = left[0]
        summary = _Job(f"waiting:{first.key}", first.run_id, first.cycle, "approvals_waiting",
                       lambda: body, covers=tuple(left))  # fmt: skip
        attempts = self._send(t, summary.key, summary.event, body)
        if attempts:
            t.rounds.pop(summary.key, None)
            for j in left:  # each is delivered: a later restart does not post it again
                self._mark(t, j, attempts, summary=True)
        elif not self._stop.is_set() and self._round_failed(t, summary):
            t.held[summary.key] = summary  # its requests again, those still not posted

    def _mark(self, t: _Target, job: _Job, attempts: int, *, summary: bool = False) -> None:
        self.delivered += 1
        data: dict[str, Any] = {"key": job.key, "target": t.id, "attempts": attempts}
        if summary:
            data["summary"] = True
        self.store.append_events(job.run_id, [NewEvent(job.cycle, MARKER, data)])

    def _send(self, t: _Target, key: str, event: str, payload: dict[str, Any]) -> int:
        """POST ``payload`` to ``t`` with retries: the attempts it took, 0 when it failed.
        The body is masked as an export is (invariant 9): it quotes names the store keeps as
        typed (a task key, a loop's, a project's) and leaves for a chat's readers."""
        body = json.dumps(redact(payload), ensure_ascii=False, separators=(",", ":")).encode()
        cfg = self.config
        error = ""
        t.retry = False
        for attempt in range(1, cfg.attempts + 1):
            ts = str(int(time.time()))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "loopwright-notify",
                EVENT_HEADER: event,
                DELIVERY_HEADER: key,
                TIMESTAMP_HEADER: ts,
            }
            if cfg.secret:
                headers[SIGNATURE_HEADER] = sign(cfg.secret, ts, body)
            try:
                status = self._post(t.url, body, headers, cfg.timeout_s)
                error = f"HTTP {status}"
            # refused, reset, timed out, or a response that is not HTTP (a bad status line,
            # too many headers: http.client's own errors, not OSError): each a retried failure
            except (OSError, ValueError, http.client.HTTPException) as exc:
                status, error = 0, type(exc).__name__ + (f": {exc}" if str(exc) else "")
                error = masked_error(error, t.url, t.where)
            t.error = error
            if 200 <= status < 300:
                return attempt
            if status and not _retryable(status):
                break
            t.retry = True
            if attempt < cfg.attempts:
                wait = min(cfg.max_wait_s, cfg.first_wait_s * 2 ** (attempt - 1))
                log.debug(  # (a round that fails says one line: ``_round_failed``)
                    "webhook %s for %s: %s (attempt %d of %d); retrying in %.0f s",
                    t.where,
                    key,
                    error,
                    attempt,
                    cfg.attempts,
                    wait,
                )
                if self._stop.wait(wait):
                    return 0
        self.failed += 1
        return 0
