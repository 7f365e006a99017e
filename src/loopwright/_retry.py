"""Error classification and retry policy: pure decisions, no I/O and no store.

``classify`` sorts an exception raised by user code (an actor, a verifier, a model call) into
one of three classes: ``"transient"`` (worth another attempt), ``"permanent"`` (retrying cannot
help) or ``"needs_human"`` (a person must act: credentials, permissions). Anything it cannot
positively tell is transient is permanent: a blind retry of a bug only burns budget.

``RetryPolicy`` turns a class and an attempt count into "retry after this many seconds" or
"stop". It keeps no state: the caller persists how many attempts failed and when the first one
started, so the bound holds across restarts of the process.

HTTP client exceptions are recognised by their attributes and class names, never by importing
the client libraries, which stay optional.
"""

from __future__ import annotations

import math
import random
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Literal

from ._calls import CallTimeout
from ._errors import ConfigError

__all__ = [
    "NO_RETRY",
    "PERMANENT_ERROR_NAMES",
    "TRANSIENT_ERROR_NAMES",
    "Classifier",
    "ErrorClass",
    "NeedsHumanError",
    "PermanentError",
    "RefusedError",
    "RetryPolicy",
    "TransientError",
    "classify",
    "retry_after_s",
    "status_code",
]

ErrorClass = Literal["transient", "permanent", "needs_human"]
_CLASSES: frozenset[str] = frozenset({"transient", "permanent", "needs_human"})

Classifier = Callable[[BaseException], ErrorClass | None]
"""A user rule: the class of an exception, or ``None`` for no opinion."""


class TransientError(Exception):
    """Raised by user code to say "this may succeed if tried again", optionally not before
    ``retry_after_s`` seconds."""

    def __init__(self, message: str = "", *, retry_after_s: float | None = None) -> None:
        self.retry_after_s = retry_after_s
        super().__init__(message)


class PermanentError(Exception):
    """Raised by user code to say "do not retry this".

    From an effect, it says nothing of whether the action happened: the effect's next attempt
    (another run, or a redo after a rollback) is handed the same key, so a provider that
    deduplicates answers with what it did. Raise ``RefusedError`` when the outside world
    refused the call and did nothing."""


class RefusedError(PermanentError):
    """Raised by user code to say "refused, nothing was done" (a declined card): not retried,
    like any ``PermanentError``, and an effect's next attempt is handed a key no attempt was
    handed before, since a provider keeps a refusal by key (Stripe declines the same key
    again for a day). Raise it only around the one request that was refused: raised after
    the action, it would let the next attempt act again."""


class NeedsHumanError(Exception):
    """Raised by user code to say "a person must act" (permission, credentials, a decision)."""


# --- reading HTTP client exceptions without importing the clients ---------------------------


