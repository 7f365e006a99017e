"""The model adapters' deadline clock, moved by a test (a reply late without waiting)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from loopwright.adapters import _deadline
from loopwright.testing import Reply

HANG_S = 120.0  # a timeout only a hang reaches


class DeadlineClock:
    """The adapters' deadline clock, moved by the test: ``late()`` (a reply's hook, in the
    server's thread) puts every request in flight past its deadline; the next request's reply
    (``then``) sets it back. A timeout no reply reaches on its own (``HANG_S``) is then reached
    exactly where the test chose: the good replies around it have all the time they need."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        monkeypatch.setattr(_deadline, "_clock", lambda: time.monotonic() + self.offset)

    def late(self) -> None:
        self.offset = 2 * HANG_S

    def ahead(self, seconds: float) -> None:
        self.offset = seconds

    def then(self, *replies: Reply) -> Any:
        left = list(replies)

        def answer(req: Any) -> Reply:
            self.offset = 0.0
            return left.pop(0)

        return answer
