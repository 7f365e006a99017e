"""Actors and reviewers backed by an OpenAI-compatible chat-completions endpoint.

Any server that speaks ``POST /v1/chat/completions`` works: OpenAI, vLLM, Ollama, llama.cpp's
server, LM Studio and the like; pass its ``base_url``. The ``openai`` SDK is imported on first
use (``pip install 'loopwright[openai]'``).

**Retries are the engine's.** The client is created with ``max_retries=0`` and every failure is
raised for the engine to classify and retry under the loop's ``RetryPolicy`` (attempts are
persisted, so the bound holds across restarts): timeouts, connection errors, 408/425/429
(honouring ``Retry-After``, capped at ``max_retry_after_s``, default 120 s, and at the run's
time left) and 5xx are transient; 401/403 need a person; other 4xx are permanent. A reply that
is not JSON or does not fit the schema, and a 2xx whose body is empty or not JSON, raise
``MalformedReplyError``, a ``TransientError``: the engine's retry is a repair turn (the bad
reply and its error shown back to the model, ``REPAIR_PROMPT``).

**Many runs at once.** ``AsyncChatActor``/``AsyncChatReviewer`` use ``openai.AsyncOpenAI`` (one
client per event loop) and are awaited by the engine. ``max_concurrency`` and
``tokens_per_minute`` hold per ``(base_url, model)`` for every run in the process, sync or async
(``_limits``). ``stream=True`` streams the reply; ``last_reply`` keeps its text and the first
token's latency.

**Secrets.** The API key is registered with ``loopwright._redact``; error messages and bodies
(a 401 can echo the key), reviewer evidence and the HTTP client's log records are masked, and
``user:password@`` in ``base_url`` is sent as a Basic ``Authorization`` header, never in the
request URL. Model identities (the self-review rule) compare case-insensitively and without a
gateway's provider prefix (``openai/gpt-4o`` is ``gpt-4o``).

**Cost** comes from the response's ``usage`` times a price (``_prices``): the user's
``PriceOverride``, else ``genai-prices``, else 0 with one logged warning. The tokens and cost of
a malformed reply ride on its exception (``usage``): inside a run the engine charges them,
journaled with the failed attempt; outside one they are carried over into the same
``bill_to``'s next successful call. Either way a retry never makes spend disappear.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import ipaddress
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .._calls import call_deadline
from .._errors import ConfigError
from .._modelcalls import ERROR_CHARS, clip_masked, engine_charges_failures, record_model_call
from .._proposal import Context, Edit, Proposal, Verdict
from .._question import Question
from .._redact import redact, redact_text, register_secret
from .._retry import PermanentError, retry_after_s, status_code
from .._state import Finding, TaskState
from .._usage import Usage
from .._userinfo import without_userinfo
from ._limits import Gate, Limits, _tighter, gate_for
from ._prices import Priced, PriceOverride, price_call
from ._prompt import (
    CONTEXT_FIELDS,
    REVIEW_FIELDS,
    apply_template,
    check_template,
    context_sections,
    review_sections,
)
from ._schema import PROPOSAL_SCHEMA, REVIEW_SCHEMA, MalformedReplyError, parse_reply

if TYPE_CHECKING:
    import openai

__all__ = [
    "ACTOR_SYSTEM_PROMPT",
    "DEFAULT_BASE_URL",
    "REPAIR_PROMPT",
    "REVIEWER_SYSTEM_PROMPT",
    "AsyncChatActor",
    "AsyncChatReviewer",
    "ChatActor",
    "ChatReviewer",
    "ModelReply",
    "ResponseFormat",
    "ReviewRefusedError",
    "normalise_base_url",
]

_log = logging.getLogger("loopwright.adapters")

_NO_SDK = "the OpenAI-compatible adapters need the openai SDK: pip install 'loopwright[openai]'"

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Where the ``openai`` SDK sends requests when neither ``base_url`` nor ``OPENAI_BASE_URL``
says otherwise."""

ResponseFormat = Literal["json_schema", "tool", "json_object", "text"]
_FORMATS: tuple[str, ...] = ("json_schema", "tool", "json_object", "text")
# When a server answers 400 to a structured-output request it does not support, the adapter
# steps down once per call and remembers the step for the next calls.
_FALLBACK: dict[str, str] = {
    "json_schema": "json_object",
    "tool": "json_object",
    "json_object": "text",
}
_FORMAT_WORDS: dict[str, tuple[str, ...]] = {
    "json_schema": ("response_format", "json_schema", "structured output"),
    "tool": ("tool", "function"),
    "json_object": ("response_format", "json_object", "json mode"),
}

ACTOR_SYSTEM_PROMPT = """\
You are the actor in a governed repair loop. Each turn you see a goal, the current artifacts \
(each made of named parts), the findings of independent checks on the last attempt (with \
their evidence), notes from people, remembered feedback, and the budget left.

Propose the smallest set of edits to named parts that resolves the findings and moves the \
artifacts toward the goal. Each edit gives a part's complete new value. Do not touch parts \
marked accepted (read-only). Do not edit parts that have no finding unless the goal requires \
it. Explain what you changed and why in "note".

If the task is ambiguous and a person could settle it, set "question" (with "choices" when \
the options are known) instead of guessing. If a person must act (contradictory \
instructions, missing permission, evidence that the task itself is wrong), set "escalate" to \
the reason. Otherwise leave both null."""

REVIEWER_SYSTEM_PROMPT = """\
You are an independent reviewer. You did not write the candidate you are shown, and you must \
judge it only against the rubric and the goal, not against anyone's explanation of it.

Give a score from 0 (unusable) to 1 (fully meets the rubric), "passed" true only if the \
candidate is acceptable as it stands, a one-sentence "summary", and one finding per problem. \
Locate each finding: the "artifact" and "part" it concerns (exactly as named in the candidate; \
null for a problem of the whole artifact or run), a short "dimension" (what kind of problem), \
a "message" that says what is wrong and what would fix it, and "severity": "error" for a \
problem that must be fixed, "warning" for a suggestion."""

REPAIR_PROMPT = """\
Your last reply could not be used: {error}
Reply again with one JSON object that fits the schema, and nothing else."""
"""The user turn that follows a malformed reply (shown back as the assistant's turn) when the
engine retries the same call: the model sees what was wrong instead of the same question."""

_NAME_CHARS = 200  # a reviewer's dimension or unknown location, as kept
MAX_REVIEW_FINDINGS = 100
"""The most findings of one review kept (each in the state, the events and the actor's next
prompt); the rest are counted in one finding."""
_REPAIR_CLIP = 2000  # characters of the bad reply shown back (MalformedReplyError.raw's length)

_FORMAT_TAIL = """

Reply with one JSON object and nothing else (no prose, no code fence), matching this JSON \
schema:
{schema}"""


def _loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def endpoint_of(base_url: str | None) -> str:
    """The endpoint as given (``base_url``, else ``OPENAI_BASE_URL``, else OpenAI's), refused
    in one line unless it is an http(s) URL with a host: the SDK would take ``localhost:8000``
    and fail every request as a retried "Connection error"."""
    raw = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip()
    field = "base_url" if base_url else "OPENAI_BASE_URL"
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises for a port out of range or not a number
    except ValueError as exc:  # "http://[::1:8000/v1", "http://host:99999/v1"
        # public_url cannot parse it either: the redaction net masks a password in it
        raise ConfigError(f"{redact_text(raw)!r} is not a valid URL: {exc}", field=field) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"{public_url(raw)!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/v1)",
            field=field,
        )
    return raw