def _attr(obj: Any, name: str) -> Any:
    # Some clients expose these as properties that raise when unset (httpx's ``request``),
    # and classification must never fail because an exception object is odd.
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _http_status(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value < 600:
        return int(value)  # an IntEnum such as http.HTTPStatus becomes a plain int
    return None


# Looked up lazily, in order: aiohttp's ``code`` is a deprecated alias of ``status`` that warns
# when read, so it is only consulted when nothing before it answered.
_STATUS_SOURCES: tuple[Callable[[BaseException], Any], ...] = (
    lambda e: _attr(e, "status_code"),  # openai APIStatusError, FastAPI/Starlette HTTPException
    lambda e: _attr(e, "status"),  # aiohttp ClientResponseError
    lambda e: _attr(_attr(e, "response"), "status_code"),  # httpx HTTPStatusError, requests
    lambda e: _attr(e, "code"),  # urllib.error.HTTPError
)


def status_code(exc: BaseException) -> int | None:
    """The HTTP status carried by a client exception, or ``None``.

    Reads ``exc.status_code``, ``exc.status``, ``exc.response.status_code`` and ``exc.code``,
    in that order; values that are not integers in [100, 600) are ignored (``code`` in
    particular is often an errno or an application code).
    """
    for source in _STATUS_SOURCES:
        found = _http_status(source(exc))
        if found is not None:
            return found
    return None


def _seconds(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        secs = float(value)
        if math.isfinite(secs) and secs >= 0:
            return secs
    return None


def _header(headers: Any, name: str) -> Any:
    """``headers[name]`` matched case-insensitively, or ``None``."""
    try:
        # urllib's HTTPError.headers (an ``email`` message: one exists only where the module
        # was imported; this module does not import it, 4 ms of every process's start)
        message = sys.modules.get("email.message")
        if message is not None and isinstance(headers, message.Message):
            return headers.get(name)
        if not isinstance(headers, Mapping):
            return None
        # httpx, requests and aiohttp headers are case-insensitive themselves; a plain dict is not.
        value = headers.get(name)
        if value is None:
            wanted = name.lower()
            value = next(
                (v for k, v in headers.items() if isinstance(k, str) and k.lower() == wanted), None
            )
    except Exception:
        return None
    return value


_DELAY = re.compile(r"[0-9]+(?:\.[0-9]+)?", re.ASCII)
"""A delay in a header: ``1*DIGIT`` (RFC 9110's delay-seconds), a decimal fraction allowed
(servers send ``1.5``). Python's ``float`` also takes ``1_000``, ``1e3``, ``+5``, ``inf`` and
other scripts' digits: none is a delay a server sends, each is read as absent."""


def _delay(value: Any) -> float | None:
    """The number of a ``Retry-After`` (or ``retry-after-ms``) header, or ``None``."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or not _DELAY.fullmatch(text := value.strip()):
        return None
    return _seconds(float(text))


def _parse_retry_after(value: Any, now: float | None) -> float | None:
    """A ``Retry-After`` value (RFC 9110 §10.2.3): delay-seconds or an HTTP-date; anything
    else (``1_000``, ``1e3``, ``-5``) is as if it were not sent."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text[0].isdigit():  # delay-seconds; an HTTP-date starts with its day's name
        return _delay(text)
    import email.utils  # (an HTTP-date: rare; imported here, see ``_header``)

    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000" means UTC with unknown local zone
        when = when.replace(tzinfo=UTC)
    reference = time.time() if now is None else now
    return max(0.0, when.timestamp() - reference)


def retry_after_s(exc: BaseException, *, now: float | None = None) -> float | None:
    """How long the failing side asked us to wait, in seconds, or ``None`` if it did not say.

    Sources, first usable one wins: ``TransientError.retry_after_s``; a numeric
    ``exc.retry_after``; a ``retry-after-ms`` (OpenAI/Anthropic APIs) or ``Retry-After`` header
    in ``exc.response.headers`` or ``exc.headers``. An HTTP-date is taken relative to ``now``
    (default ``time.time()``) and a date in the past means 0. Malformed, negative or
    non-finite values are ignored.
    """
    if isinstance(exc, TransientError):
        found = _seconds(exc.retry_after_s)
        if found is not None:
            return found
    found = _seconds(_attr(exc, "retry_after"))
    if found is not None:
        return found
    for headers in (_attr(_attr(exc, "response"), "headers"), _attr(exc, "headers")):
        if headers is None:
            continue
        ms = _delay(_header(headers, "retry-after-ms"))
        if ms is not None:
            return ms / 1000.0
        found = _parse_retry_after(_header(headers, "retry-after"), now)
        if found is not None:
            return found
    return None


# --- classification --------------------------------------------------------------------------

# Network-level failures of common clients, matched by class name anywhere in the MRO so that
# none of them has to be installed: openai/anthropic (APIConnectionError, APITimeoutError),
# httpx/httpcore (TransportError and its timeout/network/protocol subclasses), requests
# (ConnectionError, ReadTimeout, ChunkedEncodingError), aiohttp (ClientConnectionError,
# ServerDisconnectedError, ServerTimeoutError), urllib3 (NewConnectionError).
TRANSIENT_ERROR_NAMES: frozenset[str] = frozenset(
    {
        "APIConnectionError",
        "APITimeoutError",
        "TransportError",
        "TimeoutException",
        "NetworkError",
        "ConnectError",
        "ReadError",
        "WriteError",
        "ConnectTimeout",
        "ReadTimeout",
        "WriteTimeout",
        "PoolTimeout",
        "RemoteProtocolError",
        "ConnectionError",
        "ChunkedEncodingError",
        "ClientConnectionError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "NewConnectionError",
    }
)
# Subclasses of the names above that no retry can fix: a URL scheme the client does not speak,
# our own protocol misuse, a TLS certificate that does not verify. The MRO is walked from the
# most specific class, so these win over their transient base classes.
PERMANENT_ERROR_NAMES: frozenset[str] = frozenset(
    {
        "UnsupportedProtocol",
        "LocalProtocolError",
        "SSLError",
        "ClientSSLError",
        "ClientConnectorCertificateError",
        "CertificateError",
    }
)
_TRANSIENT_TYPES: tuple[type[BaseException], ...] = (TimeoutError, CallTimeout, ConnectionError)


def _by_type(exc: BaseException) -> ErrorClass | None:
    for klass in type(exc).__mro__:
        if klass.__name__ in PERMANENT_ERROR_NAMES:
            return "permanent"
        if klass in _TRANSIENT_TYPES or klass.__name__ in TRANSIENT_ERROR_NAMES:
            return "transient"
    return None


def _by_status(code: int) -> ErrorClass:
    if code in (401, 403, 407):
        return "needs_human"
    if code in (408, 425, 429) or code >= 500:
        return "transient"
    return "permanent"


def classify(exc: BaseException, extra: Sequence[Classifier] = ()) -> ErrorClass:
    """The class of ``exc``.

    Rules, first match wins:

    1. the ``extra`` classifiers, in order; one that returns ``None`` (or anything that is not
       a class) has no opinion, one that raises is ignored;
    2. ``TransientError`` / ``PermanentError`` / ``NeedsHumanError``;
    3. ``PermissionError`` → needs_human;
    4. an HTTP status (see ``status_code``): 401, 403, 407 → needs_human; 408, 425, 429 and
       5xx → transient; other statuses ≥ 400 → permanent;
    5. ``TimeoutError``, ``CallTimeout``, ``ConnectionError`` and the well-known network error
       names in ``TRANSIENT_ERROR_NAMES`` → transient (unless a more specific class is in
       ``PERMANENT_ERROR_NAMES``);
    6. everything else → permanent.

    ``exc`` that is not an exception (a message, a status code) is a ``TypeError``: it was
    classed "permanent" whatever it said.
    """
    if not isinstance(exc, BaseException):
        raise TypeError(f"classify: exc must be an exception, got {type(exc).__name__}")
    for rule in extra:
        try:
            verdict = rule(exc)
        except Exception:
            continue  # a broken user rule must not turn one failure into another
        if verdict is not None and verdict in _CLASSES:
            return verdict
    if isinstance(exc, TransientError):
        return "transient"
    if isinstance(exc, PermanentError):
        return "permanent"
    if isinstance(exc, NeedsHumanError | PermissionError):
        return "needs_human"
    code = status_code(exc)
    if code is not None and code >= 400:
        return _by_status(code)
    return _by_type(exc) or "permanent"


# --- policy --------------------------------------------------------------------------------

_FIELDS = ("attempts", "backoff_s", "max_backoff_s", "multiplier", "jitter", "deadline_s")

_JITTER_RNG = random.Random()


def _number(value: Any, field: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"must be a finite number ≥ 0, got {value!r}", field=field)
    return float(value)


def _validated(values: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check and normalise the policy's fields; errors name ``{where}.{field}``."""
    out: dict[str, Any] = {}
    attempts = values["attempts"]
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ConfigError(f"must be a whole number, got {attempts!r}", field=f"{where}.attempts")
    if attempts < 1:
        raise ConfigError(
            f"must be at least 1 (the first attempt counts), got {attempts}",
            field=f"{where}.attempts",
        )
    out["attempts"] = attempts
    for name in ("backoff_s", "max_backoff_s", "multiplier"):
        out[name] = _number(values[name], f"{where}.{name}")
    if out["max_backoff_s"] < out["backoff_s"]:
        raise ConfigError(
            f"must be ≥ backoff_s ({out['backoff_s']:g}), got {out['max_backoff_s']:g}",
            field=f"{where}.max_backoff_s",
        )
    if out["multiplier"] < 1:
        raise ConfigError(
            f"must be ≥ 1 (delays never shrink), got {out['multiplier']:g}",
            field=f"{where}.multiplier",
        )
    if not isinstance(values["jitter"], bool):
        raise ConfigError(
            f"must be true or false, got {values['jitter']!r}", field=f"{where}.jitter"
        )
    out["jitter"] = values["jitter"]
    out["deadline_s"] = _number(values["deadline_s"], f"{where}.deadline_s", optional=True)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """When and how soon to try again after a failed attempt.

    Attributes:
        attempts: total attempts, the first included; 1 means never retry.
        backoff_s: the delay after the first failure.
        max_backoff_s: the cap of the exponential delay (a longer Retry-After still wins).
        multiplier: each further failure multiplies the delay by this.
        jitter: full jitter: the delay is drawn uniformly from [0, exponential delay], so that
            many runs failing together do not retry in lockstep.
        deadline_s: no attempt starts later than this many seconds after the first attempt
            started; ``None`` for no deadline.
        classifiers: user rules consulted before the built-in ones (see ``classify``).
    """

    attempts: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    multiplier: float = 2.0
    jitter: bool = True
    deadline_s: float | None = None
    classifiers: tuple[Classifier, ...] = ()

    def __post_init__(self) -> None:
        for name, value in _validated({f: getattr(self, f) for f in _FIELDS}, "retry").items():
            object.__setattr__(self, name, value)
        rules = self.classifiers
        if not isinstance(rules, list | tuple) or not all(callable(r) for r in rules):
            raise ConfigError(
                f"must be a sequence of callables, got {rules!r}", field="retry.classifiers"
            )
        object.__setattr__(self, "classifiers", tuple(rules))

    def classify(self, exc: BaseException) -> ErrorClass:
        """``classify(exc, self.classifiers)``."""
        return classify(exc, self.classifiers)

    def delay_s(
        self, failed: int, exc: BaseException | None = None, *, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before the next attempt, after ``failed`` (≥ 1) failed attempts:
        ``min(max_backoff_s, backoff_s * multiplier ** (failed - 1))``, fully jittered if
        ``jitter``, and never less than the Retry-After that ``exc`` carries. ``rng`` makes the
        jitter reproducible."""
        if isinstance(failed, bool) or not isinstance(failed, int) or failed < 1:
            raise ValueError(f"failed must be a whole number ≥ 1, got {failed!r}")
        # Our own arithmetic, not a retry library's: attempts are counted in the run's store
        # (so the bound holds across restarts), which leaves a library only this formula, and
        # the jitter must take ``rng``. An exponent too large for a float is the cap.
        try:
            delay = self.backoff_s * self.multiplier ** (failed - 1)
        except OverflowError:
            delay = self.max_backoff_s if self.backoff_s else 0.0
        delay = min(delay, self.max_backoff_s)
        if self.jitter:
            delay = (rng or _JITTER_RNG).uniform(0.0, delay)
        if exc is not None:
            asked = retry_after_s(exc)
            if asked is not None:
                delay = max(delay, asked)
        return delay

    def decide(
        self,
        exc: BaseException,
        failed: int,
        *,
        elapsed_s: float = 0.0,
        rng: random.Random | None = None,
    ) -> tuple[ErrorClass, float | None]:
        """``(class, delay)`` for a failure; a ``None`` delay means do not retry.

        ``failed`` counts failed attempts so far, this one included; ``elapsed_s`` is the time
        since the first attempt started. No retry when the class is not transient, the
        attempts are spent, or the next attempt would start after ``deadline_s``.
        """
        if isinstance(failed, bool) or not isinstance(failed, int) or failed < 1:
            raise ValueError(f"failed must be a whole number ≥ 1, got {failed!r}")
        kind = self.classify(exc)
        if kind != "transient" or failed >= self.attempts:
            return kind, None
        delay = self.delay_s(failed, exc, rng=rng)
        if self.deadline_s is not None and elapsed_s + delay > self.deadline_s:
            return kind, None
        return kind, delay

    # --- (de)serialisation --------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The policy as a plain mapping; classifiers are code and are left out."""
        return {name: getattr(self, name) for name in _FIELDS}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None, *, where: str = "retry") -> RetryPolicy:
        """Build a policy from a TOML table (or ``to_dict`` output); ``None`` gives defaults.
        Errors name ``{where}.{field}``."""
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ConfigError(f"must be a table, got {d!r}", field=where)
        for key in d:
            if key not in _FIELDS:
                hint = (
                    " (classifiers are code: pass them to RetryPolicy)"
                    if key == "classifiers"
                    else ""
                )
                raise ConfigError(
                    f"unknown key {key!r}; expected one of {sorted(_FIELDS)}{hint}",
                    field=f"{where}.{key}",
                )
        defaults = cls()
        values = {name: d.get(name, getattr(defaults, name)) for name in _FIELDS}
        return cls(**_validated(values, where))


NO_RETRY: RetryPolicy = RetryPolicy(attempts=1)
"""One attempt, no retries."""
