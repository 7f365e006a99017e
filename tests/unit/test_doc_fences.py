"""Every code fence in the docs is closed (newcomer54): a stray fragment's closing ``` in
docs/concepts.md opened a block that swallowed the rest of the page (the stop contract,
the invariants, the metrics) into one code block."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted((ROOT / "examples").glob("*/README.md"))]  # fmt: skip
FENCE = re.compile(r"^ {0,3}```")


def test_every_fence_is_closed() -> None:
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        opened: int | None = None
        for n, line in enumerate(lines, 1):
            if not FENCE.match(line):
                continue
            if opened is None:
                opened = n
            else:
                assert line.strip() == "```", f"{page.name}:{n}: a fence closed with {line!r}"
                opened = None
        assert opened is None, f"{page.name}:{opened}: a code fence never closed"
