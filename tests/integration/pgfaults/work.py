"""A loop for the PostgreSQL fault tests: three repairs per run, one keyed payment.

Gates (files in ``$WORK_DIR``) hold a process at a known point, so a test places a fault there
without timing: ``actor_hold`` holds every actor call, ``actor_hold_<N>`` those of cycle N,
``actor_hold_<task id>`` those of one task (each call first appends ``<task> <cycle> <pid>`` to ``actors.log``); ``effect_hold`` holds every payment inside the call, the
receiver not yet reached (each attempt first appends ``<key> <pid>`` to ``attempts.log``).

The receiver (``paid.log``) honours the key: a second request under a key it has paid answers
with the first payment and pays nothing, as a payment provider does; every payment it makes is
one line ``<key> <pid>``. The reconcile hook reads it.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path
from typing import Any

import loopwright as lw

WANT = {"a": 1, "b": 2, "c": 3}


def _work() -> Path:
    return Path(os.environ["WORK_DIR"])


def _append(name: str, line: str) -> None:
    with (_work() / name).open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def _paid() -> dict[str, str]:
    p = _work() / "paid.log"
    if not p.is_file():
        return {}
    out: dict[str, str] = {}
    for line in p.read_text().splitlines():
        key, pid = line.split(" ")
        out.setdefault(key, pid)
    return out


@lw.effect("send", key=lambda a: a["task"])
def pay(task: str, *, key: str) -> dict[str, Any]:
    _append("attempts.log", f"{key} {os.getpid()}")
    while (_work() / "effect_hold").exists():
        time.sleep(0.01)
    with (_work() / "paid.log").open("a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        if not any(line.split(" ")[0] == key for line in f.read().splitlines()):
            _append("paid.log", f"{key} {os.getpid()}")  # (under the lock: one payment a key)
    return {"paid": key}


@pay.reconciler
def _was_paid(key: str) -> dict[str, Any] | None:
    return {"paid": key} if key in _paid() else None


async def actor(ctx: lw.Context) -> lw.Proposal:
    _append("actors.log", f"{ctx.task['id']} {ctx.cycle} {os.getpid()}")
    held = (
        _work() / "actor_hold",
        _work() / f"actor_hold_{ctx.cycle}",
        _work() / f"actor_hold_{ctx.task['id']}",
    )
    while any(h.exists() for h in held):  # noqa: ASYNC110 - another process lifts it
        await asyncio.sleep(0.01)
    doc = ctx.artifacts["doc"]
    # (a task with "pay": false proposes no payment: its last cycle writes one commit)
    effects = (pay.call(task=ctx.task["id"]),) if ctx.task.get("pay", True) else ()
    for k, v in WANT.items():
        if doc.get(k) != v:
            return lw.Proposal(edits=(lw.Edit("doc", k, v),), effects=effects)
    return lw.Proposal(effects=effects)


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = [k for k, v in WANT.items() if doc.get(k) != v]
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT))
