"""Token and session checks: constant-time token comparison, sessions with a CSRF token each."""

from __future__ import annotations

import hmac
import secrets
import threading

from starlette.requests import Request

from .._errors import ConfigError

__all__ = ["COOKIE", "MIN_TOKEN", "Auth", "check_token"]

COOKIE = "lw_session"
MIN_TOKEN = 8


def check_token(token: str, field: str = "token") -> None:
    """Refuse a token too short to guess-proof the dashboard (a user mistake: one line)."""
    if not token or len(token) < MIN_TOKEN:
        raise ConfigError(
            f"the dashboard token must be at least {MIN_TOKEN} characters", field=field
        )


class Auth:
    """One token, one identity bound to it; in-memory sessions (a restart signs everyone out)."""

    def __init__(self, token: str, identity: str, *, require_token_for_reads: bool) -> None:
        check_token(token)
        if not identity.strip():
            raise ConfigError("must not be empty", field="identity")
        self._token = token.encode()
        self.identity = identity
        self.require_token_for_reads = require_token_for_reads
        self._sessions: dict[str, str] = {}
        self._lock = threading.Lock()

    def token_ok(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self._token)

    def bearer_ok(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        scheme, _, value = header.partition(" ")
        return scheme.lower() == "bearer" and self.token_ok(value.strip())

    def new_session(self) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[sid] = secrets.token_urlsafe(32)
        return sid

    def end_session(self, request: Request) -> None:
        sid = request.cookies.get(COOKIE, "")
        with self._lock:
            self._sessions.pop(sid, None)

    def csrf_for(self, request: Request) -> str | None:
        """The CSRF token of the request's session, or None without a valid session."""
        sid = request.cookies.get(COOKIE)
        if not sid:
            return None
        with self._lock:
            return self._sessions.get(sid)

    def who(self, request: Request) -> str:
        """The name an action of this request is recorded under."""
        return self.identity

    def signed_in(self, request: Request) -> bool:
        return self.bearer_ok(request) or self.csrf_for(request) is not None

    def csrf_ok(self, request: Request, submitted: str | None) -> bool:
        expected = self.csrf_for(request)
        if expected is None or not submitted:
            return False
        return hmac.compare_digest(submitted.encode(), expected.encode())
