"""A chat completion as the adapters read it: ``ModelReply`` (one call as the adapter saw
it), the response's ``usage`` as untrusted token counts, the reply's text, and a streamed reply
assembled into the body of a plain completion."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from .._errors import ConfigError
from .._usage import Usage
from ._prices import Priced
from ._schema import MalformedReplyError


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
model): a larger one is the server's bug, counted as no usage (``usage_of``)."""


@dataclass(frozen=True, slots=True)
class _Counts:
    """A response's ``usage`` as read: the counts, and what was wrong with it (a warning)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    tokens: int = 0
    problem: str | None = None


def token_count(value: Any) -> int | None:
    """A server's token count as a whole number in [0, ``_MAX_CALL_TOKENS``] (a whole number
    in ASCII digits, ``"1000"``, read as one: the SDK keeps it a string, and counting it 0
    would let the call's spend disappear); ``None`` for anything else (another string, NaN,
    2**63: the server's usage is not trusted with the store)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 13:
        value = int(value)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= _MAX_CALL_TOKENS  # NaN too
    ):
        return None
    return int(value)


def _count(usage: Mapping[str, Any], name: str, bad: list[str]) -> int:
    """``usage[name]`` as a token count (``token_count``); 0, noted in ``bad``, when present
    but not one."""
    value = usage.get(name)
    if value is None:
        return 0
    count = token_count(value)
    if count is None:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        bad.append(f"{name}={shown}")
        return 0
    return count


def usage_of(body: Mapping[str, Any]) -> _Counts:
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


def text_of(message: Mapping[str, Any]) -> tuple[str | None, bool]:
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


def check_usable(
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


def _events_body(text: str) -> dict[str, Any] | None:
    """A reply sent as server-sent events to a request that did not ask for a stream (a server
    or proxy that always streams), assembled into the body of a plain completion; ``None``
    when ``text`` is not such events. Read as a body that is not a completion, it was sampled
    again until the retries were spent, each answer the server billed charged nothing."""
    acc = Stream(time.perf_counter())
    seen = False
    for line in text.splitlines():
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except (ValueError, RecursionError):
            return None
        acc.add(chunk)
        seen = True
    return acc.body() if seen else None


def body_of(completion: Any) -> Mapping[str, Any]:
    # warnings=False: a field of the wrong type (usage 1e300 where an int is declared) is read
    # by ``usage_of``; pydantic's serializer warning would be an error under ``-W error``
    body = (
        completion.model_dump(warnings=False) if hasattr(completion, "model_dump") else completion
    )
    if isinstance(body, str):  # the SDK's reading of a body that is not JSON
        body = _events_body(body) or body
    if not isinstance(body, Mapping):
        raise MalformedReplyError(
            f"the server's response is not a chat completion: {type(body).__name__}"
        )
    return cast(Mapping[str, Any], body)


class Stream:
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
            delta = choice.get("delta")
            delta = delta if isinstance(delta, Mapping) else {}  # the server's shapes: untrusted
            pieces = [delta.get("content"), delta.get("refusal")]
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
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
