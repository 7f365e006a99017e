"""`loopwright ui` listens before it names its address (outside probe outside50a).

The start line `loopwright ui: http://127.0.0.1:PORT/` was printed with the socket bound but
not listening (uvicorn called ``listen`` later, as it started): a script that read the line
and connected at once — what `--port 0` is for — was refused (ECONNREFUSED) and had to poll.
The socket now listens when the line is written; a connection made then waits in the backlog
and is answered once the server runs.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import loopwright as lw


def test_the_address_printed_accepts_a_connection_at_once(tmp_path: Path) -> None:
    store = str(tmp_path / "ui.db")
    with lw.Runtime(store):
        pass
    env = {**os.environ, "LOOPWRIGHT_UI_TOKEN": "tok-0123456789-abcdef"}
    launch = "from loopwright.cli import _ui_cmd, main; raise SystemExit(main())"
    proc = subprocess.Popen(
        [sys.executable, "-c", launch, "ui", "--port", "0", "--store", store],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        said = re.search(r"loopwright ui: http://127\.0\.0\.1:(\d+)/", line)
        assert said is not None, line
        # one try, no polling: the line says the server can be reached
        with socket.create_connection(("127.0.0.1", int(said.group(1))), timeout=120) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := conn.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    finally:
        proc.terminate()
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
