"""Pictures from an OpenAI-compatible image endpoint: generate, and repair a region.

``ImageModel`` talks to any server that speaks OpenAI's images API through the ``openai`` SDK
(``pip install 'loopwright[openai]'``), by ``base_url``:

* ``generate(prompt)`` is ``POST /images/generations``.
* ``generate(prompt, references=[sheet, accepted panel, ...])`` sends the references as
  ``image[]`` parts of ``POST /images/edits`` without a mask: the generations endpoint takes no
  images, and an edit of several input images is how OpenAI's ``gpt-image-*`` models (and the
  servers that copy the API) take a character sheet or earlier pages as references.
* ``edit(image, mask, prompt)`` is ``POST /images/edits`` with a mask: **local repair** of a
  picture. The mask is a PNG of the image's size whose transparent pixels (alpha 0) mark what
  may change (OpenAI's convention; ``region_mask`` draws one from boxes); the rest of the
  picture stays as it was. With references they follow the image as further ``image[]``
  parts; without, the image goes as a single ``image`` part (what every server accepts).

**Pictures are blobs, not state.** Each picture is stored once in the run's store, by its
SHA-256 (``store/_blobs.py``); a part's value is ``image_value``: ``{"image": "sha256:…",
"media_type", "bytes", "width", "height"}``. ``store=`` names the store (a ``Store``, a URL or
a path); by default the one ``LOOPWRIGHT_STORE`` names, else ``./.loopwright/loopwright.db``,
opened on first use. The dashboard shows such a part as a picture
(``/runs/{run_id}/blob/{digest}``).

**Retries, limits and secrets are the chat adapter's.** The SDK client has ``max_retries=0``;
every failure is raised, named after the model and endpoint, redacted, ``Retry-After`` capped,
for the engine to classify and retry under the loop's persisted ``RetryPolicy`` (429/5xx and
timeouts transient, 401/403 need a person, other 4xx permanent); a 2xx without a picture is a
``MalformedReplyError`` (transient). ``max_concurrency`` and ``tokens_per_minute`` are the
process-wide per-endpoint limits of ``_limits`` (shared with the chat adapters on the same
``(base_url, model)``).

**Many runs at once.** ``agenerate``/``aedit`` and ``AsyncImageActor`` use
``openai.AsyncOpenAI`` (one client per event loop, as the chat adapters): waiting for the
endpoint's slot or the picture never blocks the loop the runs share.

**Cost** is per image: ``price=ImagePrice(per_image_usd)`` (or a number), else the reply's
token usage priced by ``genai-prices`` (``gpt-image-1`` is priced by tokens), else 0 with one
logged warning.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import http.client
import importlib.util
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError
from .._modelcalls import record_model_call
from .._proposal import Context, Edit, Proposal
from .._redact import redact_text, register_secret
from .._retry import status_code
from .._usage import Usage
from . import _png
from ._endpoint import (
    DEFAULT_BASE_URL,
    DEFAULT_MAX_RETRY_AFTER_S,
    _async_clients,
    _body_not_json,
    _cap_retry_after,
    _closer,
    _mask_http_logs,
    _name_the_call,
    _normalise_model,
    _redact_exc,
    endpoint_of,
    no_api_key,
    normalise_base_url,
    public_url,
    sdk_endpoint,
)
from ._limits import Gate, Limits, _tighter, gate_for
from ._prices import Priced, price_call
from ._schema import MalformedReplyError

if TYPE_CHECKING:
    import openai

    from ..store._blobs import Blobs

__all__ = [
    "AsyncImageActor",
    "ImageActor",
    "ImageJob",
    "ImageModel",
    "ImagePrice",
    "ImageResult",
    "image_value",
    "is_image_value",
    "region_mask",
]

_log = logging.getLogger("loopwright.adapters")

MAX_REPLY_BYTES = 256 * 2**20
"""The largest response body (or picture fetched from a ``url`` reply) the image adapter reads:
a few large pictures as base64; a larger one fails as ``ReplyTooLarge``, permanent."""

_NO_SDK = "the image adapter needs the openai SDK: pip install 'loopwright[openai]'"

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (_png.SIGNATURE, "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
)


def _media_type(data: bytes) -> str | None:
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _damage(data: bytes, kind: str) -> str | None:
    """Why a picture of ``kind`` is cut short or damaged, or None, from its structure alone: a
    PNG's chunks to IEND with their CRCs, a JPEG's end marker, a GIF's trailer, a WebP's RIFF
    size (a download or a base64 payload cut short; a file that only begins like a picture)."""
    end = data.rstrip(b"\x00")  # padding after the end is harmless
    if kind == "image/png":
        return _png.damage(data)
    if kind == "image/jpeg" and not end.endswith(b"\xff\xd9"):
        return "a JPEG without its end marker"
    if kind == "image/gif" and not end.endswith(b";"):
        return "a GIF without its trailer"
    if kind == "image/webp" and len(data) < 8 + int.from_bytes(data[4:8], "little"):
        return "a WebP shorter than its header says"
    return None


def image_value(digest: str, media_type: str, size: int, width: int, height: int) -> dict[str, Any]:
    """What a part holds for a picture: its digest and what is needed to show it, not its
    bytes."""
    return {
        "image": digest,
        "media_type": media_type,
        "bytes": size,
        "width": width,
        "height": height,
    }


def is_image_value(value: Any) -> bool:
    """Whether a part's value is a picture (``image_value``)."""
    from ..store._blobs import is_digest

    return (
        isinstance(value, Mapping)
        and is_digest(value.get("image"))
        and isinstance(value.get("media_type"), str)
    )


