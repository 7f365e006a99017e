"""What the image adapter does with a request: pictures kept in the store (loaded by digest,
saved after their bytes are checked), one call sent (sync or async) under the endpoint's limits,
the reply's picture read (base64 or fetched) and checked, its cost, the call reported."""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError
from .._modelcalls import record_model_call
from .._redact import redact_text
from .._retry import status_code
from .._usage import Usage
from . import _png
from ._endpoint import public_url
from ._image_client import ImageClient
from ._image_data import damage, image_value, media_type_of
from ._image_reply import ImageResult, tokens_of
from ._limits import Gate
from ._prices import Priced, price_call
from ._schema import MalformedReplyError

if TYPE_CHECKING:
    from ..store._blobs import Blobs

__all__: list[str] = []


class ImageModelBase(ImageClient):
    """``ImageModel`` without its public calls: the store, one call and its reply."""

    # --- the store ------------------------------------------------------------------------
    def blobs(self) -> Blobs:
        """Where this model's pictures are kept (opened on first use)."""
        from ..store import open_store, resolve_store_url
        from ..store._blobs import Blobs

        with self._lock:
            if self._blobs is None:
                if self._store is None:
                    self._store = open_store(resolve_store_url(self._store_arg))
                self._blobs = Blobs(self._store)
            return self._blobs

    def load(self, picture: Any) -> bytes:
        """The bytes of a picture: an ``image_value``, a digest, or bytes as they are."""
        if isinstance(picture, bytes | bytearray):
            return bytes(picture)
        digest = picture.get("image") if isinstance(picture, Mapping) else picture
        blob = self.blobs().get(str(digest))
        if blob is None:
            raise ConfigError(f"no picture {digest!r} in the store", field="image")
        return blob.data

    def save(self, data: bytes) -> dict[str, Any]:
        """Store a picture (a PNG, JPEG, GIF or WebP); its part value."""
        kind = media_type_of(data)
        if kind is None:
            raise ValueError("not a picture (PNG, JPEG, GIF or WebP)")
        why = damage(data, kind)
        if why is not None:
            raise ValueError(f"a damaged picture: {why}")
        width, height = _png.size_of(data) if kind == "image/png" else (0, 0)
        digest = self.blobs().put(data, kind)
        return image_value(digest, kind, len(data), width, height)

    def _call(
        self,
        endpoint: Literal["generations", "edits"],
        prompt: str,
        size: str | None,
        budget_s: float | None,
        *,
        masked: bool,
        refs: int,
        **files: Any,
    ) -> ImageResult:
        kwargs = self._request(prompt, size, files)
        client = self._openai()
        send: Callable[..., Any] = (
            client.images.generate if endpoint == "generations" else client.images.edit
        )
        gate = self._gate()
        if gate is not None:
            gate.pace()
            gate.acquire()
        started_at, t0 = time.time(), time.perf_counter()
        try:
            response = send(**kwargs)
        except Exception as exc:
            self._report(prompt, endpoint, masked, started_at, t0, None, exc)
            self._failed(exc, budget_s)
            raise  # pragma: no cover - _failed always raises
        finally:
            if gate is not None:
                gate.release()
        seconds = time.perf_counter() - t0
        try:
            result = self._result(response, seconds, gate, endpoint, masked, refs, budget_s)
        except Exception as exc:
            self._report(prompt, endpoint, masked, started_at, t0, None, exc)
            raise
        self._report(prompt, endpoint, masked, started_at, t0, result, None)
        return result

    async def _acall(
        self,
        endpoint: Literal["generations", "edits"],
        prompt: str,
        size: str | None,
        budget_s: float | None,
        *,
        masked: bool,
        refs: int,
        **files: Any,
    ) -> ImageResult:
        """``_call`` with the async client: waiting for a slot, for tokens or for the picture
        never blocks the event loop; the store's write runs in a thread."""
        kwargs = self._request(prompt, size, files)
        client = await self._async_openai()
        send: Callable[..., Any] = (
            client.images.generate if endpoint == "generations" else client.images.edit
        )
        gate = self._gate()
        if gate is not None:
            await gate.pace_async()
            await gate.acquire_async()
        started_at, t0 = time.time(), time.perf_counter()
        try:
            response = await send(**kwargs)
        except Exception as exc:
            self._report(prompt, endpoint, masked, started_at, t0, None, exc)
            self._failed(exc, budget_s)
            raise  # pragma: no cover - _failed always raises
        finally:
            if gate is not None:
                gate.release()
        seconds = time.perf_counter() - t0
        try:
            result = await asyncio.to_thread(
                self._result, response, seconds, gate, endpoint, masked, refs, budget_s
            )
        except Exception as exc:
            self._report(prompt, endpoint, masked, started_at, t0, None, exc)
            raise
        self._report(prompt, endpoint, masked, started_at, t0, result, None)
        return result

    def _report(
        self,
        prompt: str,
        endpoint: Literal["generations", "edits"],
        masked: bool,
        started_at: float,
        t0: float,
        result: ImageResult | None,
        error: BaseException | None,
    ) -> None:
        """Tell the engine what this request sent and got (``loopwright._modelcalls``), as a
        chat call does: a no-op unless an engine's actor or verifier call is collecting. The
        reply is a line about the picture (its bytes are in the store under its digest)."""
        what = "masked edit" if masked else ("edit" if endpoint == "edits" else "generation")
        reply = None
        if result is not None:
            v = result.value
            reply = (
                f"{what}: {v.get('media_type')} {v.get('width')}x{v.get('height')}, "
                f"{v.get('bytes')} bytes, {result.digest}"
            )
            if result.revised_prompt:
                reply += f"\nrevised prompt: {result.revised_prompt}"
        record_model_call(
            model=self.model,
            provider=self.provider or ("openai" if self._default_endpoint else None),
            server=public_url(self.base_url),
            operation="generate_content",
            prompt=[{"role": "user", "content": prompt}],
            reply=reply,
            started_at=started_at,
            seconds=result.seconds if result is not None else time.perf_counter() - t0,
            input_tokens=result.input_tokens if result is not None else None,
            output_tokens=result.output_tokens if result is not None else None,
            cost_usd=result.usage.cost_usd if result is not None else None,
            error=None if error is None else f"{type(error).__name__}: {redact_text(str(error))}",
            http_status=None if error is None else status_code(error),
        )

    def _result(
        self,
        response: Any,
        seconds: float,
        gate: Gate | None,
        endpoint: Literal["generations", "edits"],
        masked: bool,
        refs: int,
        budget_s: float | None,
    ) -> ImageResult:
        # warnings=False: a field of the wrong type (``data`` an object) is judged below, not
        # warned of by pydantic's serializer (an error under ``-W error``), as ``body_of``'s
        body = response.model_dump(warnings=False) if hasattr(response, "model_dump") else response
        if not isinstance(body, Mapping):
            raise MalformedReplyError(f"the server's reply is not an images response: {body!r}")
        data, revised = self._picture(body, budget_s)
        input_tokens, output_tokens, tokens = tokens_of(body)
        usage, priced = self._cost(input_tokens, output_tokens, tokens, seconds, gate)
        result = ImageResult(
            self.save(data), data, usage, priced, self.model, endpoint, masked, refs, revised,
            seconds, input_tokens, output_tokens,
        )  # fmt: skip
        self.last_result = result
        return result

    def _picture(self, body: Mapping[str, Any], budget_s: float | None) -> tuple[bytes, str | None]:
        items = body.get("data")
        items = items if isinstance(items, list) else []  # an object or a number: no picture
        item = items[0] if items and isinstance(items[0], Mapping) else None
        if item is None:
            raise MalformedReplyError("the images response holds no picture")
        revised = item.get("revised_prompt")
        if isinstance(item.get("b64_json"), str):
            try:
                data = base64.b64decode(item["b64_json"], validate=True)
            except (binascii.Error, ValueError):
                raise MalformedReplyError("the picture in the reply is not valid base64") from None
        elif isinstance(item.get("url"), str):
            data = self._fetch(item["url"], budget_s)
        else:
            raise MalformedReplyError("the images response has neither b64_json nor url")
        kind = media_type_of(data)
        if kind is None:
            raise MalformedReplyError("the reply's picture is not a PNG, JPEG, GIF or WebP")
        why = damage(data, kind)
        if why is not None:  # stored, it would fail whatever reads it (a check: the run stops)
            raise MalformedReplyError(f"the reply's picture is damaged: {why}")
        return data, str(revised) if isinstance(revised, str) else None

    def _cost(
        self, input_tokens: int, output_tokens: int, tokens: int, seconds: float, gate: Gate | None
    ) -> tuple[Usage, Priced]:
        if gate is not None:
            gate.charge(tokens)
        if self.price is not None:
            priced = Priced(
                self.price.per_image_usd,
                "override",
                f"override: {self.price.per_image_usd:g} $ per image",
            )
        elif tokens:
            priced = price_call(
                self.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                base_url=self._endpoint,
                default_endpoint=self._default_endpoint,
                provider=self.provider,
            )
        else:
            priced = Priced(0.0, "unpriced", "no price and no token usage in the reply")
        if priced.source == "unpriced":
            self._warn_once(
                f"price:{self.model}",
                f"{self.model} at {public_url(self.base_url)}: pictures counted as $0 "
                f"({priced.detail}); pass price=ImagePrice(per_image_usd) to account them",
            )
        return Usage(priced.cost_usd, tokens, seconds), priced
