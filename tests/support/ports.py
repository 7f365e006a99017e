"""A loopback port that refuses connections, and that no other process can take meanwhile."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback TCP port bound here and never listened on, for the block: a connection to it
    is refused, every time. The port of a server that has stopped is free for any process to
    bind (the other xdist process's servers take ports the same way), and a test expecting a
    refused connection then reached that other server."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])
