"""Who is asking: tokens, sessions with a CSRF token each, and the signed-in person.

Two modes, chosen per request by the store (docs/permissions.md):

- a store with **no users**: one server token (printed by ``loopwright ui``) signs in, and
  what is done is recorded under the server's ``--as`` name (the single-user default);
- a store **with users**: each person signs in with their own token (``loopwright users
  token NAME``); the server token no longer works, reads need a sign-in, and everything is
  recorded under the signed-in user. A session remembers the token's hash and is checked
  against the store on every request, so a revoked user or token is refused at once.
"""

from __future__ import annotations

import hmac
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

from .._authority import hash_token, permits
from .._errors import ConfigError
from ..store import Store, UserRecord

__all__ = [
    "COOKIE",
    "MAX_SESSIONS",
    "MIN_TOKEN",
    "NO_TOKEN",
    "SEVERAL",
    "SIGN_IN",
    "TOO_MANY_SESSIONS",
    "UNKNOWN_TOKEN",
    "Auth",
    "RefusedSignIns",
    "SignInBackoff",
    "check_token",
    "cross_site",
]

COOKIE = "lw_session"
MIN_TOKEN = 16  # the printed token is 32 characters; a person's is 256 bits
MAX_SESSIONS = 32  # sessions kept per person: a newer sign-in ends their oldest
TOO_MANY_SESSIONS = f"signed out: too many sessions (a person keeps their newest {MAX_SESSIONS})"
_ENDED_KEPT = 1024  # sessions ended by a newer sign-in, remembered to say why (oldest forgotten)


def check_token(token: str, field: str = "token") -> None:
    """Refuse a token too short to guess-proof the dashboard (a user mistake: one line)."""
    if not token or len(token) < MIN_TOKEN:
        raise ConfigError(
            f"the dashboard token must be at least {MIN_TOKEN} characters", field=field
        )


@dataclass(frozen=True, slots=True)
class _Session:
    csrf: str
    name: str
    token_hash: str | None  # None: signed in with the server token (a store without users)