def region_mask(
    width: int, height: int, boxes: Sequence[tuple[float, float, float, float]]
) -> bytes:
    """An edit mask (PNG, RGBA) of ``width`` x ``height``: transparent inside the boxes
    ``(x0, y0, x1, y1)`` in pixels (what the model may repaint), opaque black elsewhere (what
    must stay)."""
    opaque = b"\x00\x00\x00\xff"
    rows = [bytearray(opaque * width) for _ in range(height)]
    for x0, y0, x1, y1 in boxes:
        left, right = max(0, math.floor(x0)), min(width, math.ceil(x1))
        top, bottom = max(0, math.floor(y0)), min(height, math.ceil(y1))
        if right <= left:
            continue
        clear = b"\x00\x00\x00\x00" * (right - left)
        for y in range(top, bottom):
            rows[y][left * 4 : right * 4] = clear
    return _png.encode(width, height, b"".join(rows), alpha=True)


def _rate(value: Any, field: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"must be a number, got {value!r}", field=field)
    try:
        rate = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"must be a number, got {value!r}", field=field) from None
    if not math.isfinite(rate) or rate < 0:
        raise ConfigError(f"must be a finite number ≥ 0, got {value!r}", field=field)
    return rate


@dataclass(frozen=True, slots=True)
class ImagePrice:
    """What one picture costs, in US dollars (generated or edited alike)."""

    per_image_usd: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_image_usd", _rate(self.per_image_usd, "price"))

    @classmethod
    def coerce(cls, value: Any, *, field: str = "price") -> ImagePrice | None:
        """A price from a spec or an environment variable: an ``ImagePrice``, a number, a
        string ``"0.04"`` or a table ``{per_image_usd}``; ``None`` or ``""`` for none."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, str) and not value.strip():
            return None
        if isinstance(value, Mapping):
            if set(value) != {"per_image_usd"}:
                raise ConfigError(f"needs per_image_usd, got keys {sorted(value)}", field=field)
            return cls(_rate(value["per_image_usd"], f"{field}.per_image_usd"))
        return cls(_rate(value, field))


@dataclass(frozen=True, slots=True)
class ImageResult:
    """One picture as the adapter got it.

    Attributes:
        value: the part value (``image_value``); the bytes are in the store under its digest.
        data: the picture's bytes.
        usage: tokens and cost charged for it.
        priced: where the price came from.
        model: the model asked for.
        endpoint: ``generations`` or ``edits``.
        masked: whether it was a masked edit (local repair).
        references: how many reference images went with it.
        revised_prompt: the prompt as the server rewrote it, when it says.
        seconds: wall-clock time of the HTTP call.
        input_tokens / output_tokens: as the reply's ``usage`` says (0 when it says nothing).
    """

    value: dict[str, Any]
    data: bytes
    usage: Usage
    priced: Priced
    model: str
    endpoint: Literal["generations", "edits"]
    masked: bool
    references: int
    revised_prompt: str | None
    seconds: float
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def digest(self) -> str:
        return str(self.value["image"])


def _tokens(body: Mapping[str, Any]) -> tuple[int, int, int]:
    """The reply's input, output and total tokens (0 where it says nothing)."""
    raw = body.get("usage")
    if not isinstance(raw, Mapping):
        return 0, 0, 0
    input_tokens, output_tokens = _int(raw.get("input_tokens")), _int(raw.get("output_tokens"))
    return (
        input_tokens,
        output_tokens,
        max(input_tokens + output_tokens, _int(raw.get("total_tokens"))),
    )