def no_api_key() -> ConfigError:
    """The error for OpenAI's own endpoint without a key. Its text never puts a word right
    after "api_key:" or "api_key=": the redaction net every shown error goes through would
    mask that word as the key's value ("api_key: *** API key for OpenAI ...")."""
    err = ConfigError(
        "OpenAI's endpoint needs an API key (api_key): set OPENAI_API_KEY, pass the api_key "
        "argument, or pass base_url for a local server"
    )
    err.field = "api_key"
    return err


def normalise_base_url(url: str | None) -> str:
    """The endpoint a client talks to, in one canonical spelling: ``None`` is
    ``OPENAI_BASE_URL`` or OpenAI's default; the scheme and host are lower-cased, a default port
    and a trailing slash dropped, and every loopback address (``127.0.0.1``, ``::1``,
    ``0.0.0.0``) spelled ``localhost`` — so two spellings of one server compare equal."""
    raw = (url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).strip()
    parts = urlsplit(raw if "://" in raw else f"http://{raw}")
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if _loopback(host):
        host = "localhost"
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    port = parts.port
    if port is not None and (scheme, port) not in (("http", 80), ("https", 443)):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), parts.query, ""))


_SECRET_QUERY = ("key", "token", "secret", "password", "sig", "auth")


def public_url(url: str) -> str:
    """``url`` as it may be shown in a message or a log: without ``user:password@`` and with
    the values of query parameters that look like credentials (``api-key=…``) masked."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    netloc = parts.netloc.rpartition("@")[2]
    query = "&".join(
        f"{k}=***" if any(w in k.lower() for w in _SECRET_QUERY) else (f"{k}={v}" if sep else k)
        for k, sep, v in (item.partition("=") for item in parts.query.split("&") if item)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def sdk_endpoint(endpoint: str) -> dict[str, Any]:
    """The SDK client's ``base_url``, ``default_headers`` and ``default_query`` for
    ``endpoint``: its ``user:password@`` as a Basic ``Authorization`` header, and its query
    (``?api-version=…&api-key=…``) sent with every request. The SDK joined a path to a
    ``base_url`` that held a query after it (``/v1?api-key=K`` asked ``/v1/?api-key=Kchat/
    completions``: a 404 on every call, which echoed the key). Credential-like query values
    are registered as secrets, so that an error echoing one alone is masked too."""
    url, headers = without_userinfo(endpoint)
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    for k, v in query.items():
        if v and any(w in k.lower() for w in _SECRET_QUERY):
            register_secret(v)
    return {
        "base_url": urlunsplit(parts._replace(query="", fragment="")),
        "default_headers": headers or None,
        "default_query": query or None,
    }


def _name_the_call(exc: BaseException, model: str, endpoint: str) -> None:
    """Prefix ``exc``'s message with the model and endpoint it was about, in place: the SDK's
    own ("Connection error.", "Error code: 404 …") names neither, and the exception's type,
    status and headers must stay as they are for the engine's classification (Retry-After)."""
    prefix = f"model {model!r} at {public_url(endpoint)}: "
    message = str(exc)
    if message.startswith(prefix):
        return
    with contextlib.suppress(Exception):  # an exception type with read-only args stays as is
        exc.args = (prefix + message, *exc.args[1:])
        if isinstance(getattr(exc, "message", None), str):
            exc.message = prefix + message  # type: ignore[attr-defined]


MAX_REPLY_BYTES = 32 * 2**20
"""The largest response body a chat adapter reads (a reply of 128k tokens is a few MB, escaped
as JSON); a larger one fails as ``ReplyTooLarge``, permanent, instead of filling memory."""

DEFAULT_MAX_RETRY_AFTER_S = 120.0
"""The longest ``Retry-After`` the adapters honour (a server asking for an hour gets this)."""

# Routing prefixes of gateways and SDKs (LiteLLM, OpenRouter): ``openai/gpt-4o`` is ``gpt-4o``.
_PROVIDER_PREFIXES = frozenset(
    {
        "openai",
        "azure",
        "azure_ai",
        "ollama",
        "ollama_chat",
        "anthropic",
        "groq",
        "together",
        "together_ai",
        "openrouter",
        "vllm",
        "hosted_vllm",
        "lm_studio",
        "mistral",
        "deepseek",
        "fireworks_ai",
        "google",
        "gemini",
        "vertex_ai",
        "bedrock",
        "huggingface",
        "cohere",
        "xai",
        "perplexity",
    }
)


def _normalise_model(model: str) -> str:
    # Model names are case-insensitive on every server that matters for the self-review rule
    # (Ollama's "Qwen2.5:7B" is "qwen2.5:7b"), so identities compare lower-cased.
    model = model.strip().lower()
    head, sep, rest = model.partition("/")
    while sep and rest and head in _PROVIDER_PREFIXES:
        model = rest
        head, sep, rest = model.partition("/")
    # Ollama serves "llama3" and "llama3:latest" as the same model.
    return model.removesuffix(":latest")


def _clipped(value: Any, depth: int = 0) -> Any:
    """``value`` with every string longer than ``ERROR_CHARS`` cut to a masked head
    (``clip_masked``), so that masking the rest scans a bounded amount: a server's 10 MB error
    message took seconds per regex pass and was stored whole in every copy of the error."""
    if isinstance(value, str):
        return clip_masked(value) if len(value) > ERROR_CHARS else value
    if depth > 20:
        return value
    if isinstance(value, dict):
        return {k: _clipped(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_clipped(v, depth + 1) for v in value)
    return value


def _redact_exc(exc: BaseException) -> None:
    """Mask secrets in ``exc``'s message and body, in place (a 401 body can echo the API key),
    their long texts cut (``_clipped``); its type, status and headers stay as they are for the
    engine's classification."""
    with contextlib.suppress(Exception):  # an exception type with read-only args stays as is
        args = redact(_clipped(list(exc.args)))
        if args != list(exc.args):
            exc.args = tuple(args)
        for attr in ("message", "body"):
            value = getattr(exc, attr, None)
            if isinstance(value, str | dict | list):
                masked = redact(_clipped(value))
                if masked != value:
                    setattr(exc, attr, masked)


class _RedactingFilter(logging.Filter):
    """Masks secrets in the records of the HTTP client's and the SDK's loggers (request URLs
    with ``?api-key=``, echoed error bodies)."""

    def filter(self, record: logging.LogRecord) -> bool:
        with contextlib.suppress(Exception):
            text = record.getMessage()
            masked = redact_text(text)
            if masked != text:
                record.msg, record.args = masked, ()
        return True


_HTTP_LOGGERS = ("httpx", "httpx2", "httpcore", "openai")


def _mask_http_logs() -> None:
    for name in _HTTP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in logger.filters):
            logger.addFilter(_RedactingFilter())


def _body_not_json(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK failing to parse a 2xx body as JSON: not JSON at all, bytes
    that are not UTF-8, nested past Python's stack, or an integer too long to convert (Python
    refuses more than 4,300 digits). Each a server's bad answer (transient), not a bug."""
    return isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | RecursionError) or (
        type(exc) is ValueError and "integer string conversion" in str(exc)
    )


