"""The redaction net's shape search, whole text against anchored (stop 51): µs per KB of
``SHAPES.sub(masked_shape, text)`` (the search before stop 51) and of ``shapes_sub`` (tried only
where a shape can start) on the LDB programs (code), the docs (prose) and each unit of
``bench/redact_adversarial.py`` repeated to SIZE characters; the best of three runs each.
Checks that both give the same text.

Usage:  python bench/shape_search.py [SIZE]   (default 30000)

Timings, not instructions: read them on a quiet machine.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from redact_adversarial import UNITS

from loopwright._redact_anchors import shapes_sub
from loopwright._redact_shapes import SHAPES
from loopwright._redact_substitutions import masked_shape

ROOT = Path(__file__).resolve().parent.parent


def _code() -> str:
    out: list[str] = []
    for path in sorted((ROOT / "tests/data/ldb/humaneval").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            out += [p for p in json.loads(line).get("implementations", []) if isinstance(p, str)]
    return "\n".join(out)


def _prose() -> str:
    return "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def _whole(s: str) -> str:
    return SHAPES.sub(masked_shape, s)


def _anchored(s: str) -> str:
    return shapes_sub(s, s.lower())


def best(f: Callable[[str], str], s: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f(s)
        times.append(time.perf_counter() - t)
    return min(times)


def row(name: str, s: str) -> None:
    assert _whole(s) == _anchored(s), name
    a, b = best(_whole, s), best(_anchored, s)
    kb = len(s) / 1000
    print(f"{name:18}{len(s):>10,}{a * 1e6 / kb:>12.1f}{b * 1e6 / kb:>12.1f}{a / b:>8.0f}x")


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
    print(f"{'text':18}{'chars':>10}{'whole µs/KB':>12}{'anch. µs/KB':>12}{'ratio':>9}")
    row("LDB code", _code())
    row("docs prose", _prose())
    for name, unit in UNITS.items():
        row(name, unit * (size // len(unit)))


if __name__ == "__main__":
    main()