class Auth:
    """Sign-in and identity for the dashboard; in-memory sessions (a restart signs everyone
    out)."""

    def __init__(
        self,
        token: str,
        identity: str,
        *,
        require_token_for_reads: bool,
        store: Store | None = None,
    ) -> None:
        check_token(token)
        if not identity.strip():
            raise ConfigError("must not be empty", field="identity")
        self._token = token.encode()
        self.identity = identity
        self._reads = require_token_for_reads
        self._store = store
        self._sessions: dict[str, _Session] = {}
        # Sessions a newer sign-in ended (``MAX_SESSIONS``), by id: that browser's next visit
        # to the sign-in page says why it was signed out (it was ended silently).
        self._ended: dict[str, str] = {}
        self._lock = threading.Lock()

    # --- the mode ------------------------------------------------------------------------
    @property
    def users_mode(self) -> bool:
        return self._store is not None and self._store.has_users()

    @property
    def require_token_for_reads(self) -> bool:
        return self._reads or self.users_mode

    @require_token_for_reads.setter
    def require_token_for_reads(self, value: bool) -> None:
        self._reads = value

    # --- tokens --------------------------------------------------------------------------
    def name_for(self, candidate: str | None) -> str | None:
        """The name a token signs in as, or None for a wrong, unknown or revoked one."""
        if not candidate:
            return None
        if self.users_mode:
            assert self._store is not None
            user = self._store.user_by_token(hash_token(candidate))
            return user.name if user is not None else None
        return self.identity if hmac.compare_digest(candidate.encode(), self._token) else None

    def token_ok(self, candidate: str | None) -> bool:
        return self.name_for(candidate) is not None

    def _bearer(self, request: Request) -> str | None:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return self.name_for(value.strip()) if scheme.lower() == "bearer" else None

    def bearer_ok(self, request: Request) -> bool:
        return self._bearer(request) is not None

    # --- sessions ------------------------------------------------------------------------
    def new_session(self, token: str | None = None) -> str:
        """A session for whoever ``token`` names (the server identity without one); see
        ``sessions_ended`` for the one it ends when the person has ``MAX_SESSIONS``."""
        return self.sign_in_session(token)[0]

    def sign_in_session(self, token: str | None = None) -> tuple[str, int]:
        """A new session's id for whoever ``token`` names, and how many of that person's own
        sessions it ended (their oldest, beyond ``MAX_SESSIONS``): the caller audits that."""
        name = self.name_for(token) if token is not None else self.identity
        if name is None:
            raise ConfigError("wrong token", field="token")
        sid = secrets.token_urlsafe(32)
        held = hash_token(token) if token is not None and self.users_mode else None
        with self._lock:
            # Each person's newest MAX_SESSIONS: a session was kept until its sign-out or the
            # server's stop, so a script signing in again and again grew the server without
            # bound. The oldest of the person's own ends (dicts keep insertion order), never
            # another person's.
            mine = [k for k, v in self._sessions.items() if v.name == name]
            ended = mine[: max(0, len(mine) - MAX_SESSIONS + 1)]
            for old in ended:
                del self._sessions[old]
                self._ended[old] = TOO_MANY_SESSIONS
            while len(self._ended) > _ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
            self._sessions[sid] = _Session(secrets.token_urlsafe(32), name, held)
        return sid, len(ended)

    def why_ended(self, request: Request) -> str:
        """Why the request's session was ended by the server (a newer sign-in beyond
        ``MAX_SESSIONS``), once: ``""`` for any other request."""
        sid = request.cookies.get(COOKIE, "")
        if not sid:
            return ""
        with self._lock:
            return self._ended.pop(sid, "")

    def refusal(self, request: Request) -> str:
        """What a request refused for want of a sign-in is told: why the server ended its
        session (``why_ended``, left for the sign-in page to say too), else "token required".
        Only ``/login`` said why: a script or a page's own request with the session's cookie
        read "token required", as if it never had one."""
        sid = request.cookies.get(COOKIE, "")
        with self._lock:
            why = self._ended.get(sid, "") if sid else ""
        return why or "token required"

    def end_session(self, request: Request) -> None:
        sid = request.cookies.get(COOKIE, "")
        with self._lock:
            self._sessions.pop(sid, None)
            self._ended.pop(sid, None)

    def _session(self, request: Request) -> _Session | None:
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            s = self._sessions.get(sid)
        if s is None:
            return None
        users = self.users_mode
        if users != (s.token_hash is not None) or (
            users
            and self._store is not None
            and self._store.user_by_token(s.token_hash or "") is None
        ):
            # revoked, token replaced, or the store changed mode: the session is over
            with self._lock:
                self._sessions.pop(sid, None)
            return None
        return s

    def csrf_for(self, request: Request) -> str | None:
        """The CSRF token of the request's session, or None without a valid session."""
        s = self._session(request)
        return s.csrf if s is not None else None

    def signed_in(self, request: Request) -> bool:
        return self.bearer_ok(request) or self._session(request) is not None

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        expected = self.csrf_for(request)
        if expected is None or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), expected.encode())

    # --- who -----------------------------------------------------------------------------
    def who(self, request: Request) -> str:
        """The name an action of this request is recorded under: the bearer's or the
        session's user (the server identity when nobody is signed in; writes check that)."""
        name = self._bearer(request)
        if name is None:
            s = self._session(request)
            name = s.name if s is not None else None
        return name or self.identity

    def user(self, request: Request) -> UserRecord | None:
        """The signed-in user, in a store with users."""
        if not self.users_mode or not self.signed_in(request):
            return None
        assert self._store is not None
        return self._store.get_user(self.who(request))

    def may(self, request: Request, permission: str) -> bool:
        """Whether the signed-in person may ``read``, ``operate``, ``decide`` or ``admin``
        (anyone signed in may, in a store without users)."""
        if not self.signed_in(request):
            return False
        if not self.users_mode:
            return True
        user = self.user(request)
        return user is not None and permits(user, permission)


