"""Open ``/api/events`` streams are bounded (web50b): each holds a connection and a task
looking at the feed 4 times a second, and any reader (on loopback, with no token) could open
them without end. ``create_app(max_streams=N)``: one more is 503 with ``Retry-After``, and a
stream that ends makes room. Served by uvicorn in this process; the streams are counted in
before their answer, so the refusal does not depend on timing (the wait for a closed stream
to be counted out is a condition polled, not a duration)."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from types import ModuleType

import pytest
from support.modules import load_sibling

from loopwright import ConfigError
from loopwright._authority import hash_token
from loopwright.store import open_store
from loopwright.web import create_app

TOKEN = "live-token-0123456789"


def _live() -> ModuleType:
    return load_sibling(__file__, "test_live.py", "_live_helpers_stream_cap")


def _open_as(
    port: int, headers: dict[str, str]
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", "/api/events", headers={"Accept": "text/event-stream", **headers})
    return conn, conn.getresponse()


def _open(port: int) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    return _open_as(port, {})


def test_a_stream_beyond_the_cap_is_503_with_retry_after(tmp_path: Path) -> None:
    live = _live()
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN, max_streams=2)
    with live.served(app) as port:
        opened = [_open(port) for _ in range(2)]
        try:
            for _, resp in opened:
                assert resp.status == 200 and resp.readline() == b"retry: 3000\n"
            assert app.state.messages.streams == 2
            conn, resp = _open(port)
            assert resp.status == 503
            assert resp.headers["Retry-After"].isdigit()
            assert "2 event streams are open" in json.loads(resp.read())["detail"]
            conn.close()
            assert app.state.messages.streams == 2  # the refused one counted nothing
            opened.pop(0)[0].close()  # a stream ends: room for one
            live.until(lambda: app.state.messages.streams == 1, "the closed stream counted out")
            opened.append(_open(port))
            assert opened[-1][1].status == 200
        finally:
            for c, _ in opened:
                c.close()


@pytest.mark.parametrize("field", ["max_streams", "max_streams_per_person", "max_resumes"])
@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_max_streams_must_be_a_count(tmp_path: Path, bad: object, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        create_app(str(tmp_path / "s.db"), token=TOKEN, **{field: bad})  # type: ignore[arg-type]
    assert e.value.field == field


def test_one_person_holds_at_most_their_share_of_the_streams(tmp_path: Path) -> None:
    """Any reader could hold every stream the server keeps, so no one else's page followed the
    store. In a store with users (every reader signed in) one person (a viewer's token) holds
    at most ``max_streams_per_person``; another person still gets theirs."""
    live = _live()
    store = str(tmp_path / "live.db")
    s = open_store(store)
    try:
        for name in ("vic", "ana"):
            s.add_user(name, roles=["viewer"], limits={}, by="test", now=time.time())
            s.set_token(name, hash_token(f"tok-{name}-0123456789"), now=time.time())
    finally:
        s.close()
    app = create_app(store, token=TOKEN, max_streams=10, max_streams_per_person=2)
    vic, ana = ({"Authorization": f"Bearer tok-{n}-0123456789"} for n in ("vic", "ana"))
    with live.served(app) as port:
        opened = [_open_as(port, vic) for _ in range(2)]
        try:
            assert [r.status for _, r in opened] == [200, 200]
            conn, resp = _open_as(port, vic)
            assert resp.status == 503 and resp.headers["Retry-After"].isdigit()
            assert "you have 2 event streams open" in json.loads(resp.read())["detail"]
            conn.close()
            opened.append(_open_as(port, ana))  # another person: their own share
            assert opened[-1][1].status == 200
            assert app.state.messages.streams == 3
            opened.pop(0)[0].close()  # one of vic's ends: room for another of vic's
            live.until(lambda: app.state.messages.streams == 2, "the closed stream counted out")
            opened.append(_open_as(port, vic))
            assert opened[-1][1].status == 200
        finally:
            for c, _ in opened:
                c.close()


def test_readers_not_signed_in_hold_one_persons_share_together(tmp_path: Path) -> None:
    """stop 52: in a store without users read on loopback (no token needed), the readers not
    signed in were counted in ``max_streams`` only, so a local script could hold every stream
    and the operator's signed-in page got none. Together they hold one person's share now."""
    live = _live()
    store = str(tmp_path / "live.db")
    open_store(store).close()
    app = create_app(store, token=TOKEN, max_streams=10, max_streams_per_person=2)
    operator = {"Authorization": f"Bearer {TOKEN}"}
    with live.served(app) as port:
        opened = [_open(port) for _ in range(2)]
        try:
            assert [r.status for _, r in opened] == [200, 200]
            conn, resp = _open(port)
            assert resp.status == 503 and resp.headers["Retry-After"].isdigit()
            assert "not signed in" in json.loads(resp.read())["detail"]
            conn.close()
            for _ in range(3):  # the operator (not counted per person) still gets theirs
                opened.append(_open_as(port, operator))
                assert opened[-1][1].status == 200
            assert app.state.messages.streams == 5
        finally:
            for c, _ in opened:
                c.close()
