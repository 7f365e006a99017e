"""Lease owners' names: a pid says whether its process died only within one host, boot and
pid namespace (``loopwright._owners``)."""

from __future__ import annotations

import os
import socket

from loopwright import _effect_holders
from loopwright._owners import PROCESS_SPACE, local_pid, owner_is_dead, owner_name


def test_an_owner_name_carries_host_pid_and_space() -> None:
    host, pid, nonce, space = owner_name().split(":", 3)
    assert (host, int(pid), space) == (socket.gethostname(), os.getpid(), PROCESS_SPACE)
    assert len(nonce) == 8 and owner_name() != owner_name()


def test_only_an_owner_of_this_space_is_judged_by_its_pid() -> None:
    host = socket.gethostname()
    assert local_pid(f"{host}:{os.getpid()}:n:{PROCESS_SPACE}") == os.getpid()
    assert local_pid(f"{host}:{os.getpid()}:n:other") is None  # another container
    assert local_pid(f"{host}:{os.getpid()}:n") is None  # named before spaces
    assert local_pid(f"elsewhere:{os.getpid()}:n:{PROCESS_SPACE}") is None
    assert local_pid("w1") is None and local_pid("") is None
    assert not owner_is_dead(f"{host}:999999999:n:other")


def test_an_effects_holder_in_another_space_is_unknown_not_gone() -> None:
    # pid 1 here may be pid 1 there: never "this process, call not running" (no grace wait)
    mark = ("run", "key")
    host = socket.gethostname()
    assert _effect_holders.holder(f"{host}:{os.getpid()}:n:other", mark) == "unknown"
    assert _effect_holders.holder(f"{host}:{os.getpid()}:n:{PROCESS_SPACE}", mark) == "gone"
