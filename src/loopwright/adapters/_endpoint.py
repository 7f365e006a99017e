"""The OpenAI-compatible endpoint as the adapters talk to it: the URL checked, spelled
canonically and shown without credentials, the SDK client's settings and per-loop async
clients, and a failed call's exception named, masked and its ``Retry-After`` capped. Shared by
the chat adapters (``openai_chat``) and the image adapter (``openai_images``)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from .._errors import ConfigError
from .._modelcalls import ERROR_CHARS, clip_masked
from .._redact import redact, redact_text, register_secret
from .._redact_logs import masked_logger
from .._retry import retry_after_s
from .._userinfo import without_userinfo
from ._limits import Gate, Limits, gate_for, tighter

if TYPE_CHECKING:
    import openai

DEFAULT_BASE_URL = "https://api.openai.com/v1"
"""Where the ``openai`` SDK sends requests when neither ``base_url`` nor ``OPENAI_BASE_URL``
says otherwise."""


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


def register_endpoint(endpoint: str) -> None:
    """Register ``endpoint``'s credentials as secrets now (its ``user:password@``, the Basic
    token made of it, credential-like query values): what ``sdk_endpoint`` registers when the
    first client is built, done where the adapter is built (and unpickled in a worker), so
    what a process masks depends on the loop it built, not on which adapters it has called
    yet (an actor's edit is taken in before the first reviewer call of a process: the
    reviewer's URL password was not masked in it, in that process only)."""
    sdk_endpoint(endpoint)


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


def name_the_call(exc: BaseException, model: str, endpoint: str) -> None:
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


DEFAULT_MAX_RETRY_AFTER_S = 120.0
"""The longest ``Retry-After`` the adapters honour (a server asking for an hour gets this)."""

# Routing prefixes of gateways and SDKs (LiteLLM, OpenRouter): ``openai/gpt-4o`` is ``gpt-4o``.
PROVIDER_PREFIXES = frozenset(
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
    while sep and rest and head in PROVIDER_PREFIXES:
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


def redact_exc(exc: BaseException) -> None:
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


# A logger's filter sees the records logged to it, not those its children pass up: httpcore
# logs from one logger a module (``httpcore2.http11`` prints a reply's headers, a server's
# ``Set-Cookie`` among them) and the SDK from ``openai._base_client``, so each is named, and
# any other child of these already made is taken too.
_HTTP_ROOTS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai")
_HTTP_CHILDREN = tuple(f"{r}." for r in _HTTP_ROOTS)
_HTTPCORE_MODULES = ("connection", "http11", "http2", "proxy", "socks")
_HTTP_LOGGERS = (
    *_HTTP_ROOTS,
    *(f"{c}.{m}" for c in ("httpcore", "httpcore2") for m in _HTTPCORE_MODULES),
    *(f"openai.{m}" for m in ("_base_client", "_response", "_legacy_response")),
)


def _mask_http_logs() -> None:
    made = [n for n in list(logging.Logger.manager.loggerDict) if n.startswith(_HTTP_CHILDREN)]
    for name in {*_HTTP_LOGGERS, *made}:
        masked_logger(name)


def body_not_json(exc: BaseException) -> bool:
    """Whether ``exc`` is the SDK failing to parse a 2xx body as JSON: not JSON at all, bytes
    that are not UTF-8, nested past Python's stack, or an integer too long to convert (Python
    refuses more than 4,300 digits). Each a server's bad answer (transient), not a bug."""
    return isinstance(exc, json.JSONDecodeError | UnicodeDecodeError | RecursionError) or (
        type(exc) is ValueError and "integer string conversion" in str(exc)
    )


def cap_retry_after(exc: BaseException, cap_s: float) -> None:
    """Lower the wait ``exc`` asks for to ``cap_s``: ``retry_after_s`` reads ``exc.retry_after``
    before the headers, so the engine's backoff sees the capped value."""
    asked = retry_after_s(exc)
    if asked is not None and asked > cap_s:
        with contextlib.suppress(Exception):
            exc.retry_after = cap_s  # type: ignore[attr-defined]


_AsyncClients = weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, "tuple[openai.AsyncOpenAI, AsyncIterator[None]]"
]


def async_clients() -> _AsyncClients:
    return weakref.WeakKeyDictionary()


async def _closer(client: openai.AsyncOpenAI) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await client.close()


def load_sdk(no_sdk: str) -> None:
    """Import the ``openai`` SDK and the HTTP clients built on it (``_deadline``) when an
    adapter is made (``ImportError(no_sdk)`` without it: the spec fails as it loads, not
    mid-run). Imported at the first call instead, its second or so was that call's, charged to
    the run's ``seconds`` and its ``max_seconds`` budget."""
    try:
        import openai  # noqa: F401
    except ImportError as exc:
        raise ImportError(no_sdk) from exc
    from . import _deadline  # noqa: F401


class SdkClients:
    """What the chat and the image adapters share of their endpoint: its identity, its limits
    and their gate, a warning said once, and the ``openai`` SDK clients made on first use (one
    sync client, one async client per event loop). The adapter sets the attributes named
    below and says its reply cap (``_reply_cap``, read at each call so a module's
    ``MAX_REPLY_BYTES`` can be changed) and its missing-SDK message (``_no_sdk``)."""

    _lock: threading.Lock
    _client: openai.OpenAI | None
    _aclients: _AsyncClients
    _api_key: str
    _endpoint: str
    timeout_s: float
    base_url: str
    model: str
    limits: Limits
    _warned: set[str]
    _no_sdk: str

    def _reply_cap(self) -> int:
        raise NotImplementedError

    def model_identity(self) -> tuple[str, str]:
        """``(endpoint, model)`` in canonical spelling: two adapters with the same identity are
        the same model on the same server (the engine's self-review rule compares these)."""
        return (self.base_url, _normalise_model(self.model))

    def _gate(self) -> Gate | None:
        return gate_for(self.base_url, _normalise_model(self.model), self.limits)

    def use_limits(
        self, *, max_concurrency: int | None = None, tokens_per_minute: int | None = None
    ) -> None:
        """Hold this endpoint to limits shared by every run in the process (the spec's
        ``[model.limits]``); limits already set elsewhere for it stay if tighter."""
        extra = Limits.check(max_concurrency, tokens_per_minute)
        self.limits = Limits(
            tighter(self.limits.max_concurrency, extra.max_concurrency),
            tighter(self.limits.tokens_per_minute, extra.tokens_per_minute),
        )
        self._gate()

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        # a warning can name the endpoint as given (the price table's miss): the log is an
        # output too (invariant 9), so a ``user:password@`` in it is masked
        masked_logger("loopwright.adapters").warning(redact_text(message))

    def _openai(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                try:
                    import openai
                except ImportError as exc:  # pragma: no cover - the extra is in dev
                    raise ImportError(self._no_sdk) from exc
                from ._deadline import http_client

                _mask_http_logs()
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    **sdk_endpoint(self._endpoint),
                    # timeout= bounds each network step (connect, each read) only; the client
                    # bounds the whole request, body included (a trickled reply held it open)
                    timeout=self.timeout_s,
                    http_client=http_client(self.timeout_s, self._reply_cap()),
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
                raise ImportError(self._no_sdk) from exc
            from ._deadline import async_http_client

            _mask_http_logs()
            client = openai.AsyncOpenAI(
                api_key=self._api_key,
                **sdk_endpoint(self._endpoint),
                timeout=self.timeout_s,  # each network step; the client: the whole request
                http_client=async_http_client(self.timeout_s, self._reply_cap()),
                max_retries=0,  # the engine retries, under the loop's persisted policy
            )
            closer = _closer(client)
            self._aclients[loop] = (client, closer)
        await closer.__anext__()  # registers it with the loop, to be closed at its shutdown
        return client
