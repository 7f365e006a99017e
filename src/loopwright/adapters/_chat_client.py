"""The request half of the chat adapters' shared base: settings checked, the SDK client (sync,
and one async client per event loop), structured-output modes with their step-down on a 400,
and one request sent, streamed or not (``ChatModelBase`` adds repair turns, usage and price)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from .._calls import call_deadline
from .._errors import ConfigError
from .._modelcalls import clip_masked
from .._redact import redact_text, register_secret
from .._redact_logs import masked_logger
from .._retry import PermanentError, status_code
from .._usage import Usage
from ._endpoint import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRY_AFTER_S,
    SdkClients,
    async_clients,
    body_not_json,
    cap_retry_after,
    endpoint_of,
    load_sdk,
    name_the_call,
    no_api_key,
    normalise_base_url,
    public_url,
    redact_exc,
    register_endpoint,
)
from ._limits import Limits
from ._prices import Priced, PriceOverride
from ._reply import ModelReply, Stream, body_of
from ._schema import MalformedReplyError

if TYPE_CHECKING:
    import openai

_log = masked_logger("loopwright.adapters")

_NO_SDK = "the OpenAI-compatible adapters need the openai SDK: pip install 'loopwright[openai]'"

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


_FORMAT_TAIL = """

Reply with one JSON object and nothing else (no prose, no code fence), matching this JSON \
schema:
{schema}"""


MAX_REPLY_BYTES = 32 * 2**20
"""The largest response body a chat adapter reads (a reply of 128k tokens is a few MB, escaped
as JSON); a larger one fails as ``ReplyTooLarge``, permanent, instead of filling memory."""


def _not_streamed(completion: Any) -> Any:
    """The HTTP response of a streamed request that the server answered with one JSON body
    (it ignored ``stream``: some proxies and servers do); ``None`` for a stream of events."""
    response = getattr(completion, "response", None)
    kind = str(response.headers.get("content-type", "")).lower() if response is not None else ""
    return response if "json" in kind and "event-stream" not in kind else None


def _plain_body(raw: bytes) -> Mapping[str, Any]:
    """A whole completion sent in answer to a streamed request. Read as events it was a reply
    with no choices and no usage: sampled again and again, each answer the server billed
    charged nothing."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise MalformedReplyError(
            "the server answered the streamed request with a body marked JSON that is not JSON"
        ) from None
    return body_of(data)


class ChatClient(SdkClients):
    """What actors and reviewers share to send a request: endpoint, client, structured output."""

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
        load_sdk(_NO_SDK)  # now, not in the first (timed) call
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
        register_endpoint(self._endpoint)  # and the URL's credentials, from now on too
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
        self._aclients = async_clients()
        self._lock = threading.Lock()
        self._unbilled: dict[str, Usage] = {}
        self._repairs: dict[str, tuple[str, str, str]] = {}  # bill_to: (key, reply, error)
        self._warned: set[str] = set()
        self._gate()  # the limits hold for every run in the process from now on

    # --- identity and pickling --------------------------------------------------------------
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
        self._aclients = async_clients()
        self._gate()
        register_secret(self._api_key)  # a worker process masks it too
        register_endpoint(self._endpoint)

    # --- the call ---------------------------------------------------------------------------
    _no_sdk = _NO_SDK

    def _reply_cap(self) -> int:
        return MAX_REPLY_BYTES  # read at each call: a test or a user may change the module's cap

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
        if body_not_json(exc):
            # A 2xx whose body is empty or not JSON (the SDK parses only 2xx bodies):
            # a proxy or a server hiccup, worth another sample like an HTML body.
            raise MalformedReplyError(
                "the server answered with an empty body or one that is not JSON"
            ) from exc
        lower = mode if mode in _FALLBACK else None
        if lower is None or status_code(exc) != 400 or not self._mentions(exc, mode):
            name_the_call(exc, self.model, self._endpoint)
            redact_exc(exc)
            cap = getattr(self, "max_retry_after_s", DEFAULT_MAX_RETRY_AFTER_S)
            cap_retry_after(exc, cap if budget_s is None else min(cap, budget_s))
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

    def _broken_stream(self, exc: Exception, acc: Stream) -> MalformedReplyError:
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
                return body_of(completion), mode, time.perf_counter() - t0, None
            acc = Stream(t0)
            plain = _not_streamed(completion)
            try:
                if plain is not None:  # a server that ignored ``stream``: its whole completion
                    return _plain_body(plain.read()), mode, time.perf_counter() - t0, None
                for chunk in completion:
                    acc.add(chunk)
            except MalformedReplyError:
                raise
            except PermanentError as exc:  # a reply too large: no sample will be smaller
                name_the_call(exc, self.model, self._endpoint)
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
                return body_of(completion), mode, time.perf_counter() - t0, None
            acc = Stream(t0)
            plain = _not_streamed(completion)
            try:
                if plain is not None:  # (as in _request)
                    body = _plain_body(await plain.aread())
                    return body, mode, time.perf_counter() - t0, None
                async for chunk in completion:
                    acc.add(chunk)
            except MalformedReplyError:
                raise
            except PermanentError as exc:  # (as in _request)
                name_the_call(exc, self.model, self._endpoint)
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
