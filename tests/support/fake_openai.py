"""The scripted OpenAI-compatible server now ships as ``loopwright.testing``; tests import it
from here out of habit."""

from loopwright.testing import FakeOpenAI, Reply, Request, fail, garbage, ok, slow

__all__ = ["FakeOpenAI", "Reply", "Request", "fail", "garbage", "ok", "slow"]
