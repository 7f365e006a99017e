"""Live updates for the dashboard: ``GET /api/events``, a server-sent event stream of what the
store poller (``_feed``) finds, and the webhook notifier started beside it.

Event types: ``run`` (a run summary as in ``/api/runs``, with ``"new": true`` for a run not
seen before) and ``approval`` (a request without its evidence; ``status`` says whether it is
new (pending) or was decided). Each event's ``id`` lets a reconnecting ``EventSource`` pick up
where it left (``Last-Event-ID``) while the server still holds the changes after it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from ..store import Approval, Store
from ._feed import Change, Feed
from ._notify import Notifier, NotifyConfig
from ._views import run_summary

__all__ = [
    "ANONYMOUS",
    "MAX_STREAMS_PER_PERSON",
    "Messages",
    "approval_brief",
    "install_live",
    "sse_message",
]

TICK_S = 0.25  # how often a stream looks at the feed's kept changes (in memory, no store read)
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
STREAM_S = 300.0  # a stream ends after this long; the browser reconnects with Last-Event-ID
KEPT = 1000  # messages kept for browsers that reconnect (Last-Event-ID)
# The store is polled while a stream is open and this long after the last request or stream:
# a page drawn asks for its stream within seconds, a browser reconnects after 3.
IDLE_S = 60.0
MAX_STREAMS = 100
"""Event streams open at once (``create_app(max_streams=)``): each holds a connection and a
task looking at the feed 4 times a second; one more is answered 503 with ``Retry-After``."""
MAX_STREAMS_PER_PERSON = 20
"""Event streams one signed-in person (in a store with users) holds at once
(``create_app(max_streams_per_person=)``): one person's browser tabs, but not every stream the
server keeps. Where the store has no users, the one token is the operator's, who may do
anything: not counted. Readers who are not signed in (a store without users read on loopback,
no token needed) hold this many together (``ANONYMOUS``): counted in ``max_streams`` only, a
local script holding every stream left the operator's signed-in page none (stop 52)."""
ANONYMOUS = "\x00not signed in"
"""The readers not signed in, counted as one person (no user's name holds a NUL)."""
RETRY_AFTER_S = 10


def approval_brief(a: Approval) -> dict[str, Any]:
    """An approval request as the stream sends it: no evidence, no diff."""
    d = a.to_dict()
    for big in ("evidence", "diff", "answer", "action_hash"):
        d.pop(big, None)
    return d


def sse_message(c: Change) -> str:
    """One change in the ``text/event-stream`` format."""
    data: Mapping[str, Any]
    if c.run is not None:
        data = {**run_summary(c.run), "new": c.new}
    elif c.approval is not None:
        data = {**approval_brief(c.approval), "new": c.new}
    else:  # pragma: no cover - every change carries one or the other
        data = {}
    # (a settling changes its run's stop cause and advice: the page's run rows are redrawn)
    kind = "run" if c.kind == "settled" else c.kind
    return f"id: {c.seq}\nevent: {kind}\ndata: {json.dumps(data, default=str)}\n\n"


class Messages:
    """A feed listener keeping the last ``KEPT`` changes as event-stream text (summaries of
    about a kilobyte, not the records: a run's task can hold whole artifacts)."""

    def __init__(
        self, max_streams: int = MAX_STREAMS, per_person: int = MAX_STREAMS_PER_PERSON
    ) -> None:
        self.max_streams = max_streams
        self.per_person = per_person
        self._mine: dict[str, int] = {}  # open streams by person (a store with users)
        self._items: deque[tuple[int, str]] = deque(maxlen=KEPT)
        self._lock = threading.Lock()
        self.last_seq = 0
        self._streams = 0  # open event streams
        self._last_use = float("-inf")  # monotonic time of the last request or stream end

    def active(self) -> bool:
        """Whether the dashboard is in use: the feed looks at the store only then."""
        with self._lock:
            return self._streams > 0 or time.monotonic() - self._last_use < IDLE_S

    def touch(self) -> bool:
        """A request was served (or a stream ended); True when the dashboard was idle."""
        with self._lock:
            idle = self._streams == 0 and time.monotonic() - self._last_use >= IDLE_S
            self._last_use = time.monotonic()
            return idle

    def stream_opened(self, person: str | None = None) -> str:
        """Count a stream in (for ``person``, signed in, when given): ``""``, or why
        not (nothing counted) when ``max_streams`` are open, or ``per_person`` of theirs."""
        with self._lock:
            if self._streams >= self.max_streams:
                return (
                    f"{self.max_streams} event streams are open, the most this server keeps: "
                    "try again later"
                )
            if person is not None:
                if self._mine.get(person, 0) >= self.per_person:
                    if person == ANONYMOUS:
                        return (
                            f"{self.per_person} event streams are open to readers who are not "
                            "signed in, the most they keep together: sign in, or try again later"
                        )
                    return (
                        f"you have {self.per_person} event streams open, the most one reader "
                        "keeps: close a tab, or try again later"
                    )
                self._mine[person] = self._mine.get(person, 0) + 1
            self._streams += 1
            return ""

    @property
    def streams(self) -> int:
        with self._lock:
            return self._streams

    def stream_closed(self, person: str | None = None) -> None:
        with self._lock:
            if person is not None:
                left = self._mine.get(person, 0) - 1
                if left > 0:
                    self._mine[person] = left
                else:
                    self._mine.pop(person, None)
            self._streams -= 1
            self._last_use = time.monotonic()

    def __call__(self, c: Change) -> None:
        if c.baseline:  # requests pending before the first look are for the notifier only
            return
        text = sse_message(c)
        with self._lock:
            self._items.append((c.seq, text))
            self.last_seq = c.seq

    def after(self, seq: int) -> list[tuple[int, str]]:
        with self._lock:
            return [m for m in self._items if m[0] > seq]


