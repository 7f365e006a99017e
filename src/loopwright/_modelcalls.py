"""Model calls as the engine records them: what an adapter sent and got back, per HTTP call.

A model adapter (``adapters/openai_chat.py``; user code through ``_owncalls``, checked) reports
each request it makes with ``record_model_call``: the model, the messages it sent, the reply
text it received, tokens, cost, when it started and how long it took, and the error if it
failed. Outside an engine's actor or verifier call that is a no-op. Inside one, the engine
(``_call_retry.call_with_retry``) collects the reports of each attempt (``collecting``) and stores
them as ``model_call`` events of the cycle, numbered by attempt and marked with how the attempt
ended (``ok``, ``retry``, ``gave_up``): in the cycle's own commit for a good attempt, beside the
``retry`` event for a failed one. The core imports no adapter: this module is the whole
contract between them (a keyword call and a plain dict).

What is kept is bounded, whatever the model was shown: the prompt to ``PROMPT_CHARS`` and the
reply to ``REPLY_CHARS`` characters, a cut marked in the text (``TRUNCATED``) and in the record
(``truncated``, the original sizes), so a cycle's writes never grow with the run (invariant 8);
the records are events, never part of the ``TaskState``. Secrets are masked (``redact``)
before the record leaves this module (invariant 9), each text as a whole before it is cut.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from typing import Any

from ._redact import redact, redact_text

__all__ = [
    "ERROR_CHARS",
    "MODEL_CALL",
    "PROMPT_CHARS",
    "REPLY_CHARS",
    "SINK",
    "TRUNCATED",
    "clip_masked",
    "close_sink",
    "collecting",
    "current_sink",
    "engine_charges_failures",
    "model_call_record",
    "open_sink",
    "record_model_call",
    "use_sink",
]

MODEL_CALL = "model_call"
"""The event kind of a recorded model call."""

PROMPT_CHARS = 16_000
"""The most characters of a call's messages kept (all messages together)."""

REPLY_CHARS = 16_000
"""The most characters of a call's reply kept."""

TRUNCATED = "…[truncated: {n} more characters]"
"""Appended where a prompt message or a reply was cut."""

ERROR_CHARS = 4_000
"""The most characters of an error's text the engine stores (its message, its traceback, a
model call's error, a reviewer's finding or summary): a server may answer with a 10 MB error
body, and every copy of it (packet, journal, events) would be stored whole and scanned whole by
the redaction net."""

MODEL_CHARS = 200
"""The model a server says it served (a reply's ``model``), as kept and priced: longer is a
server's noise, not a name (a 10 MB one was stored whole in every call's record)."""

CLIPPED = "…[cut: {n} more characters]"
"""Appended where ``clip_masked`` cut a text."""


def clip_masked(text: str, limit: int = ERROR_CHARS) -> str:
    """``text`` masked (``redact_text``) and cut to ``limit`` characters, the cut marked, in
    time bounded by ``limit`` whatever its length: the redaction net runs over the first
    ``2 * limit`` characters only. Only a head is ever kept (a tail could start inside a secret
    whose beginning was cut off), and it is the head of that masked window shortened by what
    masking took out of it: so a secret (up to ``limit`` characters long) that straddles the
    cut is masked whole before the cut, and none that straddles the window's end (begun past
    the kept part) can show its beginning."""
    if len(text) <= limit:
        return redact_text(text)
    window = text[: 2 * limit]
    masked = redact_text(window)
    keep = max(0, limit - max(0, len(window) - len(masked)))
    return masked[:keep] + CLIPPED.format(n=len(text) - keep)


Sink = list[dict[str, Any]]

_sink: ContextVar[Sink | None] = ContextVar("loopwright_model_calls", default=None)
# The variable itself, for the engine's hot path (``call_with_retry``, two calls a cycle): its
# ``set`` and ``reset`` called there are ``open_sink`` and ``close_sink`` without their calls.
SINK = _sink


@contextlib.contextmanager
def collecting(into: Sink) -> Iterator[Sink]:
    """Collect the model calls reported in this context (and in the threads ``call_user``
    starts from it) into ``into``."""
    token = _sink.set(into)
    try:
        yield into
    finally:
        _sink.reset(token)


