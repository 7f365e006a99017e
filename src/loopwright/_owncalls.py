"""Model calls made through the user's own client, reported to the engine: the public face of
``_modelcalls``.

An actor or verifier that calls a model itself (the Anthropic SDK, a Pydantic AI agent,
LangChain, plain ``httpx``) reports each request with ``record_model_call`` or times it with
``model_call``; the engine stores it as a ``model_call`` event of the cycle exactly as it does
an adapter's (``_modelcalls``: masked, cut to size, numbered by attempt). Unlike the adapters'
lenient hook, every argument is checked here, before anything is kept, and a bad one is
refused where it is given (``TypeError`` for a wrong type, ``ConfigError`` for a wrong value,
each naming the argument), inside or outside an engine call alike: so what reaches the store
is always storable (a NaN cost or a 2**70 token count never fails a cycle's commit).

A record is a breakdown, never a charge: the budget counts the ``usage`` of the actor's
``Proposal`` (or a verifier's ``Verdict``, or a failed attempt's exception ``.usage``), as it
does for every call. ``ModelCall.usage`` gives what to put there.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from numbers import Real
from types import TracebackType
from typing import Any

from ._errors import ConfigError
from ._modelcalls import SINK
from ._modelcalls import record_model_call as _record
from ._usage import MAX_TOKENS, Usage

__all__ = ["ModelCall", "model_call", "record_model_call"]

NAME_CHARS = 200
"""The most characters of a model, provider or finish-reason name."""


def _model(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"record_model_call: model must be a string, not {type(value).__name__}")
    if not value.strip():
        raise ConfigError("must not be empty", field="model")
    return _short(value, "model")


def _name(value: object, arg: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"record_model_call: {arg} must be a string, not {type(value).__name__}")
    return _short(value, arg)


def _short(value: str, arg: str) -> str:
    if len(value) > NAME_CHARS:
        raise ConfigError(f"is {len(value)} characters, at most {NAME_CHARS}", field=arg)
    return value


def _tokens(value: object, arg: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"record_model_call: {arg} must be a whole number, not {type(value).__name__}"
        )
    if not 0 <= value <= MAX_TOKENS:
        raise ConfigError(f"must be between 0 and {MAX_TOKENS}, not {value}", field=arg)
    return int(value)


def _amount(value: object, arg: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"record_model_call: {arg} must be a number, not {type(value).__name__}")
    f = float(value)
    if not (0 <= f < math.inf):
        raise ConfigError(f"must be a finite number ≥ 0, not {value!r}", field=arg)
    return f


_SHAPES = (
    "a string or a list of messages: mappings ({'role': ..., 'content': ...}), LangChain "
    "messages, Pydantic AI's ModelRequest/ModelResponse, or objects with role and content"
)


def _prompt(value: object) -> Sequence[Mapping[str, Any]] | str:
    if isinstance(value, str):
        return value
    if not isinstance(value, Sequence) or isinstance(value, bytes | bytearray):
        raise TypeError(f"record_model_call: prompt must be {_SHAPES}, not {type(value).__name__}")
    if all(isinstance(m, Mapping) for m in value):
        return value
    out: list[Mapping[str, Any]] = []
    for i, m in enumerate(value):
        read = m if isinstance(m, Mapping) else _message(m)
        if read is None:
            raise TypeError(
                f"record_model_call: prompt[{i}] must be a message: a mapping ({{'role': ..., "
                "'content': ...}), a LangChain message, a Pydantic AI ModelRequest or "
                f"ModelResponse, or an object with role and content; not {type(m).__name__}"
            )
        out.extend([read] if isinstance(read, Mapping) else read)
    return out


# A LangChain message's ``type`` as a role (``AIMessageChunk``: ``ai``).
_LC_ROLES = {"human": "user", "ai": "assistant", "generic": "user"}
# A Pydantic AI part's ``part_kind`` as a role (else its message's: a request's is the user's).
_PART_ROLES = {
    "system-prompt": "system",
    "user-prompt": "user",
    "retry-prompt": "user",
    "tool-return": "tool",
    "builtin-tool-return": "tool",
}


def _message(m: object) -> Mapping[str, Any] | list[Mapping[str, Any]] | None:
    """Another library's message as ``{"role", "content"}`` (one a part, for Pydantic AI's),
    read by its shape: neither library is imported. None: no message's shape."""
    kind, parts = getattr(m, "kind", None), getattr(m, "parts", None)
    if kind in ("request", "response") and isinstance(parts, Sequence):
        # Pydantic AI (``result.all_messages()``): a request's or response's parts in turn
        mine = "user" if kind == "request" else "assistant"
        return [_part(p, mine) for p in parts]
    if not hasattr(m, "content"):
        return None
    role = getattr(m, "role", None)
    if not isinstance(role, str):  # LangChain: ``type`` (``human``, ``ai``, ``system``, ...)
        role = getattr(m, "type", None)
        if not isinstance(role, str):
            return None
        role = role.removesuffix("MessageChunk").lower()
        role = _LC_ROLES.get(role, role)
    return {"role": role, "content": _text_of(getattr(m, "content", None))}


