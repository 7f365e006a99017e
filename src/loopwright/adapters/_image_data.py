"""A picture as the image adapter keeps it: what its bytes are (PNG, JPEG, GIF, WebP) and
whether they are whole, the part value that names it (``image_value``), an edit mask drawn
from boxes, and a ``WIDTHxHEIGHT`` size checked."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from . import _png

__all__ = ["image_value", "is_image_value", "region_mask"]

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (_png.SIGNATURE, "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
)


def media_type_of(data: bytes) -> str | None:
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def damage(data: bytes, kind: str) -> str | None:
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


def size_ok(size: Any) -> bool:
    if not isinstance(size, str):
        return False
    if size == "auto":
        return True
    w, sep, h = size.partition("x")
    return bool(sep) and w.isdigit() and h.isdigit() and int(w) > 0 and int(h) > 0
