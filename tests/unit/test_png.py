"""The image adapter's pure-Python PNG (loopwright.adapters._png) against Pillow's: every row
filter, every 8-bit colour type, and the files it must refuse."""

from __future__ import annotations

import contextlib
import io
import random
import struct
import tracemalloc
import zlib
from typing import Any

import pytest
from PIL import Image

from loopwright.adapters import _png


def _noise(w: int, h: int, seed: int = 1) -> bytes:
    rnd = random.Random(seed)
    return bytes(rnd.randrange(256) for _ in range(w * h * 4))


def test_encode_round_trips_and_pillow_reads_it() -> None:
    w, h = 37, 23
    px = _noise(w, h)
    data = _png.encode(w, h, px, alpha=True)
    assert _png.size_of(data) == (w, h)
    assert _png.decode(data).rgba == px
    with Image.open(io.BytesIO(data)) as im:
        assert im.mode == "RGBA" and im.tobytes() == px
    rgb = bytes(b for i, b in enumerate(px) if i % 4 != 3)
    with Image.open(io.BytesIO(_png.encode(w, h, rgb))) as im:
        assert im.mode == "RGB" and im.tobytes() == rgb
    with pytest.raises(ValueError):
        _png.encode(w, h, px)  # RGBA bytes for an RGB picture


@pytest.mark.parametrize("mode", ["RGBA", "RGB", "L", "LA", "P"])
def test_decodes_what_pillow_writes(mode: str) -> None:
    # a smooth picture with noise: Pillow's optimiser picks different filters row by row
    w, h = 61, 40
    base = Image.frombytes("RGBA", (w, h), _noise(w, h, 7))
    ramp = Image.linear_gradient("L").resize((w, h)).convert("RGBA")
    im = Image.blend(base, ramp, 0.7).convert(mode)
    buf = io.BytesIO()
    im.save(buf, "PNG", optimize=True)
    assert _png.decode(buf.getvalue()).rgba == im.convert("RGBA").tobytes()


def _with_header(depth: int, colour: int, interlace: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", 2, 2, depth, colour, 0, 0, interlace)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return struct.pack(">I", len(data)) + kind + data + crc

    idat = zlib.compress(b"\x00" + b"\x00" * 12 + b"\x00" + b"\x00" * 12)
    return _png.SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_refuses_what_it_cannot_read() -> None:
    with pytest.raises(ValueError, match="not a PNG"):
        _png.decode(b"GIF89a" + b"\x00" * 40)
    with pytest.raises(ValueError, match="bit depth 16"):
        _png.decode(_with_header(16, 2, 0))
    with pytest.raises(ValueError, match="interlace 1"):
        _png.decode(_with_header(8, 2, 1))
    good = _png.encode(4, 4, b"\x10" * 48)
    with pytest.raises(ValueError, match="damaged"):
        _png.decode(good[:40] + b"\x00" * 10 + good[50:])


def _declaring(width: int, height: int, pixels: bytes) -> bytes:
    """An RGB PNG declaring ``width``x``height`` whose IDAT is ``pixels`` compressed."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return struct.pack(">I", len(data)) + kind + data + crc

    idat = zlib.compress(pixels, 9)
    return _png.SIGNATURE + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def _peak_bytes(call: Any) -> int:
    """The most memory Python held while ``call()`` ran (allocations: not timing)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with contextlib.suppress(ValueError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


BOMB = 48 * 2**20  # zero bytes, a few tens of KB compressed


def test_declared_dimensions_past_the_limit_are_refused_before_inflating() -> None:
    """A PNG of a few KB declaring 100000x100000 pixels was inflated whole (a zlib bomb: any
    length) before its size was checked. Its size is checked first: nothing is inflated."""
    data = _declaring(100_000, 100_000, b"\0" * BOMB)
    assert len(data) < 128 * 1024
    with pytest.raises(ValueError, match=r"100000x100000 pixels: more than \d+"):
        _png.decode(data)
    assert _peak_bytes(lambda: _png.decode(data)) < 4 * 2**20


def test_pixel_data_is_inflated_only_up_to_the_declared_size() -> None:
    """A small picture whose IDAT inflates to 48 MiB held all of it; it is inflated
    incrementally up to what its 16x16 pixels need, and decodes as its first rows say."""
    w, h = 16, 16
    data = _declaring(w, h, b"\0" * BOMB)
    picture = _png.decode(data)
    assert (picture.width, picture.height) == (w, h)
    assert picture.rgba == b"\0\0\0\xff" * (w * h)
    assert _peak_bytes(lambda: _png.decode(data)) < 4 * 2**20


def test_pixel_data_in_many_idat_chunks_is_read_whole() -> None:
    w, h = 37, 23
    px = _noise(w, h)
    rgb = b"".join(
        b"\x00" + bytes(b for i, b in enumerate(px[y * w * 4 : (y + 1) * w * 4]) if i % 4 != 3)
        for y in range(h)
    )
    stream = zlib.compress(rgb)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return struct.pack(">I", len(data)) + kind + data + crc

    idats = b"".join(chunk(b"IDAT", stream[i : i + 7]) for i in range(0, len(stream), 7))
    data = _png.SIGNATURE + chunk(b"IHDR", ihdr) + idats + chunk(b"IEND", b"")
    opaque = bytes(b if i % 4 != 3 else 255 for i, b in enumerate(px))
    assert _png.decode(data).rgba == opaque
    with pytest.raises(ValueError, match="damaged PNG"):
        _png.decode(_png.SIGNATURE + chunk(b"IHDR", ihdr) + idats[: len(idats) // 2])