def _part(part: object, role: str) -> Mapping[str, Any]:
    kind = getattr(part, "part_kind", None)
    if kind == "tool-call":  # the call the model asked for: its name and arguments
        args = getattr(part, "args", None)
        said = args if isinstance(args, str) else json.dumps(args, default=str)
        return {"role": role, "content": f"{getattr(part, 'tool_name', '?')}({said})"}
    content = getattr(part, "content", None)
    if kind in ("tool-return", "builtin-tool-return") and not isinstance(content, str):
        content = json.dumps(content, default=str)
    return {"role": _PART_ROLES.get(str(kind), role), "content": _text_of(content)}


def _text_of(content: object) -> str:
    """A message's content as text: a list's text pieces joined, any other piece (an image,
    a file) named by its kind."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        text = content.get("text")
        return text if isinstance(text, str) else f"[{content.get('type', 'content')}]"
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        return "".join(map(_text_of, content))
    return f"[{type(content).__name__}]"


def _name_or_text(value: object, arg: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise TypeError(
        f"record_model_call: {arg} must be a string or None, not {type(value).__name__}"
    )


def _error(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, str):
        return value
    raise TypeError(
        f"record_model_call: error must be a string or an exception, not {type(value).__name__}"
    )


def record_model_call(
    *,
    model: str,
    prompt: Sequence[Any] | str,
    reply: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cost_usd: float | None = None,
    started_at: float | None = None,
    seconds: float = 0.0,
    error: str | BaseException | None = None,
    provider: str | None = None,
    response_model: str | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any] | None:
    """Report one model call your own client made to the engine running this actor or
    verifier: stored as a ``model_call`` event of the cycle (in the trace waterfall, ``loopwright
    trace``, the dashboard, OTel ``chat`` spans), masked and cut to size.

    ``model`` and ``prompt`` (a string, or messages ``[{"role", "content"}]``; a content may be
    a list of text parts; LangChain messages, Pydantic AI's ``ModelRequest``/``ModelResponse``
    and objects with ``role`` and ``content`` are read as such, by their shape) are required; ``reply`` is the reply text (``None``: none came);
    ``started_at`` a Unix time (default: now less ``seconds``); ``error`` what failed (a
    string or the exception). Returns the record kept, or ``None`` outside an engine's actor
    or verifier call, where nothing is kept. Every argument is checked either way: a wrong
    type raises ``TypeError``, a wrong value ``ConfigError``, each naming the argument.

    The record does not charge the budget: report the call's spend in your ``Proposal``'s (or
    ``Verdict``'s) ``usage`` as well, or on the exception's ``.usage`` if the attempt fails.
    """
    fields: dict[str, Any] = {
        "model": _model(model),
        "prompt": _prompt(prompt),
        "reply": _name_or_text(reply, "reply"),
        "input_tokens": _tokens(input_tokens, "input_tokens"),
        "output_tokens": _tokens(output_tokens, "output_tokens"),
        "cost_usd": _amount(cost_usd, "cost_usd"),
        "error": _error(error),
        "provider": _name(provider, "provider"),
        "response_model": _name(response_model, "response_model"),
        "finish_reason": _name(finish_reason, "finish_reason"),
    }
    secs = _amount(seconds, "seconds")
    secs = 0.0 if secs is None else secs
    start = _amount(started_at, "started_at")
    fields["seconds"] = secs
    fields["started_at"] = time.time() - secs if start is None else start
    if SINK.get() is None:
        return None
    return _record(**fields)


class ModelCall:
    """One model call being timed (``model_call``): give it the reply with ``reply``."""

    __slots__ = (
        "_cost",
        "_in",
        "_out",
        "_reply",
        "_t0",
        "finish_reason",
        "model",
        "prompt",
        "provider",
        "record",
        "response_model",
        "seconds",
        "started_at",
    )

    def __init__(
        self,
        model: str,
        prompt: Sequence[Any] | str,
        provider: str | None,
    ) -> None:
        self.model = _model(model)
        self.prompt = _prompt(prompt)
        self.provider = _name(provider, "provider")
        self._reply: str | None = None
        self._in: int | None = None
        self._out: int | None = None
        self._cost: float | None = None
        self.response_model: str | None = None
        self.finish_reason: str | None = None
        self.started_at = 0.0
        self.seconds = 0.0
        self._t0 = 0.0
        self.record: dict[str, Any] | None = None
        """The record kept once the block ended (``None`` outside an engine call)."""

    def reply(
        self,
        text: str | None,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        cost_usd: float | None = None,
        response_model: str | None = None,
        finish_reason: str | None = None,
    ) -> None:
        """What the model answered (checked as ``record_model_call`` checks it)."""
        self._reply = _name_or_text(text, "reply")
        self._in = _tokens(input_tokens, "input_tokens")
        self._out = _tokens(output_tokens, "output_tokens")
        self._cost = _amount(cost_usd, "cost_usd")
        self.response_model = _name(response_model, "response_model")
        self.finish_reason = _name(finish_reason, "finish_reason")

    @property
    def usage(self) -> Usage:
        """This call's spend as a ``Usage`` (cost, input + output tokens, seconds timed), to
        add to the ``Proposal``'s or ``Verdict``'s ``usage``: what the budget counts."""
        return Usage(self._cost or 0.0, (self._in or 0) + (self._out or 0), self.seconds)

    def __enter__(self) -> ModelCall:
        self.started_at = time.time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.seconds = max(0.0, time.perf_counter() - self._t0)
        if SINK.get() is None:
            return
        self.record = _record(
            model=self.model,
            prompt=self.prompt,
            reply=self._reply,
            input_tokens=self._in,
            output_tokens=self._out,
            cost_usd=self._cost,
            started_at=self.started_at,
            seconds=self.seconds,
            error=None if exc is None else f"{type(exc).__name__}: {exc}",
            provider=self.provider,
            response_model=self.response_model,
            finish_reason=self.finish_reason,
        )

    # ``async with`` as well (an async actor's habit, Pydantic AI's and httpx's style): the
    # same timing and report; nothing here awaits.
    async def __aenter__(self) -> ModelCall:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)


def model_call(
    *, model: str, prompt: Sequence[Any] | str, provider: str | None = None
) -> ModelCall:
    """A context manager that times one model call and reports it when the block ends, as
    ``record_model_call`` does: with the reply given to ``call.reply(...)``, and with the
    error if the block raised (the exception goes on). ``call.usage`` is then its spend. It is
    used with ``with`` or, in async code, ``async with``::

        with lw.model_call(model="claude-sonnet-4-5", prompt=messages) as call:
            out = client.messages.create(model=..., messages=messages, max_tokens=1024)
            call.reply(out.content[0].text, input_tokens=out.usage.input_tokens,
                       output_tokens=out.usage.output_tokens)
    """
    return ModelCall(model, prompt, provider)
