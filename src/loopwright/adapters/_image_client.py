"""The image adapter's request half: settings checked, identity, limits and pickling, the SDK
clients (sync, and one async client per event loop), a request's fields, a failed request named
and masked, a picture fetched from a ``url`` reply."""

from __future__ import annotations

import http.client
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from .._errors import ConfigError
from .._redact import redact_text, register_secret
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
from ._image_data import size_ok
from ._image_reply import ImagePrice, ImageResult
from ._limits import Limits
from ._schema import MalformedReplyError

if TYPE_CHECKING:
    import openai

    from ..store._blobs import Blobs

__all__ = ["MAX_REPLY_BYTES"]


MAX_REPLY_BYTES = 256 * 2**20
"""The largest response body (or picture fetched from a ``url`` reply) the image adapter reads:
a few large pictures as base64; a larger one fails as ``ReplyTooLarge``, permanent."""

_NO_SDK = "the image adapter needs the openai SDK: pip install 'loopwright[openai]'"


class ImageClient(SdkClients):
    """``ImageModel``'s settings and SDK clients (its arguments are documented there); what a
    request sends, and what a failed one raises."""

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
        load_sdk(_NO_SDK)  # now, not in the first (timed) call
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("a model name is required", field="model")
        if size is not None and not size_ok(size):
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
        register_endpoint(self._endpoint)
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
        self._aclients = async_clients()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._gate()

    # --- identity, limits, pickling -------------------------------------------------------
    def __repr__(self) -> str:
        return f"ImageModel(model={self.model!r}, base_url={public_url(self.base_url)!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_client", "_aclients", "_lock", "_blobs", "_store"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._client, self._blobs, self._store = None, None, None
        self._aclients = async_clients()
        self._lock = threading.Lock()
        self._gate()
        register_secret(self._api_key)
        register_endpoint(self._endpoint)

    _no_sdk = _NO_SDK

    def _reply_cap(self) -> int:
        return MAX_REPLY_BYTES  # read at each call: a test or a user may change the module's cap

    def _kwargs(self, prompt: str, size: str | None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "prompt": prompt, "n": 1}
        size = size or self.size
        if size is not None:
            if not size_ok(size):
                raise ConfigError(f"must be WIDTHxHEIGHT, got {size!r}", field="size")
            kwargs["size"] = size
        if self.quality is not None:
            kwargs["quality"] = self.quality
        if self.response_format is not None:
            kwargs["response_format"] = self.response_format
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        return kwargs

    def _request(self, prompt: str, size: str | None, files: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ConfigError("an image needs a prompt", field="prompt")
        return {**self._kwargs(prompt, size), **files}

    def _failed(self, exc: Exception, budget_s: float | None) -> None:
        """Raise what a failed request means (named, redacted, Retry-After capped)."""
        if type(exc).__name__ == "APIResponseValidationError":
            raise MalformedReplyError(
                f"the server's response is not an images response: {redact_text(str(exc))}"
            ) from exc
        if body_not_json(exc):
            raise MalformedReplyError(
                "the server answered with an empty body or one that is not JSON"
            ) from exc
        name_the_call(exc, self.model, self._endpoint)
        redact_exc(exc)
        cap = self.max_retry_after_s if budget_s is None else min(self.max_retry_after_s, budget_s)
        cap_retry_after(exc, cap)
        raise exc

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
