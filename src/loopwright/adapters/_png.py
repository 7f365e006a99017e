"""PNG in pure Python (zlib only): what the image adapter, its masks and its tests need.

``encode`` writes 8-bit RGB or RGBA, one zlib stream, no filters (fast to write and to read);
``decode`` reads any non-interlaced 8-bit PNG (grey, grey+alpha, RGB, RGBA, palette) with all
five row filters — what image servers and Pillow write. Pillow stays optional: the adapter must
be able to check a reply, size a mask and compare pixels without it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["MAX_PIXELS", "SIGNATURE", "Picture", "damage", "decode", "encode", "size_of"]

SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The most pixels ``decode`` reads (8192 x 8192, 256 MiB as RGBA): a PNG of a few KB may
# declare any size, and its compressed pixels may inflate to any length (a zlib bomb).
MAX_PIXELS = 8192 * 8192
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # colour type -> samples per pixel


@dataclass(frozen=True, slots=True)
class Picture:
    """Pixels as RGBA bytes, row by row (``width * height * 4``)."""

    width: int
    height: int
    rgba: bytes

    def pixel(self, x: int, y: int) -> tuple[int, int, int, int]:
        i = (y * self.width + x) * 4
        r, g, b, a = self.rgba[i : i + 4]
        return r, g, b, a


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


def encode(width: int, height: int, pixels: bytes, *, alpha: bool = False, level: int = 6) -> bytes:
    """A PNG of ``pixels`` (RGB, or RGBA when ``alpha``, row by row)."""
    step = width * (4 if alpha else 3)
    if width < 1 or height < 1 or len(pixels) != step * height:
        raise ValueError(f"{len(pixels)} bytes are not a {width}x{height} image")
    raw = b"".join(b"\x00" + pixels[y * step : (y + 1) * step] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 6 if alpha else 2, 0, 0, 0)
    return (
        SIGNATURE
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(raw, level))
        + _chunk(b"IEND", b"")
    )


def size_of(data: bytes) -> tuple[int, int]:
    """``(width, height)`` from the header; ``ValueError`` when ``data`` is not a PNG."""
    if data[:8] != SIGNATURE or data[12:16] != b"IHDR" or len(data) < 24:
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def damage(data: bytes) -> str | None:
    """Why ``data`` is not a whole PNG, or None: its header first, every chunk inside the file
    with its CRC right, up to IEND. Reads no pixels (a damaged stream inside IDAT is found
    only by ``decode``)."""
    try:
        size_of(data)
    except ValueError:
        return "not a PNG"
    view, at = memoryview(data), 8
    while True:
        if at + 12 > len(data):
            return "cut short before its IEND chunk"
        (n,) = struct.unpack(">I", view[at : at + 4])
        kind = bytes(view[at + 4 : at + 8])
        if at + 12 + n > len(data):
            return f"cut short inside its {kind.decode('latin-1')} chunk"
        (crc,) = struct.unpack(">I", view[at + 8 + n : at + 12 + n])
        if zlib.crc32(view[at + 4 : at + 8 + n]) & 0xFFFFFFFF != crc:
            return f"its {kind.decode('latin-1')} chunk fails its CRC"
        if kind == b"IEND":
            return None
        at += 12 + n


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    out, at = [], 8
    while at + 8 <= len(data):
        (n,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        out.append((kind, data[at + 8 : at + 8 + n]))
        at += 12 + n
        if kind == b"IEND":
            break
    return out


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> bytearray:
    stride = width * bpp
    out = bytearray(stride * height)
    prev = bytearray(stride)
    at = 0
    for y in range(height):
        kind = raw[at]
        line = bytearray(raw[at + 1 : at + 1 + stride])
        at += 1 + stride
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif kind == 2:
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif kind == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        elif kind != 0:
            raise ValueError(f"unknown PNG row filter {kind}")
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return out


def _inflate(parts: Iterator[bytes], size: int) -> bytes:
    """The first ``size`` bytes the zlib stream in ``parts`` inflates to, never more held:
    what lies past them (a stream that inflates without end) is not inflated."""
    inflate, out = zlib.decompressobj(), bytearray()
    try:
        for part in parts:
            while part and len(out) < size:
                out += inflate.decompress(part, size - len(out))
                part = inflate.unconsumed_tail
            if len(out) >= size:
                return bytes(out)
        out += inflate.flush()[: size - len(out)]
    except zlib.error as exc:
        raise ValueError(f"damaged PNG: {exc}") from None
    if len(out) < size:
        raise ValueError("damaged PNG: too little pixel data")
    return bytes(out)


def decode(data: bytes) -> Picture:
    """The pixels of a PNG as RGBA; ``ValueError`` for what this reader does not support
    (16-bit or fewer than 8 bits per sample, interlacing, more than ``MAX_PIXELS``, checked
    before its pixels are inflated) or a damaged file."""
    width, height = size_of(data)
    chunks = _chunks(data)
    header = chunks[0][1]
    depth, colour, _, _, interlace = header[8:13]
    if depth != 8 or colour not in _CHANNELS or interlace:
        raise ValueError(
            f"unsupported PNG (bit depth {depth}, colour type {colour}, interlace {interlace})"
        )
    if width < 1 or height < 1 or width * height > MAX_PIXELS:
        raise ValueError(
            f"PNG of {width}x{height} pixels: more than {MAX_PIXELS} (or none) are not read"
        )
    bpp = _CHANNELS[colour]
    raw = _inflate((d for k, d in chunks if k == b"IDAT"), (width * bpp + 1) * height)
    px = _unfilter(raw, width, height, bpp)
    n = width * height
    if colour == 6:
        return Picture(width, height, bytes(px))
    rgba = bytearray(n * 4)
    rgba[3::4] = b"\xff" * n
    if colour == 2:
        rgba[0::4], rgba[1::4], rgba[2::4] = px[0::3], px[1::3], px[2::3]
    elif colour == 0:
        rgba[0::4] = rgba[1::4] = rgba[2::4] = px
    elif colour == 4:
        rgba[0::4] = rgba[1::4] = rgba[2::4] = px[0::2]
        rgba[3::4] = px[1::2]
    else:  # a palette, with optional transparency
        palette = next((d for k, d in chunks if k == b"PLTE"), b"")
        trns = next((d for k, d in chunks if k == b"tRNS"), b"")
        for i, index in enumerate(px):
            rgba[i * 4 : i * 4 + 3] = palette[index * 3 : index * 3 + 3].ljust(3, b"\x00")
            rgba[i * 4 + 3] = trns[index] if index < len(trns) else 255
    return Picture(width, height, bytes(rgba))
