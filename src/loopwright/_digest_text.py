"""A text value as the proposal digest's canonical text holds it: the JSON text of the value
(``json``'s ASCII escaping) escaped again as a JSON string, as UTF-8 bytes, built in one pass
over the value (stop 49, digest49).

The bytes are exactly ``encode_basestring_ascii(encode_basestring_ascii(v)).encode()``, what
the digest hashed before (stored digests and approvals are bound to them; a unit test pins
known digests). Two facts make the shortcut exact:

* on ASCII text without DEL (``\\x7f``), orjson's JSON string is ``json``'s ASCII one, byte
  for byte (the same escapes of ``"``, ``\\`` and every control character), written in C at
  memory speed where ``json``'s escaper reads a character at a time;
* an ASCII-escaped JSON string holds only printable ASCII, so escaping it again changes only
  ``\\`` and ``"``: two ``bytes.replace`` (``memchr``), not a second escaper's pass.

A large value sent again (the same object, or an equal text: a document the actor passes back
unchanged) is found in a small cache keyed by its length and compared (``memcmp``, no hash of
the text), so its escaping is not done again.
"""

from __future__ import annotations

from json.encoder import encode_basestring_ascii as _ascii

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a core dependency
    orjson = None  # type: ignore[assignment]

__all__ = ["escaped_twice"]

# Values at least this long are remembered (a shorter one costs less to escape than to find).
_REMEMBER_MIN = 1024
# At most this many values, of at most this many characters together: a cache full is emptied.
_REMEMBERED = 64
_REMEMBERED_CHARS = 16 << 20
_known: dict[int, tuple[str, bytes]] = {}  # len(value) -> (value, its bytes)
_known_chars = [0]  # the characters of the values it holds


def _once(v: str) -> bytes:
    """``_ascii(v).encode()``: the value's JSON text, ASCII-escaped."""
    if orjson is not None and v.isascii() and "\x7f" not in v:
        return orjson.dumps(v)
    return _ascii(v).encode()


def escaped_twice(v: str) -> bytes:
    """``_ascii(_ascii(v)).encode()``, the value's bytes in the digest's canonical text."""
    n = len(v)
    if n >= _REMEMBER_MIN:
        hit = _known.get(n)
        if hit is not None and (hit[0] is v or hit[0] == v):
            return hit[1]
    once = _once(v)
    if b"\\" in once:  # (most text holds none: one ``memchr``, no copy)
        once = once.replace(b"\\", b"\\\\")
    out = b'"' + once.replace(b'"', b'\\"') + b'"'
    if n >= _REMEMBER_MIN:
        if len(_known) >= _REMEMBERED or _known_chars[0] + n > _REMEMBERED_CHARS:
            _known.clear()
            _known_chars[0] = 0
        if n <= _REMEMBERED_CHARS:
            _known[n] = (v, out)
            _known_chars[0] += n
    return out
