"""How a known secret value reads where it is written otherwise than as itself (``_redact``):
escaped in a printed or JSON string (``written_forms``: these join the values' own search), and
encoded — base64 and hex (masked with the run of such characters around them), percent-encoded
and as Go and PHP escape JSON (``encoded_of``: searched by substring tests, apart from the
values' expression).

Moved out of ``_redact`` (which walks data; the registries are ``_redact_registry``'s);
``_redact`` re-exports every name here that its tests reach.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import urllib.parse

from ._redact_shapes import REDACTED


def written_forms(value: str) -> set[str]:
    """``value`` and how it reads inside a printed string (``repr``: a tuple, dict or bytes in
    an exception's message) and inside a JSON string (an error body), where a quote, a
    backslash or a control character is escaped and the value's own text is not found. The
    forms differ only for such a value, which ``_unsure`` already sends down the full walk.
    A value beyond ASCII also reads as JSON that escapes it (``\\u00e4``: Python's ``json``
    by default, an echoed error body), as ``ascii()`` writes it (``\\xe4``) and as its UTF-8
    bytes print (``b'p\\xc3\\xa4ss'``: a driver's error quoting what it was sent)."""
    forms = {value, repr(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    if not value.isascii():
        forms.add(json.dumps(value)[1:-1])
        forms.add(ascii(value)[1:-1])
        forms.add(repr(value.encode("utf-8", "backslashreplace"))[2:-1])
    return forms


_BASE64_MIN = 7  # shorter forms (a value under 6 bytes) match by chance
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]*+")
_BASE64_TAIL = re.compile(r"[A-Za-z0-9+/_-]*+={0,2}")


def base64_cores(value: str) -> set[str]:
    """What every base64 text holding ``value``'s UTF-8 bytes contains, whatever precedes and
    follows it (``user:`` of a Basic token, a JSON body): at each of the three places the value
    can start in a 3-byte group, the characters whose 6 bits are all the value's, standard and
    URL-safe, without padding (``QUJD`` is a full group; a character that also encodes a
    neighbour's bits is left out). The characters around such a core encode bytes only partly
    the value's: ``mask_base64`` masks the whole run. A value of 6 bytes has 8 such characters
    where it starts a group and 7 at the other two places, one of 7 bytes 8 or more at each;
    forms under ``_BASE64_MIN`` are left out."""
    raw = value.encode("utf-8", "surrogatepass")
    bits = 8 * len(raw)
    cores: set[str] = set()
    for at in (0, 1, 2):  # the value's first byte is byte ``at`` of its group
        first = -(-8 * at // 6)  # the first character all of whose bits are the value's
        last = (8 * at + bits) // 6  # and the one after the last
        std = base64.b64encode(bytes(at) + raw).decode("ascii")[first:last]
        if len(std) >= _BASE64_MIN:
            cores.update((std, std.replace("+", "-").replace("/", "_")))
    return cores


def hex_forms(value: str) -> set[str]:
    """``value``'s UTF-8 bytes in hexadecimal, lower and upper case (``bytes.hex()``, a debug
    dump, a digest tool's input echoed): every hex text holding the bytes holds one of these,
    at an even offset. Masked as a base64 core is (the whole run of such characters)."""
    raw = value.encode("utf-8", "surrogatepass").hex()
    return {raw, raw.upper()}


def escaped_forms(value: str) -> set[str]:
    """How ``value`` reads where a character of it is written otherwise than ``written_forms``
    knows: percent-encoded (a URL's query or path, a form body: ``p%40ss``, with ``/`` kept or
    not, a space as ``+``), in JSON as Go writes it (``&``, ``<``, ``>`` as ``\\u0026`` …: a
    model server or gateway in Go echoing a key) and as PHP does (``/`` as ``\\/``). Only a
    value holding such a character has any (an API key of letters, digits, ``-`` and ``_``
    has none)."""
    forms = {
        urllib.parse.quote(value, safe=""),
        urllib.parse.quote(value),
        urllib.parse.quote_plus(value),
    }
    if "&" in value or "<" in value or ">" in value:
        escaped = json.dumps(value, ensure_ascii=False)[1:-1]
        for c, u in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e")):
            escaped = escaped.replace(c, u)
        forms.add(escaped)
    if "/" in value:
        forms.add(json.dumps(value)[1:-1].replace("/", "\\/"))
    forms.discard(value)
    return forms


@functools.lru_cache(maxsize=64)
def encoded_of(
    values: tuple[str, ...],
) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The known secret ``values`` encoded: ``(runs, forms, in_json, hexes)``. ``runs``: the
    base64 forms (``base64_cores``) and the hex ones (``hex_forms``), each masked with the
    run of base64 characters around it (``mask_base64``); ``forms``: the escaped ones
    (``escaped_forms``), replaced where found. For ``_clean``'s scan of a record's JSON text:
    ``in_json``, the base64 and escaped forms as they read there, and ``hexes``, the hex forms
    in lower case, searched in the lower-cased text (one test finds either case). Searched
    apart from the values' expression, by substring tests: added to it, they turned the one
    literal an API key is into an alternation the engine tries at every character: +61 k
    instructions a cycle with a key in the environment, +3 k with these tests
    (bench/RESULTS.md, stop 45)."""
    hexes = {h for v in values for h in hex_forms(v)}
    runs = {c for v in values for c in base64_cores(v)} | hexes
    forms = {f for v in values for f in escaped_forms(v)} - set(values)
    in_json = {json.dumps(x, ensure_ascii=False)[1:-1] for x in (runs - hexes) | forms}
    return (
        tuple(sorted(runs, key=len, reverse=True)),
        tuple(sorted(forms, key=len, reverse=True)),
        tuple(sorted(in_json, key=len, reverse=True)),
        tuple(sorted({h.lower() for h in hexes}, key=len, reverse=True)),
    )


def mask_base64(s: str, core: str) -> str:
    """``s`` with each run of base64 characters (both alphabets, and its padding) that holds
    ``core`` masked whole, but for an escaped line break's letter it starts with (``\\n``);
    one pass of ``s``."""
    out: list[str] = []
    done = 0
    rev = ""
    i = s.find(core)
    while i >= 0:
        if not rev:
            rev = s[::-1]  # the run's start, found reading backwards from the core
        left = len(s) - i
        start = max(done, i - (_BASE64_RUN.match(rev, left).end() - left))  # type: ignore[union-attr]
        end = _BASE64_TAIL.match(s, i + len(core)).end()  # type: ignore[union-attr]
        if start < i and s[start] in "nrt" and s[start - 1 : start] == "\\":
            start += 1  # the run starts with an escape's letter (``\nQUJD…``): kept
        out += (s[done:start], REDACTED)
        done = end
        i = s.find(core, done)
    return s if not out else "".join(out) + s[done:]
