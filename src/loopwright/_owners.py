"""Lease owners' names, and whether an owner is a process this one can see has died.

A lease names its holder ``host:pid:nonce:space``. A restarted process takes over a run whose
holder is a dead process of this host at once instead of waiting out the lease; that needs
the holder's pid to mean the same process here, so ``space`` names the boot and the pid
namespace (two containers with one hostname share the name, not the pids).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from pathlib import Path

__all__ = ["PROCESS_SPACE", "holder_text", "local_pid", "owner_is_dead", "owner_name"]


def _process_space() -> str:
    """Which processes this one can see by pid: the boot and the pid namespace (Linux). Two
    containers with one hostname (host networking, or the same ``--hostname``) share the
    name but not the pids; a pid of another namespace says nothing here."""
    parts = []
    with contextlib.suppress(OSError):
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink("/proc/self/ns/pid"))
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:12] if parts else "-"


PROCESS_SPACE = _process_space()


def owner_name() -> str:
    """A lease owner's name: ``host:pid:nonce:space`` (``space``: ``_process_space``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}:{PROCESS_SPACE}"


def holder_text(owner: str) -> str:
    """A lease holder as a person reads it: ``pid 4242 on host ci-7`` for a name of the form
    ``host:pid:nonce:space`` (the nonce and the namespace digest told nobody anything: skip
    lines and refusals printed ``ci-7:4242:ab12cd34:9f3e…``, polish54); any other name as it
    is. The raw name stays in the run's record (``--json``)."""
    parts = owner.split(":")
    if len(parts) == 4 and parts[0] and parts[1].isdigit():
        return f"pid {parts[1]} on host {parts[0]}"
    return owner


def local_pid(owner: str) -> int | None:
    """The pid of a lease owner that is a process this one can see (same host, boot and pid
    namespace), else None: another host, another container of the same name, or an owner
    named before names carried their space (asked nothing of: it waits out its lease)."""
    host, pid_text, _nonce, space = [*owner.split(":", 3), "", "", ""][:4]
    if host != socket.gethostname() or not pid_text.isdigit() or space != PROCESS_SPACE:
        return None
    return int(pid_text)


def owner_is_dead(owner: str) -> bool:
    """Whether a lease owner is a process of this host (and pid namespace: ``local_pid``) that
    no longer exists. Lets a restarted process take over at once after a crash instead of
    waiting for the lease to expire; any other owner still waits for expiry."""
    pid = local_pid(owner)
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A zombie (killed, not yet reaped by its parent) still answers kill(0): read its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")
