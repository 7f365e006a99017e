"""A phase hook that logs every phase boundary of a cycle and SIGKILLs the process at a chosen
one (shared by ``crashpoints/runner.py`` and ``crashloop/runner.py``)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# The phase boundaries of a cycle the engine reports (``Runtime._on_phase``), in order.
PHASES = (
    "before_actor",
    "after_actor",
    "before_effect_intent",
    "after_effect_intent",
    "before_effect_result",
    "after_effect_result",
    "before_checkpoint",
    "after_checkpoint",
)


def kill_point(var: str) -> tuple[str, int] | None:
    """``PHASE:N`` from environment variable ``var``: the N-th time phase ``PHASE`` is reached."""
    spec = os.environ.get(var)
    if not spec:
        return None
    phase, _, n = spec.rpartition(":")
    if not phase or not n.isdigit() or int(n) < 1:
        raise SystemExit(f"{var} must be PHASE:N with N >= 1, got {spec!r}")
    return phase, int(n)


def phase_hook(log: Path, kill: tuple[str, int] | None) -> Callable[[str], None]:
    """For ``Runtime._on_phase``: appends ``<pid> <phase>`` to ``log`` (before the kill, so the
    log shows where each process died), then SIGKILLs this process at ``kill``."""
    seen: Counter[str] = Counter()
    pid = os.getpid()

    def on_phase(phase: str) -> None:
        seen[phase] += 1
        with open(log, "a") as fh:
            fh.write(f"{pid} {phase}\n")
        if kill == (phase, seen[phase]):
            os.kill(pid, signal.SIGKILL)

    return on_phase