def install_live(
    app: FastAPI,
    store: Store,
    *,
    notify: NotifyConfig | None = None,
    interval_s: float = 1.0,
    max_streams: int = MAX_STREAMS,
    max_streams_per_person: int = MAX_STREAMS_PER_PERSON,
) -> Feed:
    """Add ``/api/events`` to ``app`` and run the store poller (and the notifier, when
    ``notify`` names URLs) while the app is served. Reads of ``/api/events`` are guarded like
    every other ``/api`` read by the app's middleware. At most ``max_streams`` streams are
    open at once, ``max_streams_per_person`` of one person's (with users); one more is 503 with
    ``Retry-After``."""
    feed = Feed(store, interval_s=interval_s)
    messages = Messages(max_streams, max_streams_per_person)
    feed.listen(messages)
    notifier = Notifier(store, notify) if notify is not None and notify.urls else None
    if notifier is not None:
        feed.listen(notifier)
    app.state.feed = feed
    app.state.messages = messages
    app.state.notifier = notifier
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(a: FastAPI) -> AsyncIterator[Any]:
        if notifier is not None:
            notifier.start()
        feed.start()
        try:
            async with inner(a) as state:
                yield state
        finally:
            await run_in_threadpool(feed.stop)
            if notifier is not None:
                await run_in_threadpool(notifier.stop, 5.0)

    app.router.lifespan_context = lifespan

    @app.get("/api/events", tags=["live"], response_class=StreamingResponse)
    async def api_events(request: Request) -> StreamingResponse:
        """Server-sent events (``text/event-stream``): ``run`` for a new run or a run whose
        status or cycle changed (the run's summary), ``approval`` for a new or decided request.
        Reconnecting with ``Last-Event-ID`` (or connecting with ``?after=`` the position a page
        was drawn at) resumes after that event when the server still holds it."""
        feed.start()  # served without lifespan (a test client): start on first use
        start = messages.last_seq
        # Where to pick up: a reconnect's Last-Event-ID, else ``?after=`` (the position a page
        # was drawn at, so a change found while it loaded is not missed).
        last = _position(request.headers.get("last-event-id"))
        if last < 0:
            last = _position(request.query_params.get("after"))
        if 0 <= last <= start:  # a position from another server process is larger: start fresh
            start = last
        auth = request.app.state.auth

        def still_allowed() -> bool:
            # The sign-in the stream was opened with, asked again before each change is
            # sent: a revoked user, a replaced token or a signed-out session ends the stream.
            return not auth.require_token_for_reads or auth.signed_in(request)

        # Counted in here, before the answer (not when its body starts: a burst would all find
        # room), and out when the answer ends, however it ends (_Counted).
        # Counted per person too: one token (a viewer's) held every stream the
        # server keeps, and no one else's page could follow the store.
        # (A store without users has one operator, whose token may do anything: not counted;
        # the readers who are not signed in are counted together, as one person: ANONYMOUS.)
        def reader() -> str | None:  # (store reads: in a thread, not on the event loop)
            if not auth.signed_in(request):
                return ANONYMOUS
            return auth.who(request) if auth.users_mode else None

        person = await run_in_threadpool(reader)
        why = messages.stream_opened(person)
        if why:
            raise HTTPException(503, why, headers={"Retry-After": str(RETRY_AFTER_S)})
        return _Counted(
            _stream(request, messages, start, still_allowed),
            lambda: messages.stream_closed(person),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    return feed


def _position(text: str | None) -> int:
    try:
        return int(text or "")
    except ValueError:
        return -1


class _Counted(StreamingResponse):
    """A stream counted in by its route: counted out when the answer ends, sent or not (a
    body never started runs no generator's ``finally``)."""

    def __init__(self, content: AsyncIterator[str], done: Callable[[], None], **kw: Any) -> None:
        super().__init__(content, **kw)
        self._done: Callable[[], None] | None = done

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


async def _stream(
    request: Request, messages: Messages, cursor: int, allowed: Callable[[], bool]
) -> AsyncIterator[str]:
    yield "retry: 3000\n\n"
    began = sent = time.monotonic()
    while True:
        due = messages.after(cursor)
        if due and not await run_in_threadpool(allowed):
            return  # no longer signed in: nothing more is sent
        for seq, text in due:
            cursor = seq
            sent = time.monotonic()
            yield text
        now = time.monotonic()
        if now - began > STREAM_S or await request.is_disconnected():
            return
        if now - sent > KEEPALIVE_S:
            if not await run_in_threadpool(allowed):
                return
            sent = now
            yield ": keep-alive\n\n"
        await asyncio.sleep(TICK_S)
