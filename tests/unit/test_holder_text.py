"""polish54: a lease holder is named ``host:pid:nonce:space``; skip lines and refusals print it
as "pid N on host H" where the name has that form, any other name as it is."""

from __future__ import annotations

from loopwright._owners import holder_text, owner_name


def test_a_holder_reads_as_pid_on_host() -> None:
    assert holder_text("ci-7:4242:ab12cd34:9f3e0a1b2c3d") == "pid 4242 on host ci-7"
    mine = owner_name()
    host, pid = mine.split(":")[:2]
    assert holder_text(mine) == f"pid {pid} on host {host}"


def test_other_names_are_shown_as_they_are() -> None:
    for raw in ("worker-a", "h:notapid:n:s", ":42:n:s", "a:1:b", "a:1:b:c:d"):
        assert holder_text(raw) == raw
