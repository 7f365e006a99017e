"""Error classification and the retry policy: which failures are retried, how soon, how often."""

from __future__ import annotations

import email.message
import email.utils
import io
import math
import pickle
import random
import urllib.error
from http import HTTPStatus
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwright._calls import CallTimeout
from loopwright._errors import ConfigError
from loopwright._retry import (
    NO_RETRY,
    ErrorClass,
    NeedsHumanError,
    PermanentError,
    RetryPolicy,
    TransientError,
    classify,
    retry_after_s,
    status_code,
)

# --- fakes shaped like the client libraries' exceptions --------------------------------------


class WithStatusCode(Exception):  # openai APIStatusError, FastAPI HTTPException
    def __init__(self, status_code: Any) -> None:
        super().__init__(f"status {status_code}")
        self.status_code = status_code


class WithStatus(Exception):  # aiohttp ClientResponseError
    def __init__(self, status: Any) -> None:
        super().__init__(f"status {status}")
        self.status = status


class WithCode(Exception):  # urllib HTTPError
    def __init__(self, code: Any) -> None:
        super().__init__(f"code {code}")
        self.code = code


class FakeResponse:
    def __init__(self, status_code: Any, headers: Any = None) -> None:
        self.status_code = status_code
        self.headers = headers if headers is not None else {}


class WithResponse(Exception):  # httpx HTTPStatusError, requests HTTPError
    def __init__(self, status_code: Any, headers: Any = None) -> None:
        super().__init__(f"response {status_code}")
        self.response = FakeResponse(status_code, headers)


def _named(name: str, base: type[Exception] = Exception) -> type[Exception]:
    return type(name, (base,), {})


APIConnectionError = _named("APIConnectionError")
APITimeoutError = _named("APITimeoutError", APIConnectionError)  # as in openai
TransportError = _named("TransportError")
ConnectTimeout = _named("ConnectTimeout", _named("TimeoutException", TransportError))
UnsupportedProtocol = _named("UnsupportedProtocol", TransportError)  # as in httpx
ServerDisconnectedError = _named("ServerDisconnectedError")
RemoteProtocolError = _named("RemoteProtocolError", _named("ProtocolError", TransportError))