def _cap_retry_after(exc: BaseException, cap_s: float) -> None:
    """Lower the wait ``exc`` asks for to ``cap_s``: ``retry_after_s`` reads ``exc.retry_after``
    before the headers, so the engine's backoff sees the capped value."""
    asked = retry_after_s(exc)
    if asked is not None and asked > cap_s:
        with contextlib.suppress(Exception):
            exc.retry_after = cap_s  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ModelReply:
    """One model call as the adapter saw it (``last_reply`` keeps the most recent one).

    Attributes:
        data: the reply's JSON object, validated; ``None`` when the model refused.
        refusal: the model's refusal (or the provider's content filter), if any.
        model: the model name the server reported (or the one asked for).
        response_format: the structured-output mode actually used.
        input_tokens: prompt tokens (cached ones included).
        output_tokens: completion tokens.
        cached_tokens: prompt tokens served from the provider's cache.
        usage: tokens and cost charged for this call (carried-over spend included).
        priced: where the price came from.
        finish_reason: why the model stopped.
        seconds: wall-clock time of the HTTP call(s).
        text: the reply's text as received (credentials masked); for a stream that broke off,
            what had arrived.
        streamed: whether the reply was streamed.
        first_token_s: seconds from sending the request to the first token of a streamed
            reply (``None`` when not streamed or nothing arrived).
        repair: whether the request was a repair turn (the last malformed reply and its error
            shown back to the model).
    """

    data: dict[str, Any] | None
    refusal: str | None
    model: str
    response_format: str
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    usage: Usage
    priced: Priced
    finish_reason: str | None
    seconds: float
    text: str | None = None
    streamed: bool = False
    first_token_s: float | None = None
    repair: bool = False


_MAX_CALL_TOKENS = 2**40
"""The largest token count one call's ``usage`` may report (about 1.1 trillion, far beyond any
model): a larger one is the server's bug, counted as no usage (``_usage_of``)."""


@dataclass(frozen=True, slots=True)
class _Counts:
    """A response's ``usage`` as read: the counts, and what was wrong with it (a warning)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    tokens: int = 0
    problem: str | None = None


def _count(usage: Mapping[str, Any], name: str, bad: list[str]) -> int:
    """``usage[name]`` as a token count; 0, noted in ``bad``, when present but not a finite
    number in [0, ``_MAX_CALL_TOKENS``] (a string, NaN, 2**63: the server's usage is not
    trusted with the store)."""
    value = usage.get(name)
    if value is None:
        return 0
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= _MAX_CALL_TOKENS  # NaN too
    ):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        bad.append(f"{name}={shown}")
        return 0
    return int(value)


def _usage_of(body: Mapping[str, Any]) -> _Counts:
    """The token counts of a response's ``usage``. Unusable numbers count 0 and are named in
    ``problem``: a server's usage is untrusted, and no value of it may fail the call (an
    AttributeError) or the run's commit (a count past SQLite's INTEGER)."""
    raw = body.get("usage")
    if raw is None or (isinstance(raw, Mapping) and not raw):
        return _Counts(problem="returned no usage")
    if not isinstance(raw, Mapping):
        return _Counts(problem=f"returned usage that is not an object ({type(raw).__name__})")
    if all(raw.get(k) is None for k in _USAGE_KEYS):
        return _Counts(problem="returned no usage")
    bad: list[str] = []
    inp = _count(raw, "prompt_tokens", bad)
    out = _count(raw, "completion_tokens", bad)
    details = raw.get("prompt_tokens_details")
    cached = 0
    if isinstance(details, Mapping):
        cached = min(_count(details, "cached_tokens", bad), inp)
    elif details is not None:
        bad.append(f"prompt_tokens_details={type(details).__name__}")
    total = _count(raw, "total_tokens", bad)
    if bad:
        return _Counts(inp, out, cached, max(inp + out, total),
                       f"returned unusable usage ({', '.join(bad)}), counted as 0")  # fmt: skip
    if total and not (inp or out):
        # tokens counted (max_tokens, limits), but nothing to price them by
        return _Counts(0, 0, 0, total, "returned only total_tokens, which cannot be priced")
    return _Counts(inp, out, cached, max(inp + out, total))


_USAGE_KEYS = ("prompt_tokens", "completion_tokens", "total_tokens")


def _text_of(message: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The reply's text and whether it came from a tool call: the first function call's
    arguments when there is one, else the content (text parts joined)."""
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():  # the server's shapes are untrusted
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
            return fn["arguments"], True
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(
            str(p.get("text", "")) for p in content if isinstance(p, Mapping)
        )  # some servers send content parts
    return (content if isinstance(content, str) else None), False


_AsyncClients = weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, "tuple[openai.AsyncOpenAI, AsyncIterator[None]]"
]


def _async_clients() -> _AsyncClients:
    return weakref.WeakKeyDictionary()


async def _closer(client: openai.AsyncOpenAI) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await client.close()


