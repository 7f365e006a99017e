"""A TCP proxy to PostgreSQL that loses one COMMIT's answer, for the fault tests.

``python lose_commit.py PG_HOST PG_PORT CTL_DIR``: listens on a free loopback port (written to
``CTL_DIR/port``) and forwards every connection to the server. Once ``CTL_DIR/arm`` exists, the
first CommandComplete ``COMMIT`` the server sends is not forwarded: both sides are closed
instead (``CTL_DIR/fired`` written) — the transaction is durable and its client is told the
connection died. Clients must connect with ``sslmode=disable`` (the proxy reads the server's
messages).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import threading
from pathlib import Path


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


def _to_server(client: socket.socket, server: socket.socket) -> None:
    try:
        while data := client.recv(65536):
            server.sendall(data)
    except OSError:
        pass
    _close(client, server)


def _to_client(
    server: socket.socket, client: socket.socket, ctl: Path, once: threading.Lock
) -> None:
    buf = b""
    try:
        while data := server.recv(65536):
            buf += data
            out = b""
            while len(buf) >= 5:  # after the startup: every message is type, length, body
                size = struct.unpack("!I", buf[1:5])[0]
                if len(buf) < 1 + size:
                    break
                msg, buf = buf[: 1 + size], buf[1 + size :]
                if (
                    msg[:1] == b"C"
                    and msg[5:11] == b"COMMIT"
                    and (ctl / "arm").exists()
                    and once.acquire(blocking=False)
                ):
                    client.sendall(out)
                    (ctl / "fired").write_text("1")
                    raise OSError("the COMMIT's answer is lost")
                out += msg
            client.sendall(out)
    except OSError:
        pass
    _close(server, client)


def main(host: str, port: str, ctl_dir: str) -> None:
    ctl = Path(ctl_dir)
    once = threading.Lock()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    (ctl / "port.tmp").write_text(str(listener.getsockname()[1]))
    (ctl / "port.tmp").rename(ctl / "port")
    while True:
        client, _ = listener.accept()
        server = socket.create_connection((host, int(port)))
        threading.Thread(target=_to_server, args=(client, server), daemon=True).start()
        threading.Thread(target=_to_client, args=(server, client, ctl, once), daemon=True).start()


if __name__ == "__main__":
    main(*sys.argv[1:])