# a user subclass: the well-known name is found deeper in the MRO
MyNetworkFailure = _named("MyNetworkFailure", ConnectTimeout)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        # explicit types
        (TransientError("try later"), "transient"),
        (PermanentError("no"), "permanent"),
        (NeedsHumanError("log in"), "needs_human"),
        (PermissionError("denied"), "needs_human"),
        # HTTP status, from each place a client puts it
        (WithStatusCode(401), "needs_human"),
        (WithStatusCode(403), "needs_human"),
        (WithStatusCode(407), "needs_human"),
        (WithStatusCode(408), "transient"),
        (WithStatusCode(425), "transient"),
        (WithStatusCode(429), "transient"),
        (WithStatusCode(500), "transient"),
        (WithStatusCode(503), "transient"),
        (WithStatusCode(400), "permanent"),
        (WithStatusCode(404), "permanent"),
        (WithStatusCode(422), "permanent"),
        (WithStatusCode(HTTPStatus.TOO_MANY_REQUESTS), "transient"),
        (WithStatus(502), "transient"),
        (WithStatus(401), "needs_human"),
        (WithStatus(409), "permanent"),
        (WithResponse(504), "transient"),
        (WithResponse(403), "needs_human"),
        (WithResponse(410), "permanent"),
        (WithCode(429), "transient"),
        (WithCode(451), "permanent"),
        # not HTTP statuses: ignored, so the exception falls through to "permanent"
        (WithStatusCode("503"), "permanent"),
        (WithStatusCode(True), "permanent"),
        (WithStatus(None), "permanent"),
        (WithCode(5), "permanent"),  # an errno-like code, not a status
        (WithCode(1503), "permanent"),
        # network failures
        (TimeoutError(), "transient"),
        (CallTimeout(2.0), "transient"),
        (ConnectionResetError(), "transient"),
        (BrokenPipeError(), "transient"),
        (APIConnectionError("down"), "transient"),
        (APITimeoutError("slow"), "transient"),
        (ConnectTimeout(), "transient"),
        (MyNetworkFailure(), "transient"),
        (ServerDisconnectedError(), "transient"),
        (RemoteProtocolError(), "transient"),
        (UnsupportedProtocol(), "permanent"),  # a more specific permanent name wins
        # bugs and unknowns are never retried
        (ValueError("bad"), "permanent"),
        (TypeError("bad"), "permanent"),
        (KeyError("k"), "permanent"),
        (_named("ValidationError", ValueError)(), "permanent"),
        (RuntimeError("?"), "permanent"),
        (OSError("disk"), "permanent"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_classification_table(exc: BaseException, expected: ErrorClass) -> None:
    assert classify(exc) == expected


def test_explicit_type_beats_http_status() -> None:
    class Odd(PermanentError):
        status_code = 503

    assert classify(Odd()) == "permanent"


def test_user_classifier_overrides_the_default() -> None:
    def teapot(exc: BaseException) -> ErrorClass | None:
        return "transient" if isinstance(exc, ValueError) else None

    assert classify(ValueError("flaky parser")) == "permanent"
    assert classify(ValueError("flaky parser"), [teapot]) == "transient"
    # no opinion falls through to the built-in rules
    assert classify(WithStatusCode(401), [teapot]) == "needs_human"


def test_first_classifier_with_an_opinion_wins() -> None:
    def human(exc: BaseException) -> ErrorClass | None:
        return "needs_human"

    def transient(exc: BaseException) -> ErrorClass | None:
        return "transient"

    assert classify(ValueError(), [human, transient]) == "needs_human"
    assert classify(ValueError(), [transient, human]) == "transient"


def test_raising_or_invalid_classifier_is_ignored() -> None:
    def broken(exc: BaseException) -> ErrorClass | None:
        raise RuntimeError("bug in the user's rule")

    def nonsense(exc: BaseException) -> Any:
        return "maybe"

    def transient(exc: BaseException) -> ErrorClass | None:
        return "transient"

    assert classify(WithStatusCode(429), [broken, nonsense]) == "transient"
    assert classify(ValueError(), [broken, nonsense]) == "permanent"
    assert classify(ValueError(), [broken, nonsense, transient]) == "transient"


def test_policy_uses_its_classifiers() -> None:
    policy = RetryPolicy(classifiers=(lambda e: "transient" if isinstance(e, KeyError) else None,))
    assert policy.classify(KeyError("x")) == "transient"
    assert RetryPolicy().classify(KeyError("x")) == "permanent"


# --- status_code -----------------------------------------------------------------------------


def test_status_code_sources_and_order() -> None:
    assert status_code(WithStatusCode(418)) == 418
    assert status_code(WithStatus(418)) == 418
    assert status_code(WithResponse(418)) == 418
    assert status_code(WithCode(418)) == 418
    assert status_code(ValueError()) is None
    got = status_code(WithStatusCode(HTTPStatus.NOT_FOUND))
    assert got == 404
    assert type(got) is int


def test_status_code_skips_bad_values_and_stops_at_the_first_good_one() -> None:
    class Both(Exception):
        status_code = "oops"
        status = 502

        @property
        def code(self) -> int:  # like aiohttp's deprecated alias: must not be read here
            raise AssertionError("code read although status answered")

    assert status_code(Both()) == 502


def test_status_code_survives_raising_properties() -> None:
    class Hostile(Exception):
        @property
        def response(self) -> Any:
            raise RuntimeError("no response attached")

    assert status_code(Hostile()) is None
    assert retry_after_s(Hostile()) is None
    assert classify(Hostile()) == "permanent"


def test_real_urllib_http_error() -> None:
    headers = email.message.Message()
    headers["Retry-After"] = "7"
    exc = urllib.error.HTTPError("http://x", 503, "busy", headers, io.BytesIO())
    try:
        assert status_code(exc) == 503
        assert classify(exc) == "transient"
        assert retry_after_s(exc) == 7.0
    finally:
        exc.close()


# --- Retry-After -----------------------------------------------------------------------------

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TransientError("x", retry_after_s=4.5), 4.5),
        (TransientError("x", retry_after_s=0), 0.0),
        (TransientError("x"), None),
        (TransientError("x", retry_after_s=-1), None),
        (TransientError("x", retry_after_s=math.inf), None),
        (WithResponse(429, {"Retry-After": "12"}), 12.0),
        (WithResponse(429, {"retry-after": "12"}), 12.0),  # case-insensitive on a plain dict
        (WithResponse(429, {"RETRY-AFTER": " 3 "}), 3.0),
        (WithResponse(429, {"Retry-After": "1.5"}), 1.5),
        (WithResponse(429, {"Retry-After": b"9"}), 9.0),
        (WithResponse(429, {"retry-after-ms": "250"}), 0.25),
        (WithResponse(429, {"retry-after-ms": "x", "Retry-After": "2"}), 2.0),
        (WithResponse(429, {"Retry-After": "soon"}), None),
        # delay-seconds is 1*DIGIT (RFC 9110); float() read each of these as a delay
        (WithResponse(429, {"Retry-After": "1_000"}), None),
        (WithResponse(429, {"Retry-After": "1e3"}), None),
        (WithResponse(429, {"Retry-After": "+5"}), None),
        (WithResponse(429, {"Retry-After": "inf"}), None),
        (WithResponse(429, {"Retry-After": "1."}), None),
        (WithResponse(429, {"Retry-After": "\u0661\u0662"}), None),  # Arabic-Indic "12"
        (WithResponse(429, {"retry-after-ms": "2_500", "Retry-After": "2"}), 2.0),
        (WithResponse(429, {"retry-after-ms": "1e3"}), None),
        (WithResponse(429, {"Retry-After": "-5"}), None),
        (WithResponse(429, {"Retry-After": "nan"}), None),
        (WithResponse(429, {"Retry-After": ""}), None),
        (WithResponse(429, {"Retry-After": 12}), None),  # headers are text
        (WithResponse(429, {}), None),
        (WithResponse(429, ["Retry-After", "3"]), None),  # not a mapping
        (WithResponse(429, {"Retry-After": email.utils.formatdate(NOW + 90, usegmt=True)}), 90.0),
        (WithResponse(429, {"Retry-After": email.utils.formatdate(NOW - 90, usegmt=True)}), 0.0),
        (WithResponse(429, {"Retry-After": "Tue, 14 Nov 2023 22:14:20 -0000"}), 60.0),
        (WithResponse(429, {"Retry-After": "Tue, 99 Foo 2023 99:99:99 GMT"}), None),
        (WithStatusCode(429), None),
        (ValueError(), None),
    ],
)
def test_retry_after(exc: BaseException, expected: float | None) -> None:
    got = retry_after_s(exc, now=NOW)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_retry_after_attribute_and_exc_headers() -> None:
    class RateLimited(Exception):
        retry_after = 30

    class Headed(Exception):
        headers = {"Retry-After": "5"}  # noqa: RUF012 - a fake

    class BadAttr(Exception):
        retry_after = "30"  # not a number: ignored

    assert retry_after_s(RateLimited()) == 30.0
    assert retry_after_s(Headed()) == 5.0
    assert retry_after_s(BadAttr()) is None


