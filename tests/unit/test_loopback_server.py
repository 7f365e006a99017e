"""The fake servers of ``loopwright.testing`` say nothing when a client goes away.

A client that closes a kept-alive connection (or gives up mid-reply) made ``socketserver``
print "Exception occurred during processing of request" and a ``ConnectionResetError``
traceback to stderr from ``tests/integration/test_adapter_redirects.py``: noise in every
suite run that reads as a failure. An error of the handler itself is still printed."""

from __future__ import annotations

import pytest

from loopwright.testing import FakeImages, FakeOpenAI, LoopbackServer


def _error_while(exc: BaseException, server: LoopbackServer) -> None:
    try:
        raise exc
    except BaseException:
        server.handle_error(None, ("127.0.0.1", 1))  # as socketserver calls it


@pytest.mark.parametrize("gone", [ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe")])
def test_a_client_that_went_away_is_not_reported(
    gone: BaseException, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeOpenAI() as fake:
        assert isinstance(fake._server, LoopbackServer)
        _error_while(gone, fake._server)
    images = FakeImages().start()
    try:
        assert isinstance(images._server, LoopbackServer)
        _error_while(gone, images._server)
    finally:
        images.stop()
    assert capsys.readouterr().err == ""


def test_an_error_of_the_handler_is_still_reported(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeOpenAI() as fake:
        assert fake._server is not None
        _error_while(KeyError("a bug in the handler"), fake._server)
    err = capsys.readouterr().err
    assert "Exception occurred during processing of request" in err
    assert "a bug in the handler" in err
