"""Pictures kept as blobs (``adapters.openai_images``: a part holds ``{"image": "sha256:…",
"media_type", …}``, the bytes are in the store's ``blobs`` table) shown as pictures.

``/runs/{run_id}/blob/{digest}`` serves one, only when a version of a part of that run holds it
(a digest from another run, or none at all, is a 404 like a missing run), only as a raster type
(PNG, JPEG, GIF, WebP — never SVG or HTML, which could carry script), with ``nosniff`` and a
policy that lets nothing load or run should it be opened on its own. Content-addressed, so it
is cached for good. ``picture_url(run_id, value)`` is the URL to put in an ``<img>``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from fastapi import FastAPI, HTTPException
from fastapi.responses import Response

from .._errors import ConfigError, RunNotFoundError
from .._state import TaskState
from ..store import Store
from ..store._blobs import Blob, Blobs, is_digest

__all__ = [
    "BLOB_HREF",
    "RASTER_TYPES",
    "inline_blob_refs",
    "is_picture",
    "picture_bytes",
    "picture_url",
    "register_picture_routes",
]

RASTER_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
PICTURE_CSP = "default-src 'none'; sandbox"
# An SVG part may place a stored picture by its digest: <image href="lw-blob:sha256:…"/> (the
# comic example's lettered panels). An SVG shown through <img> loads nothing from outside, so
# the dashboard puts the bytes in as a data: URL.
BLOB_HREF = "lw-blob:"
_BLOB_REF = re.compile(r'((?:xlink:)?href=)"lw-blob:(sha256:[0-9a-f]{64})"')
# What an SVG's pictures may add to it, base64 (a panel's picture is a few MB): a reference past
# it is left as it is. An SVG naming one picture a thousand times was a thousand copies in one
# answer (gigabytes in the server's memory, for one <img>).
MAX_INLINED = 64 * 1024 * 1024


def is_picture(value: Any) -> bool:
    """Whether a part's value is a picture kept as a blob."""
    return (
        isinstance(value, Mapping)
        and is_digest(value.get("image"))
        and value.get("media_type") in RASTER_TYPES
    )


def picture_url(run_id: str, value: Any) -> str | None:
    """Where the dashboard serves the picture ``value`` of run ``run_id`` (``None`` when the
    value is not a picture)."""
    if not is_picture(value):
        return None
    return f"/runs/{quote(run_id, safe='')}/blob/{value['image']}"


def picture_bytes(store: Store, value: Any) -> tuple[bytes, str] | None:
    """``(bytes, media type)`` of a picture value, read from the store; ``None`` when the value
    is not a picture or its blob is missing."""
    if not is_picture(value):
        return None
    blob = _blob(store, str(value["image"]))
    if blob is None or blob.media_type not in RASTER_TYPES:
        return None
    return blob.data, blob.media_type


def inline_blob_refs(store: Store, state: TaskState, svg: str, also: Iterable[str] = ()) -> str:
    """``svg`` with each ``lw-blob:`` picture that a part of the run (its ``state``) holds, or
    that ``also`` names (the pictures a request waiting for a decision proposes), replaced by
    its bytes as a ``data:`` URL (raster types only); any other reference is left as it is
    (and shows nothing)."""
    if BLOB_HREF not in svg:
        return svg
    held = _held_digests(state) | set(also)
    urls: dict[str, str | None] = {}  # each picture read and encoded once
    added = 0

    def inline(m: re.Match[str]) -> str:
        nonlocal added
        digest = m.group(2)
        if digest not in urls:
            blob = _blob(store, digest) if digest in held else None
            ok = blob is not None and blob.media_type in RASTER_TYPES
            urls[digest] = (
                f"data:{blob.media_type};base64,{base64.b64encode(blob.data).decode()}"
                if ok and blob is not None
                else None
            )
        url = urls[digest]
        if url is None or added + len(url) > MAX_INLINED:
            return m.group(0)
        added += len(url)
        return f'{m.group(1)}"{url}"'

    return _BLOB_REF.sub(inline, svg)


def _blob(store: Store, digest: str) -> Blob | None:
    try:
        return Blobs(store).get(digest)
    except ConfigError:  # a store that keeps no blobs has no pictures
        return None


def _held_digests(state: TaskState) -> set[str]:
    """The pictures some version of some part of the run holds."""
    return {
        str(v.value.get("image"))
        for _, part in state.iter_parts()
        for v in part.versions
        if isinstance(v.value, Mapping) and v.value.get("image")
    }


def _holds(store: Store, run_id: str, digest: str) -> bool:
    return digest in _held_digests(store.latest_checkpoint(run_id).task_state())


def register_picture_routes(app: FastAPI, store: Store) -> None:
    """``GET /runs/{run_id}/blob/{digest}`` (see the module's docstring)."""

    @app.get("/runs/{run_id}/blob/{digest}", include_in_schema=False)
    def run_blob(run_id: str, digest: str) -> Response:
        if not is_digest(digest):
            raise HTTPException(404, "not a picture digest (sha256:<64 hex digits>)")
        try:
            rec = store.get_run(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(404, str(exc)) from exc
        if not _holds(store, rec.run_id, digest):
            raise HTTPException(404, f"run {rec.run_id} holds no picture {digest}")
        blob = _blob(store, digest)
        if blob is None or blob.media_type not in RASTER_TYPES:
            why = "is not in the store" if blob is None else "is not a raster picture"
            raise HTTPException(404, f"{digest} {why}")
        return Response(
            blob.data,
            media_type=blob.media_type,
            headers={
                "Content-Security-Policy": PICTURE_CSP,
                "X-Content-Type-Options": "nosniff",
                "Content-Disposition": "inline",
                "Cache-Control": "private, max-age=31536000, immutable",
            },
        )