def cross_site(request: Request) -> str | None:
    """Why a request comes from another site's page, or None. A browser says where a request
    comes from (``Sec-Fetch-Site``; else ``Origin``, sent with every cross-origin POST); a
    client that says neither (a script, curl) is no other site's page."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return None if site in ("same-origin", "none") else f"a {site[:20]} request"
    origin = request.headers.get("origin")
    if origin is None:
        return None
    if (
        origin == "null"
        or urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()
    ):
        return f"a request from {origin[:100]}"
    return None


SIGN_IN = ("sign in", "dashboard")
"""What a refused sign-in is recorded as (action, target); the count of those not recorded
too, writes with a token that named nobody (or with none) among them."""
SEVERAL = ("refused requests", "dashboard")
"""What a count is recorded as when the attempts it counted were not all of one (action,
target): its reason then lists them."""
UNKNOWN_TOKEN = "(unknown token)"  # who a refusal is recorded under, as the CLI names it
NO_TOKEN = "(no token)"
_NAMED = 8  # the distinct (action, target) a count names; the rest are "others"
_Row = tuple[str, str, int, tuple[str, str], str]  # a record: source, reason, counted, what, who


@dataclass(slots=True)
class _Window:
    start: float
    counted: int = 0
    # what the attempts counted were, (action, target) -> how many; at most ``_NAMED`` kept
    whats: dict[tuple[str, str], int] = field(default_factory=dict)
    others: int = 0  # counted attempts beyond the ``_NAMED`` kinds kept

    def count(self, what: tuple[str, str], n: int = 1) -> None:
        self.counted += n
        if what in self.whats or len(self.whats) < _NAMED:
            self.whats[what] = self.whats.get(what, 0) + n
        else:
            self.others += n

    def absorb(self, other: _Window) -> None:
        for what, n in other.whats.items():
            self.count(what, n)
        self.counted += other.others
        self.others += other.others

    def named(self, counted: str) -> tuple[str, tuple[str, str]]:
        """The count's reason and (action, target): the one kind counted, else ``SEVERAL``
        with each kind and its number in the reason."""
        if len(self.whats) == 1 and not self.others:
            return counted, next(iter(self.whats))
        kinds = [f"{a} {t}: {n}" for (a, t), n in self.whats.items()]
        if self.others:
            kinds.append(f"others: {self.others}")
        return f"{counted} ({'; '.join(kinds)})", SEVERAL


class SignInBackoff:
    """Sign-ins slowed per source (``http 10.0.0.7``): after ``limit`` wrong tokens from one
    source within ``window_s`` of the first, every sign-in it tries — the form's, or a bearer
    token — is answered 429 until that window is over (``retry_after``), a right token too (an
    answer that let it through would say which guess was right). Counted, not timed: ``clock``
    is monotonic seconds (a test's own). At most ``max_sources`` sources are kept, the one that
    failed longest ago forgotten first."""

    LIMIT = 10
    WINDOW_S = 60.0
    MAX_SOURCES = 4096

    def __init__(
        self,
        *,
        limit: int = LIMIT,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = MAX_SOURCES,
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self._max = max_sources
        self._failed: dict[str, tuple[float, int]] = {}  # source -> (window's start, count)
        self._lock = threading.Lock()

    def failed(self, source: str) -> None:
        """A wrong, unknown or revoked token from ``source``."""
        now = self.clock()
        with self._lock:
            start, n = self._failed.pop(source, (now, 0))
            if now - start >= self.window_s:
                start, n = now, 0
            self._failed[source] = (start, n + 1)  # (last: the most recent failure)
            while len(self._failed) > self._max:
                del self._failed[next(iter(self._failed))]

    def retry_after(self, source: str) -> int:
        """Whole seconds until ``source`` may try a token again; 0: now."""
        now = self.clock()
        with self._lock:
            start, n = self._failed.get(source, (now, 0))
        left = start + self.window_s - now
        return max(1, math.ceil(left)) if n >= self.limit and left > 0 else 0


class RefusedSignIns:
    """Refused sign-ins, audited once per source and window. Anyone who reaches the sign-in
    page can try a token, so one record per attempt would let them fill the append-only audit
    log. The first refusal from a source (``http 10.0.0.7``) in ``window_s`` is recorded; the
    later ones (recorded under the same ``who``: a forged request's is the person whose browser
    sent it) are counted, and their count is recorded with the source's next record (its
    first refusal after the window) or when the server stops (``flush``). At most
    ``max_sources`` windows are open: a source beyond them, while each is within its window, is
    counted with the others beyond (recorded as from ``MANY_SOURCES``, under whom they were
    refused as, at most 8 apart, then ``OTHERS``; recorded when their window is over on the
    same schedule as a source's), so however many addresses try, a window's time writes at most
    ``max_sources`` records of refusals and as many of counts. ``record(source, reason, counted, what, who)`` writes one record, ``what``
    its (action, target): a sign-in's
    ``("sign in", "dashboard")``, or the method and path of a write whose bearer token named
    nobody, or that had no token at all, which the same count per source holds (one flood, one
    bound); ``who`` whom it is recorded under (``(unknown token)``, ``(no token)``); ``clock``
    is monotonic seconds.

    A count names what it counted: the (action, target) of the attempts counted when they were
    all one, else ``SEVERAL`` with each (at most 8, then "others") and its number in the
    reason, ``counted_reason`` then the list (it named the window's first record's action, while
    the later attempts may have been other paths). A count is recorded with the source's next
    record only where that record is of the one kind counted; else on its own, just before.
    The same scheme holds other records one can repeat at will (allowed sign-ins, resumes
    refused for room): ``counted_reason`` says what a count of them is."""

    WINDOW_S = 600.0
    MAX_SOURCES = 4096

    def __init__(
        self,
        record: Callable[[str, str, int, tuple[str, str], str], None],
        *,
        window_s: float = WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_sources: int = MAX_SOURCES,
        counted_reason: str = "",
    ) -> None:
        self._record = record
        self.window_s = window_s
        self.clock = clock
        self._max = max_sources
        self.counted_reason = counted_reason or COUNTED
        self._windows: dict[tuple[str, str], _Window] = {}  # by (source, who); oldest first
        # the sources beyond ``max_sources``, a window per whom they were recorded under (a
        # forged write's person, ``(unknown token)``...), at most ``_NAMED`` then ``OTHERS``
        self._overflow: dict[str, _Window] = {}
        self._lock = threading.Lock()

    def _count_of(self, source: str, w: _Window, who: str) -> _Row:
        reason, what = w.named(self.counted_reason)
        return (source, reason, w.counted, what, who)

    def refused(
        self,
        source: str,
        reason: str,
        what: tuple[str, str] = SIGN_IN,
        who: str = UNKNOWN_TOKEN,
    ) -> None:
        """A sign-in (or ``what``, by ``who``) from ``source`` refused for ``reason``:
        recorded, or counted."""
        now = self.clock()
        out: list[_Row] = []
        with self._lock:
            key = (source, who)
            w = self._windows.get(key)
            if w is not None and now - w.start < self.window_s:
                w.count(what)
                return
            old = self._windows.pop(key) if w is not None else None
            # Windows over (the oldest first, as they were opened) close, their counts recorded
            while self._windows:
                first = next(iter(self._windows))
                if now - self._windows[first].start < self.window_s:
                    break
                gone = self._windows.pop(first)
                if gone.counted:
                    out.append(self._count_of(first[0], gone, first[1]))
            # ... and so do the windows of the sources beyond them (only a later refusal from
            # beyond closed one, so a crash in a quiet spell lost its count)
            for over in [k for k, ov in self._overflow.items() if now - ov.start >= self.window_s]:
                ov = self._overflow.pop(over)
                if ov.counted:
                    out.append(self._count_of(MANY_SOURCES, ov, over))
            if len(self._windows) < self._max:
                self._windows[key] = _Window(now)
                carried = 0
                if old is not None and old.counted:
                    if set(old.whats) == {what} and not old.others:
                        carried = old.counted  # with this record: the one kind it counted
                    else:
                        out.append(self._count_of(source, old, who))
                out.append((source, reason, carried, what, who))
            else:
                # As many sources as are kept, each within its window: this one is counted
                # with the others beyond them, not recorded. Closing the oldest window for it
                # (as before) let a flood from more addresses than are kept (an IPv6 prefix)
                # write a record per attempt, and recorded no more than a source each.
                whom = who if who in self._overflow or len(self._overflow) < _NAMED else OTHERS
                beyond = self._overflow.setdefault(whom, _Window(now))
                beyond.count(what)
                if old is not None:
                    beyond.absorb(old)
        for args in out:
            self._record(*args)

    def flush(self) -> None:
        """Record the counts not yet recorded (the server stops)."""
        with self._lock:
            held = [self._count_of(s, w, who) for (s, who), w in self._windows.items()]
            held += [self._count_of(MANY_SOURCES, w, who) for who, w in self._overflow.items()]
            self._windows.clear()
            self._overflow.clear()
        for args in held:
            if args[2]:
                self._record(*args)


MANY_SOURCES = "http (many sources)"  # where the refusals beyond the windows kept come from
OTHERS = "(several)"  # whom they are recorded under, beyond the ``_NAMED`` first kept apart
COUNTED = (
    "refused sign-ins (and writes with no token, one naming nobody, or no CSRF token) counted "
    "since the last record from here"
)
