"""A part's or record's value as a page shows it: shortened to a line (``short``), drawn
when it is an SVG (``is_svg``), shown through its blob when it is a picture
(``picture_digest``); the characters that reorder what a person reads written out
(``reveal``, every value a template writes)."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["Exact", "exact", "is_svg", "picture_digest", "reveal", "short"]

# What makes a browser show text other than in its order: the bidirectional marks,
# embeddings, overrides and isolates, and the line and paragraph separators (as the CLI's
# ``printable`` writes them out for a terminal). A value with U+202E (right-to-left override)
# shows "\u202e0001" as "1000" and an invoice "INV-1234\u202e99" with its tail reversed: on an
# approval card, the person would approve what they did not read.
_REORDERING = re.compile("[\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


class Exact(str):
    """A string a form sends back (a part's value in its edit box, a search typed): written
    as it is, never ``reveal``-ed, so what is submitted is what was stored or typed."""

    __slots__ = ()


def exact(value: Any) -> Any:
    """The ``|exact`` filter: a string as an ``Exact`` one (None and others unchanged)."""
    return Exact(value) if isinstance(value, str) else value


def _written(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def reveal(value: Any) -> Any:
    """The Jinja ``finalize`` of every page: a string with the reordering characters written
    out (``\\u202e``); markup (escaped already, or drawn by the server), an ``Exact`` string
    and other values unchanged."""
    if type(value) is not str:  # Markup and Exact are str's subclasses: left as they are
        return value
    return _REORDERING.sub(_written, value)


def short(value: Any, limit: int = 120) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def picture_digest(value: Any) -> str | None:
    """The digest of a picture part's blob (``/runs/{id}/blob/{digest}`` serves it), or None."""
    from ._pictures import is_picture

    return str(value["image"]) if is_picture(value) else None


def is_svg(value: Any) -> bool:
    return isinstance(value, str) and value.lstrip()[:200].lower().startswith(("<svg", "<?xml"))