def test_transient_error_pickles_with_its_retry_after() -> None:
    exc = pickle.loads(pickle.dumps(TransientError("slow down", retry_after_s=8.0)))
    assert isinstance(exc, TransientError)
    assert str(exc) == "slow down"
    assert exc.retry_after_s == 8.0


# --- delays ----------------------------------------------------------------------------------


def test_delay_grows_exponentially_and_is_capped() -> None:
    policy = RetryPolicy(backoff_s=0.5, multiplier=2, max_backoff_s=3, jitter=False)
    assert [policy.delay_s(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert policy.delay_s(10_000) == 3.0  # no overflow for very long failure streaks


def test_delay_with_multiplier_one_is_constant_and_zero_backoff_is_zero() -> None:
    assert RetryPolicy(backoff_s=2, multiplier=1, jitter=False).delay_s(5) == 2.0
    assert RetryPolicy(backoff_s=0, max_backoff_s=0, jitter=False).delay_s(3) == 0.0
    # an exponent too large for a float: the cap, or still nothing when there is no backoff
    assert RetryPolicy(backoff_s=0, max_backoff_s=9, jitter=False).delay_s(10**6) == 0.0
    assert RetryPolicy(backoff_s=1, max_backoff_s=9, jitter=False).delay_s(10**6) == 9.0


def test_jitter_stays_within_bounds_and_is_reproducible() -> None:
    policy = RetryPolicy(backoff_s=1, multiplier=2, max_backoff_s=8)
    for failed, cap in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        draws = [policy.delay_s(failed, rng=random.Random(seed)) for seed in range(200)]
        assert all(0.0 <= d <= cap for d in draws)
        assert len(set(draws)) > 100  # actually jittered, not a constant
        assert max(draws) > cap * 0.9  # full jitter spans the whole window...
        assert min(draws) < cap * 0.1  # ...from near zero
    a = policy.delay_s(3, rng=random.Random(42))
    b = policy.delay_s(3, rng=random.Random(42))
    assert a == b


def test_retry_after_raises_the_delay_but_never_lowers_it() -> None:
    policy = RetryPolicy(backoff_s=2, max_backoff_s=10, jitter=False)
    assert policy.delay_s(1, TransientError(retry_after_s=45)) == 45.0
    assert policy.delay_s(3, TransientError(retry_after_s=1)) == 8.0
    assert policy.delay_s(1, WithResponse(429, {"Retry-After": "20"})) == 20.0


@pytest.mark.parametrize("failed", [0, -1, True, 1.0])
def test_failed_must_be_a_positive_whole_number(failed: Any) -> None:
    with pytest.raises(ValueError, match="failed"):
        RetryPolicy().delay_s(failed)
    with pytest.raises(ValueError, match="failed"):
        RetryPolicy().decide(TransientError(), failed)


policies = st.builds(
    lambda attempts, backoff, extra, multiplier, jitter: RetryPolicy(
        attempts=attempts,
        backoff_s=backoff,
        max_backoff_s=backoff + extra,
        multiplier=multiplier,
        jitter=jitter,
    ),
    st.integers(1, 20),
    st.floats(0, 1e6, allow_nan=False),
    st.floats(0, 1e6, allow_nan=False),
    st.floats(1, 1e3, allow_nan=False),
    st.booleans(),
)


@given(
    policy=policies,
    failed=st.integers(1, 10_000),
    retry_after=st.none() | st.floats(0, 1e7, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_delay_and_decide_properties(
    policy: RetryPolicy, failed: int, retry_after: float | None, seed: int
) -> None:
    exc = TransientError("flaky", retry_after_s=retry_after)
    delay = policy.delay_s(failed, exc, rng=random.Random(seed))
    assert 0.0 <= delay <= max(policy.max_backoff_s, retry_after or 0.0)
    if retry_after is not None:
        assert delay >= retry_after
    kind, next_delay = policy.decide(exc, failed, rng=random.Random(seed))
    assert kind == "transient"
    if failed >= policy.attempts:
        assert next_delay is None
    else:
        assert next_delay == delay  # same seed, same draw


# --- decide ----------------------------------------------------------------------------------


def test_decide_retries_transient_until_attempts_are_spent() -> None:
    policy = RetryPolicy(attempts=3, backoff_s=1, jitter=False)
    exc = WithStatusCode(503)
    assert policy.decide(exc, 1) == ("transient", 1.0)
    assert policy.decide(exc, 2) == ("transient", 2.0)
    assert policy.decide(exc, 3) == ("transient", None)
    assert NO_RETRY.decide(exc, 1) == ("transient", None)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (ValueError(), "permanent"),
        (WithStatusCode(403), "needs_human"),
        (PermanentError(), "permanent"),
    ],
)
def test_decide_never_retries_what_is_not_transient(exc: BaseException, kind: str) -> None:
    assert RetryPolicy(attempts=10).decide(exc, 1) == (kind, None)


def test_decide_respects_the_deadline() -> None:
    policy = RetryPolicy(attempts=10, backoff_s=4, jitter=False, deadline_s=10)
    exc = TimeoutError()
    assert policy.decide(exc, 1, elapsed_s=0) == ("transient", 4.0)
    assert policy.decide(exc, 1, elapsed_s=6) == ("transient", 4.0)  # starts at exactly 10 s
    assert policy.decide(exc, 1, elapsed_s=6.01) == ("transient", None)
    assert policy.decide(exc, 2, elapsed_s=3) == ("transient", None)  # 3 + 8 > 10
    assert policy.decide(exc, 1, elapsed_s=11) == ("transient", None)
    # a Retry-After that reaches past the deadline ends the retries too
    assert policy.decide(TransientError(retry_after_s=60), 1) == ("transient", None)


# --- configuration ---------------------------------------------------------------------------


def _config_error(fn: Any, *args: Any, **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    return info.value


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"attempts": 0}, "attempts"),
        ({"attempts": 2.0}, "attempts"),
        ({"attempts": True}, "attempts"),
        ({"attempts": "3"}, "attempts"),
        ({"backoff_s": -1}, "backoff_s"),
        ({"backoff_s": "1s"}, "backoff_s"),
        ({"backoff_s": math.nan}, "backoff_s"),
        ({"backoff_s": 5, "max_backoff_s": 1}, "max_backoff_s"),
        ({"max_backoff_s": math.inf}, "max_backoff_s"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"multiplier": False}, "multiplier"),
        ({"jitter": "yes"}, "jitter"),
        ({"jitter": 1}, "jitter"),
        ({"deadline_s": -3}, "deadline_s"),
        ({"deadline_s": "1h"}, "deadline_s"),
        ({"attemps": 3}, "attemps"),
        ({"classifiers": ["mod:fn"]}, "classifiers"),
    ],
)
def test_from_dict_names_the_field(table: dict[str, Any], field: str) -> None:
    err = _config_error(RetryPolicy.from_dict, table, where="actor.retry")
    assert err.field == f"actor.retry.{field}"
    assert f"actor.retry.{field}" in str(err)


