"""A small loop for worker tests: three repairs per run, then a counting effect pays once.

The effect appends ``<key> <pid>`` to ``$WORK_DIR/effects.log`` on every real execution; its
reconcile hook reads the log, so a worker killed between intent and result never pays twice.

``gated_actor`` (``loop_gated.toml``) is a barrier for the drain test: each call appends
``<task> <cycle>`` to ``$WORK_DIR/started.log``, then waits (without blocking the event loop)
until ``$WORK_DIR/gate`` exists, so the test can signal the worker while every run is known to
be inside a cycle, whatever the machine's load.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import loopwright as lw

WANT = {"a": 1, "b": 2, "c": 3}


def _log() -> Path:
    return Path(os.environ["WORK_DIR"]) / "effects.log"


@lw.effect("send", key=lambda a: a["task"])
def notify(task: str, *, key: str) -> dict[str, Any]:
    with _log().open("a") as f:
        f.write(f"{key} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())
    return {"sent": key}


@notify.reconciler
def _sent(key: str) -> dict[str, Any] | None:
    if not _log().is_file():
        return None
    for line in _log().read_text().splitlines():
        if line.split(" ")[0] == key:
            return {"sent": key}
    return None


def actor(ctx: lw.Context) -> lw.Proposal:
    time.sleep(float(os.environ.get("WORK_SLEEP", "0.02")))
    doc = ctx.artifacts["doc"]
    for k, v in WANT.items():
        if doc.get(k) != v:
            return lw.Proposal(
                edits=(lw.Edit("doc", k, v),),
                effects=(notify.call(task=ctx.task["id"]),),
            )
    return lw.Proposal(effects=(notify.call(task=ctx.task["id"]),))


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    doc = state.artifacts["doc"].values()
    bad = [k for k, v in WANT.items() if doc.get(k) != v]
    return lw.Verdict(passed=not bad, score=1 - len(bad) / len(WANT))


async def gated_actor(ctx: lw.Context) -> lw.Proposal:
    work = Path(os.environ["WORK_DIR"])
    with (work / "started.log").open("a") as f:
        f.write(f"{ctx.task['id']} {ctx.cycle}\n")
    while not (work / "gate").exists():  # noqa: ASYNC110 - another process opens the gate
        await asyncio.sleep(0.01)
    return actor(ctx)