class _ChatModel:
    """What actors and reviewers share: endpoint, client, structured output, usage, price."""

    _schema: dict[str, Any]
    _schema_name: str
    _role: str

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        system_prompt: str,
        temperature: float | None,
        timeout_s: float,
        price: PriceOverride | Mapping[str, Any] | Sequence[float] | str | None,
        provider: str | None,
        response_format: ResponseFormat,
        extra_body: Mapping[str, Any] | None,
        name: str,
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        stream: bool = False,
        max_concurrency: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> None:
        if importlib.util.find_spec("openai") is None:  # fail when the spec loads, not mid-run
            raise ImportError(_NO_SDK)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("a model name is required", field="model")
        if response_format not in _FORMATS:
            raise ConfigError(f"must be one of {list(_FORMATS)}", field="response_format")
        if (
            isinstance(timeout_s, bool)
            or not isinstance(timeout_s, int | float)
            or not timeout_s > 0
        ):
            raise ConfigError(f"must be a positive number, got {timeout_s!r}", field="timeout_s")
        if temperature is not None and (
            isinstance(temperature, bool) or not isinstance(temperature, int | float)
        ):
            raise ConfigError(f"must be a number, got {temperature!r}", field="temperature")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ConfigError("must be a table", field="extra_body")
        if (
            isinstance(max_retry_after_s, bool)
            or not isinstance(max_retry_after_s, int | float)
            or not 0 <= max_retry_after_s < float("inf")
        ):
            raise ConfigError(
                f"must be a finite number ≥ 0, got {max_retry_after_s!r}",
                field="max_retry_after_s",
            )
        if not isinstance(stream, bool):
            raise ConfigError("must be true or false", field="stream")
        self.stream = stream
        self.limits = Limits.check(max_concurrency, tokens_per_minute)
        self.max_retry_after_s = float(max_retry_after_s)
        self.model = model.strip()
        # The client gets the URL as given; identity and display use the canonical spelling.
        self._endpoint = endpoint_of(base_url)
        self.base_url = normalise_base_url(self._endpoint)
        self._default_endpoint = self.base_url == normalise_base_url(DEFAULT_BASE_URL)
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self._default_endpoint:
                raise no_api_key()
            key = "not-needed"  # local servers (Ollama, vLLM without --api-key) ignore it
        self._api_key = key
        register_secret(key)  # masked wherever it might be echoed (a 401 body, a log line)
        self.system_prompt = system_prompt
        self.temperature = None if temperature is None else float(temperature)
        self.timeout_s = float(timeout_s)
        self.price = PriceOverride.coerce(price)
        self.provider = provider
        self.response_format: str = response_format
        self.extra_body = dict(extra_body) if extra_body else None
        self.__name__ = name
        self.last_reply: ModelReply | None = None
        self._client: openai.OpenAI | None = None
        self._aclients = _async_clients()
        self._lock = threading.Lock()
        self._unbilled: dict[str, Usage] = {}
        self._repairs: dict[str, tuple[str, str, str]] = {}  # bill_to: (key, reply, error)
        self._warned: set[str] = set()
        self._gate()  # the limits hold for every run in the process from now on

    # --- identity and pickling --------------------------------------------------------------
    def model_identity(self) -> tuple[str, str]:
        """``(endpoint, model)`` in canonical spelling: two adapters with the same identity are
        the same model on the same server (the engine's self-review rule compares these)."""
        return (self.base_url, _normalise_model(self.model))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={public_url(self.base_url)!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None
        state.pop("_lock", None)
        state.pop("_aclients", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("stream", False)  # pickled by an older version
        state.setdefault("limits", Limits())
        state.setdefault("_repairs", {})
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._aclients = _async_clients()
        self._gate()
        register_secret(self._api_key)  # a worker process masks it too

    # --- the call ---------------------------------------------------------------------------
    def _openai(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                try:
                    import openai
                except ImportError as exc:  # pragma: no cover - the extra is in dev
                    raise ImportError(_NO_SDK) from exc
                from ._deadline import http_client

                _mask_http_logs()
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    **sdk_endpoint(self._endpoint),
                    # timeout= bounds each network step (connect, each read) only; the client
                    # bounds the whole request, body included (a trickled reply held it open)
                    timeout=self.timeout_s,
                    http_client=http_client(self.timeout_s, MAX_REPLY_BYTES),
                    max_retries=0,  # the engine retries, under the loop's persisted policy
                )
                # Its pooled connections are closed when this object goes, not left to the
                # garbage collector (an unclosed socket, whichever code is running then).
                weakref.finalize(self, self._client.close)
            return self._client

    async def _async_openai(self) -> openai.AsyncOpenAI:
        """The async client of the running event loop: an ``httpx.AsyncClient`` belongs to the
        loop it first ran on, and ``run_sync`` makes a loop per call. It is closed when its
        loop shuts down (``asyncio.run`` closes the loop's async generators, ``_closer`` one)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._aclients.get(loop)
            if held is not None:
                return held[0]
            try:
                import openai
            except ImportError as exc:  # pragma: no cover - the extra is in dev
                raise ImportError(_NO_SDK) from exc
            from ._deadline import async_http_client

            _mask_http_logs()
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                **sdk_endpoint(self._endpoint),
                timeout=self.timeout_s,  # each network step; the client: the whole request
                http_client=async_http_client(self.timeout_s, MAX_REPLY_BYTES),
                max_retries=0,  # the engine retries, under the loop's persisted policy
            )
            closer = _closer(client)
            self._aclients[loop] = (client, closer)
        await closer.__anext__()  # registers it with the loop, to be closed at its shutdown
        return client

    def _format_kwargs(self, mode: str) -> dict[str, Any]:
        if mode == "json_schema":
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": self._schema_name,
                        "schema": self._schema,
                        "strict": False,  # edit values are free-form JSON
                    },
                }
            }
        if mode == "json_object":
            return {"response_format": {"type": "json_object"}}
        if mode == "tool":
            return {
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": self._schema_name,
                            "description": f"Submit the {self._role}'s reply.",
                            "parameters": self._schema,
                        },
                    }
                ],
                "tool_choice": {"type": "function", "function": {"name": self._schema_name}},
            }
        return {}

    def _system(self) -> str:
        return self.system_prompt + _FORMAT_TAIL.format(
            schema=json.dumps(self._schema, separators=(",", ":"))
        )

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        # a warning can name the endpoint as given (the price table's miss): the log is an
        # output too (invariant 9), so a ``user:password@`` in it is masked
        _log.warning(redact_text(message))

    def _kwargs(self, mode: str) -> dict[str, Any]:
        kwargs = self._format_kwargs(mode)
        deadline = call_deadline()
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                # the engine has given up on this call (a sync one goes on in its thread):
                # a request sent now would be answered and billed with nobody to count it
                raise TimeoutError(  # named by _failed, as the client's errors are
                    "the engine's time for this call ran out before the request was sent"
                )
            if left < self.timeout_s:
                # each network step too (the sync client blocks in its reads): the request is
                # cut, its connection closed, when the engine gives up on the call
                kwargs["timeout"] = left
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        if self.stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}  # usage arrives in the last chunk
        return kwargs

    def _failed(self, exc: Exception, mode: str, budget_s: float | None) -> str:
        """What a failed request means: the structured-output mode to step down to, or
        ``exc`` raised (named, redacted, its ``Retry-After`` capped at ``max_retry_after_s``
        and at ``budget_s``, the run's time left when known)."""
        if type(exc).__name__ == "APIResponseValidationError":
            raise MalformedReplyError(
                f"the server's response is not a chat completion: {clip_masked(str(exc))}"
            ) from exc
        if _body_not_json(exc):
            # A 2xx whose body is empty or not JSON (the SDK parses only 2xx bodies):
            # a proxy or a server hiccup, worth another sample like an HTML body.
            raise MalformedReplyError(
                "the server answered with an empty body or one that is not JSON"
            ) from exc
        lower = mode if mode in _FALLBACK else None
        if lower is None or status_code(exc) != 400 or not self._mentions(exc, mode):
            _name_the_call(exc, self.model, self._endpoint)
            _redact_exc(exc)
            cap = getattr(self, "max_retry_after_s", DEFAULT_MAX_RETRY_AFTER_S)
            _cap_retry_after(exc, cap if budget_s is None else min(cap, budget_s))
            raise exc
        mode = _FALLBACK[lower]
        self.response_format = mode  # remembered for the next calls
        _log.warning(
            "%s at %s refused response_format=%r (%s); using %r",
            self.model,
            public_url(self.base_url),
            lower,
            clip_masked(str(exc), 500),
            mode,
        )
        return mode

    def _broken_stream(self, exc: Exception, acc: _Stream) -> MalformedReplyError:
        """A stream that broke off after it began: transient (sampled again), and what had
        arrived is kept in ``last_reply.text``."""
        partial = redact_text(acc.text() or "")
        self.last_reply = got = ModelReply(
            None, None, acc.model or self.model, self.response_format, 0, 0, 0, Usage(),
            Priced(0.0, "unpriced", "the stream broke off"), None,
            time.perf_counter() - acc.t0, text=partial, streamed=True,
            first_token_s=acc.first_token_s,
        )  # fmt: skip
        err = MalformedReplyError(
            f"the reply stream broke off after {len(partial)} characters: {clip_masked(str(exc))}",
            partial,
        )
        err.reply = got
        return err

    def _request(
        self, messages: list[dict[str, str]], budget_s: float | None = None
    ) -> tuple[Mapping[str, Any], str, float, float | None]:
        """Send the request (sync client), stepping down the structured-output mode when the
        server says it does not support it; returns ``(body, mode used, seconds, first-token
        seconds)``, a streamed reply assembled into the body of a plain completion."""
        client = self._openai()
        mode = self.response_format
        t0 = time.perf_counter()
        while True:
            create: Callable[..., Any] = client.chat.completions.create
            try:
                completion = create(model=self.model, messages=messages, **self._kwargs(mode))
            except Exception as exc:
                mode = self._failed(exc, mode, budget_s)
                continue
            if not self.stream:
                return _body_of(completion), mode, time.perf_counter() - t0, None
            acc = _Stream(t0)
            try:
                for chunk in completion:
                    acc.add(chunk)
            except PermanentError as exc:  # a reply too large: no sample will be smaller
                _name_the_call(exc, self.model, self._endpoint)
                raise
            except Exception as exc:
                raise self._broken_stream(exc, acc) from exc
            finally:
                with contextlib.suppress(Exception):
                    completion.close()
            return acc.body(), mode, time.perf_counter() - t0, acc.first_token_s

    async def _arequest(
        self, messages: list[dict[str, str]], budget_s: float | None = None
    ) -> tuple[Mapping[str, Any], str, float, float | None]:
        """``_request`` with the async client, on the running event loop."""
        client = await self._async_openai()
        mode = self.response_format
        t0 = time.perf_counter()
        while True:
            create: Callable[..., Any] = client.chat.completions.create
            try:
                completion = await create(model=self.model, messages=messages, **self._kwargs(mode))
            except Exception as exc:
                mode = self._failed(exc, mode, budget_s)
                continue
            if not self.stream:
                return _body_of(completion), mode, time.perf_counter() - t0, None
            acc = _Stream(t0)
            try:
                async for chunk in completion:
                    acc.add(chunk)
            except PermanentError as exc:  # (as in _request)
                _name_the_call(exc, self.model, self._endpoint)
                raise
            except Exception as exc:
                raise self._broken_stream(exc, acc) from exc
            finally:
                with contextlib.suppress(Exception):
                    await completion.close()
            return acc.body(), mode, time.perf_counter() - t0, acc.first_token_s

    @staticmethod
    def _mentions(exc: BaseException, mode: str) -> bool:
        text = str(exc).lower()
        with contextlib.suppress(Exception):
            text += " " + json.dumps(getattr(exc, "body", None), default=str).lower()
        return any(word in text for word in _FORMAT_WORDS.get(mode, ()))

    # --- limits and repair ------------------------------------------------------------------
    def _gate(self) -> Gate | None:
        return gate_for(self.base_url, _normalise_model(self.model), self.limits)

    def use_limits(
        self, *, max_concurrency: int | None = None, tokens_per_minute: int | None = None
    ) -> None:
        """Hold this endpoint to limits shared by every run in the process (the spec's
        ``[model.limits]``); limits already set elsewhere for it stay if tighter."""
        extra = Limits.check(max_concurrency, tokens_per_minute)
        self.limits = Limits(
            _tighter(self.limits.max_concurrency, extra.max_concurrency),
            _tighter(self.limits.tokens_per_minute, extra.tokens_per_minute),
        )
        self._gate()

    def _with_repair(
        self, messages: list[dict[str, str]], bill_to: str
    ) -> tuple[list[dict[str, str]], str]:
        """``messages`` as they go out, and their key. When this run's last call with these
        same messages got a malformed reply, that reply and what was wrong with it follow, so
        that the model repairs it instead of being asked the same question blind."""
        key = hashlib.sha256(json.dumps(messages, sort_keys=True, default=str).encode()).hexdigest()
        with self._lock:
            pending = self._repairs.get(bill_to)
        if pending is None or pending[0] != key:
            return messages, key
        _, raw, reason = pending
        return [
            *messages,
            {"role": "assistant", "content": raw},
            {"role": "user", "content": REPAIR_PROMPT.format(error=reason)},
        ], key

    def _complete(
        self,
        messages: list[dict[str, str]],
        bill_to: str,
        budget_s: float | None = None,
        usable: Callable[[dict[str, Any]], object] | None = None,
    ) -> ModelReply:
        """One call (sync): request, usage and price, refusal or validated JSON. A malformed
        reply's spend is kept under ``bill_to`` (the run) and added to that run's next good
        reply, and the run's next call with the same messages is a repair turn."""
        sent, key = self._with_repair(messages, bill_to)
        gate = self._gate()
        if gate is not None:
            gate.pace()
            gate.acquire()
        started = time.time()
        try:
            body, mode, seconds, first = self._request(sent, budget_s)
        except Exception as exc:
            self._report(sent, started, None, exc, sent is not messages)
            raise
        finally:
            if gate is not None:
                gate.release()
        return self._finish(
            body,
            mode,
            seconds,
            first,
            bill_to,
            key,
            gate,
            sent is not messages,
            sent,
            started,
            usable,
        )

    async def _acomplete(
        self,
        messages: list[dict[str, str]],
        bill_to: str,
        budget_s: float | None = None,
        usable: Callable[[dict[str, Any]], object] | None = None,
    ) -> ModelReply:
        """``_complete`` with the async client: waiting for a slot or for tokens never blocks
        the event loop the other runs share."""
        sent, key = self._with_repair(messages, bill_to)
        gate = self._gate()
        if gate is not None:
            await gate.pace_async()
            await gate.acquire_async()
        started = time.time()
        try:
            body, mode, seconds, first = await self._arequest(sent, budget_s)
        except Exception as exc:
            self._report(sent, started, None, exc, sent is not messages)
            raise
        finally:
            if gate is not None:
                gate.release()
        return self._finish(
            body,
            mode,
            seconds,
            first,
            bill_to,
            key,
            gate,
            sent is not messages,
            sent,
            started,
            usable,
        )

    def _finish(
        self,
        body: Mapping[str, Any],
        mode: str,
        seconds: float,
        first_token_s: float | None,
        bill_to: str,
        key: str,
        gate: Gate | None,
        repair: bool,
        sent: list[dict[str, str]] | None = None,
        started_at: float | None = None,
        usable: Callable[[dict[str, Any]], object] | None = None,
    ) -> ModelReply:
        """The reply of a request: usage and price, refusal, or JSON that fits the schema and
        that ``usable`` accepts (it builds the proposal or verdict and raises
        ``MalformedReplyError`` or ``ConfigError`` when the reply cannot make one). A malformed
        reply raises ``MalformedReplyError`` carrying its ``usage``; outside an engine call
        that spend is also carried into the same ``bill_to``'s next good reply (inside one the
        engine charges it, journaled with the failed attempt)."""
        counts = _usage_of(body)
        input_tokens, output_tokens = counts.input_tokens, counts.output_tokens
        cached, tokens = counts.cached_tokens, counts.tokens
        if gate is not None:
            gate.charge(tokens)
        if counts.problem is not None:
            self._warn_once(
                f"usage:{self.model}",
                f"{self.model} at {public_url(self.base_url)} {counts.problem}: its tokens and "
                "cost are not fully accounted",
            )
        priced = price_call(
            self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached,
            base_url=self._endpoint,
            default_endpoint=self._default_endpoint,
            provider=self.provider,
            override=self.price,
        )
        if priced.source == "unpriced" and tokens:
            self._warn_once(
                f"price:{self.model}", f"{self.model}: cost counted as 0: {priced.detail}"
            )
        usage = Usage(priced.cost_usd, tokens, seconds)
        # Any shape may come back (``choices`` an object, ``message`` a string): what is not the
        # shape of a completion counts as missing, a malformed reply, never a crash (permanent)
        choices = body.get("choices")
        choices = choices if isinstance(choices, list) else []
        choice = choices[0] if choices and isinstance(choices[0], Mapping) else {}
        message = choice.get("message")
        message = message if isinstance(message, Mapping) else {}
        finish = choice.get("finish_reason")
        refusal = message.get("refusal") or (
            "the provider's content filter stopped the reply"
            if finish == "content_filter"
            else None
        )
        text, _ = _text_of(message)
        shown = redact_text(text) if text is not None else None
        data: dict[str, Any] | None = None
        if refusal is None:
            try:
                if not choices:
                    raise MalformedReplyError("the response has no choices")
                data = parse_reply(text, self._schema)
                if usable is not None:
                    _usable(usable, data, text)
            except MalformedReplyError as exc:
                if finish == "length":
                    exc = MalformedReplyError(
                        f"the reply was cut off at the token limit; {exc.reason}", exc.raw
                    )
                if not engine_charges_failures():
                    self._carry(bill_to, usage)
                exc.usage = usage
                exc.raw = redact_text(exc.raw)
                _redact_exc(exc)
                if text is not None:
                    with self._lock:
                        self._repairs[bill_to] = (key, exc.raw[:_REPAIR_CLIP], exc.reason)
                self.last_reply = bad = ModelReply(
                    None,
                    None,
                    str(body.get("model") or self.model),
                    mode,
                    input_tokens,
                    output_tokens,
                    cached,
                    usage,
                    priced,
                    finish,
                    seconds,
                    text=shown,
                    streamed=self.stream,
                    first_token_s=first_token_s,
                    repair=repair,
                )
                exc.reply = bad
                if sent is not None and started_at is not None:
                    self._report(sent, started_at, bad, exc, repair)
                raise exc from None
        with self._lock:
            carried = self._unbilled.pop(bill_to, None)
            self._repairs.pop(bill_to, None)
        if carried is not None:
            usage = usage + carried
        reply = ModelReply(
            data,
            str(refusal) if refusal is not None else None,
            str(body.get("model") or self.model),
            mode,
            input_tokens,
            output_tokens,
            cached,
            usage,
            priced,
            finish,
            seconds,
            text=shown,
            streamed=self.stream,
            first_token_s=first_token_s,
            repair=repair,
        )
        self.last_reply = reply
        if sent is not None and started_at is not None:
            self._report(sent, started_at, reply, None, repair)
        return reply

    def _report(
        self,
        sent: list[dict[str, str]],
        started_at: float,
        reply: ModelReply | None,
        error: BaseException | None,
        repair: bool,
    ) -> None:
        """Tell the engine what this call sent and got (``loopwright._modelcalls``): a no-op
        unless an engine's actor or verifier call is collecting. The tokens and cost are this
        request's own (a malformed reply's spend carried into a later call is not counted
        again there)."""
        if reply is None and error is not None:
            reply = getattr(error, "reply", None)  # what had arrived of a broken stream
        record_model_call(
            model=self.model,
            response_model=reply.model if reply is not None else None,
            provider=self.provider or ("openai" if self._default_endpoint else None),
            server=public_url(self.base_url),
            prompt=sent,
            reply=reply.text if reply is not None else None,
            started_at=started_at,
            seconds=reply.seconds if reply is not None else time.time() - started_at,
            first_token_s=reply.first_token_s if reply is not None else None,
            input_tokens=reply.input_tokens if reply is not None else None,
            output_tokens=reply.output_tokens if reply is not None else None,
            cost_usd=reply.priced.cost_usd if reply is not None else None,
            finish_reason=reply.finish_reason if reply is not None else None,
            error=None if error is None else f"{type(error).__name__}: {error}",
            http_status=None if error is None else status_code(error),
            repair=repair,
            streamed=self.stream,
        )

    def _carry(self, bill_to: str, usage: Usage) -> None:
        with self._lock:
            self._unbilled[bill_to] = self._unbilled.get(bill_to, Usage()) + usage


def _usable(
    usable: Callable[[dict[str, Any]], object], data: dict[str, Any], text: str | None
) -> None:
    """``usable(data)``, a reply that fits the schema but makes no proposal or verdict (an
    edit naming ``doc/a``, a question refused) raised as ``MalformedReplyError``: repairable,
    and its spend kept like any malformed reply's."""
    try:
        usable(data)
    except MalformedReplyError:
        raise
    except (ConfigError, ValueError, TypeError) as exc:
        raise MalformedReplyError(f"the reply cannot be used: {exc}", text or "") from None


def _body_of(completion: Any) -> Mapping[str, Any]:
    # warnings=False: a field of the wrong type (usage 1e300 where an int is declared) is read
    # by ``_usage_of``; pydantic's serializer warning would be an error under ``-W error``
    body = (
        completion.model_dump(warnings=False) if hasattr(completion, "model_dump") else completion
    )
    if not isinstance(body, Mapping):
        raise MalformedReplyError(
            f"the server's response is not a chat completion: {type(body).__name__}"
        )
    return cast(Mapping[str, Any], body)


class _Stream:
    """A streamed reply (``chat.completion.chunk`` events) assembled as it arrives: the text
    so far (content, or a tool call's arguments), the first token's latency, and the usage the
    last chunk carries."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.first_token_s: float | None = None
        self.model: str | None = None
        self.content: list[str] = []
        self.arguments: list[str] = []
        self.tool_name: str | None = None
        self.refusal: list[str] = []
        self.finish: str | None = None
        self.usage: Mapping[str, Any] | None = None
        self.chosen = False

    def add(self, chunk: Any) -> None:
        data = chunk.model_dump(warnings=False) if hasattr(chunk, "model_dump") else chunk
        if not isinstance(data, Mapping):
            return
        self.model = data.get("model") or self.model
        if isinstance(data.get("usage"), Mapping):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            if not isinstance(choice, Mapping) or (choice.get("index") or 0) != 0:
                continue
            self.chosen = True
            delta = choice.get("delta") or {}
            pieces = [delta.get("content"), delta.get("refusal")]
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(fn, Mapping):
                    self.tool_name = fn.get("name") or self.tool_name
                    if isinstance(fn.get("arguments"), str):
                        self.arguments.append(fn["arguments"])
                        pieces.append(fn["arguments"])
            if self.first_token_s is None and any(isinstance(p, str) and p for p in pieces):
                self.first_token_s = time.perf_counter() - self.t0
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def text(self) -> str:
        return "".join(self.arguments) if self.arguments else "".join(self.content)

    def body(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.content) if self.content else None,
            "refusal": "".join(self.refusal) or None,
        }
        if self.arguments or self.tool_name:
            message["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": self.tool_name, "arguments": "".join(self.arguments)},
                }
            ]
        choices = [{"index": 0, "message": message, "finish_reason": self.finish}]
        return {
            "model": self.model,
            "choices": choices if self.chosen else [],
            "usage": self.usage or {},
        }


class ChatActor(_ChatModel):
    """An actor (``Context -> Proposal``) backed by a chat model.

    The context is rendered into a user message (goal, task input, current artifacts as JSON,
    accepted parts marked read-only, open findings with their evidence, notes and answers from
    people, remembered feedback, the budget left), and the model replies with one JSON object
    ``{"edits": [{"artifact", "part", "value"}], "note", "escalate", "question"}`` checked
    against ``PROPOSAL_SCHEMA``.

    Args:
        model: the model name the server knows (``gpt-4o-mini``, ``qwen2.5:7b``).
        base_url: the endpoint, e.g. ``http://localhost:11434/v1`` (Ollama) or
            ``http://localhost:8000/v1`` (vLLM); default ``OPENAI_BASE_URL`` or OpenAI.
        api_key: default ``OPENAI_API_KEY``; for a server other than OpenAI's, ``"not-needed"``
            when that is unset.
        system_prompt: the role; the output schema is always appended to it.
        template: a callable ``Context -> str``, or a format string over ``CONTEXT_FIELDS``;
            default: every section under a heading.
        temperature: sampling temperature (``None``: the server's default).
        timeout_s: the most one HTTP request may take, its reply's body included (and each
            network step: connecting, each read); a timeout is a transient failure the engine
            retries (docs/models.md, "What timeout_s bounds").
        price: ``PriceOverride`` (or ``{input_per_mtok, output_per_mtok}``, ``"in,out"``) in
            dollars per million tokens; default: ``genai-prices``, else 0.
        provider: a ``genai-prices`` provider id to price by (``"openai"``, ``"groq"``) when
            ``base_url`` is a proxy or gateway the table does not know.
        response_format: ``json_schema`` (structured outputs), ``tool`` (a forced function
            call), ``json_object`` (JSON mode, schema in the prompt) or ``text`` (schema in the
            prompt only). A server that answers 400 to the mode steps down once per adapter:
            ``json_schema``/``tool`` → ``json_object`` → ``text``. Replies are validated in
            every mode.
        extra_body: extra request fields (``{"max_tokens": 800}``, vLLM's or Ollama's
            ``options``).
        name: the name shown for it.
        max_retry_after_s: the longest ``Retry-After`` honoured (default 120 s; the time
            budget left caps it too).
        stream: stream the reply (``stream=True``); the text as it arrived and the first
            token's latency are kept in ``last_reply``.
        max_concurrency: the most requests in flight at once to this ``base_url`` and model,
            across every run in the process (``None``: no limit).
        tokens_per_minute: the most tokens a minute to this ``base_url`` and model, across
            every run in the process (``None``: no limit).

    A malformed reply is retried by the engine as a *repair turn*: the same run's next call
    with the same context shows the model its bad reply and what was wrong with it
    (``REPAIR_PROMPT``). ``AsyncChatActor`` is the same actor with the async client, for an
    engine that awaits it.
    """

    _schema = PROPOSAL_SCHEMA
    _schema_name = "proposal"
    _role = "actor"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        system_prompt: str = ACTOR_SYSTEM_PROMPT,
        template: Callable[[Context], str] | str | None = None,
        temperature: float | None = 0.0,
        timeout_s: float = 60.0,
        price: PriceOverride | Mapping[str, Any] | Sequence[float] | str | None = None,
        provider: str | None = None,
        response_format: ResponseFormat = "json_schema",
        extra_body: Mapping[str, Any] | None = None,
        name: str = "chat_actor",
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        stream: bool = False,
        max_concurrency: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> None:
        check_template(template, CONTEXT_FIELDS, "template")
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            system_prompt=system_prompt,
            temperature=temperature,
            timeout_s=timeout_s,
            price=price,
            provider=provider,
            response_format=response_format,
            extra_body=extra_body,
            name=name,
            max_retry_after_s=max_retry_after_s,
            stream=stream,
            max_concurrency=max_concurrency,
            tokens_per_minute=tokens_per_minute,
        )
        self.template = template

    def messages(self, ctx: Context) -> list[dict[str, str]]:
        """The chat messages this context becomes (what the model will see)."""
        text = apply_template(self.template, lambda: context_sections(ctx), "context", ctx)
        return [
            {"role": "system", "content": self._system()},
            {"role": "user", "content": text},
        ]

    def __call__(self, ctx: Context) -> Proposal:
        reply = self._complete(
            self.messages(ctx),
            bill_to=ctx.run_id,
            budget_s=ctx.remaining.seconds,
            usable=self.proposal,
        )
        return self._proposal_of(reply)

    async def acall(self, ctx: Context) -> Proposal:
        """``self(ctx)`` with the async client: awaiting a slot, tokens or the reply never
        blocks the event loop."""
        reply = await self._acomplete(
            self.messages(ctx),
            bill_to=ctx.run_id,
            budget_s=ctx.remaining.seconds,
            usable=self.proposal,
        )
        return self._proposal_of(reply)

    def _proposal_of(self, reply: ModelReply) -> Proposal:
        if reply.data is None:
            return Proposal(escalate=f"the model refused: {reply.refusal}", usage=reply.usage)
        return self.proposal(reply.data, reply.usage)

    @staticmethod
    def proposal(data: Mapping[str, Any], usage: Usage | None = None) -> Proposal:
        """A ``Proposal`` from a reply that fits ``PROPOSAL_SCHEMA``."""
        question = None
        q = data.get("question")
        if q:
            try:
                question = Question(
                    text=q["text"],
                    choices=tuple(q.get("choices") or ()),
                    type=q.get("type", "text"),
                )
            except ConfigError as exc:
                raise MalformedReplyError(f"$.question: {exc}", json.dumps(q)) from None
        escalate = data.get("escalate")
        try:
            edits = tuple(Edit(e["artifact"], e["part"], e["value"]) for e in data["edits"])
        except ConfigError as exc:  # "doc/a" as an artifact's name, an empty part: repairable
            raise MalformedReplyError(f"$.edits: {exc}", json.dumps(data["edits"])) from None
        return Proposal(
            edits=edits,
            # a model's note is clipped as a reviewer's summary is: stored with the proposal
            # (its event, the checkpoint), whatever size the model chose to write
            note=clip_masked(str(data.get("note") or "")),
            escalate=escalate.strip() if isinstance(escalate, str) and escalate.strip() else None,
            question=question,
            usage=usage,
        )


class ReviewRefusedError(PermanentError):
    """The reviewer model refused to review (or the provider's filter stopped it): permanent,
    the run escalates. ``usage`` is what the refused call cost; the engine charges it."""

    usage: Usage | None = None


class ChatReviewer(_ChatModel):
    """A verifier (``(state, proposal) -> Verdict``) backed by a chat model with a rubric.

    The reviewer sees the rubric, the goal, the task input (never its held-out part), the
    candidate artifacts and which parts the proposal changed — not the actor's note — and
    replies ``{"score", "passed", "summary", "findings": [{"artifact", "part", "dimension",
    "message", "severity"}]}`` (``REVIEW_SCHEMA``). The verdict passes only when the model says
    it passes, the score is at least ``pass_score`` and no finding is an error. A finding naming
    a part that does not exist is widened to its artifact (or to the whole run), the name the
    model gave kept in its evidence. Tokens and cost are the verdict's ``usage``.

    Register it like any verifier, visible (its findings reach the actor) or held out::

        Check(fn=ChatReviewer("llama3.1:8b", base_url=..., rubric="..."), name="review")

    **Self-review.** A reviewer should be a different model from the generator: the engine
    compares ``model_identity()`` of the actor and each reviewer and refuses a loop where they
    match unless ``allow_self_review=True`` (recorded in the run).

    Args:
        rubric: what good looks like, in words the model can apply.
        pass_score: the lowest score that can pass.
        allow_self_review: allow this reviewer to be the actor's own model and endpoint.
        dimension: the dimension of findings the model leaves unnamed.
        Other arguments as for ``ChatActor`` (``template`` is a callable ``(state, proposal)
        -> str`` or a format string over ``REVIEW_FIELDS``).
    """

    _schema = REVIEW_SCHEMA
    _schema_name = "review"
    _role = "reviewer"

    def __init__(
        self,
        model: str,
        *,
        rubric: str,
        base_url: str | None = None,
        api_key: str | None = None,
        pass_score: float = 0.8,
        allow_self_review: bool = False,
        system_prompt: str = REVIEWER_SYSTEM_PROMPT,
        template: Callable[[TaskState, Proposal], str] | str | None = None,
        temperature: float | None = 0.0,
        timeout_s: float = 60.0,
        price: PriceOverride | Mapping[str, Any] | Sequence[float] | str | None = None,
        provider: str | None = None,
        response_format: ResponseFormat = "json_schema",
        extra_body: Mapping[str, Any] | None = None,
        dimension: str = "review",
        name: str = "review",
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        stream: bool = False,
        max_concurrency: int | None = None,
        tokens_per_minute: int | None = None,
    ) -> None:
        if not isinstance(rubric, str) or not rubric.strip():
            raise ConfigError("a reviewer needs a rubric", field="rubric")
        if (
            isinstance(pass_score, bool)
            or not isinstance(pass_score, int | float)
            or not 0.0 <= pass_score <= 1.0
        ):
            raise ConfigError(f"must be in [0, 1], got {pass_score!r}", field="pass_score")
        if not isinstance(allow_self_review, bool):
            raise ConfigError("must be true or false", field="allow_self_review")
        check_template(template, REVIEW_FIELDS, "template")
        super().__init__(
            model,
            base_url=base_url,
            api_key=api_key,
            system_prompt=system_prompt,
            temperature=temperature,
            timeout_s=timeout_s,
            price=price,
            provider=provider,
            response_format=response_format,
            extra_body=extra_body,
            name=name,
            max_retry_after_s=max_retry_after_s,
            stream=stream,
            max_concurrency=max_concurrency,
            tokens_per_minute=tokens_per_minute,
        )
        self.rubric = rubric.strip()
        self.pass_score = float(pass_score)
        self.allow_self_review = allow_self_review
        self.dimension = dimension
        self.template = template

    def messages(self, state: TaskState, proposal: Proposal) -> list[dict[str, str]]:
        """The chat messages this candidate becomes (what the reviewer model will see)."""
        text = apply_template(
            self.template,
            lambda: review_sections(state, proposal, self.rubric),
            "review",
            state,
            proposal,
        )
        return [
            {"role": "system", "content": self._system()},
            {"role": "user", "content": text},
        ]

    def __call__(self, state: TaskState, proposal: Proposal) -> Verdict:
        bill_to = state.task_key or "-"
        reply = self._complete(
            self.messages(state, proposal), bill_to, usable=lambda data: self.verdict(data, state)
        )
        return self._verdict_of(reply, state)

    async def acall(self, state: TaskState, proposal: Proposal) -> Verdict:
        """``self(state, proposal)`` with the async client."""
        bill_to = state.task_key or "-"
        reply = await self._acomplete(
            self.messages(state, proposal), bill_to, usable=lambda data: self.verdict(data, state)
        )
        return self._verdict_of(reply, state)

    def _verdict_of(self, reply: ModelReply, state: TaskState) -> Verdict:
        if reply.data is None:
            refused = ReviewRefusedError(f"the reviewer model refused to review: {reply.refusal}")
            refused.usage = reply.usage  # charged like the actor's refusal (the engine bills it)
            raise refused
        return self.verdict(reply.data, state, reply.usage, reply)

    def verdict(
        self,
        data: Mapping[str, Any],
        state: TaskState,
        usage: Usage | None = None,
        reply: ModelReply | None = None,
    ) -> Verdict:
        """A located ``Verdict`` from a reply that fits ``REVIEW_SCHEMA``."""
        score = float(data["score"])
        # a reviewer's texts are stored in the state, events and the actor's next context:
        # cut like an error's (a 2 MB finding message was stored whole)
        summary = clip_masked(str(data.get("summary") or "").strip())
        raw = data["findings"]
        # a reviewer listing 20,000 findings stored 6 MB a cycle and sent them all to the actor
        findings = [self._finding(f, state) for f in raw[:MAX_REVIEW_FINDINGS]]
        # every finding counts, kept or not: one is an error unless it says "warning" (_finding)
        errors = any(f.get("severity") != "warning" for f in raw if isinstance(f, Mapping))
        if len(raw) > MAX_REVIEW_FINDINGS:
            dropped = raw[MAX_REVIEW_FINDINGS:]
            findings.append(
                Finding(
                    f"the reviewer listed {len(dropped)} more findings, not kept (the first "
                    f"{MAX_REVIEW_FINDINGS} are)",
                    dimension=self.dimension,
                    severity="error"
                    if any(f.get("severity") != "warning" for f in dropped)
                    else "warning",
                )
            )
        passed = bool(data["passed"]) and score >= self.pass_score and not errors
        if not passed and not errors:
            why = summary or f"score {score:g} (passing needs {self.pass_score:g})"
            findings.append(
                Finding(f"the reviewer did not pass the candidate: {why}", dimension=self.dimension)
            )
        evidence: dict[str, Any] = {
            "model": reply.model if reply else self.model,
            "base_url": public_url(self.base_url),
            "score": score,
            "pass_score": self.pass_score,
            "model_passed": bool(data["passed"]),
        }
        if summary:
            evidence["summary"] = summary
        if reply is not None:
            evidence["price"] = reply.priced.detail
            # The call's token split: what a trace's GenAI attributes report (usage has totals).
            evidence["input_tokens"] = reply.input_tokens
            evidence["output_tokens"] = reply.output_tokens
            if reply.first_token_s is not None:
                evidence["first_token_s"] = round(reply.first_token_s, 4)
            if reply.repair:
                evidence["repair_turn"] = True
        return Verdict(
            passed=passed,
            score=score,
            findings=tuple(findings),
            evidence=redact(evidence),
            usage=usage,
        )

    def _finding(self, raw: Mapping[str, Any], state: TaskState) -> Finding:
        artifact, part = raw.get("artifact") or None, raw.get("part") or None
        evidence: dict[str, Any] = {"reviewer": self.model}
        art = state.artifacts.get(artifact) if artifact else None
        if artifact is not None and art is None:
            evidence["located_as"] = clip_masked(
                f"{artifact}/{part}" if part else artifact, _NAME_CHARS
            )
            artifact, part = None, None
        elif art is not None and part is not None and part not in art.parts:
            evidence["located_as"] = clip_masked(f"{artifact}/{part}", _NAME_CHARS)
            part = None
        elif artifact is None and part is not None:
            owners = [a.name for a in state.artifacts.values() if part in a.parts]
            if len(owners) == 1:  # "part" alone, unambiguous: locate it
                artifact = owners[0]
            else:
                evidence["located_as"] = clip_masked(part, _NAME_CHARS)
                part = None
        return Finding(
            message=clip_masked(str(raw["message"])),
            artifact=artifact,
            part=part,
            dimension=clip_masked(str(raw.get("dimension") or self.dimension), _NAME_CHARS),
            severity="warning" if raw.get("severity") == "warning" else "error",
            evidence=evidence,
        )


class AsyncChatActor(ChatActor):
    """``ChatActor`` with ``openai.AsyncOpenAI``: ``await actor(ctx)``. The engine awaits it on
    its event loop, so many runs in one process share one loop and their waits for the
    endpoint's limits without a thread each. Same arguments as ``ChatActor``."""

    async def __call__(self, ctx: Context) -> Proposal:  # type: ignore[override]
        return await self.acall(ctx)


class AsyncChatReviewer(ChatReviewer):
    """``ChatReviewer`` with ``openai.AsyncOpenAI``: ``await reviewer(state, proposal)``. Same
    arguments as ``ChatReviewer``."""

    async def __call__(  # type: ignore[override]
        self, state: TaskState, proposal: Proposal
    ) -> Verdict:
        return await self.acall(state, proposal)
