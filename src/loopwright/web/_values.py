"""A part's or record's value as a page shows it: shortened to a line (``short``), drawn
when it is an SVG (``is_svg``), shown through its blob when it is a picture
(``picture_digest``)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["is_svg", "picture_digest", "short"]


def short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def picture_digest(value: Any) -> str | None:
    """The digest of a picture part's blob (``/runs/{id}/blob/{digest}`` serves it), or None."""
    from ._pictures import is_picture

    return str(value["image"]) if is_picture(value) else None


def is_svg(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:200].lower().startswith(("<svg", "<?xml"))