def open_sink(into: Sink) -> Token[Sink | None]:
    """``collecting`` without a generator, for the engine's hot path: collect into ``into``
    until ``close_sink`` is given the token returned."""
    return _sink.set(into)


def close_sink(token: Token[Sink | None]) -> None:
    _sink.reset(token)


def current_sink() -> Sink | None:
    """Where reports go now (``None``: nowhere); ``call_user`` hands it to its thread."""
    return _sink.get()


def engine_charges_failures() -> bool:
    """Whether this is an engine's actor or verifier call (a sink collects its model calls).
    The engine then charges each failed attempt's ``usage`` (an exception's ``.usage``, a
    malformed reply's), journaled with the attempt so that a restart keeps it: an adapter must
    not carry that spend into a later reply as well."""
    return _sink.get() is not None


def use_sink(sink: Sink | None) -> None:
    """Report into ``sink`` from here on in this context (a worker thread's own context)."""
    if sink is not None:
        _sink.set(sink)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        # content parts (``[{"type": "text", "text": ...}]``): their text, joined
        return "".join(
            str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content
        )
    return "" if content is None else str(content)


def _cut(text: str, room: int) -> tuple[str, bool]:
    if len(text) <= room:
        return text, False
    return text[: max(room, 0)] + TRUNCATED.format(n=len(text) - max(room, 0)), True


def model_call_record(
    *,
    model: str,
    prompt: Sequence[Mapping[str, Any]] | str,
    reply: str | None,
    started_at: float,
    seconds: float,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cost_usd: float | None = None,
    provider: str | None = None,
    server: str | None = None,
    response_model: str | None = None,
    priced_by: str | None = None,
    finish_reason: str | None = None,
    first_token_s: float | None = None,
    error: str | None = None,
    http_status: int | None = None,
    repair: bool = False,
    streamed: bool = False,
    operation: str = "chat",
) -> dict[str, Any]:
    """The stored form of one call: the figures first (what an event list shows), then the
    prompt as ``[{"role", "content"}]`` and the reply, both cut to their limits, masked.
    ``priced_by`` (the adapters' price source: which model's price billed it) is kept when
    given."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    room = PROMPT_CHARS
    kept: list[dict[str, str]] = []
    prompt_chars = 0
    cut_any = False
    for m in messages:
        content = _text(m.get("content"))
        prompt_chars += len(content)
        # masked whole, then cut: a cut through a secret would leave a part no rule knows
        content = redact_text(content)
        shown, cut = _cut(content, room)
        room -= min(len(content), max(room, 0))
        cut_any = cut_any or cut
        kept.append({"role": redact_text(str(m.get("role") or "user")), "content": shown})
    reply_shown, reply_cut = (
        (None, False) if reply is None else _cut(redact_text(reply), REPLY_CHARS)
    )
    rec: dict[str, Any] = {
        "model": model,
        "response_model": (
            None if response_model is None else clip_masked(str(response_model), MODEL_CHARS)
        ),
        "provider": provider,
        "server": server,
        "operation": operation,
        "started_at": float(started_at),
        "seconds": max(0.0, float(seconds)),
        "first_token_s": first_token_s,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd": cost_usd,
        "finish_reason": finish_reason,
        "http_status": http_status,
        "error": None if error is None else clip_masked(error, 1000),
        "repair": repair,
        "streamed": streamed,
        "prompt_chars": prompt_chars,
        "reply_chars": None if reply is None else len(reply),
        "truncated": cut_any or reply_cut,
    }
    if priced_by is not None:
        rec["priced_by"] = clip_masked(priced_by, 1000)
    out: dict[str, Any] = redact(rec)  # the prompt and reply are masked already: not scanned twice
    return {**out, "prompt": kept, "reply": reply_shown}


def record_model_call(**fields: Any) -> dict[str, Any] | None:
    """Report one model call (keyword arguments of ``model_call_record``) to the engine
    collecting this context's calls; returns the record kept, ``None`` when none collects.
    Never raises: a report that cannot be made is dropped (it must not fail the call)."""
    sink = _sink.get()
    if sink is None:
        return None
    try:
        rec = model_call_record(**fields)
    except Exception:  # a bad report is the adapter's bug; the call itself went fine
        return None
    sink.append(rec)
    return rec