def test_from_dict_unknown_key_lists_the_expected_ones() -> None:
    err = _config_error(RetryPolicy.from_dict, {"max_attempts": 3})
    assert err.field == "retry.max_attempts"
    assert "attempts" in str(err)
    assert "backoff_s" in str(err)


def test_from_dict_refuses_a_non_table() -> None:
    err = _config_error(RetryPolicy.from_dict, [("attempts", 3)])
    assert err.field == "retry"


def test_constructor_validates_too() -> None:
    assert _config_error(RetryPolicy, attempts=0).field == "retry.attempts"
    assert _config_error(RetryPolicy, classifiers=("not callable",)).field == "retry.classifiers"


def test_from_dict_defaults_and_round_trip() -> None:
    assert RetryPolicy.from_dict(None) == RetryPolicy()
    assert RetryPolicy.from_dict({}) == RetryPolicy()
    policy = RetryPolicy.from_dict(
        {"attempts": 5, "backoff_s": 1, "max_backoff_s": 60, "jitter": False, "deadline_s": 300}
    )
    assert policy.attempts == 5
    assert policy.backoff_s == 1.0
    assert isinstance(policy.backoff_s, float)  # TOML integers become floats
    assert policy.deadline_s == 300.0
    assert policy.jitter is False
    assert RetryPolicy.from_dict(policy.to_dict()) == policy
    assert "classifiers" not in policy.to_dict()
    assert set(policy.to_dict()) == {
        "attempts",
        "backoff_s",
        "max_backoff_s",
        "multiplier",
        "jitter",
        "deadline_s",
    }


def test_no_retry_is_one_attempt() -> None:
    assert NO_RETRY.attempts == 1
    assert NO_RETRY.decide(CallTimeout(1.0), 1) == ("transient", None)
