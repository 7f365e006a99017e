"""What ``loopwright show`` prints, read in process with the memory it took."""

from __future__ import annotations

import io
import sys
import tracemalloc

from loopwright.cli import _app


class TextSink(io.TextIOBase):
    """stdout that keeps what is written, piece by piece."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, s: str) -> int:
        self.parts.append(s)
        return len(s)


def shown_text(url: str, run_id: str, *, every: bool = True) -> tuple[str, int]:
    """(what ``loopwright show`` printed, peak bytes allocated while it read and printed);
    ``every``: the whole timeline (``--all``), else its default window (the last cycles)."""
    sink = TextSink()
    old = sys.stdout
    sys.stdout = sink
    tracemalloc.start()
    try:
        _app.show(run_id, store=url, as_json=False, all_=every)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        sys.stdout = old
    return "".join(sink.parts), peak