def _int(value: Any) -> int:
    # a server's usage is untrusted: NaN, infinity or 2**63 count 0 rather than fail the call
    # or the run's commit (as the chat adapters' ``_usage_of``)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 <= value <= 2**40  # NaN too
    ):
        return 0
    return int(value)


class ImageModel:
    """A client of one image model on one OpenAI-compatible endpoint (see the module's
    docstring).

    Args:
        model: the model name the server knows (``gpt-image-1``, ``dall-e-2``, a local one).
        base_url: the endpoint (``http://localhost:8000/v1``); default ``OPENAI_BASE_URL`` or
            OpenAI.
        api_key: default ``OPENAI_API_KEY``; ``"not-needed"`` for another server when unset.
        size: ``"WIDTHxHEIGHT"`` asked for (``None``: the server's default).
        quality: the ``quality`` field, when set.
        response_format: ``"b64_json"`` (the picture in the reply), ``"url"`` (fetched), or
            ``None`` to send none; default: none for ``gpt-image-*`` models (which always reply
            with base64 and refuse the field), ``b64_json`` for others.
        timeout_s: the most one request to the images API may take, its reply's body
            included, as the chat adapters' (a timeout is transient); a picture fetched from a
            ``url`` reply is bounded per read only.
        price: ``ImagePrice`` or dollars per picture; default: ``genai-prices`` by tokens.
        provider: a ``genai-prices`` provider id for a proxy the table does not know.
        extra_body: extra request fields.
        max_retry_after_s: the longest ``Retry-After`` honoured.
        max_concurrency / tokens_per_minute: process-wide limits for this endpoint and model.
        store: where pictures are kept (a ``Store``, URL or path; default the process's store).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        size: str | None = None,
        quality: str | None = None,
        response_format: Literal["b64_json", "url", "auto"] | None = "auto",
        timeout_s: float = 120.0,
        price: ImagePrice | float | str | Mapping[str, Any] | None = None,
        provider: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        max_retry_after_s: float = DEFAULT_MAX_RETRY_AFTER_S,
        max_concurrency: int | None = None,
        tokens_per_minute: int | None = None,
        store: Any = None,
        name: str = "image_model",
    ) -> None:
        if importlib.util.find_spec("openai") is None:  # fail when the spec loads, not mid-run
            raise ImportError(_NO_SDK)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("a model name is required", field="model")
        if size is not None and not _size_ok(size):
            raise ConfigError(f"must be WIDTHxHEIGHT, got {size!r}", field="size")
        if response_format not in ("auto", "b64_json", "url", None):
            raise ConfigError("must be b64_json, url or none", field="response_format")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ConfigError(f"must be a positive number, got {timeout_s!r}", field="timeout_s")
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise ConfigError("must be a table", field="extra_body")
        self.model = model.strip()
        self._endpoint = endpoint_of(base_url)
        self.base_url = normalise_base_url(self._endpoint)
        self._default_endpoint = self.base_url == normalise_base_url(DEFAULT_BASE_URL)
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self._default_endpoint:
                raise no_api_key()
            key = "not-needed"
        self._api_key = key
        register_secret(key)
        self.size = size
        self.quality = quality
        if response_format == "auto":
            response_format = None if self.model.lower().startswith("gpt-image") else "b64_json"
        self.response_format = response_format
        self.timeout_s = float(timeout_s)
        self.price = ImagePrice.coerce(price)
        self.provider = provider
        self.extra_body = dict(extra_body) if extra_body else None
        self.max_retry_after_s = float(max_retry_after_s)
        self.limits = Limits.check(max_concurrency, tokens_per_minute)
        self.__name__ = name
        self.last_result: ImageResult | None = None
        # What another process (a Ray worker) opens: a URL or path as given, an SQLite store's
        # URL; a PostgreSQL Store object keeps its password to itself, so there it is the
        # process's store (LOOPWRIGHT_STORE) — pass a URL for workers.
        self._store_arg = (
            store if isinstance(store, str) or store is None else getattr(store, "url", None)
        )
        self._store = None if isinstance(store, str) or store is None else store
        self._blobs: Blobs | None = None
        self._client: openai.OpenAI | None = None
        self._aclients = _async_clients()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._gate()

    # --- identity, limits, pickling -------------------------------------------------------
    def model_identity(self) -> tuple[str, str]:
        return (self.base_url, _normalise_model(self.model))

    def __repr__(self) -> str:
        return f"ImageModel(model={self.model!r}, base_url={public_url(self.base_url)!r})"

    def _gate(self) -> Gate | None:
        return gate_for(self.base_url, _normalise_model(self.model), self.limits)

    def use_limits(
        self, *, max_concurrency: int | None = None, tokens_per_minute: int | None = None
    ) -> None:
        """The spec's ``[model.limits]``: limits shared by every run in the process."""
        extra = Limits.check(max_concurrency, tokens_per_minute)
        self.limits = Limits(
            _tighter(self.limits.max_concurrency, extra.max_concurrency),
            _tighter(self.limits.tokens_per_minute, extra.tokens_per_minute),
        )
        self._gate()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_client", "_aclients", "_lock", "_blobs", "_store"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client, self._blobs, self._store = None, None, None
        self._aclients = _async_clients()
        self._lock = threading.Lock()
        self._gate()
        register_secret(self._api_key)

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
        kind = _media_type(data)
        if kind is None:
            raise ValueError("not a picture (PNG, JPEG, GIF or WebP)")
        why = _damage(data, kind)
        if why is not None:
            raise ValueError(f"a damaged picture: {why}")
        width, height = _png.size_of(data) if kind == "image/png" else (0, 0)
        digest = self.blobs().put(data, kind)
        return image_value(digest, kind, len(data), width, height)

    # --- the calls ------------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """A new picture from ``prompt``; with ``references`` (pictures, digests or bytes)
        they go as ``image[]`` of an edit without a mask (see the module's docstring)."""
        refs = [self._file(f"reference-{i}", self.load(r)) for i, r in enumerate(references)]
        if not refs:
            return self._call("generations", prompt, size, budget_s, masked=False, refs=0)
        return self._call("edits", prompt, size, budget_s, masked=False, refs=len(refs), image=refs)

    def edit(
        self,
        image: Any,
        mask: bytes,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``image`` with the region ``mask`` leaves transparent repainted from ``prompt``;
        the rest stays as it was (local repair)."""
        base = self.load(image)
        files = self._edit_files(base, mask, [self.load(r) for r in references])
        return self._call(
            "edits", prompt, size, budget_s, masked=True, refs=len(references), **files
        )

    async def agenerate(
        self,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``generate`` with the async client."""
        pictures = [await asyncio.to_thread(self.load, r) for r in references]
        refs = [self._file(f"reference-{i}", data) for i, data in enumerate(pictures)]
        if not refs:
            return await self._acall("generations", prompt, size, budget_s, masked=False, refs=0)
        return await self._acall(
            "edits", prompt, size, budget_s, masked=False, refs=len(refs), image=refs
        )

    async def aedit(
        self,
        image: Any,
        mask: bytes,
        prompt: str,
        *,
        references: Sequence[Any] = (),
        size: str | None = None,
        budget_s: float | None = None,
    ) -> ImageResult:
        """``edit`` with the async client."""
        base = await asyncio.to_thread(self.load, image)
        pictures = [await asyncio.to_thread(self.load, r) for r in references]
        files = self._edit_files(base, mask, pictures)
        return await self._acall(
            "edits", prompt, size, budget_s, masked=True, refs=len(pictures), **files
        )

    def _edit_files(self, base: bytes, mask: bytes, pictures: Sequence[bytes]) -> dict[str, Any]:
        """The ``image`` and ``mask`` parts of a masked edit, the mask checked first."""
        if _media_type(mask) != "image/png":
            raise ConfigError("a mask is a PNG with an alpha channel", field="mask")
        if _media_type(base) == "image/png" and _png.size_of(base) != _png.size_of(mask):
            raise ConfigError(
                f"the mask is {_png.size_of(mask)}, the picture {_png.size_of(base)}: "
                "they must be the same size",
                field="mask",
            )
        files = [self._file("image", base)]
        files += [self._file(f"reference-{i}", data) for i, data in enumerate(pictures)]
        return {
            "image": files if len(files) > 1 else files[0],
            "mask": ("mask.png", mask, "image/png"),
        }

    @staticmethod
    def _file(name: str, data: bytes) -> tuple[str, bytes, str]:
        kind = _media_type(data) or "application/octet-stream"
        return (f"{name}.{kind.rpartition('/')[2]}", data, kind)

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
        """The async client of the running event loop (an ``httpx`` async client belongs to
        the loop it first ran on), closed when that loop shuts down — as the chat adapter's."""
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

    def _kwargs(self, prompt: str, size: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": 1}
        size = size or self.size
        if size is not None:
            if not _size_ok(size):
                raise ConfigError(f"must be WIDTHxHEIGHT, got {size!r}", field="size")
            kwargs["size"] = size
        if self.quality is not None:
            kwargs["quality"] = self.quality
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

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

    def _request(self, prompt: str, size: str | None, files: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError("an image needs a prompt", field="prompt")
        return {**self._kwargs(prompt, size), **files}

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
        # warned of by pydantic's serializer (an error under ``-W error``), as ``_body_of``'s
        body = response.model_dump(warnings=False) if hasattr(response, "model_dump") else response
        if not isinstance(body, Mapping):
            raise MalformedReplyError(f"the server's reply is not an images response: {body!r}")
        data, revised = self._picture(body, budget_s)
        input_tokens, output_tokens, tokens = _tokens(body)
        usage, priced = self._cost(input_tokens, output_tokens, tokens, seconds, gate)
        result = ImageResult(
            self.save(data), data, usage, priced, self.model, endpoint, masked, refs, revised,
            seconds, input_tokens, output_tokens,
        )  # fmt: skip
        self.last_result = result
        return result

    def _failed(self, exc: Exception, budget_s: float | None) -> None:
        """Raise what a failed request means (named, redacted, Retry-After capped)."""
        if type(exc).__name__ == "APIResponseValidationError":
            raise MalformedReplyError(
                f"the server's response is not an images response: {redact_text(str(exc))}"
            ) from exc
        if _body_not_json(exc):
            raise MalformedReplyError(
                "the server answered with an empty body or one that is not JSON"
            ) from exc
        _name_the_call(exc, self.model, self._endpoint)
        _redact_exc(exc)
        cap = self.max_retry_after_s if budget_s is None else min(self.max_retry_after_s, budget_s)
        _cap_retry_after(exc, cap)
        raise exc

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
        kind = _media_type(data)
        if kind is None:
            raise MalformedReplyError("the reply's picture is not a PNG, JPEG, GIF or WebP")
        why = _damage(data, kind)
        if why is not None:  # stored, it would fail whatever reads it (a check: the run stops)
            raise MalformedReplyError(f"the reply's picture is damaged: {why}")
        return data, str(revised) if isinstance(revised, str) else None

    def _fetch(self, url: str, budget_s: float | None) -> bytes:
        timeout = self.timeout_s if budget_s is None else max(1.0, min(self.timeout_s, budget_s))
        if not url.startswith(("http://", "https://")):
            raise MalformedReplyError(f"the picture's url is not http(s): {url[:80]!r}")
        from ._deadline import fetch  # (the SDK's rules: a reply named the url)

        try:
            return fetch(url, timeout, MAX_REPLY_BYTES)
        except (OSError, http.client.HTTPException) as exc:  # a download cut short, not HTTP
            raise MalformedReplyError(
                f"the picture at {public_url(url)} could not be fetched: {exc}"
            ) from exc

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

    def _warn_once(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        # a warning can name the endpoint as given (the price table's miss): the log is an
        # output too (invariant 9), so a ``user:password@`` in it is masked
        _log.warning(redact_text(message))


def _size_ok(size: Any) -> bool:
    if not isinstance(size, str):
        return False
    if size == "auto":
        return True
    w, sep, h = size.partition("x")
    return bool(sep) and w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0


@dataclass(frozen=True)
class ImageJob:
    """What an ``ImageActor`` draws this cycle.

    Attributes:
        artifact, part: where the picture goes (the part's value becomes its ``image_value``).
        prompt: what to draw (or, for a repair, what the masked region must become).
        references: pictures to follow (``image_value``s, digests or bytes).
        base: the picture to repair; with ``mask``, a masked edit instead of a new picture.
        mask: the edit mask (``region_mask``).
        size: ``WIDTHxHEIGHT`` for this picture (default: the model's).
        note: the proposal's note.
        then: more edits of the same proposal, made from the result (say, a lettered panel
            that shows the new picture).
    """

    artifact: str
    part: str
    prompt: str
    references: Sequence[Any] = ()
    base: Any = None
    mask: bytes | None = None
    size: str | None = None
    note: str = ""
    then: Callable[[ImageResult], Sequence[Edit]] | None = field(default=None, compare=False)


class ImageActor:
    """An actor step that draws: ``job(ctx)`` says what (an ``ImageJob``, or ``None`` when
    there is nothing to draw), the model draws or repairs it, and the proposal sets the part
    to the picture's ``image_value`` with the picture's cost as its usage."""

    def __init__(
        self,
        images: ImageModel,
        job: Callable[[Context], ImageJob | None],
        *,
        name: str = "image_actor",
    ) -> None:
        self.images = images
        self.job = job
        self.__name__ = name

    def model_identity(self) -> tuple[str, str]:
        return self.images.model_identity()

    def use_limits(self, **limits: int | None) -> None:
        self.images.use_limits(**limits)

    def __call__(self, ctx: Context) -> Proposal:
        job = self.job(ctx)
        if job is None:
            return Proposal(note="nothing to draw")
        budget = ctx.remaining.seconds
        if job.mask is not None:
            if job.base is None:
                raise ConfigError("a masked repair needs the picture to repair", field="base")
            result = self.images.edit(
                job.base, job.mask, job.prompt, references=job.references, size=job.size,
                budget_s=budget,
            )  # fmt: skip
        else:
            result = self.images.generate(
                job.prompt, references=job.references, size=job.size, budget_s=budget
            )
        return self._proposal(job, result)

    @staticmethod
    def _proposal(job: ImageJob, result: ImageResult) -> Proposal:
        edits = [Edit(job.artifact, job.part, result.value)]
        if job.then is not None:
            edits += list(job.then(result))
        what = "repaired a region of" if result.masked else "drew"
        return Proposal(
            edits=tuple(edits),
            note=job.note or f"{what} {job.artifact}/{job.part}",
            usage=result.usage,
        )


class AsyncImageActor(ImageActor):
    """``ImageActor`` with the async client: ``await actor(ctx)``. The engine awaits it on its
    event loop, so many runs share one loop and the endpoint's limits without a thread each."""

    async def __call__(self, ctx: Context) -> Proposal:  # type: ignore[override]
        job = self.job(ctx)
        if job is None:
            return Proposal(note="nothing to draw")
        budget = ctx.remaining.seconds
        if job.mask is not None:
            if job.base is None:
                raise ConfigError("a masked repair needs the picture to repair", field="base")
            result = await self.images.aedit(
                job.base, job.mask, job.prompt, references=job.references, size=job.size,
                budget_s=budget,
            )  # fmt: skip
        else:
            result = await self.images.agenerate(
                job.prompt, references=job.references, size=job.size, budget_s=budget
            )
        return self._proposal(job, result)
