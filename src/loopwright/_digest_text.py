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
the text), so its escaping is not done again. The cache holds at most ``_REMEMBERED`` values
and ``_REMEMBERED_BYTES`` bytes (values and escapings), for the whole process.
"""

from __future__ import annotations

import sys
import threading
from json.encoder import encode_basestring_ascii as _ascii

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a core dependency
    orjson = None  # type: ignore[assignment]

__all__ = ["escaped_twice"]

# Values at least this long are remembered (a shorter one costs less to escape than to find).
_REMEMBER_MIN = 1024
# At most this many values, holding at most this many bytes together (each value's ``str``
# and its escaped bytes: what the cache keeps alive): a cache full is emptied. Stop 50: the
# bound was 16 M *characters* of values alone, which held up to ≈ 290 MB for text outside
# the BMP (4 bytes a character, 14 escaped), and a lost update of the count between threads
# could let it pass the bound; the bytes counted here are what a process holds at most,
# however many runs it makes (the cache is the process's, not a run's).
_REMEMBERED = 64
_REMEMBERED_BYTES = 32 << 20
_known: dict[int, tuple[str, bytes]] = {}  # len(value) -> (value, its bytes)
_known_bytes = [0]  # the bytes the values it holds and their escapings take
_lock = threading.Lock()  # (a lookup takes none: ``dict.get`` is atomic)


def _once(v: str) -> bytes:
    """``_ascii(v).encode()``: the value's JSON text, ASCII-escaped."""
    if orjson is not None and v.isascii() and "\x7f" not in v:
        return orjson.dumps(v)
    return _ascii(v).encode()


def _held(v: str, out: bytes) -> int:
    return sys.getsizeof(v) + sys.getsizeof(out)


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
        _remember(n, v, out)
    return out


def _remember(n: int, v: str, out: bytes) -> None:
    size = _held(v, out)
    if size > _REMEMBERED_BYTES:
        return
    with _lock:  # (the check, the emptying and the count as one: no update lost)
        old = _known.pop(n, None)  # (a value of the same length is replaced: its bytes go)
        if old is not None:
            _known_bytes[0] -= _held(*old)
        if len(_known) >= _REMEMBERED or _known_bytes[0] + size > _REMEMBERED_BYTES:
            _known.clear()
            _known_bytes[0] = 0
        _known[n] = (v, out)
        _known_bytes[0] += size


def forget() -> None:
    """Empty the cache (what it holds is let go of)."""
    with _lock:
        _known.clear()
        _known_bytes[0] = 0
