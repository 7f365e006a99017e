"""The loop of the Ray executor tests: a counter raised by one each cycle until it reaches the
task's target, and a counting ``send`` effect in every cycle.

A task::

    {"id": "t3", "target": 3, "artifacts": {"doc": {"count": 0}},
     "calls": "/path/calls.log",                # optional: the actor logs "run cycle pid"
     "die": "actor" | "effect", "die_at": 2,    # optional: SIGKILL this process once,
     "marker": "/path/died-t3",                 #   marked by this file
     "boom": true}                              # optional: the actor raises in cycle 2

The effect appends its idempotency key to the spec's log file once per real execution, so a
key found twice there is an effect that ran twice. Its ``reconcile`` hook reads that file: a
worker killed after the append but before the result was journaled leaves the effect in doubt,
and the resumed run must find it done there instead of sending again.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import loopwright as lw

ARTIFACT = "doc"


def die_once(marker: str) -> None:
    """SIGKILL this process, unless ``marker`` says it already happened."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.fsync(fd)
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def count_up(ctx: lw.Context) -> lw.Proposal:
    task = ctx.task
    if task.get("calls"):
        _append(str(task["calls"]), f"{ctx.run_id} {ctx.cycle} {os.getpid()}")
    at = ctx.cycle == int(task.get("die_at", 2))
    if at and task.get("die") == "actor":
        die_once(str(task["marker"]))
    if task.get("boom") and ctx.cycle == 2:
        raise RuntimeError("the actor broke")
    time.sleep(0.01)
    count = int(ctx.artifacts[ARTIFACT]["count"]) + 1
    args: dict[str, Any] = {"task": str(task["id"]), "cycle": ctx.cycle}
    if at and task.get("die") == "effect":
        args["die_marker"] = str(task["marker"])
    return lw.Proposal(
        edits=(lw.Edit(ARTIFACT, "count", count),),
        effects=(lw.EffectCall("send_note", args),),
        usage=lw.Usage(cost_usd=0.01, tokens=10),
        note=f"count {count}",
    )


def reached(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    target = int(state.task["target"])
    count = int(state.values()[ARTIFACT]["count"])
    if count >= target:
        return lw.Verdict(passed=True, score=1.0)
    finding = lw.Finding(f"count is {count}, target {target}", ARTIFACT, "count", "progress")
    return lw.Verdict(passed=False, score=count / target, findings=(finding,))


def counting_send(log: str) -> lw.Effect:
    """The ``send_note`` effect, appending to ``log``; built by the spec (``options``)."""
    path = Path(log)

    def send_note(task: str, cycle: int, die_marker: str | None = None, *, key: str) -> Any:
        _append(log, key)
        if die_marker:
            die_once(die_marker)  # after sending, before the result is journaled
        return {"sent": key}

    def already_sent(key: str) -> Any:
        if path.exists() and key in path.read_text(encoding="utf-8").splitlines():
            return {"sent": key, "found_in_log": True}
        return None

    return lw.effect(
        "send",
        name="send_note",
        key=lambda a: f"{a['task']}/c{a['cycle']}",
        requires_success=False,
        idempotent=False,
        reconcile=already_sent,
    )(send_note)
