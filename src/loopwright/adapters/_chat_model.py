"""What the chat actors and reviewers share (``ChatModelBase``): one call made, its usage and
price charged, a malformed reply's spend carried and its repair turn, the call reported to the
engine."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from .._modelcalls import engine_charges_failures, record_model_call
from .._redact import redact_text
from .._retry import status_code
from .._usage import Usage
from ._chat_client import ChatClient
from ._endpoint import public_url, redact_exc
from ._limits import Gate
from ._prices import price_call
from ._reply import ModelReply, check_usable, text_of, usage_of
from ._schema import MalformedReplyError, parse_reply

REPAIR_PROMPT = """\
Your last reply could not be used: {error}
Reply again with one JSON object that fits the schema, and nothing else."""
"""The user turn that follows a malformed reply (shown back as the assistant's turn) when the
engine retries the same call: the model sees what was wrong instead of the same question."""

_REPAIR_CLIP = 2000  # characters of the bad reply shown back (MalformedReplyError.raw's length)


class ChatModelBase(ChatClient):
    """What actors and reviewers share: endpoint, client, structured output, usage, price."""

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
        # The start on the wall clock (where the call sits in the trace); its length on the
        # monotonic one, as a reply's own seconds are: a clock stepped during a failed request
        # would make it hours long, or none.
        started, t0 = time.time(), time.perf_counter()
        try:
            got = self._request(sent, budget_s)  # (body, mode, seconds, first token)
        except Exception as exc:
            self._report(sent, started, None, exc, sent is not messages, t0)
            raise
        finally:
            if gate is not None:
                gate.release()
        return self._finish(*got, bill_to, key, gate, sent is not messages, sent, started, usable)

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
        started, t0 = time.time(), time.perf_counter()  # (as ``_complete``)
        try:
            got = await self._arequest(sent, budget_s)
        except Exception as exc:
            self._report(sent, started, None, exc, sent is not messages, t0)
            raise
        finally:
            if gate is not None:
                gate.release()
        return self._finish(*got, bill_to, key, gate, sent is not messages, sent, started, usable)

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
        counts = usage_of(body)
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
        served = body.get("model")
        priced = price_call(
            self.model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cached_tokens=cached,
            base_url=self._endpoint,
            default_endpoint=self._default_endpoint,
            provider=self.provider,
            override=self.price,
            served=served,  # a gateway may answer with another model than asked
        )
        if priced.model is not None and priced.model != self.model:
            self._warn_once(
                f"served:{self.model}:{priced.model}",
                f"{self.model}: the server says it served {priced.model!r}; its calls are "
                f"billed at that model's price ({priced.detail})",
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
        text, _ = text_of(message)
        shown = redact_text(text) if text is not None else None
        data: dict[str, Any] | None = None

        def reply_of(data: dict[str, Any] | None, refusal: str | None, usage: Usage) -> ModelReply:
            return ModelReply(
                data,
                refusal,
                served if isinstance(served, str) and served.strip() else self.model,
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

        if refusal is None:
            try:
                if not choices:
                    raise MalformedReplyError("the response has no choices")
                data = parse_reply(text, self._schema)
                if usable is not None:
                    check_usable(usable, data, text)
            except MalformedReplyError as exc:
                if finish == "length":
                    exc = MalformedReplyError(
                        f"the reply was cut off at the token limit; {exc.reason}", exc.raw
                    )
                if not engine_charges_failures():
                    self._carry(bill_to, usage)
                exc.usage = usage
                exc.raw = redact_text(exc.raw)
                redact_exc(exc)
                if text is not None:
                    with self._lock:
                        self._repairs[bill_to] = (key, exc.raw[:_REPAIR_CLIP], exc.reason)
                self.last_reply = bad = reply_of(None, None, usage)
                exc.reply = bad
                if sent is not None and started_at is not None:
                    self._report(sent, started_at, bad, exc, repair)
                raise exc from None
        with self._lock:
            carried = self._unbilled.pop(bill_to, None)
            self._repairs.pop(bill_to, None)
        if carried is not None:
            usage = usage + carried
        reply = reply_of(data, str(refusal) if refusal is not None else None, usage)
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
        t0: float | None = None,
    ) -> None:
        """Tell the engine what this call sent and got (``loopwright._modelcalls``): a no-op
        unless an engine's actor or verifier call is collecting. The tokens and cost are this
        request's own (a malformed reply's spend carried into a later call is not counted
        again there). A request that got no reply lasted from ``t0`` (``time.perf_counter``)
        to now."""
        if reply is None and error is not None:
            reply = getattr(error, "reply", None)  # what had arrived of a broken stream
        lasted = time.perf_counter() - t0 if t0 is not None else 0.0
        record_model_call(
            model=self.model,
            response_model=reply.model if reply is not None else None,
            provider=self.provider or ("openai" if self._default_endpoint else None),
            server=public_url(self.base_url),
            prompt=sent,
            reply=reply.text if reply is not None else None,
            started_at=started_at,
            seconds=reply.seconds if reply is not None else lasted,
            first_token_s=reply.first_token_s if reply is not None else None,
            input_tokens=reply.input_tokens if reply is not None else None,
            output_tokens=reply.output_tokens if reply is not None else None,
            cost_usd=reply.priced.cost_usd if reply is not None else None,
            priced_by=reply.priced.detail if reply is not None else None,
            finish_reason=reply.finish_reason if reply is not None else None,
            error=None if error is None else f"{type(error).__name__}: {error}",
            http_status=None if error is None else status_code(error),
            repair=repair,
            streamed=self.stream,
        )

    def _carry(self, bill_to: str, usage: Usage) -> None:
        with self._lock:
            self._unbilled[bill_to] = self._unbilled.get(bill_to, Usage()) + usage
